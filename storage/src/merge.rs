//! `MERGE INTO t USING s ON … WHEN [NOT] MATCHED [BY SOURCE|TARGET] [AND …] THEN UPDATE | DELETE
//! | INSERT`: the statement's view of the table joined with the source (a full join when an
//! INSERT may fire, else a left one), each row's first clause that applies deciding what it
//! becomes, planned and run by DataFusion. The table's rows are written anew (every file of the
//! view is replaced) and the change is handed to the session's transaction like any other.

use std::sync::Arc;

use arrow::array::{Array, BooleanArray, Int32Array, RecordBatch};
use arrow::datatypes::SchemaRef;
use async_trait::async_trait;
use datafusion::catalog::Session;
use datafusion::common::{DFSchemaRef, JoinType, Result as DfResult, TableReference};
use datafusion::datasource::{TableProvider, TableType, provider_as_source};
use datafusion::logical_expr::conditional_expressions::CaseBuilder;
use datafusion::logical_expr::dml::{MergeIntoAction, MergeIntoClause};
use datafusion::logical_expr::{Expr, LogicalPlanBuilder, cast, col, lit, when};
use datafusion::physical_plan::ExecutionPlan;
use futures::StreamExt;

use crate::error::{Result, StorageError};
use crate::scan::scan_files;
use crate::table::StoredTable;
use crate::txn::TableView;
use crate::types::TableSchema;
use crate::write::FileWriter;

/// Marks a joined row that has a target row.
const TARGET_MARK: &str = "__accelsql_merge_target";
/// Marks a joined row that has a source row.
const SOURCE_MARK: &str = "__accelsql_merge_source";
/// Which clause fired (0: none).
const ACTION: &str = "__accelsql_merge_action";
/// Whether the row stays in the table.
const KEEP: &str = "__accelsql_merge_keep";

/// A plan that already exists, as a table (the MERGE's source).
#[derive(Debug)]
struct PlanTable {
    plan: Arc<dyn ExecutionPlan>,
}

#[async_trait]
impl TableProvider for PlanTable {
    fn schema(&self) -> SchemaRef {
        self.plan.schema()
    }

    fn table_type(&self) -> TableType {
        TableType::Temporary
    }

    async fn scan(
        &self,
        _state: &dyn Session,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        _limit: Option<usize>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        match projection {
            None => Ok(Arc::clone(&self.plan)),
            Some(p) if *p == (0..self.plan.schema().fields().len()).collect::<Vec<_>>() => {
                Ok(Arc::clone(&self.plan))
            }
            Some(p) => {
                use datafusion::physical_plan::projection::ProjectionExec;
                let schema = self.plan.schema();
                let exprs: Vec<(Arc<dyn datafusion::physical_expr::PhysicalExpr>, String)> = p
                    .iter()
                    .map(|&i| {
                        (
                            Arc::new(datafusion::physical_expr::expressions::Column::new(
                                schema.field(i).name(),
                                i,
                            )) as _,
                            schema.field(i).name().clone(),
                        )
                    })
                    .collect();
                Ok(Arc::new(ProjectionExec::try_new(
                    exprs,
                    Arc::clone(&self.plan),
                )?))
            }
        }
    }
}

/// The statement's view of the target table, as a table.
#[derive(Debug)]
struct ViewTable {
    table: Arc<StoredTable>,
    schema: TableSchema,
    view: TableView,
}

#[async_trait]
impl TableProvider for ViewTable {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema.logical)
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        limit: Option<usize>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        scan_files(
            state,
            &self.table,
            &self.schema,
            &self.view.files,
            projection,
            limit,
        )
        .await
    }
}

