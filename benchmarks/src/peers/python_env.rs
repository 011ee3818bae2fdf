//! The Python the Python peers run under: a virtualenv (default `target/bench-python-env`,
//! `ACCELSQL_BENCH_VENV` to override) made or reused with duckdb, pyarrow, numpy and ADBC's
//! Flight SQL driver from PyPI.
//! When it cannot be made, the peers that need it report themselves unavailable with the reason.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The packages the peers need (as pip names them).
pub const PACKAGES: [&str; 5] = [
    "duckdb",
    "pyarrow",
    "numpy",
    "adbc-driver-flightsql",
    "adbc-driver-manager",
];

/// The modules of [`PACKAGES`], as the peers import them.
pub const IMPORTS: [&str; 5] = [
    "duckdb",
    "pyarrow",
    "numpy",
    "adbc_driver_flightsql",
    "adbc_driver_manager",
];

/// The variable naming another virtualenv directory.
pub const ENV_VENV: &str = "ACCELSQL_BENCH_VENV";

/// The workspace root (this crate's parent directory).
pub fn workspace_root() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().unwrap_or(manifest).to_path_buf()
}

/// The directory of this crate's Python scripts (`benchmarks/python`).
pub fn scripts_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("python")
}

/// The virtualenv's directory: `ACCELSQL_BENCH_VENV`, else `<workspace>/target/bench-python-env`.
pub fn venv_dir() -> PathBuf {
    std::env::var_os(ENV_VENV).map_or_else(
        || workspace_root().join("target").join("bench-python-env"),
        PathBuf::from,
    )
}

/// A prepared (or failed) Python environment.
#[derive(Debug, Clone)]
pub struct PythonEnv {
    /// The virtualenv's `bin/python3` (absolute), when the virtualenv exists at all.
    pub python: Option<PathBuf>,
    /// Whether [`PACKAGES`] import, or why not.
    pub ready: Result<(), String>,
}

impl PythonEnv {
    /// The interpreter, when the packages import; else why not.
    pub fn interpreter(&self) -> Result<&Path, String> {
        match (&self.python, &self.ready) {
            (Some(p), Ok(())) => Ok(p),
            (_, Err(e)) => Err(e.clone()),
            (None, Ok(())) => Err("no virtualenv python".into()),
        }
    }

    /// Makes (or reuses) the virtualenv `venv` with [`PACKAGES`]; `log` hears what is done.
    pub fn prepare(venv: &Path, log: &dyn Fn(&str)) -> Self {
        let venv = std::path::absolute(venv).unwrap_or_else(|_| venv.to_path_buf());
        let python = venv.join("bin").join("python3");
        if python.is_file() && has_packages(&python) {
            return Self {
                python: Some(python),
                ready: Ok(()),
            };
        }
        if !python.is_file() {
            log(&format!("creating virtualenv {}", venv.display()));
            if let Err(e) = output_of(Command::new("python3").arg("-m").arg("venv").arg(&venv)) {
                return Self {
                    python: None,
                    ready: Err(format!("python3 -m venv: {e}")),
                };
            }
        }
        log(&format!(
            "installing {} into {} (pip)",
            PACKAGES.join(" "),
            venv.display()
        ));
        let install = output_of(
            Command::new(&python)
                .args([
                    "-m",
                    "pip",
                    "install",
                    "--quiet",
                    "--disable-pip-version-check",
                ])
                .args(PACKAGES),
        );
        let ready = match install {
            Err(e) => Err(format!("pip install: {e}")),
            Ok(_) if !has_packages(&python) => {
                Err("pip install succeeded but the packages do not import".to_string())
            }
            Ok(_) => Ok(()),
        };
        Self {
            python: python.is_file().then_some(python),
            ready,
        }
    }
}

fn has_packages(python: &Path) -> bool {
    Command::new(python)
        .args(["-c", &format!("import {}", IMPORTS.join(", "))])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Runs `cmd`, returning its stdout, or why it failed (exit status and the end of stderr).
pub fn output_of(cmd: &mut Command) -> Result<String, String> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{:?} cannot be run: {e}", cmd.get_program()))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "{:?} failed ({}): {}",
            cmd.get_program(),
            out.status,
            tail(&String::from_utf8_lossy(&out.stderr), 5)
        ))
    }
}

/// The last `n` lines of `text`, joined with ` | `.
pub fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().rev().take(n).collect();
    lines.into_iter().rev().collect::<Vec<_>>().join(" | ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tail_keeps_the_last_lines() {
        assert_eq!(tail("a\nb\nc\n", 2), "b | c");
    }

    #[test]
    fn a_missing_interpreter_is_a_reason_not_a_panic() {
        let env = PythonEnv {
            python: None,
            ready: Err("pip install: no network".into()),
        };
        assert_eq!(env.interpreter().unwrap_err(), "pip install: no network");
        assert!(output_of(&mut Command::new("/nonexistent/python3")).is_err());
    }
}
