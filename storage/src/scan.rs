//! Reading a table's files: DataFusion's own Parquet scan (`DataSourceExec` over a
//! `ParquetSource`) of the files a snapshot (and its transaction's own writes) holds, with the
//! row counts the log keeps as exact statistics. Being DataFusion's plan, it is pruned,
//! filtered, split by byte range and serialized for a cluster's executors as any Parquet scan.

use std::sync::Arc;

use arrow::array::RecordBatch;
use datafusion::catalog::Session;
use datafusion::common::stats::Precision;
use datafusion::common::{Result as DfResult, Statistics, project_schema};
use datafusion::datasource::listing::PartitionedFile;
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::datasource::object_store::ObjectStoreUrl;
use datafusion::datasource::physical_plan::parquet::CachedParquetFileReaderFactory;
use datafusion::datasource::physical_plan::{FileGroup, FileScanConfigBuilder};
use datafusion::datasource::physical_plan::{ParquetFileReaderFactory, ParquetSource};
use datafusion::datasource::source::DataSourceExec;
use datafusion::datasource::table_schema::TableSchema as DfTableSchema;
use datafusion::parquet::arrow::arrow_reader::ArrowReaderOptions;
use datafusion::parquet::arrow::async_reader::AsyncFileReader;
use datafusion::parquet::errors::ParquetError;
use datafusion::parquet::file::metadata::ParquetMetaData;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::empty::EmptyExec;
use datafusion::physical_plan::metrics::ExecutionPlanMetricsSet;
use datafusion::physical_plan::union::UnionExec;
use futures::FutureExt;
use futures::future::BoxFuture;

use crate::cache::FileCache;
use crate::error::StorageError;
use crate::table::{DataFile, StoredTable};
use crate::types::TableSchema;

/// The object-store URL DataFusion reads `table`'s files through, registering the table's
/// store with the session's runtime when it is not the local filesystem.
pub(crate) fn object_store_url(
    state: &dyn Session,
    table: &StoredTable,
) -> DfResult<ObjectStoreUrl> {
    let url = table.url();
    if url.scheme() == "file" {
        return Ok(ObjectStoreUrl::local_filesystem());
    }
    let base = format!("{}://{}", url.scheme(), url.host_str().unwrap_or_default());
    let store_url = ObjectStoreUrl::parse(&base)?;
    let registry = state.runtime_env();
    if registry.object_store(&store_url).is_err() {
        let root = table.log_store().root_object_store(None);
        let parsed = url::Url::parse(&base).map_err(|e| {
            StorageError::Io {
                table: table.name().to_string(),
                detail: e.to_string(),
            }
            .into_datafusion()
        })?;
        registry.register_object_store(&parsed, root);
    }
    Ok(store_url)
}

/// A scan of `files` of `table`, with `schema`'s logical columns (projected by `projection`),
/// at most `limit` rows when given. Files the session's [`FileCache`] holds are read from
/// memory; the others from disk (and read into the cache in the background when they fit).
pub(crate) async fn scan_files(
    state: &dyn Session,
    table: &Arc<StoredTable>,
    schema: &TableSchema,
    files: &[DataFile],
    projection: Option<&Vec<usize>>,
    limit: Option<usize>,
) -> DfResult<Arc<dyn ExecutionPlan>> {
    let logical = Arc::clone(&schema.logical);
    if files.is_empty() {
        let projected = project_schema(&logical, projection)?;
        return Ok(Arc::new(EmptyExec::new(projected)));
    }
    let Some(cache) = state.config().get_extension::<FileCache>() else {
        return parquet_scan(state, table, schema, files, projection, limit).await;
    };
    let mut cached: Vec<RecordBatch> = Vec::new();
    let mut on_disk: Vec<DataFile> = Vec::new();
    for file in files {
        let path = table
            .file_path(&file.add.path)
            .map_err(StorageError::into_datafusion)?
            .to_string();
        match cache.get(&path, &logical) {
            Some(batches) => cached.extend(batches.iter().cloned()),
            None => on_disk.push(file.clone()),
        }
    }
    let mut plans: Vec<Arc<dyn ExecutionPlan>> = Vec::new();
    if !on_disk.is_empty() {
        plans.push(parquet_scan(state, table, schema, &on_disk, projection, limit).await?);
        // A scan that stops early (a LIMIT) reads little of the table: not a reason to load it.
        if limit.is_none() {
            warm(state, &cache, table, schema, &on_disk).await?;
        }
    }
    if !cached.is_empty() {
        let partitions = state.config().target_partitions().max(1);
        let mut parts: Vec<Vec<RecordBatch>> = vec![Vec::new(); partitions.min(cached.len())];
        let count = parts.len();
        for (i, batch) in cached.into_iter().enumerate() {
            parts[i % count].push(batch);
        }
        plans.push(MemorySourceConfig::try_new_exec(
            &parts,
            Arc::clone(&logical),
            projection.cloned(),
        )?);
    }
    if plans.len() == 1 {
        return Ok(plans.remove(0));
    }
    Ok(UnionExec::try_new(plans)?)
}

