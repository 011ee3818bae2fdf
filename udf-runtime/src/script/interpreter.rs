//! Finding `python3` (`builtin_python3`), checking its version, and the command line that
//! starts the embedded worker module with it.

use std::ffi::OsString;
use std::fs;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, OnceLock};

use crate::{Result, RuntimeError};

/// The worker package `accelsql_worker` (`python/accelsql_worker/`), compiled into the binary so
/// that it works from any directory: `(module name, source)` in an order in which each module's
/// imports of its siblings come before it (the inline bootstrap runs them in this order).
pub(crate) const WORKER_MODULES: &[(&str, &str)] = &[
    (
        "__init__",
        include_str!("../../python/accelsql_worker/__init__.py"),
    ),
    (
        "state",
        include_str!("../../python/accelsql_worker/state.py"),
    ),
    ("wire", include_str!("../../python/accelsql_worker/wire.py")),
    (
        "values",
        include_str!("../../python/accelsql_worker/values.py"),
    ),
    ("exa", include_str!("../../python/accelsql_worker/exa.py")),
    (
        "ctx_base",
        include_str!("../../python/accelsql_worker/ctx_base.py"),
    ),
    (
        "errors",
        include_str!("../../python/accelsql_worker/errors.py"),
    ),
    (
        "chunks",
        include_str!("../../python/accelsql_worker/chunks.py"),
    ),
    (
        "context",
        include_str!("../../python/accelsql_worker/context.py"),
    ),
    (
        "single_call",
        include_str!("../../python/accelsql_worker/single_call.py"),
    ),
    (
        "runner",
        include_str!("../../python/accelsql_worker/runner.py"),
    ),
    (
        "fork_server",
        include_str!("../../python/accelsql_worker/fork_server.py"),
    ),
    (
        "entry",
        include_str!("../../python/accelsql_worker/entry.py"),
    ),
];

/// The name of the worker package.
const WORKER_PACKAGE: &str = "accelsql_worker";

/// The oldest Python the worker runs on.
pub const MIN_PYTHON: (u32, u32) = (3, 8);

/// Exit code of the bootstrap when the interpreter is older than [`MIN_PYTHON`].
pub(crate) const EXIT_TOO_OLD: i32 = 86;

/// Checks the version (with syntax even Python 2 reads), drops the current directory from
/// `sys.path` (a stray `struct.py` there must not shadow the standard library), then imports the
/// worker package from the cache directory `argv[1]`, so that its bytecode is cached in
/// `__pycache__`, and starts it.
const BOOTSTRAP_CACHED: &str = "import sys
if sys.version_info < (3, 8):
    sys.stderr.write('accelsql: Python UDFs need Python 3.8 or newer; %s is Python %s\\n' % (sys.executable, sys.version.split()[0]))
    sys.exit(86)
sys.path[:] = [p for p in sys.path if p not in ('', '.')]
sys.path.insert(0, sys.argv.pop(1))
from accelsql_worker.entry import start
start()
";

/// As [`BOOTSTRAP_CACHED`], with the worker's modules in the arguments: `argv[1]` their count,
/// then a name and a source for each, in [`WORKER_MODULES`]' order (when no cache directory can be
/// used; costs a compile of the modules per start).
const BOOTSTRAP_INLINE: &str = "import sys
if sys.version_info < (3, 8):
    sys.stderr.write('accelsql: Python UDFs need Python 3.8 or newer; %s is Python %s\\n' % (sys.executable, sys.version.split()[0]))
    sys.exit(86)
sys.path[:] = [p for p in sys.path if p not in ('', '.')]
import types
_pkg = types.ModuleType('accelsql_worker')
_pkg.__path__ = []
_pkg.__package__ = 'accelsql_worker'
sys.modules['accelsql_worker'] = _pkg
for _ in range(int(sys.argv.pop(1))):
    _name, _src = sys.argv.pop(1), sys.argv.pop(1)
    if _name == '__init__':
        _mod = _pkg
    else:
        _mod = types.ModuleType('accelsql_worker.' + _name)
        _mod.__package__ = 'accelsql_worker'
        sys.modules[_mod.__name__] = _mod
        setattr(_pkg, _name, _mod)
    _mod.__file__ = '<accelsql worker %s.py>' % _name
    exec(compile(_src, _mod.__file__, 'exec'), _mod.__dict__)
