//! The DuckDB peer: `python/duckdb_peer.py` run as a subprocess under the virtualenv's Python,
//! given SQL cases as JSON on stdin, answering timings and result rows as JSON on stdout.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};

use serde::{Deserialize, Serialize};

use super::python_env::{scripts_dir, tail};
use crate::measure::RunPlan;
use crate::progress::Progress;

/// One SQL case for DuckDB.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DuckDbCase {
    /// Its key in the answer.
    pub name: String,
    /// The timed query.
    pub sql: String,
}

/// What DuckDB is asked to do.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DuckDbSpec {
    /// Untimed statements first (loading Parquet into tables).
    pub setup: Vec<String>,
    /// The timed cases.
    pub cases: Vec<DuckDbCase>,
    /// Untimed runs of each case.
    pub warmup: usize,
    /// Timed runs of each case.
    pub runs: usize,
    /// Result rows sent back per case (for the answer checks).
    pub max_rows: usize,
    /// A DuckDB database file to run in (`None`: in memory).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub database: Option<String>,
}

impl DuckDbSpec {
    /// A spec with `plan`'s runs and no statements yet.
    pub fn new(plan: RunPlan) -> Self {
        Self {
            setup: Vec::new(),
            cases: Vec::new(),
            warmup: plan.warmup,
            runs: plan.runs,
            max_rows: 100,
            database: None,
        }
    }

    /// Adds a case.
    pub fn case(&mut self, name: impl Into<String>, sql: impl Into<String>) {
        self.cases.push(DuckDbCase {
            name: name.into(),
            sql: sql.into(),
        });
    }

    /// Runs (warm-up + timed) in all, for progress bars.
    pub fn total_runs(&self) -> usize {
        self.cases.len() * (self.warmup + self.runs)
    }
}

/// One case's answer: timings and rows, or the error DuckDB raised.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum DuckDbCaseResult {
    /// It ran.
    Ran {
        /// Timed samples, seconds.
        samples_s: Vec<f64>,
        /// The first rows of the last run.
        rows: Vec<Vec<serde_json::Value>>,
    },
    /// It failed.
    Failed {
        /// DuckDB's error.
        error: String,
    },
}

/// DuckDB's whole answer.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct DuckDbRun {
    /// DuckDB's version.
    pub duckdb: String,
    /// Python's version.
    pub python: String,
    /// pyarrow's version, if installed.
    pub pyarrow: Option<String>,
    /// numpy's version, if installed.
    pub numpy: Option<String>,
    /// DuckDB's `threads` setting.
    pub threads: serde_json::Value,
    /// Seconds the setup statements took (untimed in the figures).
    pub setup_s: f64,
    /// Per case name.
    pub cases: BTreeMap<String, DuckDbCaseResult>,
}

impl DuckDbRun {
    /// The versions worth recording in the machine facts.
    pub fn versions(&self) -> Vec<(String, String)> {
        let mut out = vec![
            ("duckdb".to_string(), self.duckdb.clone()),
            ("python".to_string(), self.python.clone()),
        ];
        if let Some(v) = &self.pyarrow {
            out.push(("pyarrow".into(), v.clone()));
        }
        if let Some(v) = &self.numpy {
            out.push(("numpy".into(), v.clone()));
        }
        out
    }

    /// Case `name`'s samples and rows, or why there are none.
    pub fn case(&self, name: &str) -> Result<(&[f64], &[Vec<serde_json::Value>]), String> {
        match self.cases.get(name) {
            Some(DuckDbCaseResult::Ran { samples_s, rows }) => Ok((samples_s, rows)),
            Some(DuckDbCaseResult::Failed { error }) => Err(format!("DuckDB: {error}")),
            None => Err(format!("DuckDB gave no answer for {name}")),
        }
    }
}

/// Runs `spec` on DuckDB with `python`, ticking `progress` once per run.
pub fn run(python: &Path, spec: &DuckDbSpec, progress: &Progress) -> Result<DuckDbRun, String> {
    let script = scripts_dir().join("duckdb_peer.py");
    let mut child = Command::new(python)
        .arg(&script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("{} cannot be run: {e}", python.display()))?;
    let input = serde_json::to_vec(spec).map_err(|e| e.to_string())?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(&input)
            .map_err(|e| format!("writing the spec to DuckDB: {e}"))?;
    }
    // Stdout is read on its own thread, so neither pipe can fill up while the other is read.
    let stdout = child.stdout.take().map(|mut out| {
        std::thread::spawn(move || {
            let mut text = String::new();
            std::io::Read::read_to_string(&mut out, &mut text).map(|_| text)
        })
    });
    let mut other_lines = String::new();
    if let Some(stderr) = child.stderr.take() {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if line == "tick" {
                progress.inc(1);
            } else {
                other_lines.push_str(&line);
                other_lines.push('\n');
            }
        }
    }
    let status = child
        .wait()
        .map_err(|e| format!("waiting for DuckDB: {e}"))?;
    let stdout = match stdout.map(std::thread::JoinHandle::join) {
        Some(Ok(Ok(text))) => text,
        Some(Ok(Err(e))) => return Err(format!("reading DuckDB's answer: {e}")),
        Some(Err(_)) | None => return Err("DuckDB's answer could not be read".into()),
    };
    if !status.success() {
        return Err(format!(
            "duckdb_peer.py failed ({status}): {}",
            tail(&other_lines, 5)
        ));
    }
    parse(&stdout)
}

/// Parses the script's stdout (its last JSON line).
pub fn parse(stdout: &str) -> Result<DuckDbRun, String> {
    let line = stdout
        .lines()
        .rev()
        .find(|l| l.trim_start().starts_with('{'))
        .ok_or_else(|| format!("no JSON on DuckDB's stdout: {}", tail(stdout, 3)))?;
    serde_json::from_str(line).map_err(|e| format!("DuckDB's answer: {e}"))
}

/// A JSON cell as a number (numbers, and strings that parse; else NaN).
pub fn number(v: &serde_json::Value) -> f64 {
    match v {
        serde_json::Value::Number(n) => n.as_f64().unwrap_or(f64::NAN),
        serde_json::Value::String(s) => s.parse().unwrap_or(f64::NAN),
        _ => f64::NAN,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_parse_per_case() {
        let run = parse(
            "noise\n{\"duckdb\": \"1.4.1\", \"python\": \"3.11.2\", \"pyarrow\": null, \
             \"numpy\": \"2.1\", \"threads\": 2, \"setup_s\": 0.5, \"cases\": {\
             \"a\": {\"samples_s\": [0.1, 0.2], \"rows\": [[1, \"2.5\"]]}, \
             \"b\": {\"error\": \"CatalogException: no table\"}}}\n",
        )
        .unwrap();
        let (samples, rows) = run.case("a").unwrap();
        assert_eq!(samples, [0.1, 0.2]);
        assert_eq!((number(&rows[0][0]), number(&rows[0][1])), (1.0, 2.5));
        assert!(run.case("b").unwrap_err().contains("no table"));
        assert!(run.case("c").is_err());
        assert_eq!(run.versions().len(), 3);
        assert!(parse("Traceback").is_err());
    }
}
