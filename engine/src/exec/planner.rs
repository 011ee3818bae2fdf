//! Physical planning of `UdfCall` nodes: DataFusion's planner with an extension planner for them.

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::catalog::Session as DfSession;
use datafusion::error::Result as DfResult;
use datafusion::execution::context::QueryPlanner;
use datafusion::logical_expr::physical_planning_context::PhysicalPlanningContext;
use datafusion::logical_expr::{LogicalPlan, UserDefinedLogicalNode};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_planner::{DefaultPhysicalPlanner, ExtensionPlanner, PhysicalPlanner};

use super::emits::{CallSpec, UdfCallExec};
use super::gpu_batches::coalesce_call_inputs;
use crate::core::options::AccelsqlOptions;
use crate::plan::emits_node::UdfCallNode;

/// DataFusion's physical planner, knowing `UdfCall`.
#[derive(Debug, Default)]
pub(crate) struct AccelQueryPlanner;

#[async_trait]
impl QueryPlanner for AccelQueryPlanner {
    async fn create_physical_plan(
        &self,
        logical_plan: &LogicalPlan,
        session: &dyn DfSession,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let plan = DefaultPhysicalPlanner::with_extension_planners(vec![Arc::new(UdfCallPlanner)])
            .create_physical_plan(logical_plan, session)
            .await?;
        // After DataFusion's optimizer, not as one of its rules: EXPLAIN VERBOSE then prints
        // exactly DataFusion's list of rules (the upstream parity files check it); the plan that
        // runs, and EXPLAIN ANALYZE, show the coalescing.
        coalesce_call_inputs(plan, session.config().batch_size())
    }
}

/// Plans a `UdfCall` node as a [`UdfCallExec`].
struct UdfCallPlanner;

#[async_trait]
impl ExtensionPlanner for UdfCallPlanner {
    async fn plan_extension(
        &self,
        planner: &dyn PhysicalPlanner,
        node: &dyn UserDefinedLogicalNode,
        logical_inputs: &[&LogicalPlan],
        physical_inputs: &[Arc<dyn ExecutionPlan>],
        session: &dyn DfSession,
        planning_ctx: &PhysicalPlanningContext,
    ) -> DfResult<Option<Arc<dyn ExecutionPlan>>> {
        let Some(call) = node.as_any().downcast_ref::<UdfCallNode>() else {
            return Ok(None);
        };
        let (Some(logical_input), Some(input)) = (logical_inputs.first(), physical_inputs.first())
        else {
            return Ok(None);
        };
        let input_schema = logical_input.schema();
        let plan = |exprs: &[datafusion::logical_expr::Expr]| {
            exprs
                .iter()
                .map(|e| planner.create_physical_expr(e, input_schema, session, planning_ctx))
                .collect::<DfResult<Vec<_>>>()
        };
        let spec = CallSpec {
            def: Arc::clone(&call.def),
            keys: plan(&call.keys)?,
            output_keys: call.output_keys.clone(),
            args: plan(&call.args)?,
            carried: plan(&call.carried)?,
            schema: Arc::new(call.schema.as_arrow().clone()),
            placed: call.placed.clone(),
            grouping: session
                .config()
                .options()
                .extensions
                .get::<AccelsqlOptions>()
                .map(|o| o.set_grouping)
                .unwrap_or_default(),
        };
        Ok(Some(Arc::new(UdfCallExec::new(spec, Arc::clone(input)))))
    }
}
