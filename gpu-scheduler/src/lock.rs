//! Cross-process device locks: one advisory `flock` file per device UUID in a shared directory.
//!
//! The kernel drops an `flock` when the process holding it dies, however it dies, so a crashed
//! holder never leaves a stale lock behind (safe-gpu's placeholder allocations can). Locks are
//! taken with non-blocking `try_lock` only: callers that must wait poll with back-off, which keeps
//! waiting cancellable and avoids hold-and-wait between devices.
//!
//! The directory is shared between users, so nothing in it is trusted:
//! - the directory must be a real directory (not a symlink) owned by root or by us, and if others
//!   may write it, sticky (as `/tmp`), else it is refused (58G01, naming it);
//! - lock files are opened with `O_NOFOLLOW` (a planted symlink is refused, never followed),
//!   never truncated or chmod-ed, created `0644`, and must be regular files; another user's lock
//!   file is locked through a read-only descriptor (flock does not need write access);
//! - who holds a lock comes from the kernel (`/proc/locks` names the pid holding the flock); the
//!   holder's note (`<uuid>.<pid>.holder`, e.g. the statement) is shown only when the process
//!   that holds the lock is owned by the note's owner, so a note cannot be spoofed.

use std::fs::{self, File, OpenOptions, TryLockError};
use std::io::{ErrorKind, Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::{Result, device_lock_err};

/// A directory of device lock files shared by every accelsql process on the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceLockDir {
    path: PathBuf,
}

/// The default lock directory of `accelsql gpu run`: `<tmp>/accelsql-device-locks`.
pub fn default_lock_dir() -> PathBuf {
    std::env::temp_dir().join("accelsql-device-locks")
}

/// This process's effective user id.
fn my_uid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// A refusal of `path` for what `why` says, as a 58G01 device-lock error.
fn refused(path: &Path, why: String) -> crate::SchedulerError {
    device_lock_err!(path, std::io::Error::new(ErrorKind::PermissionDenied, why))
}

/// Checks that `path` (not followed if a symlink) is a directory others cannot abuse: owned by
/// root or `uid`, and sticky if group or others may write it.
pub(crate) fn check_shared_dir(path: &Path, uid: u32) -> Result<()> {
    let meta = fs::symlink_metadata(path).map_err(|e| device_lock_err!(path, e))?;
    if meta.file_type().is_symlink() {
        return Err(refused(
            path,
            "is a symbolic link; a lock directory must be a real directory (another user could \
             point it anywhere)"
                .into(),
        ));
    }
    if !meta.is_dir() {
        return Err(refused(path, "is not a directory".into()));
    }
    if meta.uid() != 0 && meta.uid() != uid {
        return Err(refused(
            path,
            format!(
                "is owned by uid {}, neither root nor this user (uid {uid}): its owner could \
                 plant or remove lock files; use a directory owned by root or by you (see \
                 docs/src/security.md, \"Untrusted SQL and shared machines\")",
                meta.uid()
            ),
        ));
    }
    let mode = meta.mode();
    if mode & 0o022 != 0 && mode & 0o1000 == 0 {
        return Err(refused(
            path,
            format!(
                "is writable by other users (mode {:o}) without the sticky bit, so any of them \
                 could delete or replace lock files; chmod 1777 it (as /tmp)",
                mode & 0o7777
            ),
        ));
    }
    Ok(())
}