from accelsql_worker.entry import start
start()
";

/// Finds `python3` on `PATH` (what the `builtin_python3` runtime means), checks that it is
/// Python 3.8 or newer, and returns the interpreter it really is (`sys.executable`; a pyenv shim
/// or wrapper script resolves to the binary behind it, which starts much faster).
///
/// Asking the interpreter starts Python (through a pyenv shim: a few hundred milliseconds), so
/// the answer is kept for the process: the same `python3` on `PATH` (the same file, unmodified)
/// whose answer still exists is not asked again. Failures are not kept.
pub fn find_python3() -> Result<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let candidate = std::env::split_paths(&path)
        .map(|dir| dir.join("python3"))
        .find(|p| is_executable(p))
        .ok_or_else(|| RuntimeError::InterpreterStart {
            interpreter: PathBuf::from("python3"),
            message: "no python3 on PATH; install Python 3.8 or newer, or point the script \
                      language alias at an interpreter (ALTER SESSION SET SCRIPT_LANGUAGES)"
                .to_string(),
        })?;
    let key = FoundKey::of(&candidate);
    static FOUND: Mutex<Option<(FoundKey, PathBuf)>> = Mutex::new(None);
    if let Some(key) = &key
        && let Some((known, exe)) = &*FOUND.lock().unwrap_or_else(|e| e.into_inner())
        && known == key
        && is_executable(exe)
    {
        return Ok(exe.clone());
    }
    let version = PythonVersion::of(&candidate)?;
    if let Some(key) = key {
        *FOUND.lock().unwrap_or_else(|e| e.into_inner()) = Some((key, version.executable.clone()));
    }
    Ok(version.executable)
}

/// Which `python3` [`find_python3`] asked: its path, and the file there (device, inode, size,
/// modification time), so that a replaced or edited interpreter or shim is asked again.
#[derive(Debug, PartialEq, Eq)]
struct FoundKey {
    path: PathBuf,
    file: (u64, u64, u64, i64, i64),
}

impl FoundKey {
    fn of(path: &Path) -> Option<Self> {
        let m = fs::metadata(path).ok()?;
        Some(Self {
            path: path.to_path_buf(),
            file: (m.dev(), m.ino(), m.size(), m.mtime(), m.mtime_nsec()),
        })
    }
}

fn is_executable(p: &Path) -> bool {
    fs::metadata(p)
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

/// An interpreter's version, as it reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PythonVersion {
    /// `sys.version_info.major`.
    pub major: u32,
    /// `sys.version_info.minor`.
    pub minor: u32,
    /// `sys.version_info.micro`.
    pub micro: u32,
    /// `sys.implementation.name`, e.g. `cpython`.
    pub implementation: String,
    /// `sys.executable`: the binary that runs (or the path asked for, when it reports none).
    pub executable: PathBuf,
}