/// The physical plan of a MERGE: every joined row as the table's logical columns, then which
/// clause fired for it (`ACTION`, 0 for none) and whether it stays in the table (`KEEP`).
pub(crate) async fn merge_plan(
    state: &dyn Session,
    table: &Arc<StoredTable>,
    schema: &TableSchema,
    view: &TableView,
    source: Arc<dyn ExecutionPlan>,
    merge_schema: &DFSchemaRef,
    on: Expr,
    clauses: &[MergeIntoClause],
) -> DfResult<Arc<dyn ExecutionPlan>> {
    let columns = schema.logical.fields().len();
    let unsupported = |what: String| StorageError::Unsupported { what }.into_datafusion();
    let target_name = merge_schema
        .qualified_field(0)
        .0
        .cloned()
        .unwrap_or_else(|| TableReference::bare(table.name()));
    let source_names: Vec<Option<TableReference>> = (columns..merge_schema.fields().len())
        .map(|i| merge_schema.qualified_field(i).0.cloned())
        .collect();
    let source_name = source_names.first().cloned().flatten();
    if source_names.iter().any(|q| *q != source_name) {
        return Err(unsupported(
            "MERGE with a source whose columns come from several tables: give the source an \
             alias (USING (SELECT …) AS s)"
                .into(),
        ));
    }
    let source_name = source_name.unwrap_or_else(|| TableReference::bare("source"));
    let view_table = ViewTable {
        table: Arc::clone(table),
        schema: schema.clone(),
        view: view.clone(),
    };
    let mut target_exprs: Vec<Expr> = schema
        .logical
        .fields()
        .iter()
        .map(|f| {
            Expr::Column(datafusion::common::Column::new(
                Some(target_name.clone()),
                f.name(),
            ))
        })
        .collect();
    target_exprs.push(lit(true).alias(TARGET_MARK));
    let target = LogicalPlanBuilder::scan(
        target_name.clone(),
        provider_as_source(Arc::new(view_table)),
        None,
    )?
    .project(target_exprs)?
    .alias(target_name.clone())?;
    let source_schema = source.schema();
    let mut source_exprs: Vec<Expr> = source_schema
        .fields()
        .iter()
        .map(|f| {
            Expr::Column(datafusion::common::Column::new(
                Some(source_name.clone()),
                f.name(),
            ))
        })
        .collect();
    source_exprs.push(lit(true).alias(SOURCE_MARK));
    let source = LogicalPlanBuilder::scan(
        source_name.clone(),
        provider_as_source(Arc::new(PlanTable { plan: source })),
        None,
    )?
    .project(source_exprs)?
    .alias(source_name.clone())?;
    let inserts = clauses.iter().any(|c| c.kind.is_not_matched_by_target());
    let join = if inserts {
        JoinType::Full
    } else {
        JoinType::Left
    };
    let joined = target.join_on(source.build()?, join, vec![on])?;
    let target_mark = Expr::Column(datafusion::common::Column::new(
        Some(target_name.clone()),
        TARGET_MARK,
    ));
    let source_mark = Expr::Column(datafusion::common::Column::new(
        Some(source_name.clone()),
        SOURCE_MARK,
    ));
    let has_target = target_mark.clone().is_not_null();
    let has_source = source_mark.clone().is_not_null();
    // Which clause fires: the first whose kind and condition hold.
    let mut action: Option<CaseBuilder> = None;
    for (i, clause) in clauses.iter().enumerate() {
        use datafusion::logical_expr::dml::MergeIntoClauseKind::*;
        let kind = match clause.kind {
            Matched => has_target.clone().and(has_source.clone()),
            NotMatchedBySource => has_target.clone().and(source_mark.clone().is_null()),
            NotMatched | NotMatchedByTarget => {
                target_mark.clone().is_null().and(has_source.clone())
            }
        };
        let condition = match &clause.predicate {
            Some(p) => kind.and(p.clone()),
            None => kind,
        };
        let number = lit((i + 1) as i32);
        action = Some(match action {
            None => when(condition, number),
            Some(mut builder) => builder.when(condition, number),
        });
    }
    let action = match action {
        Some(mut builder) => builder.otherwise(lit(0i32))?,
        None => lit(0i32),
    };
    let all = joined_columns(&joined);
    let joined = joined.project(
        all.into_iter()
            .chain(std::iter::once(action.alias(ACTION)))
            .collect::<Vec<_>>(),
    )?;
    // Each column's new value.
    let action_col = col(ACTION);
    let mut outputs = Vec::with_capacity(columns + 1);
    for field in schema.logical.fields() {
        let old = Expr::Column(datafusion::common::Column::new(
            Some(target_name.clone()),
            field.name(),
        ));
        let mut value: Option<CaseBuilder> = None;
        for (i, clause) in clauses.iter().enumerate() {
            let number = lit((i + 1) as i32);
            let new = match &clause.action {
                MergeIntoAction::Update(assignments) => assignments
                    .iter()
                    .find(|(c, _)| c == field.name())
                    .map(|(_, e)| e.clone()),
                MergeIntoAction::Insert {
                    columns: named,
                    values,
                } => {
                    if named.is_empty() {
                        let at = schema.logical.index_of(field.name()).ok();
                        Some(
                            at.and_then(|i| values.get(i).cloned())
                                .unwrap_or(lit(datafusion::common::ScalarValue::Null)),
                        )
                    } else {
                        Some(
                            named
                                .iter()
                                .position(|c| c == field.name())
                                .and_then(|i| values.get(i).cloned())
                                .unwrap_or(lit(datafusion::common::ScalarValue::Null)),
                        )
                    }
                }
                MergeIntoAction::Delete => None,
            };
            if let Some(new) = new {
                let condition = action_col.clone().eq(number);
                let new = cast(new, field.data_type().clone());
                value = Some(match value {
                    None => when(condition, new),
                    Some(mut builder) => builder.when(condition, new),
                });
            }
        }
        let expr = match value {
            Some(mut builder) => builder.otherwise(old)?,
            None => old,
        };
        outputs.push(cast(expr, field.data_type().clone()).alias(field.name()));
    }
    // Rows that leave: deleted ones, and source rows no clause inserts.
    let deletes: Vec<i32> = clauses
        .iter()
        .enumerate()
        .filter(|(_, c)| matches!(c.action, MergeIntoAction::Delete))
        .map(|(i, _)| (i + 1) as i32)
        .collect();
    let mut keep = has_target.clone().or(action_col.clone().not_eq(lit(0i32)));
    for d in deletes {
        keep = keep.and(action_col.clone().not_eq(lit(d)));
    }
    outputs.push(action_col.clone());
    outputs.push(keep.alias(KEEP));
    let plan = joined.project(outputs)?.build()?;
    state.create_physical_plan(&plan).await
}

