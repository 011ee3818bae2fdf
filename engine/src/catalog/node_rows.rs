//! System tables that answer for every node of a cluster (`accelsql.gpu_devices`,
//! `accelsql.gpu_leases`, `accelsql.udf_calls`): their scan reads one in-memory partition per
//! node, each holding that node's number, and turns the number of the node that runs it into
//! the rows of its own process. On a cluster partition p runs on node p, so the table lists
//! every node's rows with a `node` column; on one node the scan has one partition and answers
//! for this process. The numbers are a plain memory scan so that Ballista hands each task
//! exactly its own partitions, as it does for any table's scan.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::{RecordBatch, UInt32Array};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::catalog::{Session as CatalogSession, TableProvider};
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::datasource::TableType;
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::Expr;
use datafusion::physical_expr::{EquivalenceProperties, PhysicalExpr};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::union::UnionExec;
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties};
use futures::TryStreamExt;

use super::node_tables::{NodeTable, Rows, node_table};
use crate::core::EngineState;
use crate::core::error::{EngineError, Result};
use crate::core::owners::{SessionIdentity, Viewer};

/// Scans a per-node system table: each node number its input yields becomes that node's rows,
/// produced by the engine of the process that runs it when it is that node.
pub(crate) struct NodeRowsExec {
    table: &'static NodeTable,
    engine: Arc<EngineState>,
    projection: Option<Vec<usize>>,
    schema: SchemaRef,
    /// The engine that planned the scan (`udf_calls` shows its statements' calls).
    client: u64,
    /// The session that reads it, where it was planned (`None` on a cluster's node, which
    /// answers for the client in full).
    viewer: Option<Viewer>,
    /// One partition per node, holding the node's number.
    nodes: Arc<dyn ExecutionPlan>,
    properties: Arc<PlanProperties>,
}

/// The schema of the node numbers a [`NodeRowsExec`] reads.
fn node_numbers_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![Field::new(
        "node",
        DataType::UInt32,
        false,
    )]))
}

/// A memory scan of `nodes` partitions, partition k holding the number k.
fn node_numbers(nodes: usize) -> DfResult<Arc<dyn ExecutionPlan>> {
    let schema = node_numbers_schema();
    let partitions = (0..nodes.max(1))
        .map(|k| {
            let k = u32::try_from(k).map_err(|_| {
                DataFusionError::Internal(format!("node number {k} is out of range"))
            })?;
            let column = Arc::new(UInt32Array::from(vec![k]));
            Ok(vec![RecordBatch::try_new(
                Arc::clone(&schema),
                vec![column],
            )?])
        })
        .collect::<DfResult<Vec<_>>>()?;
    Ok(MemorySourceConfig::try_new_exec(&partitions, schema, None)?)
}

impl NodeRowsExec {
    /// The scan of `table` over `nodes` nodes.
    pub(crate) fn try_new(
        table: &'static NodeTable,
        engine: Arc<EngineState>,
        projection: Option<Vec<usize>>,
        nodes: usize,
        client: u64,
        viewer: Option<Viewer>,
    ) -> DfResult<Self> {
        Self::over(
            table,
            engine,
            projection,
            client,
            viewer,
            node_numbers(nodes)?,
        )
    }

    /// The scan of `table` whose node numbers come from `nodes`.
    fn over(
        table: &'static NodeTable,
        engine: Arc<EngineState>,
        projection: Option<Vec<usize>>,
        client: u64,
        viewer: Option<Viewer>,
        nodes: Arc<dyn ExecutionPlan>,
    ) -> DfResult<Self> {
        if nodes.schema().fields().len() != 1 {
            return Err(DataFusionError::Internal(format!(
                "the scan of {} reads node numbers, not {}",
                table.name,
                nodes.schema()
            )));
        }
        let full = (table.schema)();
        let schema = match &projection {
            Some(columns) => Arc::new(full.project(columns)?),
            None => full,
        };
        let properties = PlanProperties::new(
            EquivalenceProperties::new(Arc::clone(&schema)),
            nodes.properties().output_partitioning().clone(),
            EmissionType::Incremental,
            Boundedness::Bounded,
        );
        Ok(Self {
            table,
            engine,
            projection,
            schema,
            client,
            viewer,
            nodes,
            properties: Arc::new(properties),
        })
    }
}

