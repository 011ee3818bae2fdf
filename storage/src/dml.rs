//! The writes of a stored table as DataFusion plans: [`WriteExec`] (`INSERT`, `INSERT
//! OVERWRITE`) writes its input into new files; [`RewriteExec`] (`DELETE`, `UPDATE`,
//! `TRUNCATE`) rewrites the files that hold matching rows (copy-on-write: a file with a
//! matching row is read again and written anew without those rows, or with them changed, and
//! the old file leaves the table in the same commit). Each ends by handing its [`Change`] to
//! the session's [`Transaction`] and yields one row, the count of rows affected.

use std::fmt;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, BooleanArray, RecordBatch, UInt64Array};
use arrow::compute::{cast, filter_record_batch, not, prep_null_mask_filter};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::{DataFusionError, Result as DfResult};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::{EquivalenceProperties, PhysicalExpr};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties,
};
use futures::{StreamExt, TryStreamExt};

use crate::error::{Result, StorageError};
use crate::table::{DataFile, StoredTable};
use crate::txn::{Change, ChangeKind, TableView, Transaction};
use crate::types::TableSchema;
use crate::write::{FileWriter, write_plan};

/// The schema of a write's result: one row, `count`.
pub(crate) fn count_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![Field::new(
        "count",
        DataType::UInt64,
        false,
    )]))
}

pub(crate) fn count_properties(schema: &SchemaRef) -> Arc<PlanProperties> {
    Arc::new(PlanProperties::new(
        EquivalenceProperties::new(Arc::clone(schema)),
        Partitioning::UnknownPartitioning(1),
        EmissionType::Final,
        Boundedness::Bounded,
    ))
}

/// The one-row result of a write.
pub(crate) fn count_batch(schema: &SchemaRef, rows: u64) -> DfResult<RecordBatch> {
    Ok(RecordBatch::try_new(
        Arc::clone(schema),
        vec![Arc::new(UInt64Array::from(vec![rows]))],
    )?)
}

/// The stream of a write plan's one partition: runs `work` when first polled and yields its one
/// row, the rows affected. Another partition than 0 is an internal error.
pub(crate) fn count_stream<F>(
    plan: &str,
    partition: usize,
    count: &SchemaRef,
    work: F,
) -> DfResult<SendableRecordBatchStream>
where
    F: std::future::Future<Output = Result<u64>> + Send + 'static,
{
    if partition != 0 {
        return Err(DataFusionError::Internal(format!(
            "{plan} has one partition, not {partition}"
        )));
    }
    let schema = Arc::clone(count);
    let stream = futures::stream::once(async move {
        let rows = work.await.map_err(StorageError::into_datafusion)?;
        count_batch(&schema, rows)
    });
    Ok(Box::pin(RecordBatchStreamAdapter::new(
        Arc::clone(count),
        stream,
    )))
}

/// `INSERT INTO t …` (`overwrite`: `INSERT OVERWRITE`): its input's rows into new files of the
/// table, handed to the session's transaction.
pub struct WriteExec {
    table: Arc<StoredTable>,
    schema: TableSchema,
    input: Arc<dyn ExecutionPlan>,
    overwrite: bool,
    txn: Arc<Transaction>,
    count: SchemaRef,
    properties: Arc<PlanProperties>,
}

impl fmt::Debug for WriteExec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WriteExec")
            .field("table", &self.table.name())
            .field("overwrite", &self.overwrite)
            .finish()
    }
}

impl WriteExec {
    /// Writes `input` (rows of `schema`'s logical columns) into `table` through `txn`.
    pub fn new(
        table: Arc<StoredTable>,
        schema: TableSchema,
        input: Arc<dyn ExecutionPlan>,
        overwrite: bool,
        txn: Arc<Transaction>,
    ) -> Self {
        let count = count_schema();
        Self {
            properties: count_properties(&count),
            table,
            schema,
            input,
            overwrite,
            txn,
            count,
        }
    }

    /// The table written to.
    pub fn table(&self) -> &Arc<StoredTable> {
        &self.table
    }
}

impl DisplayAs for WriteExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = if self.overwrite {
            "overwrite"
        } else {
            "append"
        };
        write!(f, "DeltaWriteExec: table={}, {what}", self.table.name())
    }
}