impl DeviceLockDir {
    /// Uses (and creates if needed) `path`. A directory this process creates is made
    /// world-writable with the sticky bit (like `/tmp`), so every user of the server can lock
    /// there; an existing one must pass [`DeviceLockDir`]'s checks (see the module docs).
    pub fn open(path: impl Into<PathBuf>) -> Result<Self> {
        let path = path.into();
        if fs::symlink_metadata(&path).is_err() {
            if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
                fs::create_dir_all(parent).map_err(|e| device_lock_err!(parent, e))?;
            }
            match fs::DirBuilder::new().mode(0o700).create(&path) {
                Ok(()) => {
                    // Widened through a descriptor of the directory we just made (never
                    // through a path someone could swap): sticky and world-writable.
                    let dir = OpenOptions::new()
                        .read(true)
                        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
                        .open(&path)
                        .map_err(|e| device_lock_err!(path, e))?;
                    let mine = dir.metadata().is_ok_and(|m| m.uid() == my_uid());
                    if mine {
                        dir.set_permissions(fs::Permissions::from_mode(0o1777))
                            .map_err(|e| device_lock_err!(path, e))?;
                    }
                }
                Err(e) if e.kind() == ErrorKind::AlreadyExists => {}
                Err(e) => return Err(device_lock_err!(path, e)),
            }
        }
        check_shared_dir(&path, my_uid())?;
        Ok(Self { path })
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The file name stem of device `uuid`: only letters, digits and `-`.
    fn stem(uuid: &str) -> String {
        uuid.chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .collect()
    }

    /// The lock file of device `uuid`.
    pub fn file_for(&self, uuid: &str) -> PathBuf {
        self.path.join(format!("{}.lock", Self::stem(uuid)))
    }

    /// The note a holder with process id `pid` leaves for device `uuid`.
    fn note_for(&self, uuid: &str, pid: u32) -> PathBuf {
        self.path.join(format!("{}.{pid}.holder", Self::stem(uuid)))
    }

    /// Locks device `uuid` if no process holds it; `Ok(None)` if one does.
    /// `holder` is left in a note beside the lock so that waiters can say who they wait for.
    pub fn try_lock(&self, uuid: &str, holder: &str) -> Result<Option<DeviceLock>> {
        let path = self.file_for(uuid);
        let file = open_lock_file(&path)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => return Ok(None),
            Err(TryLockError::Error(e)) => return Err(device_lock_err!(path, e)),
        }
        // Best effort: the lock is what matters, the note only helps waiters' messages.
        let note = self.note_for(uuid, std::process::id());
        let note =
            write_note(&note, &format!("pid {} {holder}", std::process::id())).then_some(note);
        Ok(Some(DeviceLock {
            file,
            note,
            uuid: uuid.to_string(),
        }))
    }

    /// Locks every device of `uuids`, or none: if any is held elsewhere, the ones taken so far are
    /// released and `Ok(Err(uuid))` names the busy device.
    pub fn try_lock_all<'a>(
        &self,
        uuids: impl IntoIterator<Item = &'a str>,
        holder: &str,
    ) -> Result<std::result::Result<Vec<DeviceLock>, String>> {
        let mut taken = Vec::new();
        for uuid in uuids {
            match self.try_lock(uuid, holder)? {
                Some(lock) => taken.push(lock),
                None => return Ok(Err(uuid.to_string())),
            }
        }
        Ok(Ok(taken))
    }

    /// Whether a process holds device `uuid` now, and who (see [`DeviceLockDir::holder_of`], or
    /// `"holder unknown"`).
    pub fn locked_by(&self, uuid: &str) -> Result<Option<String>> {
        let path = self.file_for(uuid);
        let file = match open_existing(&path) {
            Ok(file) => file,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(device_lock_err!(path, e)),
        };
        match file.try_lock_shared() {
            Ok(()) => Ok(None),
            Err(TryLockError::WouldBlock) => Ok(Some(
                self.holder_of(uuid)
                    .unwrap_or_else(|| "holder unknown".into()),
            )),
            Err(TryLockError::Error(e)) => Err(device_lock_err!(path, e)),
        }
    }

    /// Who holds device `uuid`, if anyone does: the holder's note (e.g. `pid 4242 statement 17`)
    /// when the kernel says that process holds the lock and the note is that process's owner's;
    /// else `pid N` as the kernel says.
    pub fn holder_of(&self, uuid: &str) -> Option<String> {
        let file = open_existing(&self.file_for(uuid)).ok()?;
        let pid = flock_holder(&file)?;
        let note = self.note_for(uuid, pid);
        let owner = fs::metadata(format!("/proc/{pid}")).ok().map(|m| m.uid());
        let text = read_note(&note, owner?).unwrap_or_default();
        Some(if text.is_empty() {
            format!("pid {pid}")
        } else {
            text
        })
    }
}

