//! The script workers' sandbox: what a worker process may not touch on the file system.
//!
//! A worker runs user code as the server's OS user, so without a sandbox it could read the
//! server's token, its users file, the catalog and every table's files straight from the data
//! directory. The embedding engine names those paths ([`deny_paths`]); every worker (and fork
//! server) then starts under a Linux Landlock ruleset that grants the whole file system except
//! them, plus `PR_SET_NO_NEW_PRIVS` (no setuid escalation). Landlock rules are inode-based, so
//! no path trick (`..`, symlinks, `/proc/<pid>/root`, `/proc/<pid>/fd`) reaches a denied file,
//! and a sandboxed process cannot ptrace one outside its sandbox.
//!
//! Landlock only grants, so the ruleset is carved: each denied path's ancestors are walked from
//! `/`, and every entry beside the path to a denied one is granted, recursively. The ruleset
//! is built when the denied paths change, so a worker cannot reach entries made later directly
//! in a denied path's parent folders (say a new folder in `/tmp` when the data directory is
//! `/tmp/x/data`), nor create any there; anywhere else it can. Its temporary files go to a
//! scratch folder of its own ([`scratch_dir`], `TMPDIR`). For that reason a path inside the
//! system's temporary folder (a throwaway data directory) is not denied. Without Landlock (a kernel
//! before 5.13, or one without it) workers run unsandboxed, and [`status`] says so.

use std::collections::BTreeSet;
use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

// Landlock's ABI (linux/landlock.h): syscalls, flags and file-system rights.
const SYS_LANDLOCK_CREATE_RULESET: libc::c_long = 444;
const SYS_LANDLOCK_ADD_RULE: libc::c_long = 445;
const SYS_LANDLOCK_RESTRICT_SELF: libc::c_long = 446;
const LANDLOCK_CREATE_RULESET_VERSION: u32 = 1;
const LANDLOCK_RULE_PATH_BENEATH: libc::c_int = 1;

const ACCESS_FS_EXECUTE: u64 = 1 << 0;
const ACCESS_FS_WRITE_FILE: u64 = 1 << 1;
const ACCESS_FS_READ_FILE: u64 = 1 << 2;
const ACCESS_FS_REFER: u64 = 1 << 13;
const ACCESS_FS_TRUNCATE: u64 = 1 << 14;
const ACCESS_FS_IOCTL_DEV: u64 = 1 << 15;
/// The rights of ABI 1: bits 0 to 12.
const ACCESS_FS_V1: u64 = (1 << 13) - 1;

/// `struct landlock_ruleset_attr` (only its first field: the kernel takes the size given).
#[repr(C)]
struct RulesetAttr {
    handled_access_fs: u64,
}

/// `struct landlock_path_beneath_attr` (packed in the kernel's header).
#[repr(C, packed)]
struct PathBeneathAttr {
    allowed_access: u64,
    parent_fd: i32,
}

/// The paths denied to workers, and the ruleset that denies them (built on first use).
#[derive(Default)]
struct Policy {
    denied: BTreeSet<PathBuf>,
    /// Bumped on each change, so that fork servers started under an older policy are not reused.
    generation: u64,
    ruleset: Option<Arc<OwnedFd>>,
    /// Paths that would be denied but lie in the system's temporary folder.
    in_temp: BTreeSet<PathBuf>,
    /// The OS user workers run as instead of the engine's ([`run_scripts_as`]).
    run_as: Option<ScriptUser>,
}

/// An OS user that script workers run as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScriptUser {
    /// Its name, as given.
    pub name: String,
    /// Its user id.
    pub uid: u32,
    /// Its primary group id.
    pub gid: u32,
}

impl ScriptUser {
    /// The user named `name` in the system's user database (or `#UID`); an error names what
    /// was not found.
    pub fn lookup(name: &str) -> io::Result<Self> {
        if let Some(uid) = name.strip_prefix('#') {
            let uid: u32 = uid.parse().map_err(|_| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("not a user id: {name}"),
                )
            })?;
            return Ok(Self {
                name: name.to_string(),
                uid,
                gid: uid,
            });
        }
        let c_name = CString::new(name).map_err(|_| {
            io::Error::new(io::ErrorKind::InvalidInput, "a user name has no NUL byte")
        })?;
        let mut buf = vec![0 as libc::c_char; 16 * 1024];
        // SAFETY: an all-zero passwd is a valid value for getpwnam_r to fill.
        let mut entry: libc::passwd = unsafe { std::mem::zeroed() };
        let mut found: *mut libc::passwd = std::ptr::null_mut();
        // SAFETY: every pointer is valid for the call and `buf` for its length.
        let rc = unsafe {
            libc::getpwnam_r(
                c_name.as_ptr(),
                &mut entry,
                buf.as_mut_ptr(),
                buf.len(),
                &mut found,
            )
        };
        if rc != 0 {
            return Err(io::Error::from_raw_os_error(rc));
        }
        if found.is_null() {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("no OS user named {name:?} (give another with --script-user)"),
            ));
        }
        Ok(Self {
            name: name.to_string(),
            uid: entry.pw_uid,
            gid: entry.pw_gid,
        })
    }
}