impl ExecutionPlan for WriteExec {
    fn name(&self) -> &str {
        "DeltaWriteExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> DfResult<TreeNodeRecursion>,
    ) -> DfResult<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn benefits_from_input_partitioning(&self) -> Vec<bool> {
        vec![false]
    }

    fn with_new_children(
        self: Arc<Self>,
        mut children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        if children.len() != 1 {
            return Err(DataFusionError::Internal(format!(
                "DeltaWriteExec has one input, got {}",
                children.len()
            )));
        }
        Ok(Arc::new(Self::new(
            Arc::clone(&self.table),
            self.schema.clone(),
            children.remove(0),
            self.overwrite,
            Arc::clone(&self.txn),
        )))
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> DfResult<SendableRecordBatchStream> {
        let table = Arc::clone(&self.table);
        let schema = self.schema.clone();
        let input = Arc::clone(&self.input);
        let overwrite = self.overwrite;
        let txn = Arc::clone(&self.txn);
        let work = async move {
            let view = txn.view(&table).await?;
            let (added, rows) =
                write_plan(&table, &schema, Some(&view.snapshot.state), input, context).await?;
            let change = Change {
                table: Arc::clone(&table),
                base: Arc::clone(&view.snapshot),
                added,
                removed: if overwrite {
                    view.files.as_ref().clone()
                } else {
                    Vec::new()
                },
                kind: if overwrite {
                    ChangeKind::Overwrite
                } else {
                    ChangeKind::Append
                },
            };
            let committed = txn.apply(change).await?;
            if committed.is_some() {
                crate::maintenance::compact_in_background(&table);
            }
            Ok(rows)
        };
        count_stream("DeltaWriteExec", partition, &self.count, work)
    }
}

/// What a rewrite does to the rows that match.
#[derive(Debug, Clone)]
pub enum Rewrite {
    /// `DELETE`: they go.
    Delete,
    /// `UPDATE`: these columns (by index) get these values (over the logical columns).
    Update(Vec<(usize, Arc<dyn PhysicalExpr>)>),
    /// `TRUNCATE`: every row goes, no file is read.
    Truncate,
}

/// One file of a rewrite and the plan that reads it (the table's logical columns).
#[derive(Debug, Clone)]
pub struct FileScan {
    /// The file.
    pub file: DataFile,
    /// Its rows.
    pub plan: Arc<dyn ExecutionPlan>,
}

/// `DELETE`, `UPDATE` or `TRUNCATE` of a stored table: the files of the statement's view that
/// hold a matching row are written anew.
pub struct RewriteExec {
    table: Arc<StoredTable>,
    schema: TableSchema,
    view: TableView,
    files: Vec<FileScan>,
    /// Which rows (over the logical columns); `None`: all of them.
    predicate: Option<Arc<dyn PhysicalExpr>>,
    rewrite: Rewrite,
    txn: Arc<Transaction>,
    count: SchemaRef,
    properties: Arc<PlanProperties>,
}

impl fmt::Debug for RewriteExec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RewriteExec")
            .field("table", &self.table.name())
            .field("files", &self.files.len())
            .finish()
    }
}

impl RewriteExec {
    /// A rewrite of `files` (the statement's view of `table`, each with the plan that reads
    /// it) where `predicate` holds.
    pub fn new(
        table: Arc<StoredTable>,
        schema: TableSchema,
        view: TableView,
        files: Vec<FileScan>,
        predicate: Option<Arc<dyn PhysicalExpr>>,
        rewrite: Rewrite,
        txn: Arc<Transaction>,
    ) -> Self {
        let count = count_schema();
        Self {
            properties: count_properties(&count),
            table,
            schema,
            view,
            files,
            predicate,
            rewrite,
            txn,
            count,
        }
    }
}

impl DisplayAs for RewriteExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match &self.rewrite {
            Rewrite::Delete => "delete",
            Rewrite::Update(_) => "update",
            Rewrite::Truncate => "truncate",
        };
        write!(f, "DeltaRewriteExec: table={}, {what}", self.table.name())?;
        if let Some(p) = &self.predicate {
            write!(f, ", where {p}")?;
        }
        write!(f, ", files={}", self.files.len())
    }
}

impl ExecutionPlan for RewriteExec {
    fn name(&self) -> &str {
        "DeltaRewriteExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        Vec::new()
    }