/// Opens (creating it `0644` if needed) a lock file without following a symlink or truncating
/// it; read-only where we may not write it (flock works on a read-only descriptor too). The file
/// must be a regular file.
fn open_lock_file(path: &Path) -> Result<File> {
    let flags = libc::O_NOFOLLOW | libc::O_CLOEXEC;
    let opened = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o644)
        .custom_flags(flags)
        .open(path);
    let file = match opened {
        Ok(file) => file,
        // Another user's file (or, with fs.protected_regular, O_CREAT on it in a sticky
        // directory): read-only, without O_CREAT.
        Err(e) if e.kind() == ErrorKind::PermissionDenied => {
            open_existing(path).map_err(|e| device_lock_err!(path, e))?
        }
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            return Err(refused(
                path,
                "is a symbolic link; lock files are never followed (another user may have \
                 planted it)"
                    .into(),
            ));
        }
        Err(e) => return Err(device_lock_err!(path, e)),
    };
    let meta = file.metadata().map_err(|e| device_lock_err!(path, e))?;
    if !meta.is_file() {
        return Err(refused(path, "is not a regular file".into()));
    }
    Ok(file)
}

/// Opens an existing file read-only without following a symlink.
fn open_existing(path: &Path) -> std::io::Result<File> {
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
}

/// Writes a holder note (a fresh file of ours, `0644`, never through a symlink); false if it
/// could not be written.
fn write_note(path: &Path, text: &str) -> bool {
    // A note of ours left by a process that had our pid before: ours to replace.
    if fs::symlink_metadata(path).is_ok_and(|m| m.uid() == my_uid() && m.is_file()) {
        let _ = fs::remove_file(path);
    }
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .and_then(|mut f| writeln!(f, "{text}"))
        .is_ok()
}

/// A note's text if it is a regular file owned by `owner`.
fn read_note(path: &Path, owner: u32) -> Option<String> {
    let mut file = open_existing(path).ok()?;
    let meta = file.metadata().ok()?;
    if !meta.is_file() || meta.uid() != owner || meta.len() > 4096 {
        return None;
    }
    let mut text = String::new();
    file.read_to_string(&mut text).ok()?;
    Some(text.trim().to_string())
}

/// The pid holding an exclusive flock on `file`, from `/proc/locks` (Linux).
fn flock_holder(file: &File) -> Option<u32> {
    let meta = file.metadata().ok()?;
    let dev = meta.dev();
    let id = format!(
        "{:02x}:{:02x}:{}",
        libc::major(dev),
        libc::minor(dev),
        meta.ino()
    );
    let locks = fs::read_to_string("/proc/locks").ok()?;
    locks.lines().find_map(|line| {
        // `1: FLOCK  ADVISORY  WRITE 4242 08:01:1234567 0 EOF`
        let fields: Vec<&str> = line.split_whitespace().collect();
        let (kind, pid, at) = (fields.get(1)?, fields.get(4)?, fields.get(5)?);
        (*kind == "FLOCK" && *at == id)
            .then(|| pid.parse().ok())
            .flatten()
    })
}

/// A held device lock; dropping it (or the process dying) releases it.
#[derive(Debug)]
pub struct DeviceLock {
    file: File,
    /// The holder's note, removed on release.
    note: Option<PathBuf>,
    uuid: String,
}

impl DeviceLock {
    /// The locked device's UUID.
    pub fn uuid(&self) -> &str {
        &self.uuid
    }
}

