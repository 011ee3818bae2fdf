//! Cross-process device locks: one advisory `flock` file per device UUID in a shared directory.
//!
//! The kernel drops an `flock` when the process holding it dies, however it dies, so a crashed
//! holder never leaves a stale lock behind (safe-gpu's placeholder allocations can). Locks are
//! taken with non-blocking `try_lock` only: callers that must wait poll with back-off, which keeps
//! waiting cancellable and avoids hold-and-wait between devices.

use std::fs::{self, File, OpenOptions, TryLockError};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
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

impl DeviceLockDir {
    /// Uses (and creates if needed) `path`. A directory this process creates is made
    /// world-writable with the sticky bit (like `/tmp`), so every user of the server can lock there.
    pub fn open(path: impl Into<PathBuf>) -> Result<Self> {
        let path = path.into();
        if !path.is_dir() {
            match fs::create_dir_all(&path) {
                Ok(()) => {
                    // Best effort: a directory another user owns keeps its mode.
                    let _ = fs::set_permissions(&path, fs::Permissions::from_mode(0o1777));
                }
                Err(e) if path.is_dir() => log::debug!("lock dir raced into existence: {e}"),
                Err(e) => return Err(device_lock_err!(path, e)),
            }
        }
        Ok(Self { path })
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The lock file of device `uuid`.
    pub fn file_for(&self, uuid: &str) -> PathBuf {
        let safe: String = uuid
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        self.path.join(format!("{safe}.lock"))
    }

    /// Locks device `uuid` if no process holds it; `Ok(None)` if one does.
    /// `holder` is written into the file so that waiters can say who they wait for.
    pub fn try_lock(&self, uuid: &str, holder: &str) -> Result<Option<DeviceLock>> {
        let path = self.file_for(uuid);
        let (mut file, writable) = open_shared(&path)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => return Ok(None),
            Err(TryLockError::Error(e)) => return Err(device_lock_err!(path, e)),
        }
        if writable {
            // Best effort: the lock is what matters, the note only helps waiters' messages.
            let _ = file
                .set_len(0)
                .and_then(|()| file.seek(SeekFrom::Start(0)))
                .and_then(|_| writeln!(file, "pid {} {holder}", std::process::id()));
        }
        Ok(Some(DeviceLock {
            file,
            writable,
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

    /// Whether a process holds device `uuid` now, and who (as it wrote it, or `"holder unknown"`).
    /// Unlike [`DeviceLockDir::holder_of`], a note left by a holder that died is ignored.
    pub fn locked_by(&self, uuid: &str) -> Result<Option<String>> {
        let path = self.file_for(uuid);
        let file = match File::open(&path) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
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

    /// Who holds device `uuid`, as its holder wrote it (e.g. `pid 4242 statement 17`), if anyone does.
    pub fn holder_of(&self, uuid: &str) -> Option<String> {
        let mut text = String::new();
        File::open(self.file_for(uuid))
            .ok()?
            .read_to_string(&mut text)
            .ok()?;
        let text = text.trim();
        (!text.is_empty()).then(|| text.to_string())
    }
}

/// Opens (creating if needed) a lock file every user may open; read-only if we may not write it.
fn open_shared(path: &Path) -> Result<(File, bool)> {
    let created = !path.exists();
    match OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o666)
        .open(path)
    {
        Ok(file) => {
            if created {
                // The umask narrowed the mode; widen it so other users can share the lock.
                let _ = file.set_permissions(fs::Permissions::from_mode(0o666));
            }
            Ok((file, true))
        }
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            // flock works on a read-only descriptor too.
            let file = File::open(path).map_err(|e| device_lock_err!(path, e))?;
            Ok((file, false))
        }
        Err(e) => Err(device_lock_err!(path, e)),
    }
}

/// A held device lock; dropping it (or the process dying) releases it.
#[derive(Debug)]
pub struct DeviceLock {
    file: File,
    writable: bool,
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
        if self.writable {
            let _ = self.file.set_len(0);
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
        assert_eq!(mode & 0o777, 0o666);
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
