//! Larger input batches for calls that pay a fixed cost per batch, applied by the query planner
//! to the optimized plan (so EXPLAIN ANALYZE shows it; plain EXPLAIN prints DataFusion's plan):
//! - a call placed on the GPU that has a GPU implementation pays the device's turn, a stream
//!   synchronisation and the transfers' set-up per batch, so its input is coalesced up to
//!   [`GPU_BATCH_BYTES`] per batch. Measured on an H100 (benchmarks/report-gpu/REPORT.md): with
//!   8192-row batches the options suite's `black_scholes_call` over 5M rows spent ~0.4 ms per
//!   batch in fixed costs and ran at a sixth of the CPU's speed;
//! - a SCALAR RETURNS script pays one round trip to its worker per batch, so tiny input batches
//!   (a selective filter's, one-row `VALUES` lists) are coalesced up to the session's batch size.
//!   Rows keep their order; a script's per-row error names the row of the run it saw.

use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, Schema};
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::error::Result as DfResult;
use datafusion::physical_expr::{PhysicalExpr, ScalarFunctionExpr};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::aggregates::AggregateExec;
use datafusion::physical_plan::execution_plan::{ChildrenPropertiesMode, ReplaceChildrenOptions};
// DataFusion's operators coalesce their own output now; a GPU call needs its input coalesced
// to far more rows than they aim at, which this operator still does.
#[expect(deprecated)]
use datafusion::physical_plan::coalesce_batches::CoalesceBatchesExec;
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::filter::FilterExec;
use datafusion::physical_plan::limit::{GlobalLimitExec, LocalLimitExec};
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::repartition::RepartitionExec;

use crate::core::calls::Placement;
use crate::udf::as_accel_udf as as_accel;

/// The input bytes a GPU call's batch is coalesced up to (estimated from the input's schema).
pub(crate) const GPU_BATCH_BYTES: usize = 64 << 20;
/// The fewest rows a coalesced batch aims at (DataFusion's default batch size).
const MIN_ROWS: usize = 8192;
/// The most rows a coalesced batch aims at.
const MAX_ROWS: usize = 1 << 20;
/// The bytes assumed per value of a variable-width type.
const VARIABLE_WIDTH: usize = 64;

/// `plan` with the inputs of every node that evaluates a GPU call (one with a GPU
/// implementation, placed on the GPU) coalesced into batches of up to [`GPU_BATCH_BYTES`], and
/// those of every other node that evaluates a SCALAR RETURNS script into batches of
/// `batch_size` rows (the session's `datafusion.execution.batch_size`).
pub(crate) fn coalesce_call_inputs(
    plan: Arc<dyn ExecutionPlan>,
    batch_size: usize,
) -> DfResult<Arc<dyn ExecutionPlan>> {
    coalesce_under(plan, batch_size, None)
}

/// [`coalesce_call_inputs`] of `node`, under a `LIMIT` that needs at most `limit` rows from it
/// (`None`: no such limit): a coalesced batch aims at no more rows than that, so that a
/// `LIMIT 10` over a huge table reads a few batches, not a million rows.
#[expect(deprecated)]
fn coalesce_under(
    node: Arc<dyn ExecutionPlan>,
    batch_size: usize,
    limit: Option<usize>,
) -> DfResult<Arc<dyn ExecutionPlan>> {
    // A limit reaches down through operators that stream their input (projections, filters,
    // coalescers, repartitions): below them a few more rows than it asks for may be read, never
    // the whole input. An operator that needs all its input first (a sort, an aggregation, a
    // join's build side) ends it.
    let child_limit = if let Some(l) = node.downcast_ref::<GlobalLimitExec>() {
        l.fetch().map(|f| f.saturating_add(l.skip()))
    } else if let Some(l) = node.downcast_ref::<LocalLimitExec>() {
        Some(l.fetch())
    } else if node.downcast_ref::<ProjectionExec>().is_some()
        || node.downcast_ref::<FilterExec>().is_some()
        || node.downcast_ref::<CoalesceBatchesExec>().is_some()
        || node.downcast_ref::<RepartitionExec>().is_some()
        || node.downcast_ref::<CoalescePartitionsExec>().is_some()
    {
        // DataFusion folds a LIMIT into such an operator's own `fetch`.
        match (limit, node.fetch()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    } else {
        None
    };
    let children: Vec<Arc<dyn ExecutionPlan>> = node
        .children()
        .into_iter()
        .map(|child| coalesce_under(Arc::clone(child), batch_size, child_limit))
        .collect::<DfResult<_>>()?;
    let target = match evaluates(node.as_ref())? {
        Evaluates::GpuCall => None,
        Evaluates::Script => Some(batch_size.max(1)),
        Evaluates::Neither => {
            let unchanged = node
                .children()
                .into_iter()
                .zip(&children)
                .all(|(before, after)| Arc::ptr_eq(before, after));
            if unchanged {
                return Ok(node);
            }
            let options = ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute);
            return node.replace_children(children, options);
        }
    };
    let children: Vec<Arc<dyn ExecutionPlan>> = children
        .into_iter()
        .map(|child| {
            let rows = target.unwrap_or_else(|| target_rows(&child.schema()));
            // Under a limit a batch holds no more rows than the limit asks for (at least an
            // ordinary batch's, as a filter between them may drop some).
            let rows = limit.map_or(rows, |l| rows.min(l.max(MIN_ROWS)));
            let input = match child.downcast_ref::<CoalesceBatchesExec>() {
                // Replace a smaller coalescing target rather than stack another.
                Some(c) if c.target_batch_size() < rows => Arc::clone(c.input()),
                Some(_) => return child,
                None => Arc::clone(&child),
            };
            Arc::new(CoalesceBatchesExec::new(input, rows)) as Arc<dyn ExecutionPlan>
        })
        .collect();
    let options = ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute);
    node.replace_children(children, options)
}