/// Every column of a joined plan, by its qualified name.
fn joined_columns(plan: &LogicalPlanBuilder) -> Vec<Expr> {
    plan.schema()
        .iter()
        .map(|(q, f)| Expr::Column(datafusion::common::Column::new(q.cloned(), f.name())))
        .collect()
}

/// Runs a [`merge_plan`]: the table's new files and the rows a clause changed.
pub(crate) async fn write_merge(
    table: &Arc<StoredTable>,
    schema: &TableSchema,
    plan: Arc<dyn ExecutionPlan>,
    context: Arc<datafusion::execution::TaskContext>,
) -> Result<(Vec<deltalake::kernel::Add>, u64)> {
    let partitions = plan.properties().partitioning.partition_count().max(1);
    let mut writer = FileWriter::new(table, schema, None);
    let mut affected = 0u64;
    let columns = schema.logical.fields().len();
    for partition in 0..partitions {
        let mut stream = plan
            .execute(partition, Arc::clone(&context))
            .map_err(StorageError::DataFusion)?;
        while let Some(batch) = stream.next().await {
            let batch = match batch {
                Ok(b) => b,
                Err(e) => {
                    writer.abort().await;
                    return Err(StorageError::DataFusion(e));
                }
            };
            let actions = batch.column(columns).as_any().downcast_ref::<Int32Array>();
            let keep = batch
                .column(columns + 1)
                .as_any()
                .downcast_ref::<BooleanArray>();
            let (Some(actions), Some(keep)) = (actions, keep) else {
                writer.abort().await;
                return Err(StorageError::Internal {
                    table: table.name().to_string(),
                    detail: "MERGE plan without its action columns".into(),
                });
            };
            affected += actions.iter().filter(|a| a.is_some_and(|a| a != 0)).count() as u64;
            let keep = if keep.null_count() == 0 {
                keep.clone()
            } else {
                arrow::compute::prep_null_mask_filter(keep)
            };
            let rows = RecordBatch::try_new(
                Arc::clone(&schema.logical),
                batch.columns()[..columns].to_vec(),
            )
            .and_then(|b| arrow::compute::filter_record_batch(&b, &keep))
            .map_err(|e| StorageError::Data {
                detail: format!("MERGE into table {}: {e}", table.name()),
            })?;
            if let Err(e) = writer.write(&rows).await {
                writer.abort().await;
                return Err(e);
            }
        }
    }
    let (adds, _) = writer.finish().await?;
    Ok((adds, affected))
}