    fn apply_expressions(
        &self,
        f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> DfResult<TreeNodeRecursion>,
    ) -> DfResult<TreeNodeRecursion> {
        let assigned = match &self.rewrite {
            Rewrite::Update(a) => a.iter().map(|(_, e)| e).collect::<Vec<_>>(),
            _ => Vec::new(),
        };
        for e in self.predicate.iter().chain(assigned) {
            if f(e)? == TreeNodeRecursion::Stop {
                return Ok(TreeNodeRecursion::Stop);
            }
        }
        Ok(TreeNodeRecursion::Continue)
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        if !children.is_empty() {
            return Err(DataFusionError::Internal(
                "DeltaRewriteExec has no inputs".to_string(),
            ));
        }
        Ok(self)
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> DfResult<SendableRecordBatchStream> {
        let job = Job {
            table: Arc::clone(&self.table),
            schema: self.schema.clone(),
            predicate: self.predicate.clone(),
            rewrite: self.rewrite.clone(),
            context,
        };
        let files = self.files.clone();
        let view = self.view.clone();
        let txn = Arc::clone(&self.txn);
        let work = async move {
            let (added, removed, rows) = job.run(&view, files).await?;
            let kind = match job.rewrite {
                Rewrite::Delete => ChangeKind::Delete,
                Rewrite::Update(_) => ChangeKind::Update,
                Rewrite::Truncate => ChangeKind::Truncate,
            };
            let change = Change {
                table: Arc::clone(&job.table),
                base: Arc::clone(&view.snapshot),
                added,
                removed,
                kind,
            };
            txn.apply(change).await?;
            Ok(rows)
        };
        count_stream("DeltaRewriteExec", partition, &self.count, work)
    }
}

/// One rewrite being run.
struct Job {
    table: Arc<StoredTable>,
    schema: TableSchema,
    predicate: Option<Arc<dyn PhysicalExpr>>,
    rewrite: Rewrite,
    context: Arc<TaskContext>,
}

/// What one file's rewrite did: the files written, whether the file leaves the table, rows.
type FileOutcome = (Vec<deltalake::kernel::Add>, bool, u64);

impl Job {
    /// Rewrites the files (a few at a time): the files added, those removed, the rows
    /// affected. On failure, the files written so far are deleted.
    async fn run(
        &self,
        view: &TableView,
        files: Vec<FileScan>,
    ) -> Result<(Vec<deltalake::kernel::Add>, Vec<DataFile>, u64)> {
        if matches!(self.rewrite, Rewrite::Truncate) {
            let rows = view.files.iter().filter_map(|f| f.rows).sum();
            return Ok((Vec::new(), view.files.as_ref().clone(), rows));
        }
        let parallel = self
            .context
            .session_config()
            .target_partitions()
            .clamp(1, 8);
        let mut results = futures::stream::iter(files.into_iter().map(|scan| async move {
            let outcome = self.rewrite_file(&scan).await;
            (scan.file, outcome)
        }))
        .buffer_unordered(parallel);
        let mut added = Vec::new();
        let mut removed = Vec::new();
        let mut rows = 0;
        let mut failure = None;
        while let Some((file, outcome)) = results.next().await {
            match outcome {
                Ok((written, gone, n)) => {
                    added.extend(written);
                    if gone {
                        removed.push(file);
                    }
                    rows += n;
                }
                Err(e) => {
                    failure.get_or_insert(e);
                }
            }
        }
        if let Some(e) = failure {
            self.table.delete_files(&added).await;
            return Err(e);
        }
        Ok((added, removed, rows))
    }

    /// Which rows of `batch` match (NULL does not).
    fn matches(&self, batch: &RecordBatch) -> Result<BooleanArray> {
        let Some(predicate) = &self.predicate else {
            return Ok(BooleanArray::from(vec![true; batch.num_rows()]));
        };
        let value = predicate
            .evaluate(batch)
            .and_then(|v| v.into_array(batch.num_rows()))
            .map_err(StorageError::DataFusion)?;
        let mask = value
            .as_any()
            .downcast_ref::<BooleanArray>()
            .ok_or_else(|| StorageError::Data {
                detail: format!("a WHERE condition is not a boolean: {predicate}"),
            })?;
        Ok(if mask.null_count() == 0 {
            mask.clone()
        } else {
            prep_null_mask_filter(mask)
        })
    }

