//! Reading a table's files: DataFusion's own Parquet scan (`DataSourceExec` over a
//! `ParquetSource`) of the files a snapshot (and its transaction's own writes) holds, with the
//! row counts the log keeps as exact statistics. Being DataFusion's plan, it is pruned,
//! filtered, split by byte range and serialized for a cluster's executors as any Parquet scan.

use std::sync::Arc;

use datafusion::catalog::Session;
use datafusion::common::stats::Precision;
use datafusion::common::{Result as DfResult, Statistics, project_schema};
use datafusion::datasource::file_format::FileFormat;
use datafusion::datasource::file_format::parquet::ParquetFormat;
use datafusion::datasource::listing::PartitionedFile;
use datafusion::datasource::object_store::ObjectStoreUrl;
use datafusion::datasource::physical_plan::{FileGroup, FileScanConfigBuilder};
use datafusion::datasource::table_schema::TableSchema as DfTableSchema;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::empty::EmptyExec;

use crate::error::StorageError;
use crate::table::{DataFile, StoredTable};
use crate::types::TableSchema;

/// The object-store URL DataFusion reads `table`'s files through, registering the table's
/// store with the session's runtime when it is not the local filesystem.
pub(crate) fn object_store_url(state: &dyn Session, table: &StoredTable) -> DfResult<ObjectStoreUrl> {
    let url = table.url();
    if url.scheme() == "file" {
        return Ok(ObjectStoreUrl::local_filesystem());
    }
    let base = format!(
        "{}://{}",
        url.scheme(),
        url.host_str().unwrap_or_default()
    );
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
/// at most `limit` rows when given.
pub(crate) async fn scan_files(
    state: &dyn Session,
    table: &StoredTable,
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
    let format = ParquetFormat::new().with_options(state.table_options().parquet.clone());
    let source = format.file_source(DfTableSchema::from(&logical));
    let config = FileScanConfigBuilder::new(url, source)
        .with_file_groups(groups)
        .with_statistics(statistics)
        .with_projection_indices(projection.cloned())?
        .with_limit(limit)
        .build();
    format.create_physical_plan(state, config).await
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
