//! Keeping tables fast and small: compaction (`OPTIMIZE t`, and automatically once many small
//! writes have left many small files, as row-by-row INSERTs do) and `VACUUM t` (deleting files
//! no version within the retention period reads, and files of writes that never committed).
//! Both are delta-rs's own operations, committed as their own versions.

use std::num::NonZeroU64;
use std::sync::Arc;

use deltalake::DeltaTable;
use deltalake::operations::vacuum::VacuumMode;

use crate::error::{Result, StorageError};
use crate::table::{StoredTable, TableSnapshot};
use crate::write::TARGET_FILE_SIZE;

/// A file smaller than this counts as small.
pub const SMALL_FILE_BYTES: i64 = 8 * 1024 * 1024;
/// A table with at least this many small files is compacted after a write.
pub const COMPACT_MIN_SMALL_FILES: usize = 64;
/// How long a removed file is kept for readers of older versions (time travel) unless `VACUUM
/// … RETAIN` says otherwise: Delta's default, 7 days.
pub const DEFAULT_RETENTION_HOURS: u64 = 168;

/// What a compaction did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Compaction {
    /// Files written.
    pub files_added: u64,
    /// Files they replace.
    pub files_removed: u64,
}

/// What a vacuum did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Vacuum {
    /// The files deleted.
    pub files_deleted: Vec<String>,
}

/// How many of `snapshot`'s files are small.
pub fn small_files(snapshot: &TableSnapshot) -> usize {
    snapshot
        .files
        .iter()
        .filter(|f| f.add.size < SMALL_FILE_BYTES)
        .count()
}

/// The table's newest version as delta-rs's own table handle.
async fn loaded(table: &StoredTable) -> Result<DeltaTable> {
    let mut handle = DeltaTable::new(Arc::clone(table.log_store()));
    handle
        .load()
        .await
        .map_err(|e| StorageError::from_delta(table.name(), e))?;
    Ok(handle)
}

/// Deletes the log entries older than the table's log retention (`delta.logRetentionDuration`,
/// 30 days by default) that a checkpoint covers: commits do not (each cleanup lists the whole
/// log), compaction and vacuum do. A failure is logged.
async fn clean_log(table: &StoredTable, handle: &DeltaTable) {
    if let Err(e) = deltalake::checkpoints::cleanup_metadata(handle, None).await {
        log::info!("table {}: cleaning up old log entries: {e}", table.name());
    }
}

/// `OPTIMIZE t`: joins the table's small files into files of about [`TARGET_FILE_SIZE`], in
/// one commit that changes no row (a concurrent statement that rewrote one of those files
/// wins; the compaction then fails with 40001 and changes nothing).
pub async fn optimize(table: &StoredTable) -> Result<Compaction> {
    let handle = loaded(table).await?;
    let (handle, metrics) = handle
        .optimize()
        .with_target_size(NonZeroU64::new(TARGET_FILE_SIZE).unwrap_or(NonZeroU64::MIN))
        .await
        .map_err(|e| StorageError::from_delta(table.name(), e))?;
    clean_log(table, &handle).await;
    Ok(Compaction {
        files_added: metrics.num_files_added,
        files_removed: metrics.num_files_removed,
    })
}

/// `VACUUM t [RETAIN n HOURS]`: deletes the files that no version younger than the retention
/// period reads (removed by DELETE, UPDATE, OPTIMIZE, …), and files in the table's folder that
/// no commit ever named (writes that failed or were killed), once older than that. Time travel
/// to versions older than the retention period stops working.
pub async fn vacuum(
    table: &StoredTable,
    retain_hours: Option<u64>,
    dry_run: bool,
) -> Result<Vacuum> {
    let handle = loaded(table).await?;
    let hours = retain_hours.unwrap_or(DEFAULT_RETENTION_HOURS);
    let (handle, metrics) = handle
        .vacuum()
        .with_mode(VacuumMode::Full)
        .with_retention_period(chrono::Duration::hours(hours as i64))
        .with_enforce_retention_duration(false)
        .with_dry_run(dry_run)
        .await
        .map_err(|e| StorageError::from_delta(table.name(), e))?;
    clean_log(table, &handle).await;
    Ok(Vacuum {
        files_deleted: metrics.files_deleted,
    })
}

/// Whether `ACCELSQL_AUTO_COMPACT=off` (or `0`, `false`) turns the background compaction off
/// (benchmarks that measure many small files do).
pub fn auto_compaction_off() -> bool {
    std::env::var("ACCELSQL_AUTO_COMPACT").is_ok_and(|v| {
        matches!(
            v.to_ascii_lowercase().as_str(),
            "off" | "0" | "false" | "no"
        )
    })
}

/// After a committed write: compacts `table` in the background when it has gathered
/// [`COMPACT_MIN_SMALL_FILES`] small files (one compaction per table at a time; a failure is
/// logged, the next write tries again).
pub fn compact_in_background(table: &Arc<StoredTable>) {
    if auto_compaction_off() {
        return;
    }
    let Ok(handle) = tokio::runtime::Handle::try_current() else {
        return;
    };
    // Most writes leave few small files: look at the snapshot read already before starting
    // anything.
    if table
        .cached()
        .is_some_and(|s| small_files(&s) < COMPACT_MIN_SMALL_FILES)
    {
        return;
    }
    if !table.start_compacting() {
        return;
    }
    let table = Arc::clone(table);
    handle.spawn(async move {
        let outcome = async {
            let snapshot = table.latest().await?;
            if small_files(&snapshot) >= COMPACT_MIN_SMALL_FILES {
                let done = optimize(&table).await?;
                log::debug!(
                    "table {}: compacted {} small files into {}",
                    table.name(),
                    done.files_removed,
                    done.files_added
                );
            }
            Ok::<(), StorageError>(())
        }
        .await;
        if let Err(e) = outcome {
            log::info!("table {}: background compaction: {e}", table.name());
        }
        table.stop_compacting();
    });
}