/// Rows per coalesced batch for inputs of `schema`.
fn target_rows(schema: &Schema) -> usize {
    let width: usize = schema
        .fields()
        .iter()
        .map(|f| value_width(f.data_type()))
        .sum::<usize>()
        .max(1);
    (GPU_BATCH_BYTES / width).clamp(MIN_ROWS, MAX_ROWS)
}

/// Estimated bytes of one value of `t`.
fn value_width(t: &DataType) -> usize {
    match t {
        DataType::FixedSizeList(field, n) => value_width(field.data_type()) * (*n).max(0) as usize,
        DataType::Struct(fields) => fields.iter().map(|f| value_width(f.data_type())).sum(),
        t => t.primitive_width().unwrap_or(VARIABLE_WIDTH),
    }
}

/// Which calls with a cost per batch a plan node evaluates itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Evaluates {
    /// A call placed on the GPU that has a GPU implementation (whatever else it evaluates).
    GpuCall,
    /// A SCALAR RETURNS script, and no such GPU call.
    Script,
    /// Neither.
    Neither,
}

/// Which calls with a cost per batch `node` evaluates itself.
fn evaluates(node: &dyn ExecutionPlan) -> DfResult<Evaluates> {
    let exprs: Vec<Arc<dyn PhysicalExpr>> = if let Some(p) = node.downcast_ref::<ProjectionExec>() {
        p.expr().iter().map(|e| Arc::clone(&e.expr)).collect()
    } else if let Some(f) = node.downcast_ref::<FilterExec>() {
        vec![Arc::clone(f.predicate())]
    } else if let Some(a) = node.downcast_ref::<AggregateExec>() {
        a.aggr_expr()
            .iter()
            .flat_map(|e| e.expressions())
            .chain(a.group_expr().expr().iter().map(|(e, _)| Arc::clone(e)))
            .collect()
    } else {
        return Ok(Evaluates::Neither);
    };
    let mut found = Evaluates::Neither;
    for expr in exprs {
        expr.apply(|e| {
            let Some(udf) = e
                .downcast_ref::<ScalarFunctionExpr>()
                .and_then(|f| as_accel(f.fun().inner().as_ref()))
            else {
                return Ok(TreeNodeRecursion::Continue);
            };
            let gpu = udf.definition().has_gpu_implementation()
                && udf
                    .placed_call()
                    .is_some_and(|c| c.decision.placement == Placement::Gpu);
            if gpu {
                found = Evaluates::GpuCall;
                return Ok(TreeNodeRecursion::Stop);
            }
            // Scripts are the UDFs defined in this process (Rust UDFs are registered).
            if udf.definition().is_local() {
                found = Evaluates::Script;
            }
            Ok(TreeNodeRecursion::Continue)
        })?;
        if found == Evaluates::GpuCall {
            break;
        }
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::arrow::datatypes::{DataType, Field, Schema};

    use super::*;

    #[test]
    fn the_target_depends_on_the_row_width() {
        let doubles = Schema::new(
            (0..4)
                .map(|i| Field::new(format!("c{i}"), DataType::Float64, true))
                .collect::<Vec<_>>(),
        );
        // 32 bytes a row: 2M rows would fit 64 MiB; capped at 1M.
        assert_eq!(target_rows(&doubles), MAX_ROWS);
        let embedding = Schema::new(vec![Field::new(
            "e",
            DataType::FixedSizeList(
                Arc::new(Field::new_list_field(DataType::Float32, true)),
                768,
            ),
            true,
        )]);
        assert_eq!(target_rows(&embedding), GPU_BATCH_BYTES / (768 * 4));
        let wide = Schema::new(vec![Field::new(
            "e",
            DataType::FixedSizeList(
                Arc::new(Field::new_list_field(DataType::Float64, true)),
                1 << 20,
            ),
            true,
        )]);
        assert_eq!(target_rows(&wide), MIN_ROWS);
    }
}