#[cfg(test)]
mod tests {
    #[test]
    fn marks_do_not_clash_with_each_other() {
        assert_ne!(super::TARGET_MARK, super::SOURCE_MARK);
        assert_ne!(super::ACTION, super::SOURCE_MARK);
        let _ = arrow::array::Int32Array::from(vec![1]).len();
    }
}

/// `MERGE INTO` a stored table: runs the [`merge_plan`] (its child), writes the table's new
/// files and hands the change to the session's transaction; one row, the rows changed.
pub struct MergeExec {
    table: Arc<StoredTable>,
    schema: TableSchema,
    view: TableView,
    plan: Arc<dyn ExecutionPlan>,
    txn: Arc<crate::txn::Transaction>,
    count: SchemaRef,
    properties: Arc<datafusion::physical_plan::PlanProperties>,
}

impl std::fmt::Debug for MergeExec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MergeExec")
            .field("table", &self.table.name())
            .finish()
    }
}

impl MergeExec {
    pub(crate) fn new(
        table: Arc<StoredTable>,
        schema: TableSchema,
        view: TableView,
        plan: Arc<dyn ExecutionPlan>,
        txn: Arc<crate::txn::Transaction>,
    ) -> Self {
        let count = crate::dml::count_schema();
        Self {
            properties: crate::dml::count_properties(&count),
            table,
            schema,
            view,
            plan,
            txn,
            count,
        }
    }
}

impl datafusion::physical_plan::DisplayAs for MergeExec {
    fn fmt_as(
        &self,
        _t: datafusion::physical_plan::DisplayFormatType,
        f: &mut std::fmt::Formatter<'_>,
    ) -> std::fmt::Result {
        write!(
            f,
            "DeltaMergeExec: table={}, files={}",
            self.table.name(),
            self.view.files.len()
        )
    }
}

impl ExecutionPlan for MergeExec {
    fn name(&self) -> &str {
        "DeltaMergeExec"
    }

    fn properties(&self) -> &Arc<datafusion::physical_plan::PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.plan]
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(
            &Arc<dyn datafusion::physical_expr::PhysicalExpr>,
        ) -> DfResult<datafusion::common::tree_node::TreeNodeRecursion>,
    ) -> DfResult<datafusion::common::tree_node::TreeNodeRecursion> {
        Ok(datafusion::common::tree_node::TreeNodeRecursion::Continue)
    }

    fn benefits_from_input_partitioning(&self) -> Vec<bool> {
        vec![false]
    }

    fn with_new_children(
        self: Arc<Self>,
        mut children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        if children.len() != 1 {
            return Err(datafusion::common::DataFusionError::Internal(
                "DeltaMergeExec has one input".into(),
            ));
        }
        Ok(Arc::new(Self::new(
            Arc::clone(&self.table),
            self.schema.clone(),
            self.view.clone(),
            children.remove(0),
            Arc::clone(&self.txn),
        )))
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<datafusion::execution::TaskContext>,
    ) -> DfResult<datafusion::execution::SendableRecordBatchStream> {
        let table = Arc::clone(&self.table);
        let schema = self.schema.clone();
        let view = self.view.clone();
        let plan = Arc::clone(&self.plan);
        let txn = Arc::clone(&self.txn);
        let work = async move {
            let (added, rows) = write_merge(&table, &schema, plan, context).await?;
            let change = crate::txn::Change {
                table: Arc::clone(&table),
                base: Arc::clone(&view.snapshot),
                added,
                removed: view.files.as_ref().clone(),
                kind: crate::txn::ChangeKind::Merge,
            };
            txn.apply(change).await?;
            Ok(rows)
        };
        crate::dml::count_stream("DeltaMergeExec", partition, &self.count, work)
    }
}