/// This process's rows of `table` for the engine `client`, projected.
fn rows_here(
    table: &NodeTable,
    engine: &EngineState,
    projection: Option<&[usize]>,
    client: u64,
    viewer: Option<Viewer>,
) -> DfResult<RecordBatch> {
    let columns = (table.produce)(engine, Rows::Node { client }, viewer)?;
    let batch = RecordBatch::try_new((table.schema)(), columns)?;
    Ok(match projection {
        Some(columns) => batch.project(columns)?,
        None => batch,
    })
}

impl fmt::Debug for NodeRowsExec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NodeRowsExec")
            .field("table", &self.table.name)
            .finish()
    }
}

impl DisplayAs for NodeRowsExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self
            .nodes
            .properties()
            .output_partitioning()
            .partition_count();
        write!(
            f,
            "NodeRowsExec: {} on {n} node{}",
            self.table.name,
            if n == 1 { "" } else { "s" }
        )
    }
}

impl ExecutionPlan for NodeRowsExec {
    fn name(&self) -> &str {
        "NodeRowsExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.nodes]
    }

    /// Each partition of the input is a node: spreading it would move a node's number away
    /// from the node's partition.
    fn benefits_from_input_partitioning(&self) -> Vec<bool> {
        vec![false]
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> DfResult<TreeNodeRecursion>,
    ) -> DfResult<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let [nodes] = <[_; 1]>::try_from(children).map_err(|c| {
            DataFusionError::Internal(format!("NodeRowsExec has one child, not {}", c.len()))
        })?;
        Ok(Arc::new(Self::over(
            self.table,
            Arc::clone(&self.engine),
            self.projection.clone(),
            self.client,
            self.viewer,
            nodes,
        )?))
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> DfResult<SendableRecordBatchStream> {
        // A node's number yields its rows where that node runs it. Elsewhere (a lost node's
        // partition that Ballista ran on another) it yields nothing: that node's rows are
        // missing rather than another's shown twice.
        let me = u32::try_from(self.engine.node.id).ok();
        let (table, engine, client) = (self.table, Arc::clone(&self.engine), self.client);
        let viewer = self.viewer;
        let projection = self.projection.clone();
        let numbers = self.nodes.execute(partition, context)?;
        let rows = numbers.try_filter_map(move |batch| {
            let is_me = batch
                .column(0)
                .as_any()
                .downcast_ref::<UInt32Array>()
                .is_some_and(|n| n.iter().any(|k| k.is_some() && k == me));
            let rows = is_me
                .then(|| rows_here(table, &engine, projection.as_deref(), client, viewer))
                .transpose();
            futures::future::ready(rows)
        });
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            Arc::clone(&self.schema),
            rows,
        )))
    }
}

/// A per-node system table's scan taken apart to travel ([`node_rows_parts`]); its input (the
/// node numbers) travels as a plan of its own. [`Engine::node_rows_exec`](crate::Engine::node_rows_exec)
/// puts it together again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeRowsParts {
    /// The table's qualified name.
    pub table: String,
    /// The projected columns (`None`: all).
    pub projection: Option<Vec<usize>>,
    /// The engine that planned the scan.
    pub client: u64,
}

/// `plan` taken apart when it is a per-node system table's scan; `None` for any other plan.
pub fn node_rows_parts(plan: &dyn ExecutionPlan) -> Option<NodeRowsParts> {
    let exec = plan.downcast_ref::<NodeRowsExec>()?;
    Some(NodeRowsParts {
        table: exec.table.name.to_string(),
        projection: exec.projection.clone(),
        client: exec.client,
    })
}

/// The scan [`node_rows_parts`] took apart, over `nodes` (its input), producing the rows of
/// the process whose engine state is `engine`.
pub(crate) fn node_rows_exec(
    engine: &Arc<EngineState>,
    parts: NodeRowsParts,
    nodes: Arc<dyn ExecutionPlan>,
) -> Result<Arc<dyn ExecutionPlan>> {
    let table = node_table(&parts.table).ok_or_else(|| {
        EngineError::Sql(DataFusionError::Internal(format!(
            "{} is not a per-node system table",
            parts.table
        )))
    })?;
    Ok(Arc::new(NodeRowsExec::over(
        table,
        Arc::clone(engine),
        parts.projection,
        parts.client,
        None,
        nodes,
    )?))
}