    /// Whether any row of the file matches: reads until the first match.
    async fn any_match(&self, scan: &FileScan) -> Result<bool> {
        let mut stream = self.read(scan)?;
        while let Some(batch) = stream.next().await {
            let batch = batch.map_err(|e| self.read_error(&scan.file, e))?;
            if self.matches(&batch)?.true_count() > 0 {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// A fresh run of `scan`'s plan (a plan's scan state is spent by one run).
    fn read(&self, scan: &FileScan) -> Result<SendableRecordBatchStream> {
        Arc::clone(&scan.plan)
            .reset_state()
            .and_then(|plan| plan.execute(0, Arc::clone(&self.context)))
            .map_err(StorageError::DataFusion)
    }

    /// A failure reading a file of the table, naming the file.
    fn read_error(&self, file: &DataFile, e: DataFusionError) -> StorageError {
        match e {
            DataFusionError::ParquetError(_) | DataFusionError::ArrowError(..) => {
                StorageError::Corrupt {
                    table: self.table.name().to_string(),
                    detail: format!("data file {}: {e}", file.add.path),
                }
            }
            other => StorageError::DataFusion(other),
        }
    }

    /// Rewrites one file if a row of it matches: the files written, whether the file goes,
    /// the rows affected.
    async fn rewrite_file(&self, scan: &FileScan) -> Result<FileOutcome> {
        if !self.any_match(scan).await? {
            return Ok((Vec::new(), false, 0));
        }
        let mut writer = FileWriter::new(&self.table, &self.schema, None);
        let mut stream = self.read(scan)?;
        let mut affected = 0u64;
        let outcome: Result<()> = async {
            while let Some(batch) = stream.next().await {
                let batch = batch.map_err(|e| self.read_error(&scan.file, e))?;
                let mask = self.matches(&batch)?;
                let n = mask.true_count();
                affected += n as u64;
                let keep = not(&mask).map_err(|e| StorageError::DataFusion(e.into()))?;
                let kept = filter_record_batch(&batch, &keep)
                    .map_err(|e| StorageError::DataFusion(e.into()))?;
                writer.write(&kept).await?;
                if let (Rewrite::Update(assignments), true) = (&self.rewrite, n > 0) {
                    let matched = filter_record_batch(&batch, &mask)
                        .map_err(|e| StorageError::DataFusion(e.into()))?;
                    let changed = self.assign(&matched, assignments)?;
                    writer.write(&changed).await?;
                }
            }
            Ok(())
        }
        .await;
        match outcome {
            Ok(()) => {
                let (adds, _) = writer.finish().await?;
                Ok((adds, true, affected))
            }
            Err(e) => {
                writer.abort().await;
                Err(e)
            }
        }
    }

    /// `rows` with the assigned columns set to their new values.
    fn assign(
        &self,
        rows: &RecordBatch,
        assignments: &[(usize, Arc<dyn PhysicalExpr>)],
    ) -> Result<RecordBatch> {
        let mut columns: Vec<ArrayRef> = rows.columns().to_vec();
        for (index, expr) in assignments {
            let value = expr
                .evaluate(rows)
                .and_then(|v| v.into_array(rows.num_rows()))
                .map_err(StorageError::DataFusion)?;
            let field = self.schema.logical.field(*index);
            let value = if value.data_type() == field.data_type() {
                value
            } else {
                cast(&value, field.data_type()).map_err(|e| StorageError::Data {
                    detail: format!(
                        "UPDATE of column {} of table {}: {e}",
                        field.name(),
                        self.table.name()
                    ),
                })?
            };
            columns[*index] = value;
        }
        RecordBatch::try_new(Arc::clone(&self.schema.logical), columns).map_err(|e| {
            StorageError::Data {
                detail: format!("UPDATE of table {}: {e}", self.table.name()),
            }
        })
    }
}

/// Collects a stream of `count` batches into the number (for callers running a write plan).
pub async fn count_of(stream: SendableRecordBatchStream) -> DfResult<u64> {
    let batches: Vec<RecordBatch> = stream.try_collect().await?;
    Ok(batches
        .iter()
        .filter_map(|b| b.column(0).as_any().downcast_ref::<UInt64Array>())
        .flat_map(|a| a.iter().flatten())
        .sum())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_count_batch_has_one_row() {
        let schema = count_schema();
        let batch = count_batch(&schema, 7).unwrap();
        assert_eq!(batch.num_rows(), 1);
        assert_eq!(
            batch
                .column(0)
                .as_any()
                .downcast_ref::<UInt64Array>()
                .unwrap()
                .value(0),
            7
        );
    }
}
