//! Physical planning of `UdfCall` nodes: DataFusion's planner with an extension planner for
//! them, which splits a SET call with a [`TopKMerge`] into partial runs and a merge (per group
//! with GROUP BY).

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::compute::SortOptions;
use datafusion::arrow::datatypes::{Field, Schema};
use datafusion::catalog::Session as DfSession;
use datafusion::common::{Column, DFSchema, ScalarValue, internal_err};
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::execution::context::QueryPlanner;
use datafusion::functions::expr_fn::isnan;
use datafusion::functions_window::row_number::row_number_udwf;
use datafusion::logical_expr::physical_planning_context::PhysicalPlanningContext;
use datafusion::logical_expr::{Expr, Operator, WindowFrame, WindowFunctionDefinition};
use datafusion::logical_expr::{LogicalPlan, UserDefinedLogicalNode};
use datafusion::physical_expr::expressions::{BinaryExpr, Column as PhysicalColumn, Literal};
use datafusion::physical_expr::{LexOrdering, PhysicalExpr, PhysicalSortExpr};
use datafusion::physical_plan::filter::FilterExec;
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::sorts::sort::SortExec;
use datafusion::physical_plan::sorts::sort_preserving_merge::SortPreservingMergeExec;
use datafusion::physical_plan::windows::{BoundedWindowAggExec, create_window_expr};
use datafusion::physical_plan::{
    ExecutionPlan, ExecutionPlanProperties, InputOrderMode, Partitioning,
};
use datafusion::physical_planner::{DefaultPhysicalPlanner, ExtensionPlanner, PhysicalPlanner};

use super::emits::{CallSpec, UdfCallExec};
use super::gpu_batches::coalesce_call_inputs;
use crate::core::options::{AccelsqlOptions, SetGrouping};
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
        if !spec.keys.is_empty() {
            return grouped_top_k(spec, input, k, &merge, planner, session, planning_ctx).map(Some);
        }
        // Each partition's k best, sorted there, then merged: the k best of those.
        spec.partial = true;
        let partial: Arc<dyn ExecutionPlan> = Arc::new(UdfCallExec::new(spec, Arc::clone(input)));
        let ranking = merge_ranking(&merge, &call.schema, planner, session, planning_ctx)?;
        let Some(ordering) = LexOrdering::new(ranking) else {
            return internal_err!("the merge of {} has no order", call.def.name());
        };
        let sorted = SortExec::new(ordering.clone(), partial)
            .with_preserve_partitioning(true)
            .with_fetch(Some(k));
        let merged = SortPreservingMergeExec::new(ordering, Arc::new(sorted)).with_fetch(Some(k));
        Ok(Some(Arc::new(merged)))
    }
}

