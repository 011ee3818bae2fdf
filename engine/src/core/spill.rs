//! Disk quotas for spilling: operators that spill (sorts, aggregations, joins) write temporary
//! files under the data directory's `tmp` folder, and a statement must not be able to fill the
//! disk. Each session spills through its own DataFusion [`DiskManager`], whose byte limit is
//! set before each statement to what the session may still use: its own quota, what is left of
//! its user's quota (all of a user's sessions together), and what is left of the engine's. A
//! statement that spills past it fails with 53400, and its files are deleted as it ends.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};

use datafusion::execution::disk_manager::{DiskManager, DiskManagerBuilder, DiskManagerMode};

/// The most an engine spills by default (DataFusion's own default bound).
pub(crate) const DEFAULT_SPILL_LIMIT: u64 = 100 * 1024 * 1024 * 1024;

/// The text of DataFusion's error for a spill past its disk manager's limit.
pub(crate) const DATAFUSION_QUOTA_TEXT: &str =
    "used disk space during the spilling process has exceeded";

/// The free bytes of the file system that holds `path` (`None`: unknown).
fn available_bytes(path: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c_path = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    let mut stat = std::mem::MaybeUninit::<libc::statvfs>::zeroed();
    // SAFETY: `c_path` is a NUL-terminated path and `stat` a buffer of the size statvfs writes.
    let rc = unsafe { libc::statvfs(c_path.as_ptr(), stat.as_mut_ptr()) };
    if rc != 0 {
        return None;
    }
    // SAFETY: statvfs returned 0, so it filled the buffer.
    let stat = unsafe { stat.assume_init() };
    #[allow(clippy::unnecessary_cast)] // the field types differ between platforms
    Some((stat.f_bavail as u64).saturating_mul(stat.f_frsize as u64))
}

/// The engine's spill bound when none is given: half the free space of the spill folder's file
/// system at start, at most [`DEFAULT_SPILL_LIMIT`].
pub(crate) fn default_spill_limit(dir: Option<&Path>) -> u64 {
    let dir = dir.map_or_else(std::env::temp_dir, Path::to_path_buf);
    available_bytes(&dir).map_or(DEFAULT_SPILL_LIMIT, |free| {
        (free / 2).min(DEFAULT_SPILL_LIMIT)
    })
}

/// One session's spilling.
#[derive(Debug)]
struct Spiller {
    user: String,
    disk: Weak<DiskManager>,
}

/// The engine's spill quotas and every session's disk manager.
#[derive(Debug)]
pub(crate) struct SpillQuotas {
    /// Where sessions spill (`None`: the OS's temporary folder).
    dir: Option<PathBuf>,
    /// All sessions together.
    engine_limit: u64,
    /// All sessions of one user together.
    user_limit: u64,
    /// One session.
    session_limit: u64,
    sessions: Mutex<HashMap<u64, Spiller>>,
}

impl SpillQuotas {
    /// Quotas over `dir` (the data directory's spill folder, or none): the engine's, a user's
    /// and a session's, in bytes.
    pub(crate) fn new(
        dir: Option<PathBuf>,
        engine_limit: u64,
        user_limit: u64,
        session_limit: u64,
    ) -> Self {
        Self {
            dir,
            engine_limit,
            user_limit: user_limit.min(engine_limit),
            session_limit: session_limit.min(engine_limit),
            sessions: Mutex::default(),
        }
    }

    /// The disk manager of new session `session` (its files go in a folder of their own, deleted
    /// with the session). When that folder cannot be made the session spills through
    /// `fallback` (the engine's, bounded by the engine's limit alone), and the reason is logged.
    pub(crate) fn session_disk(
        &self,
        session: u64,
        fallback: &Arc<DiskManager>,
    ) -> Arc<DiskManager> {
        let mode = match &self.dir {
            Some(dir) => DiskManagerMode::Directories(vec![dir.clone()]),
            None => DiskManagerMode::OsTmpDirectory,
        };
        let built = DiskManagerBuilder::default()
            .with_mode(mode)
            .with_max_temp_directory_size(self.session_limit)
            .build();
        let disk = match built {
            Ok(disk) => Arc::new(disk),
            Err(e) => {
                log::warn!(
                    "session {session}: cannot make a folder for its spill files under {}: {e}",
                    self.dir
                        .clone()
                        .unwrap_or_else(std::env::temp_dir)
                        .display()
                );
                return Arc::clone(fallback);
            }
        };
        let mut sessions = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        sessions.retain(|_, s| s.disk.strong_count() > 0);
        sessions.insert(
            session,
            Spiller {
                user: String::new(),
                disk: Arc::downgrade(&disk),
            },
        );
        disk
    }