/// Runs every worker (and fork server) started from now on as `user` instead of the engine's
/// OS user; `None`: as the engine's. A server started as root gives its scripts an
/// unprivileged user this way (`accelsql serve --script-user`), so that nothing a script does
/// runs with root's rights, on top of the sandbox's denied paths.
pub fn run_scripts_as(user: Option<ScriptUser>) {
    let mut guard = POLICY.lock().unwrap_or_else(|e| e.into_inner());
    let policy = guard.get_or_insert_with(Policy::default);
    if policy.run_as != user {
        policy.run_as = user;
        policy.generation += 1;
    }
}

/// The OS user workers run as, when not the engine's.
pub fn script_user() -> Option<ScriptUser> {
    POLICY
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .as_ref()
        .and_then(|p| p.run_as.clone())
}

static POLICY: Mutex<Option<Policy>> = Mutex::new(None);

/// Denies `paths` (files or folders, e.g. a data directory and a users file) to every worker
/// started from now on. Paths that do not exist are ignored.
pub fn deny_paths<I, P>(paths: I)
where
    I: IntoIterator<Item = P>,
    P: AsRef<Path>,
{
    let mut guard = POLICY.lock().unwrap_or_else(|e| e.into_inner());
    let policy = guard.get_or_insert_with(Policy::default);
    let mut changed = false;
    // A path in the system's temporary folder is not carved out: every folder made there
    // after the ruleset would be out of the workers' reach (see the module's note). Such data
    // directories are throwaway ones (tests, trials); `status` counts them.
    let temp = std::fs::canonicalize(std::env::temp_dir()).unwrap_or_else(|_| std::env::temp_dir());
    for path in paths {
        if let Ok(real) = std::fs::canonicalize(path.as_ref())
            && real != Path::new("/")
        {
            if real.starts_with(&temp) {
                // Not denied: the ruleset (and its generation) stays as it is.
                policy.in_temp.insert(real);
            } else {
                changed |= policy.denied.insert(real);
            }
        }
    }
    if changed {
        policy.generation += 1;
        policy.ruleset = None;
    }
}

/// The policy's generation: a fork server started under another one is not reused.
pub(crate) fn generation() -> u64 {
    POLICY
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .as_ref()
        .map_or(0, |p| p.generation)
}

/// The folder sandboxed workers keep their temporary files in (`TMPDIR`): `accelsql-scratch-
/// UID` in the system's temporary folder, owner-only, made on first use. `None` when nothing is
/// denied (workers then use the system's temporary folder as before) or it cannot be made.
pub(crate) fn scratch_dir() -> Option<PathBuf> {
    static SCRATCH: Mutex<Vec<(u32, Option<PathBuf>)>> = Mutex::new(Vec::new());
    let (denied, run_as) = {
        let guard = POLICY.lock().unwrap_or_else(|e| e.into_inner());
        guard.as_ref().map_or((false, None), |p| {
            (
                !p.denied.is_empty() && landlock_abi().is_some(),
                p.run_as.clone(),
            )
        })
    };
    if !denied && run_as.is_none() {
        return None;
    }
    // SAFETY: getuid has no preconditions.
    let (uid, gid) = run_as.map_or_else(
        || unsafe { (libc::getuid(), libc::getgid()) },
        |u| (u.uid, u.gid),
    );
    let mut made = SCRATCH.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, dir)) = made.iter().find(|(owner, _)| *owner == uid) {
        return dir.clone();
    }
    let dir = make_scratch(uid, gid);
    made.push((uid, dir.clone()));
    dir
}

/// `accelsql-scratch-UID` in the system's temporary folder, made owner-only and given to
/// `uid`; `None` if it is not such a folder (a link someone planted, another owner's).
fn make_scratch(uid: u32, gid: u32) -> Option<PathBuf> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
    let dir = std::env::temp_dir().join(format!("accelsql-scratch-{uid}"));
    if std::fs::DirBuilder::new().mode(0o700).create(&dir).is_ok() {
        // SAFETY: getuid has no preconditions.
        if unsafe { libc::getuid() } != uid {
            std::os::unix::fs::chown(&dir, Some(uid), Some(gid)).ok()?;
        }
    }
    // The user's, a real folder, and private.
    let meta = std::fs::symlink_metadata(&dir).ok()?;
    if !meta.is_dir() || meta.uid() != uid {
        return None;
    }
    if meta.permissions().mode() & 0o077 != 0 {
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).ok()?;
    }
    Some(dir)
}