/// The table of a [`NodeTable`]: on a cluster its scan has one partition per node.
pub(crate) struct NodeTableProvider {
    pub(crate) table: &'static NodeTable,
    pub(crate) engine: Arc<EngineState>,
}

impl fmt::Debug for NodeTableProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NodeTableProvider")
            .field("table", &self.table.name)
            .finish()
    }
}

#[async_trait]
impl TableProvider for NodeTableProvider {
    fn schema(&self) -> SchemaRef {
        (self.table.schema)()
    }

    fn table_type(&self) -> TableType {
        TableType::View
    }

    async fn scan(
        &self,
        state: &dyn CatalogSession,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        _limit: Option<usize>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let engine = &self.engine;
        // Who reads: a session sees its own statements' SQL and calls only, unless it may see
        // every session's. A session without an identity (none of ours) sees its own: none.
        let viewer = Some(state.config().get_extension::<SessionIdentity>().map_or(
            Viewer {
                session: 0,
                sees_all: false,
            },
            |identity| identity.viewer(),
        ));
        // A cluster's nodes answer for the client in full (they do not know its sessions): a
        // session that may not see every session's calls gets only its own statements' rows,
        // filtered here by statement id (the filter travels with the plan).
        let schema = (self.table.schema)();
        let filtered = match (viewer, schema.index_of("statement_id")) {
            (Some(v), Ok(column)) if engine.distributor.is_some() && !v.sees_all => {
                Some((column, engine.owners.visible_to(&v)))
            }
            _ => None,
        };
        let nodes: Arc<dyn ExecutionPlan> = Arc::new(NodeRowsExec::try_new(
            self.table,
            Arc::clone(engine),
            if filtered.is_some() {
                None
            } else {
                projection.cloned()
            },
            engine.distributor.as_ref().map_or(1, |_| engine.node.count),
            engine.id,
            viewer,
        )?);
        let nodes = match filtered {
            None => nodes,
            Some((column, visible)) => own_statements_only(nodes, column, &visible, projection)?,
        };
        if engine.distributor.is_none() {
            return Ok(nodes);
        }
        // A cluster's client adds what ran in its own process, read now.
        let own = RecordBatch::try_new(
            Arc::clone(&schema),
            (self.table.produce)(engine, Rows::Client, viewer)?,
        )?;
        if own.num_rows() == 0 {
            return Ok(nodes);
        }
        let own = MemorySourceConfig::try_new_exec(&[vec![own]], schema, projection.cloned())?;
        Ok(UnionExec::try_new(vec![nodes, own])?)
    }
}

/// `rows` (all of a node table's columns) limited to those whose `statement_id` (column
/// `column`) is one of `visible`, then projected to `projection`.
fn own_statements_only(
    rows: Arc<dyn ExecutionPlan>,
    column: usize,
    visible: &[u64],
    projection: Option<&Vec<usize>>,
) -> DfResult<Arc<dyn ExecutionPlan>> {
    use datafusion::common::ScalarValue;
    use datafusion::physical_expr::expressions::{Column, InListExpr, Literal};
    use datafusion::physical_plan::filter::FilterExec;
    use datafusion::physical_plan::projection::ProjectionExec;

    let schema = rows.schema();
    let id = Arc::new(Column::new(schema.field(column).name(), column));
    let list: Vec<Arc<dyn datafusion::physical_expr::PhysicalExpr>> = visible
        .iter()
        .map(|v| Arc::new(Literal::new(ScalarValue::UInt64(Some(*v)))) as _)
        .collect();
    // No statement is visible: an empty IN list is false for every row.
    let predicate: Arc<dyn datafusion::physical_expr::PhysicalExpr> = if list.is_empty() {
        Arc::new(Literal::new(ScalarValue::Boolean(Some(false))))
    } else {
        Arc::new(InListExpr::try_new(id, list, false, &schema)?)
    };
    let filtered: Arc<dyn ExecutionPlan> = Arc::new(FilterExec::try_new(predicate, rows)?);
    let Some(projection) = projection else {
        return Ok(filtered);
    };
    let exprs = projection
        .iter()
        .map(|&i| {
            let field = schema.field(i);
            (
                Arc::new(Column::new(field.name(), i))
                    as Arc<dyn datafusion::physical_expr::PhysicalExpr>,
                field.name().clone(),
            )
        })
        .collect::<Vec<_>>();
    Ok(Arc::new(ProjectionExec::try_new(exprs, filtered)?))
}
