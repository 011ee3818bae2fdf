//! Physical planning of `UdfCall` nodes: DataFusion's planner with an extension planner for
//! them, which splits a SET call with a [`TopKMerge`] into partial runs and a merge.

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::compute::SortOptions;
use datafusion::catalog::Session as DfSession;
use datafusion::common::{Column, ScalarValue, internal_err};
use datafusion::error::Result as DfResult;
use datafusion::execution::context::QueryPlanner;
use datafusion::functions::expr_fn::isnan;
use datafusion::logical_expr::Expr;
use datafusion::logical_expr::physical_planning_context::PhysicalPlanningContext;
use datafusion::logical_expr::{LogicalPlan, UserDefinedLogicalNode};
use datafusion::physical_expr::expressions::Literal;
use datafusion::physical_expr::{LexOrdering, PhysicalSortExpr};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::sorts::sort::SortExec;
use datafusion::physical_plan::sorts::sort_preserving_merge::SortPreservingMergeExec;
use datafusion::physical_planner::{DefaultPhysicalPlanner, ExtensionPlanner, PhysicalPlanner};

use super::emits::{CallSpec, UdfCallExec};
use super::gpu_batches::coalesce_call_inputs;
use crate::core::options::AccelsqlOptions;
use crate::plan::emits_node::UdfCallNode;
use crate::udf::{InputType, TopKMerge};

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
        let mut spec = CallSpec {
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
            partial: false,
        };
        let Some((k, merge)) = top_k_split(&spec) else {
            return Ok(Some(Arc::new(UdfCallExec::new(spec, Arc::clone(input)))));
        };
        // Each partition's k best, sorted there, then merged: the k best of those.
        spec.partial = true;
        let partial: Arc<dyn ExecutionPlan> = Arc::new(UdfCallExec::new(spec, Arc::clone(input)));
        let col = |name: &str| Expr::Column(Column::new_unqualified(name));
        let column = |name: &str| {
            planner.create_physical_expr(&col(name), &call.schema, session, planning_ctx)
        };
        let score = column(&merge.score_column)?;
        let nan = planner.create_physical_expr(
            &isnan(col(&merge.score_column)),
            &call.schema,
            session,
            planning_ctx,
        )?;
        let order = |expr, descending, nulls_first| PhysicalSortExpr {
            expr,
            options: SortOptions {
                descending,
                nulls_first,
            },
        };
        let Some(ordering) = LexOrdering::new([
            order(nan, false, false),
            order(score, true, false),
            order(column(&merge.id_column)?, false, false),
        ]) else {
            return internal_err!("the merge of {} has no order", call.def.name());
        };
        let sorted = SortExec::new(ordering.clone(), partial)
            .with_preserve_partitioning(true)
            .with_fetch(Some(k));
        let merged = SortPreservingMergeExec::new(ordering, Arc::new(sorted)).with_fetch(Some(k));
        Ok(Some(Arc::new(merged)))
    }
}

/// The most rows a split call's merge keeps (a larger `k` runs the call whole).
const MAX_MERGED_K: i64 = 1 << 20;

/// Whether `spec`'s call runs as partial runs per partition and a merge: a SET call without
/// GROUP BY whose UDF has a [`TopKMerge`] and whose `k` (1 to [`MAX_MERGED_K`]) and other named
/// arguments are literals. Gives `k` and the merge.
fn top_k_split(spec: &CallSpec) -> Option<(usize, TopKMerge)> {
    let merge = spec.def.top_k_merge()?;
    if spec.def.input_type() != InputType::Set || !spec.keys.is_empty() {
        return None;
    }
    let literal = |i: usize| {
        spec.args
            .get(i)
            .and_then(|e| e.downcast_ref::<Literal>())
            .map(Literal::value)
    };
    let k = match literal(merge.k_argument)? {
        ScalarValue::Int64(Some(k)) if (1..=MAX_MERGED_K).contains(k) => {
            usize::try_from(*k).ok()?
        }
        _ => return None,
    };
    merge
        .constant_arguments
        .iter()
        .all(|&i| literal(i).is_some_and(|v| !v.is_null()))
        .then(|| (k, merge.clone()))
}
