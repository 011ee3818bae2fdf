//! Writing rows into new data files of a table: delta-rs's Parquet writer (`DeltaWriter`),
//! which rolls files at a target size and gives each file's `add` action with its statistics.
//! A write adds files and nothing else; the files join the table only when a commit names them,
//! so a write that fails or is dropped leaves the table as it was (its files, if any reached
//! the disk, are deleted here or by `VACUUM`).

use std::collections::HashMap;
use std::num::NonZeroU64;
use std::sync::Arc;

use arrow::array::RecordBatch;
use datafusion::common::runtime::SpawnedTask;
use datafusion::execution::TaskContext;
use datafusion::physical_plan::ExecutionPlan;
use deltalake::kernel::Add;
use deltalake::operations::get_num_idx_cols_and_stats_columns;
use deltalake::operations::write::writer::{DeltaWriter, WriterConfig};
use deltalake::table::state::DeltaTableState;
use futures::StreamExt;

use crate::cache::FileCache;
use crate::error::{Result, StorageError};
use crate::table::StoredTable;
use crate::types::TableSchema;

/// A data file is closed at about this size (the Parquet bytes), and a new one started.
pub const TARGET_FILE_SIZE: u64 = 128 * 1024 * 1024;

/// A small write keeps its rows (up to this many bytes) for the table cache.
const CACHED_WRITE_BYTES: usize = 8 * 1024 * 1024;

/// Rows into new files of one table.
pub struct FileWriter {
    table: Arc<StoredTable>,
    schema: TableSchema,
    writer: DeltaWriter,
    rows: u64,
    /// The cache that takes a small write's rows, and the rows kept for it so far.
    keep: Option<(Arc<FileCache>, Vec<RecordBatch>, usize)>,
}

impl FileWriter {
    /// A writer of `schema`'s rows into new files of `table`, with the statistics settings of
    /// `state` (the table's version being written to; `None` for a new table).
    pub fn new(
        table: &Arc<StoredTable>,
        schema: &TableSchema,
        state: Option<&DeltaTableState>,
    ) -> Self {
        let (indexed, stats_columns) =
            get_num_idx_cols_and_stats_columns(state.map(|s| s.table_config()), HashMap::new());
        let config = WriterConfig::new(
            Arc::clone(&schema.storage),
            Vec::new(),
            None,
            NonZeroU64::new(TARGET_FILE_SIZE),
            None,
            indexed,
            stats_columns,
        );
        Self {
            table: Arc::clone(table),
            schema: schema.clone(),
            writer: DeltaWriter::new(table.object_store(), config),
            rows: 0,
            keep: None,
        }
    }

    /// This writer, handing the rows of a small write (one file) to `cache` when it finishes.
    pub(crate) fn with_cache(mut self, cache: Option<Arc<FileCache>>) -> Self {
        self.keep = cache.map(|c| (c, Vec::new(), 0));
        self
    }

    /// Writes `batch` (the logical schema's columns).
    pub(crate) async fn write(&mut self, batch: &RecordBatch) -> Result<()> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        let stored = self.schema.to_storage(self.table.name(), batch)?;
        if let Some((_, kept, bytes)) = &mut self.keep {
            *bytes += batch.get_array_memory_size();
            if *bytes <= CACHED_WRITE_BYTES {
                if let Ok(b) =
                    RecordBatch::try_new(Arc::clone(&self.schema.logical), batch.columns().to_vec())
                {
                    kept.push(b);
                }
            } else {
                self.keep = None;
            }
        }
        self.writer
            .write(&stored)
            .await
            .map_err(|e| StorageError::from_delta(self.table.name(), e))?;
        self.rows += batch.num_rows() as u64;
        Ok(())
    }

    /// Closes the last file: the `add` actions of every file written, and the rows.
    pub(crate) async fn finish(self) -> Result<(Vec<Add>, u64)> {
        let rows = self.rows;
        let adds = self
            .writer
            .close()
            .await
            .map_err(|e| StorageError::from_delta(self.table.name(), e))?;
        if let (Some((cache, kept, _)), [add]) = (self.keep, adds.as_slice())
            && let Ok(path) = self.table.file_path(&add.path)
        {
            cache.insert(&path.to_string(), &self.schema.logical, kept);
        }
        Ok((adds, rows))
    }

    /// Gives up: what is buffered is dropped; files already closed are left for the caller's
    /// cleanup or `VACUUM`.
    pub(crate) async fn abort(self) {
        if let Err(e) = self.writer.abort().await {
            log::warn!("table {}: aborting a write: {e}", self.table.name());
        }
    }
}

/// Writes every row `input` produces (each of its partitions on its own task) into new files
/// of `table`; the files' `add` actions and the rows written.
///
/// On failure, the files already closed are deleted before the error returns.
pub(crate) async fn write_plan(
    table: &Arc<StoredTable>,
    schema: &TableSchema,
    state: Option<&DeltaTableState>,
    input: Arc<dyn ExecutionPlan>,
    context: Arc<TaskContext>,
) -> Result<(Vec<Add>, u64)> {
    let partitions = input.properties().partitioning.partition_count().max(1);
    let mut tasks = Vec::with_capacity(partitions);
    for partition in 0..partitions {
        let stream = input
            .execute(partition, Arc::clone(&context))
            .map_err(StorageError::DataFusion)?;
        let cache = context.session_config().get_extension::<FileCache>();
        let writer = FileWriter::new(table, schema, state).with_cache(cache);
        tasks.push(SpawnedTask::spawn(write_stream(writer, stream)));
    }
    let mut adds = Vec::new();
    let mut rows = 0;
    let mut failure = None;
    for task in tasks {
        match task.join().await {
            Ok(Ok((written, n))) => {
                adds.extend(written);
                rows += n;
            }
            Ok(Err(e)) => {
                failure.get_or_insert(e);
            }
            Err(e) => {
                failure.get_or_insert(StorageError::Internal {
                    table: table.name().to_string(),
                    detail: format!("a write task failed: {e}"),
                });
            }
        }
    }
    if let Some(e) = failure {
        table.delete_files(&adds).await;
        return Err(e);
    }
    Ok((adds, rows))
}

/// Writes one stream's batches through `writer`.
pub async fn write_stream(
    mut writer: FileWriter,
    mut stream: datafusion::execution::SendableRecordBatchStream,
) -> Result<(Vec<Add>, u64)> {
    let table = writer.table.name().to_string();
    while let Some(batch) = stream.next().await {
        let batch = match batch {
            Ok(batch) => batch,
            Err(e) => {
                writer.abort().await;
                return Err(StorageError::from_write(&table, e));
            }
        };
        if let Err(e) = writer.write(&batch).await {
            writer.abort().await;
            return Err(e);
        }
    }
    writer.finish().await
}
