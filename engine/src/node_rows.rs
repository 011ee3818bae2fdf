//! System tables that answer for every node of a cluster: `accelsql.gpu_devices` read by a plan
//! of one partition per node, each partition producing the rows of the process that runs it (on
//! a cluster, partition p runs on node p), so the table lists every node's devices with a `node`
//! column. On one node the same plan has one partition and answers for this process.

use std::fmt;
use std::sync::Arc;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::error::Result as DfResult;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::{EquivalenceProperties, Partitioning, PhysicalExpr};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties};

use crate::system::{NodeTable, node_table};
use crate::{Engine, EngineError, Result};

/// Scans a per-node system table: partition p produces the table's rows from the engine of the
/// process that runs it.
pub(crate) struct NodeRowsExec {
    table: &'static NodeTable,
    engine: Engine,
    projection: Option<Vec<usize>>,
    schema: SchemaRef,
    partitions: usize,
    properties: Arc<PlanProperties>,
}

impl NodeRowsExec {
    pub(crate) fn try_new(
        table: &'static NodeTable,
        engine: Engine,
        projection: Option<Vec<usize>>,
        partitions: usize,
    ) -> DfResult<Self> {
        let full = (table.schema)();
        let schema = match &projection {
            Some(columns) => Arc::new(full.project(columns)?),
            None => full,
        };
        let properties = PlanProperties::new(
            EquivalenceProperties::new(Arc::clone(&schema)),
            Partitioning::UnknownPartitioning(partitions.max(1)),
            EmissionType::Incremental,
            Boundedness::Bounded,
        );
        Ok(Self {
            table,
            engine,
            projection,
            schema,
            partitions: partitions.max(1),
            properties: Arc::new(properties),
        })
    }
}

impl fmt::Debug for NodeRowsExec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NodeRowsExec")
            .field("table", &self.table.name)
            .field("partitions", &self.partitions)
            .finish()
    }
}

impl DisplayAs for NodeRowsExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "NodeRowsExec: {} on {} node{}",
            self.table.name,
            self.partitions,
            if self.partitions == 1 { "" } else { "s" }
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
        Vec::new()
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> DfResult<TreeNodeRecursion>,
    ) -> DfResult<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn with_new_children(
        self: Arc<Self>,
        _children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        Ok(self)
    }

    fn execute(
        &self,
        partition: usize,
        _context: Arc<TaskContext>,
    ) -> DfResult<SendableRecordBatchStream> {
        // Partition p holds node p's rows. A cluster task may run every partition of this
        // scan (Ballista cannot narrow it to the task's own partition): only the node's own
        // partition yields rows, so each node's rows come once.
        if self.partitions > 1 && partition % self.partitions != self.engine.inner.node.id {
            return Ok(Box::pin(RecordBatchStreamAdapter::new(
                Arc::clone(&self.schema),
                futures::stream::empty(),
            )));
        }
        let columns = (self.table.produce)(&self.engine)?;
        let batch = RecordBatch::try_new((self.table.schema)(), columns)?;
        let batch = match &self.projection {
            Some(columns) => batch.project(columns)?,
            None => batch,
        };
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            Arc::clone(&self.schema),
            futures::stream::once(async move { Ok(batch) }),
        )))
    }
}

/// A per-node system table's scan taken apart to travel: the table, the projected columns and
/// the partition (node) count. `None` for any other plan.
pub fn node_rows_parts(plan: &dyn ExecutionPlan) -> Option<(String, Option<Vec<usize>>, usize)> {
    let exec = plan.downcast_ref::<NodeRowsExec>()?;
    Some((
        exec.table.name.to_string(),
        exec.projection.clone(),
        exec.partitions,
    ))
}

impl Engine {
    /// The scan [`node_rows_parts`] took apart, producing this process's rows.
    pub fn node_rows_exec(
        &self,
        table: &str,
        projection: Option<Vec<usize>>,
        partitions: usize,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let table = node_table(table).ok_or_else(|| {
            EngineError::Sql(datafusion::error::DataFusionError::Internal(format!(
                "{table} is not a per-node system table"
            )))
        })?;
        Ok(Arc::new(NodeRowsExec::try_new(
            table,
            self.clone(),
            projection,
            partitions,
        )?))
    }
}