/// Plans a grouped SET call split by its [`TopKMerge`]: each input batch's groups run where
/// the batch is (the arguments are neither repartitioned nor sorted: a run's rows are gathered
/// from its batch), each run keeps its `k` best rows, and the merge keeps each group's `k` best
/// of those: the runs' rows hash-partitioned by the keys, sorted by the keys and the merge's
/// order, ranked by `row_number()` and cut at `k`. The runs show every key, so that the merge
/// can group by them; a projection then shows the keys the select list shows.
fn grouped_top_k(
    mut spec: CallSpec,
    input: &Arc<dyn ExecutionPlan>,
    k: usize,
    merge: &TopKMerge,
    planner: &dyn PhysicalPlanner,
    session: &dyn DfSession,
    planning_ctx: &PhysicalPlanningContext,
) -> DfResult<Arc<dyn ExecutionPlan>> {
    let call_schema = Arc::clone(&spec.schema);
    let shown = std::mem::take(&mut spec.output_keys);
    let key_count = spec.keys.len();
    let input_schema = input.schema();
    let mut fields = Vec::with_capacity(key_count + call_schema.fields().len());
    for (i, key) in spec.keys.iter().enumerate() {
        fields.push(Arc::new(Field::new(
            format!("__accelsql_key_{i}"),
            key.data_type(&input_schema)?,
            key.nullable(&input_schema)?,
        )));
    }
    fields.extend(call_schema.fields().iter().skip(shown.len()).cloned());
    let runs_schema = Arc::new(Schema::new(fields));
    spec.output_keys = (0..key_count).collect();
    spec.schema = Arc::clone(&runs_schema);
    spec.partial = true;
    let partitions = input.output_partitioning().partition_count();
    let runs: Arc<dyn ExecutionPlan> = Arc::new(UdfCallExec::new(spec, Arc::clone(input)));

    let column = |i: usize| -> Arc<dyn PhysicalExpr> {
        Arc::new(PhysicalColumn::new(runs_schema.field(i).name(), i))
    };
    let keys: Vec<Arc<dyn PhysicalExpr>> = (0..key_count).map(column).collect();
    let df_schema = DFSchema::try_from(runs_schema.as_ref().clone())?;
    let ranking = merge_ranking(merge, &df_schema, planner, session, planning_ctx)?;
    let ascending = |expr| PhysicalSortExpr {
        expr,
        options: SortOptions {
            descending: false,
            nulls_first: false,
        },
    };
    let repartitioned: Arc<dyn ExecutionPlan> = if partitions > 1 {
        Arc::new(RepartitionExec::try_new(
            runs,
            Partitioning::Hash(keys.clone(), partitions),
        )?)
    } else {
        runs
    };
    let Some(sorting) = LexOrdering::new(
        keys.iter()
            .map(|k| ascending(Arc::clone(k)))
            .chain(ranking.iter().cloned()),
    ) else {
        return internal_err!("the merge of {} has no order", merge.score_column);
    };
    let sorted = SortExec::new(sorting, repartitioned).with_preserve_partitioning(true);
    let rank = create_window_expr(
        &WindowFunctionDefinition::WindowUDF(row_number_udwf()),
        "__accelsql_rank".to_string(),
        &[],
        &keys,
        &ranking,
        Arc::new(WindowFrame::new(Some(true))),
        Arc::clone(&runs_schema),
        false,
        false,
        None,
    )?;
    let ranked =
        BoundedWindowAggExec::try_new(vec![rank], Arc::new(sorted), InputOrderMode::Sorted, true)?;
    let rank_column = Arc::new(PhysicalColumn::new(
        "__accelsql_rank",
        runs_schema.fields().len(),
    ));
    let limit = u64::try_from(k).map_err(|e| DataFusionError::External(Box::new(e)))?;
    let kept = FilterExec::try_new(
        Arc::new(BinaryExpr::new(
            rank_column,
            Operator::LtEq,
            Arc::new(Literal::new(ScalarValue::UInt64(Some(limit)))),
        )),
        Arc::new(ranked),
    )?;
    // The call's own columns: the keys it shows, then what it emits.
    let projection = shown
        .iter()
        .copied()
        .chain(key_count..runs_schema.fields().len())
        .zip(call_schema.fields())
        .map(|(i, field)| (column(i), field.name().clone()));
    Ok(Arc::new(ProjectionExec::try_new(
        projection,
        Arc::new(kept),
    )?))
}

/// The order a split call's merge keeps rows in, over `schema` (the partial runs' output):
/// NaN scores last, then the score descending, then the id ascending (NULLs last throughout).
fn merge_ranking(
    merge: &TopKMerge,
    schema: &DFSchema,
    planner: &dyn PhysicalPlanner,
    session: &dyn DfSession,
    planning_ctx: &PhysicalPlanningContext,
) -> DfResult<Vec<PhysicalSortExpr>> {
    let col = |name: &str| Expr::Column(Column::new_unqualified(name));
    let physical = |e: Expr| planner.create_physical_expr(&e, schema, session, planning_ctx);
    let order = |expr, descending| PhysicalSortExpr {
        expr,
        options: SortOptions {
            descending,
            nulls_first: false,
        },
    };
    Ok(vec![
        order(physical(isnan(col(&merge.score_column)))?, false),
        order(physical(col(&merge.score_column))?, true),
        order(physical(col(&merge.id_column))?, false),
    ])
}

/// The most rows a split call's merge keeps (a larger `k` runs the call whole).
const MAX_MERGED_K: i64 = 1 << 20;

/// Whether `spec`'s call runs as partial runs and a merge: a SET call (without GROUP BY, or
/// with it in the gathered grouping) whose UDF has a [`TopKMerge`] and whose `k` (1 to [`MAX_MERGED_K`]) and other named
/// arguments are literals. Gives `k` and the merge.
fn top_k_split(spec: &CallSpec) -> Option<(usize, TopKMerge)> {
    let merge = spec.def.top_k_merge()?;
    // With GROUP BY keys only in the gathered grouping: `set_grouping = 'sort'` keeps the plan
    // that sorts the whole input (the benchmark compares the two).
    if spec.def.input_type() != InputType::Set
        || (!spec.keys.is_empty() && spec.grouping != SetGrouping::Gather)
    {
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