impl Drop for DeviceLock {
    fn drop(&mut self) {
        if let Some(note) = &self.note {
            let _ = fs::remove_file(note);
        }
        // Closing the descriptor releases the flock; unlock first so it is gone even if a
        // duplicate of the descriptor were alive somewhere.
        let _ = self.file.unlock();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lock_excludes_a_second_open_until_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let locks = DeviceLockDir::open(dir.path().join("locks")).unwrap();
        let first = locks.try_lock("GPU-aaaa", "statement 1").unwrap().unwrap();
        assert_eq!(first.uuid(), "GPU-aaaa");
        // flock is per open file description: a second open in this same process conflicts too.
        assert!(locks.try_lock("GPU-aaaa", "statement 2").unwrap().is_none());
        let holder = locks.holder_of("GPU-aaaa").unwrap();
        assert!(
            holder.contains("statement 1") && holder.contains(&std::process::id().to_string()),
            "{holder}"
        );
        // Other devices are independent.
        assert!(locks.try_lock("GPU-bbbb", "statement 2").unwrap().is_some());
        assert!(
            locks
                .locked_by("GPU-aaaa")
                .unwrap()
                .unwrap()
                .contains("statement 1")
        );
        assert_eq!(locks.locked_by("GPU-never-used").unwrap(), None);
        drop(first);
        assert_eq!(locks.holder_of("GPU-aaaa"), None);
        assert_eq!(locks.locked_by("GPU-aaaa").unwrap(), None);
        assert!(locks.try_lock("GPU-aaaa", "statement 2").unwrap().is_some());
    }