/// Reads the files of `files` the cache takes into it, each on a task of its own.
async fn warm(
    state: &dyn Session,
    cache: &Arc<FileCache>,
    table: &Arc<StoredTable>,
    schema: &TableSchema,
    files: &[DataFile],
) -> DfResult<()> {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return Ok(());
    };
    for file in files {
        let path = table
            .file_path(&file.add.path)
            .map_err(StorageError::into_datafusion)?
            .to_string();
        if !cache.claim(&path, file.add.size.max(0) as u64) {
            continue;
        }
        let plan = match parquet_scan(state, table, schema, std::slice::from_ref(file), None, None)
            .await
        {
            Ok(plan) => plan,
            Err(_) => {
                cache.release(&path);
                continue;
            }
        };
        let context = state.task_ctx();
        let cache = Arc::clone(cache);
        let logical = Arc::clone(&schema.logical);
        runtime.spawn(async move {
            let _turn = cache.load_permit().await;
            match datafusion::physical_plan::collect(plan, context).await {
                Ok(batches) => cache.insert(&path, &logical, batches),
                Err(_) => cache.release(&path),
            }
        });
    }
    Ok(())
}

/// DataFusion's Parquet scan of `files`.
async fn parquet_scan(
    state: &dyn Session,
    table: &StoredTable,
    schema: &TableSchema,
    files: &[DataFile],
    projection: Option<&Vec<usize>>,
    limit: Option<usize>,
) -> DfResult<Arc<dyn ExecutionPlan>> {
    let logical = Arc::clone(&schema.logical);
    let url = object_store_url(state, table)?;
    let mut partitioned = Vec::with_capacity(files.len());
    for file in files {
        let path = table
            .file_path(&file.add.path)
            .map_err(StorageError::into_datafusion)?;
        let mut part = PartitionedFile::new(path.to_string(), file.add.size.max(0) as u64);
        if let Some(rows) = file.rows {
            let mut stats = Statistics::new_unknown(&logical);
            stats.num_rows = Precision::Exact(rows as usize);
            stats.total_byte_size = Precision::Inexact(file.add.size.max(0) as usize);
            part = part.with_statistics(Arc::new(stats));
        }
        partitioned.push(part);
    }
    let groups = spread(partitioned, state.config().target_partitions().max(1));
    let mut statistics = Statistics::new_unknown(&logical);
    let rows: Option<u64> = files.iter().map(|f| f.rows).sum();
    if let Some(rows) = rows {
        statistics.num_rows = Precision::Exact(rows as usize);
    }
    statistics.total_byte_size =
        Precision::Inexact(files.iter().map(|f| f.add.size.max(0) as usize).sum());
    let options = state.table_options().parquet.clone();
    let hint = options.global.metadata_size_hint;
    let store = state.runtime_env().object_store(url.clone())?;
    let cache = state.runtime_env().cache_manager.get_file_metadata_cache();
    let factory = NamingReaderFactory {
        inner: Arc::new(CachedParquetFileReaderFactory::new(store, cache)),
        table: table.name().to_string(),
        root: table.url().path().to_string(),
    };
    let mut source = ParquetSource::new(DfTableSchema::from(&logical))
        .with_table_parquet_options(options)
        .with_parquet_file_reader_factory(Arc::new(factory));
    if let Some(hint) = hint {
        source = source.with_metadata_size_hint(hint);
    }
    let config = FileScanConfigBuilder::new(url, Arc::new(source))
        .with_file_groups(groups)
        .with_statistics(statistics)
        .with_projection_indices(projection.cloned())?
        .with_limit(limit)
        .build();
    Ok(DataSourceExec::from_data_source(config))
}

/// DataFusion's reader of a table's Parquet files, whose failures name the table and the file
/// (a damaged file is [`StorageError::Corrupt`], 22000 otherwise).
#[derive(Debug)]
struct NamingReaderFactory {
    inner: Arc<dyn ParquetFileReaderFactory>,
    table: String,
    /// The table folder's path (file names are shown relative to it).
    root: String,
}