impl PythonVersion {
    /// Runs `interpreter` once to ask its version; fails (58U14) when it cannot be run or is older
    /// than [`MIN_PYTHON`].
    pub fn of(interpreter: &Path) -> Result<Self> {
        let err = |message: String| RuntimeError::InterpreterStart {
            interpreter: interpreter.to_path_buf(),
            message,
        };
        let mut cmd = Command::new(interpreter);
        cmd.arg("-c")
            // Python 2 must be able to answer too, to be told it is too old.
            .arg(
                "import sys; v = sys.version_info; sys.stdout.write('%d %d %d\\n%s\\n%s\\n' % \
                 (v[0], v[1], v[2], getattr(getattr(sys, 'implementation', None), 'name', \
                 'python'), sys.executable or ''))",
            )
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .env_clear();
        for var in ["PATH", "HOME", "LANG"] {
            if let Some(v) = std::env::var_os(var) {
                cmd.env(var, v);
            }
        }
        let out = cmd
            .output()
            .map_err(|e| err(format!("it cannot be run: {e}")))?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        let mut lines = stdout.lines();
        let nums: Vec<u32> = lines
            .next()
            .unwrap_or_default()
            .split_whitespace()
            .filter_map(|s| s.parse().ok())
            .collect();
        let (&[major, minor, micro], true) = (nums.as_slice(), out.status.success()) else {
            return Err(err(format!(
                "it did not report a Python version ({}): {}",
                super::process::describe_exit(out.status),
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        };
        let implementation = lines.next().unwrap_or("python").trim().to_string();
        let executable = match lines.next().map(str::trim) {
            Some(p) if !p.is_empty() && Path::new(p).is_absolute() => PathBuf::from(p),
            _ => interpreter.to_path_buf(),
        };
        if (major, minor) < MIN_PYTHON {
            return Err(err(format!(
                "it is Python {major}.{minor}.{micro}; Python UDFs need {}.{} or newer",
                MIN_PYTHON.0, MIN_PYTHON.1
            )));
        }
        Ok(Self {
            major,
            minor,
            micro,
            implementation,
            executable,
        })
    }
}

/// The arguments after the interpreter's path that start a worker.
pub(crate) fn worker_args() -> Vec<OsString> {
    // Workers run as another OS user cannot read the engine's owner-only cache folder.
    if super::sandbox::script_user().is_some() {
        return inline_worker_args();
    }
    match cached_worker_dir() {
        Some(dir) => vec![
            "-c".into(),
            BOOTSTRAP_CACHED.into(),
            dir.clone().into_os_string(),
        ],
        None => inline_worker_args(),
    }
}

/// The arguments that start a worker with its modules inline ([`BOOTSTRAP_INLINE`]).
fn inline_worker_args() -> Vec<OsString> {
    let mut args: Vec<OsString> = vec![
        "-c".into(),
        BOOTSTRAP_INLINE.into(),
        WORKER_MODULES.len().to_string().into(),
    ];
    for (name, source) in WORKER_MODULES {
        args.push((*name).into());
        args.push((*source).into());
    }
    args
}

/// A hash of every module's name and source: the cache directory's version.
fn worker_hash() -> u64 {
    let mut bytes = Vec::new();
    for (name, source) in WORKER_MODULES {
        bytes.extend_from_slice(name.as_bytes());
        bytes.push(0);
        bytes.extend_from_slice(source.as_bytes());
        bytes.push(0);
    }
    fnv1a(&bytes)
}

/// `<tmp>/accelsql-<uid>/worker-<hash>/` holding the package `accelsql_worker/`, written once per
/// process and version of the modules; `None` when it cannot be made safely (then the source is passed
/// inline). The per-user directory must be ours and not writable by others, since its code runs.
fn cached_worker_dir() -> Option<&'static PathBuf> {
    static DIR: OnceLock<Option<PathBuf>> = OnceLock::new();
    DIR.get_or_init(|| prepare_worker_dir(&std::env::temp_dir()).ok())
        .as_ref()
}

fn prepare_worker_dir(tmp: &Path) -> std::io::Result<PathBuf> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let uid = unsafe { libc::geteuid() };
    let base = tmp.join(format!("accelsql-{uid}"));
    ensure_private_dir(&base, uid)?;
    let dir = base.join(format!("worker-{:016x}", worker_hash()));
    ensure_private_dir(&dir, uid)?;
    let package = dir.join(WORKER_PACKAGE);
    ensure_private_dir(&package, uid)?;
    for (name, source) in WORKER_MODULES {
        let file = package.join(format!("{name}.py"));
        if fs::read(&file).ok().as_deref() == Some(source.as_bytes()) {
            continue;
        }
        // Written under a temporary name and renamed: a concurrent start sees the old file or the
        // whole new one, never a part.
        let tmp_file = package.join(format!(".{name}.{}.tmp", std::process::id()));
        let mut f = fs::File::create(&tmp_file)?;
        f.write_all(source.as_bytes())?;
        f.sync_all()?;
        fs::rename(&tmp_file, &file)?;
    }
    Ok(dir)
}

fn ensure_private_dir(dir: &Path, uid: u32) -> std::io::Result<()> {
    match fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    let meta = fs::symlink_metadata(dir)?;
    if !meta.is_dir() || meta.uid() != uid || meta.mode() & 0o022 != 0 {
        return Err(std::io::Error::other(format!(
            "{} is not a private directory of this user",
            dir.display()
        )));
    }
    Ok(())
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_python3_and_checks_its_version() {
        let exe = find_python3().unwrap();
        assert!(exe.is_absolute(), "{}", exe.display());
        let v = PythonVersion::of(&exe).unwrap();
        assert!((v.major, v.minor) >= MIN_PYTHON);
    }

    /// The kept answer is asked again when `python3` on `PATH` is another file or was edited.
    #[test]
    fn a_changed_interpreter_is_asked_again() {
        let dir = std::env::temp_dir().join(format!("accelsql-found-key-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let shim = dir.join("python3");
        fs::write(&shim, "#!/bin/sh\nexec python3 \"$@\"\n").unwrap();
        let first = FoundKey::of(&shim).unwrap();
        assert_eq!(FoundKey::of(&shim), Some(FoundKey::of(&shim).unwrap()));
        fs::write(&shim, "#!/bin/sh\nexec /usr/bin/python3 \"$@\"\n").unwrap();
        assert_ne!(
            FoundKey::of(&shim).unwrap(),
            first,
            "an edited shim keeps its key"
        );
        fs::remove_file(&shim).unwrap();
        assert_eq!(FoundKey::of(&shim), None);
        fs::remove_dir(&dir).unwrap();
        // Asked twice, the same answer (the second from the kept one).
        assert_eq!(find_python3().unwrap(), find_python3().unwrap());
    }

    #[test]
    fn a_missing_interpreter_is_58u14() {
        let e = PythonVersion::of(Path::new("/nonexistent/python3")).unwrap_err();
        assert_eq!(e.code(), "58U14");
        let e = PythonVersion::of(Path::new("/bin/false")).unwrap_err();
        assert_eq!(e.code(), "58U14", "{e}");
    }

    /// Both bootstraps run the worker package: it answers with HELLO on its socket (fd 0).
    #[test]
    fn both_bootstraps_start_the_worker() {
        use std::io::Read;
        use std::os::unix::net::UnixStream;

        let exe = find_python3().unwrap();
        let mut args = vec![inline_worker_args()];
        args.extend(cached_worker_dir().map(|_| worker_args()));
        assert_eq!(args.len(), 2, "no cache directory");
        for args in args {
            let (ours, theirs) = UnixStream::pair().unwrap();
            let child = Command::new(&exe)
                .args(&args)
                .stdin(std::process::Stdio::from(std::os::fd::OwnedFd::from(
                    theirs,
                )))
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            let mut ours = ours;
            let mut header = [0u8; 9];
            let read = ours.read_exact(&mut header);
            drop(ours); // the worker sees the engine gone and exits
            let out = child.wait_with_output().unwrap();
            read.unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
            assert_eq!(header[8], super::super::wire::F_HELLO);
        }
    }

    #[test]
    fn the_worker_dir_is_private_and_holds_the_module() {
        let tmp = std::env::temp_dir().join(format!("accelsql-test-{}", std::process::id()));
        fs::create_dir_all(&tmp).unwrap();
        let dir = prepare_worker_dir(&tmp).unwrap();
        for (name, source) in WORKER_MODULES {
            let src = fs::read_to_string(dir.join(WORKER_PACKAGE).join(format!("{name}.py")));
            assert_eq!(src.unwrap(), *source, "{name}");
        }
        // Every module of the package directory is embedded.
        let shipped = fs::read_dir(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/python/accelsql_worker"
        ))
        .unwrap()
        .filter_map(|e| e.unwrap().file_name().into_string().ok())
        .filter(|n| n.ends_with(".py"))
        .count();
        assert_eq!(shipped, WORKER_MODULES.len());
        // A second call reuses it.
        assert_eq!(prepare_worker_dir(&tmp).unwrap(), dir);
        // A directory others can write to is refused.
        let base = dir.parent().unwrap();
        fs::set_permissions(base, fs::Permissions::from_mode(0o777)).unwrap();
        assert!(prepare_worker_dir(&tmp).is_err());
        fs::remove_dir_all(&tmp).unwrap();
    }
}