    #[test]
    fn try_lock_all_is_all_or_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let locks = DeviceLockDir::open(dir.path()).unwrap();
        let busy = locks.try_lock("GPU-b", "other").unwrap().unwrap();
        let outcome = locks
            .try_lock_all(["GPU-a", "GPU-b", "GPU-c"], "me")
            .unwrap();
        assert_eq!(outcome.unwrap_err(), "GPU-b");
        // GPU-a was released again.
        assert!(locks.try_lock("GPU-a", "third").unwrap().is_some());
        drop(busy);
        let all = locks
            .try_lock_all(["GPU-a", "GPU-b"], "me")
            .unwrap()
            .unwrap();
        assert_eq!(all.len(), 2);
    }

    #[test]
    fn created_directory_and_files_are_shareable() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("shared");
        let locks = DeviceLockDir::open(&path).unwrap();
        assert_eq!(
            fs::metadata(&path).unwrap().permissions().mode() & 0o7777,
            0o1777
        );
        let _l = locks.try_lock("GPU-x", "s").unwrap().unwrap();
        let mode = fs::metadata(locks.file_for("GPU-x"))
            .unwrap()
            .permissions()
            .mode();
        // Readable by all (another user locks it read-only), writable by its creator only.
        assert_eq!(mode & 0o777, 0o644);
    }

    #[test]
    fn a_planted_symlink_is_refused_and_its_target_untouched() {
        let dir = tempfile::tempdir().unwrap();
        let locks = DeviceLockDir::open(dir.path().join("locks")).unwrap();
        let target = dir.path().join("victim.txt");
        fs::write(&target, "precious").unwrap();
        fs::set_permissions(&target, fs::Permissions::from_mode(0o600)).unwrap();
        std::os::unix::fs::symlink(&target, locks.file_for("GPU-evil")).unwrap();
        let e = locks.try_lock("GPU-evil", "me").unwrap_err();
        assert_eq!(e.code(), "58G01");
        assert!(e.to_string().contains("symbolic link"), "{e}");
        assert_eq!(fs::read_to_string(&target).unwrap(), "precious");
        assert_eq!(fs::metadata(&target).unwrap().mode() & 0o777, 0o600);
        // A dangling one would have been created elsewhere: refused too, nothing created.
        let elsewhere = dir.path().join("created-elsewhere");
        std::os::unix::fs::symlink(&elsewhere, locks.file_for("GPU-dangling")).unwrap();
        assert!(locks.try_lock("GPU-dangling", "me").is_err());
        assert!(!elsewhere.exists());
    }

    #[test]
    fn unsafe_directories_are_refused_naming_them() {
        let dir = tempfile::tempdir().unwrap();
        // A symlink to a directory.
        let real = dir.path().join("real");
        fs::create_dir(&real).unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let e = DeviceLockDir::open(&link).unwrap_err();
        assert!(
            e.to_string().contains("symbolic link") && e.to_string().contains("link"),
            "{e}"
        );
        // Writable by others without the sticky bit.
        let open = dir.path().join("open");
        fs::create_dir(&open).unwrap();
        fs::set_permissions(&open, fs::Permissions::from_mode(0o777)).unwrap();
        let e = DeviceLockDir::open(&open).unwrap_err();
        assert_eq!(e.code(), "58G01");
        assert!(
            e.to_string().contains(&open.display().to_string()) && e.to_string().contains("sticky"),
            "{e}"
        );
        fs::set_permissions(&open, fs::Permissions::from_mode(0o1777)).unwrap();
        assert!(DeviceLockDir::open(&open).is_ok());
        // Owned by someone who is neither root nor us. As root, the test gives the directory
        // to another uid; otherwise it checks our own directory as seen by another uid.
        let e = if my_uid() == 0 {
            std::os::unix::fs::chown(&real, Some(54321), None).unwrap();
            DeviceLockDir::open(&real).unwrap_err()
        } else {
            check_shared_dir(&real, my_uid() + 1).unwrap_err()
        };
        assert!(e.to_string().contains("neither root nor this user"), "{e}");
        // Root's directories are fine.
        assert!(check_shared_dir(Path::new("/"), my_uid().wrapping_add(1)).is_ok());
    }

    #[test]
    fn a_lock_file_we_cannot_write_is_locked_read_only() {
        let dir = tempfile::tempdir().unwrap();
        let locks = DeviceLockDir::open(dir.path().join("locks")).unwrap();
        drop(locks.try_lock("GPU-ro", "first").unwrap().unwrap());
        fs::set_permissions(locks.file_for("GPU-ro"), fs::Permissions::from_mode(0o444)).unwrap();
        let held = locks.try_lock("GPU-ro", "second").unwrap().unwrap();
        assert!(locks.try_lock("GPU-ro", "third").unwrap().is_none());
        drop(held);
        assert!(locks.try_lock("GPU-ro", "fourth").unwrap().is_some());
    }

    #[test]
    fn the_holder_comes_from_the_kernel_and_notes_of_others_are_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let locks = DeviceLockDir::open(dir.path().join("locks")).unwrap();
        // A note planted for a process that holds nothing is never shown.
        fs::write(locks.note_for("GPU-n", 1), "pid 1 spoofed").unwrap();
        assert_eq!(locks.holder_of("GPU-n"), None);
        let held = locks.try_lock("GPU-n", "statement 9").unwrap().unwrap();
        let holder = locks.holder_of("GPU-n").unwrap();
        assert_eq!(holder, format!("pid {} statement 9", std::process::id()));
        // A note not owned by the holder's owner is not believed.
        let note = locks.note_for("GPU-n", std::process::id());
        assert_eq!(read_note(&note, my_uid().wrapping_add(1)), None);
        drop(held);
        assert!(!note.exists(), "the note goes with the lock");
        assert_eq!(locks.holder_of("GPU-n"), None);
    }

    #[test]
    fn odd_characters_in_ids_do_not_escape_the_directory() {
        let locks = DeviceLockDir {
            path: PathBuf::from("/locks"),
        };
        assert_eq!(
            locks.file_for("../../etc/passwd"),
            PathBuf::from("/locks/______etc_passwd.lock")
        );
    }

    #[test]
    fn an_unusable_directory_is_a_coded_error() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("plain-file");
        fs::write(&file, "x").unwrap();
        let e = DeviceLockDir::open(file.join("sub")).unwrap_err();
        assert_eq!(e.code(), "58G01");
    }
}