impl ParquetFileReaderFactory for NamingReaderFactory {
    fn create_reader(
        &self,
        partition_index: usize,
        file: PartitionedFile,
        metadata_size_hint: Option<usize>,
        metrics: &ExecutionPlanMetricsSet,
    ) -> DfResult<Box<dyn AsyncFileReader + Send>> {
        let path = file.object_meta.location.to_string();
        let shown = path
            .strip_prefix(self.root.trim_start_matches('/'))
            .unwrap_or(&path)
            .to_string();
        let inner = self
            .inner
            .create_reader(partition_index, file, metadata_size_hint, metrics)?;
        Ok(Box::new(NamingReader {
            inner,
            table: self.table.clone(),
            file: shown,
        }))
    }
}

/// One file's reader, naming the table and file in its errors.
struct NamingReader {
    inner: Box<dyn AsyncFileReader + Send>,
    table: String,
    file: String,
}

impl NamingReader {
    fn named(table: &str, file: &str, e: ParquetError) -> ParquetError {
        let corrupt = matches!(
            e,
            ParquetError::EOF(_) | ParquetError::General(_) | ParquetError::NeedMoreData(_)
        ) || e.to_string().contains("footer")
            || e.to_string().contains("magic");
        let error = if corrupt {
            StorageError::Corrupt {
                table: table.to_string(),
                detail: format!("data file {file}: {e}"),
            }
        } else {
            StorageError::Io {
                table: table.to_string(),
                detail: format!("data file {file}: {e}"),
            }
        };
        ParquetError::External(Box::new(error))
    }
}

impl AsyncFileReader for NamingReader {
    fn get_bytes(
        &mut self,
        range: std::ops::Range<u64>,
    ) -> BoxFuture<'_, Result<bytes::Bytes, ParquetError>> {
        let (table, file) = (self.table.clone(), self.file.clone());
        self.inner
            .get_bytes(range)
            .map(move |r| r.map_err(|e| Self::named(&table, &file, e)))
            .boxed()
    }

    fn get_byte_ranges(
        &mut self,
        ranges: Vec<std::ops::Range<u64>>,
    ) -> BoxFuture<'_, Result<Vec<bytes::Bytes>, ParquetError>> {
        let (table, file) = (self.table.clone(), self.file.clone());
        self.inner
            .get_byte_ranges(ranges)
            .map(move |r| r.map_err(|e| Self::named(&table, &file, e)))
            .boxed()
    }

    fn get_metadata<'a>(
        &'a mut self,
        options: Option<&'a ArrowReaderOptions>,
    ) -> BoxFuture<'a, Result<Arc<ParquetMetaData>, ParquetError>> {
        let (table, file) = (self.table.clone(), self.file.clone());
        self.inner
            .get_metadata(options)
            .map(move |r| r.map_err(|e| Self::named(&table, &file, e)))
            .boxed()
    }
}

/// `files` in at most `n` groups of about equal bytes (largest first, each to the lightest
/// group), so that each partition of the scan reads its share.
fn spread(mut files: Vec<PartitionedFile>, n: usize) -> Vec<FileGroup> {
    files.sort_by_key(|f| std::cmp::Reverse(f.object_meta.size));
    let n = n.min(files.len()).max(1);
    let mut groups: Vec<(u64, Vec<PartitionedFile>)> = (0..n).map(|_| (0, Vec::new())).collect();
    for file in files {
        let size = file.object_meta.size;
        if let Some(lightest) = groups.iter_mut().min_by_key(|(bytes, _)| *bytes) {
            lightest.0 += size;
            lightest.1.push(file);
        }
    }
    groups
        .into_iter()
        .filter(|(_, files)| !files.is_empty())
        .map(|(_, files)| FileGroup::new(files))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_are_spread_by_bytes() {
        let files = [100u64, 10, 10, 10, 70, 5]
            .iter()
            .enumerate()
            .map(|(i, size)| PartitionedFile::new(format!("f{i}"), *size))
            .collect();
        let groups = spread(files, 2);
        assert_eq!(groups.len(), 2);
        let sizes: Vec<u64> = groups
            .iter()
            .map(|g| g.files().iter().map(|f| f.object_meta.size).sum())
            .collect();
        assert_eq!(sizes.iter().sum::<u64>(), 205);
        assert!(sizes.iter().all(|s| *s >= 95 && *s <= 110), "{sizes:?}");
        assert_eq!(spread(Vec::new(), 4).len(), 0);
    }
}