    /// Before a statement of `session` (run by `user`): bounds its disk manager by what it may
    /// still spill. Returns that bound.
    pub(crate) fn bound_statement(&self, session: u64, user: &str) -> u64 {
        let mut sessions = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        sessions.retain(|_, s| s.disk.strong_count() > 0);
        let (mut engine_used, mut user_used) = (0u64, 0u64);
        for (id, spiller) in sessions.iter() {
            if *id == session {
                continue;
            }
            let used = spiller.disk.upgrade().map_or(0, |d| d.used_disk_space());
            engine_used = engine_used.saturating_add(used);
            if spiller.user == user {
                user_used = user_used.saturating_add(used);
            }
        }
        let bound = self
            .session_limit
            .min(self.engine_limit.saturating_sub(engine_used))
            .min(self.user_limit.saturating_sub(user_used));
        if let Some(spiller) = sessions.get_mut(&session) {
            user.clone_into(&mut spiller.user);
            if let Some(disk) = spiller.disk.upgrade() {
                // Only fails for a disk manager that cannot spill at all.
                let _ = disk.set_max_temp_directory_size(bound);
            }
        }
        bound
    }

    /// The bytes spilled now, by every session.
    pub(crate) fn used(&self) -> u64 {
        let sessions = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        sessions
            .values()
            .filter_map(|s| s.disk.upgrade())
            .map(|d| d.used_disk_space())
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use datafusion::execution::SpillFile;

    use super::*;

    /// Writes `bytes` to a new spill file of `disk`, as an operator would; the file (kept
    /// while it lives) and whether the write fit the disk manager's limit.
    fn spill(disk: &Arc<DiskManager>, bytes: usize) -> (Arc<dyn SpillFile>, bool) {
        let file = disk.create_tmp_file("a test").unwrap();
        let mut writer = file.open_writer().unwrap();
        let fits = writer.write_all(&vec![7u8; bytes]).is_ok();
        (file, fits)
    }

    #[test]
    fn a_statement_may_spill_what_its_session_user_and_engine_have_left() {
        let dir = tempfile::tempdir().unwrap();
        let quotas = SpillQuotas::new(Some(dir.path().to_path_buf()), 1000, 600, 400);
        let fallback = Arc::new(DiskManager::builder().build().unwrap());
        let a = quotas.session_disk(1, &fallback);
        let b = quotas.session_disk(2, &fallback);
        let c = quotas.session_disk(3, &fallback);
        assert_eq!(quotas.bound_statement(1, "ANN"), 400);
        assert_eq!(a.max_temp_directory_size(), 400);
        // A session cannot spill past its own quota.
        let (_held, fits) = spill(&a, 401);
        assert!(!fits);
        let (_a_files, fits) = spill(&a, 350);
        assert!(fits);
        assert_eq!(quotas.used(), 350);
        // ANN's other session may use what is left of ANN's 600; BOB his own 400.
        assert_eq!(quotas.bound_statement(2, "ANN"), 250);
        assert!(!spill(&b, 251).1);
        assert_eq!(quotas.bound_statement(3, "BOB"), 400);
        let (_c_files, fits) = spill(&c, 400);
        assert!(fits);
        // The engine's 1000 now has 250 left for a new session of anyone.
        let d = quotas.session_disk(4, &fallback);
        assert_eq!(quotas.bound_statement(4, "EVE"), 250);
        drop((b, c, d, _c_files));
        // Sessions that ended, and their files, no longer count.
        assert_eq!(quotas.bound_statement(1, "ANN"), 400);
        assert_eq!(quotas.sessions.lock().unwrap().len(), 1);
    }

    #[test]
    fn quotas_never_exceed_the_engines() {
        let quotas = SpillQuotas::new(None, 100, 1_000, 1_000);
        let fallback = Arc::new(DiskManager::builder().build().unwrap());
        let _disk = quotas.session_disk(7, &fallback);
        assert_eq!(quotas.bound_statement(7, "SYS"), 100);
    }

    #[test]
    fn the_default_bound_is_at_most_datafusions() {
        let limit = default_spill_limit(None);
        assert!(limit > 0 && limit <= DEFAULT_SPILL_LIMIT, "{limit}");
    }
}