/// The Landlock ABI version of the running kernel; `None` without Landlock.
pub fn landlock_abi() -> Option<u32> {
    // SAFETY: with a null attribute and size 0, the version flag only queries the ABI.
    let abi = unsafe {
        libc::syscall(
            SYS_LANDLOCK_CREATE_RULESET,
            std::ptr::null::<RulesetAttr>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    u32::try_from(abi).ok().filter(|v| *v >= 1)
}

/// What the sandbox does now, in words (for logs and `accelsql gpu status`-style reports).
pub fn status() -> String {
    let guard = POLICY.lock().unwrap_or_else(|e| e.into_inner());
    let denied = guard.as_ref().map_or(0, |p| p.denied.len());
    let in_temp = guard.as_ref().map_or(0, |p| p.in_temp.len());
    let temp_note = if in_temp > 0 {
        format!(
            "; {in_temp} in the system's temporary folder NOT denied (put a data directory \
             elsewhere to sandbox it)"
        )
    } else {
        String::new()
    };
    let user_note = match guard.as_ref().and_then(|p| p.run_as.as_ref()) {
        Some(u) => format!("; run as OS user {} (uid {})", u.name, u.uid),
        None => String::new(),
    };
    let temp_note = format!("{user_note}{temp_note}");
    match (landlock_abi(), denied) {
        (_, 0) => format!("script workers: no paths denied{temp_note}"),
        (Some(abi), n) => {
            format!("script workers: {n} paths denied (Landlock ABI {abi}){temp_note}")
        }
        (None, n) => format!(
            "script workers: UNSANDBOXED, {n} paths would be denied but this kernel has no \
             Landlock{temp_note}"
        ),
    }
}

/// The ruleset workers start under, building it when the policy changed; `None` when nothing
/// is denied or the kernel has no Landlock.
pub(crate) fn ruleset() -> Option<Arc<OwnedFd>> {
    let mut guard = POLICY.lock().unwrap_or_else(|e| e.into_inner());
    let policy = guard.as_mut()?;
    if policy.denied.is_empty() {
        return None;
    }
    if policy.ruleset.is_none() {
        let abi = landlock_abi()?;
        match build(&policy.denied, abi) {
            Ok(fd) => policy.ruleset = Some(Arc::new(fd)),
            Err(e) => {
                log::error!("script workers run unsandboxed: cannot build their ruleset: {e}");
                return None;
            }
        }
    }
    policy.ruleset.clone()
}

/// Every right of ABI `abi` on folders, and those that apply to files.
fn rights(abi: u32) -> (u64, u64) {
    let mut all = ACCESS_FS_V1;
    if abi >= 2 {
        all |= ACCESS_FS_REFER;
    }
    if abi >= 3 {
        all |= ACCESS_FS_TRUNCATE;
    }
    if abi >= 5 {
        all |= ACCESS_FS_IOCTL_DEV;
    }
    let file = all
        & (ACCESS_FS_EXECUTE
            | ACCESS_FS_WRITE_FILE
            | ACCESS_FS_READ_FILE
            | ACCESS_FS_TRUNCATE
            | ACCESS_FS_IOCTL_DEV);
    (all, file)
}

/// A ruleset that handles every file-system right and grants them all beneath every path
/// except `denied` (and their contents).
fn build(denied: &BTreeSet<PathBuf>, abi: u32) -> io::Result<OwnedFd> {
    let (all, file) = rights(abi);
    let attr = RulesetAttr {
        handled_access_fs: all,
    };
    // SAFETY: `attr` is a valid ruleset attribute of the size given.
    let fd = unsafe {
        libc::syscall(
            SYS_LANDLOCK_CREATE_RULESET,
            &attr as *const RulesetAttr,
            std::mem::size_of::<RulesetAttr>(),
            0u32,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    let fd = RawFd::try_from(fd).map_err(|_| io::Error::other("bad ruleset fd"))?;
    // SAFETY: the kernel just returned this descriptor, and nothing else owns it.
    let ruleset = unsafe { OwnedFd::from_raw_fd(fd) };
    // The folders on the way to a denied path: their other entries are granted.
    let ancestors = ancestors_of(denied);
    for dir in &ancestors {
        let Ok(entries) = std::fs::read_dir(dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if denied.contains(&path) || ancestors.contains(&path) {
                continue;
            }
            // A symlink is granted where it leads, unless that is denied or on the way to it.
            let target = std::fs::canonicalize(&path).unwrap_or_else(|_| path.clone());
            if denied.iter().any(|d| target.starts_with(d)) || ancestors.contains(&target) {
                continue;
            }
            let is_dir = target.is_dir();
            // Entries that vanish or cannot be opened are simply not granted.
            let _ = add_rule(&ruleset, &path, if is_dir { all } else { file });
        }
    }
    Ok(ruleset)
}

/// The folders on the way from `/` to each of `denied`.
fn ancestors_of(denied: &BTreeSet<PathBuf>) -> BTreeSet<PathBuf> {
    let mut ancestors = BTreeSet::new();
    for path in denied {
        let mut at = path.parent();
        while let Some(dir) = at {
            ancestors.insert(dir.to_path_buf());
            at = dir.parent();
        }
    }
    ancestors
}

/// Grants `access` beneath `path` in `ruleset`.
fn add_rule(ruleset: &OwnedFd, path: &Path, access: u64) -> io::Result<()> {
    let c_path = CString::new(path.as_os_str().as_bytes())?;
    // SAFETY: `c_path` is NUL-terminated; O_PATH opens for reference only.
    let fd = unsafe { libc::open(c_path.as_ptr(), libc::O_PATH | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `open` just returned this descriptor.
    let parent = unsafe { OwnedFd::from_raw_fd(fd) };
    let attr = PathBeneathAttr {
        allowed_access: access,
        parent_fd: parent.as_raw_fd(),
    };
    // SAFETY: `attr` is a valid path-beneath attribute and `ruleset` a ruleset descriptor.
    let rc = unsafe {
        libc::syscall(
            SYS_LANDLOCK_ADD_RULE,
            ruleset.as_raw_fd(),
            LANDLOCK_RULE_PATH_BENEATH,
            &attr as *const PathBeneathAttr,
            0u32,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// In a forked child before exec: no new privileges, then the ruleset. Async-signal-safe (two
/// system calls, no allocation).
pub(crate) fn enter(ruleset: RawFd) -> io::Result<()> {
    // SAFETY: prctl with these arguments only sets a flag of the calling process.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `ruleset` is a Landlock ruleset descriptor inherited from the parent.
    if unsafe { libc::syscall(SYS_LANDLOCK_RESTRICT_SELF, ruleset, 0u32) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::process::Command;

    use super::*;

    #[test]
    fn rights_grow_with_the_abi() {
        let (v1, f1) = rights(1);
        assert_eq!(v1, ACCESS_FS_V1);
        assert_eq!(
            f1,
            ACCESS_FS_EXECUTE | ACCESS_FS_WRITE_FILE | ACCESS_FS_READ_FILE
        );
        let (v5, f5) = rights(5);
        assert!(v5 & ACCESS_FS_REFER != 0 && f5 & ACCESS_FS_TRUNCATE != 0);
    }

    /// A child under a ruleset that denies one folder cannot read it, by its path or through a
    /// symlink, and reads a sibling folder as before.
    #[test]
    fn a_sandboxed_child_cannot_reach_the_denied_folder() {
        let Some(abi) = landlock_abi() else {
            eprintln!("SKIPPED (this kernel has no Landlock)");
            return;
        };
        let root = tempfile::tempdir().unwrap();
        let secret_dir = root.path().join("data");
        let open_dir = root.path().join("open");
        std::fs::create_dir_all(&secret_dir).unwrap();
        std::fs::create_dir_all(&open_dir).unwrap();
        std::fs::write(secret_dir.join("server-token"), "s3cret").unwrap();
        std::fs::write(open_dir.join("notes"), "public").unwrap();
        std::os::unix::fs::symlink(&secret_dir, open_dir.join("link")).unwrap();
        let denied = BTreeSet::from([std::fs::canonicalize(&secret_dir).unwrap()]);
        let ruleset = build(&denied, abi).unwrap();
        let fd = ruleset.as_raw_fd();
        let cat = |path: &Path| {
            let mut cmd = Command::new("cat");
            cmd.arg(path);
            // SAFETY: `enter` makes two system calls and allocates nothing.
            unsafe {
                std::os::unix::process::CommandExt::pre_exec(&mut cmd, move || enter(fd));
            }
            cmd.output().unwrap()
        };
        let secret = cat(&secret_dir.join("server-token"));
        assert!(!secret.status.success());
        assert!(String::from_utf8_lossy(&secret.stderr).contains("Permission denied"));
        assert!(
            !cat(&open_dir.join("link").join("server-token"))
                .status
                .success()
        );
        let open = cat(&open_dir.join("notes"));
        assert_eq!(String::from_utf8_lossy(&open.stdout), "public");
        // System files stay readable.
        assert!(
            cat(Path::new("/etc/hostname")).status.success()
                || !Path::new("/etc/hostname").exists()
        );
    }
}
