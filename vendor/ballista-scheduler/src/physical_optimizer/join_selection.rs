// Licensed to the Apache Software Foundation (ASF) under one
// or more contributor license agreements.  See the NOTICE file
// distributed with this work for additional information
// regarding copyright ownership.  The ASF licenses this file
// to you under the Apache License, Version 2.0 (the
// "License"); you may not use this file except in compliance
// with the License.  You may obtain a copy of the License at
//
//   http://www.apache.org/licenses/LICENSE-2.0
//
// Unless required by applicable law or agreed to in writing,
// software distributed under the License is distributed on an
// "AS IS" BASIS, WITHOUT WARRANTIES OR CONDITIONS OF ANY
// KIND, either express or implied.  See the License for the
// specific language governing permissions and limitations
// under the License.

//! The [`JoinSelection`] rule tries to modify a given plan so that it can
//! accommodate infinite sources and utilize statistical information (if there
//! is any) to obtain more performant plans. To achieve the first goal, it
//! tries to transform a non-runnable query (with the given infinite sources)
//! into a runnable query by replacing pipeline-breaking join operations with
//! pipeline-friendly ones. To achieve the second goal, it selects the proper
//! `PartitionMode` and the build side using the available statistics for hash joins.

//
// this is a copy of datafusion rule, with some differences
// needed to make this rule working on ballista
//
// see: https://github.com/apache/datafusion-ballista/issues/1304
// for more details
//
use std::sync::Arc;

use datafusion::common::config::ConfigOptions;
use datafusion::common::error::Result;
use datafusion::physical_plan::StatisticsArgs;
use datafusion::physical_plan::statistics::StatisticsContext;

use datafusion::common::tree_node::{Transformed, TransformedResult, TreeNode};
use datafusion::common::{JoinSide, JoinType, internal_err};
use datafusion::logical_expr::sort_properties::SortProperties;
use datafusion::physical_expr::LexOrdering;
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::execution_plan::EmissionType;
use datafusion::physical_plan::joins::utils::{ColumnIndex, JoinFilter};
use datafusion::physical_plan::joins::{
    CrossJoinExec, HashJoinExec, NestedLoopJoinExec, PartitionMode,
    StreamJoinPartitionMode, SymmetricHashJoinExec,
};
use datafusion::physical_plan::{ExecutionPlan, ExecutionPlanProperties};

/// The [`JoinSelection`] rule tries to modify a given plan so that it can
/// accommodate infinite sources and optimize joins in the plan according to
/// available statistical information, if there is any.
#[derive(Default, Debug)]
pub struct JoinSelection {}

impl JoinSelection {
    #[allow(missing_docs)]
    pub fn new() -> Self {
        Self {}
    }
}

// TODO: We need some performance test for Right Semi/Right Join swap to Left Semi/Left Join in case that the right side is smaller but not much smaller.
// TODO: In PrestoSQL, the optimizer flips join sides only if one side is much smaller than the other by more than SIZE_DIFFERENCE_THRESHOLD times, by default is 8 times.
/// Checks statistics for join swap.
pub(crate) fn should_swap_join_order(
    left: &dyn ExecutionPlan,
    right: &dyn ExecutionPlan,
) -> Result<bool> {
    // Get the left and right table's total bytes
    // If both the left and right tables contain total_byte_size statistics,
    // use `total_byte_size` to determine `should_swap_join_order`, else use `num_rows`
    let left_stats = StatisticsContext::new().compute(left, &StatisticsArgs::new())?;
    let right_stats = StatisticsContext::new().compute(right, &StatisticsArgs::new())?;
    // First compare `total_byte_size` of left and right side,
    // if information in this field is insufficient fallback to the `num_rows`
    match (
        left_stats.total_byte_size.get_value(),
        right_stats.total_byte_size.get_value(),
    ) {
        (Some(l), Some(r)) => Ok(l > r),
        _ => match (
            left_stats.num_rows.get_value(),
            right_stats.num_rows.get_value(),
        ) {
            (Some(l), Some(r)) => Ok(l > r),
            _ => Ok(false),
        },
    }
}

fn supports_collect_by_thresholds(
    plan: &dyn ExecutionPlan,
    threshold_byte_size: usize,
    threshold_num_rows: usize,
) -> bool {
    // Currently we do not trust the 0 value from stats, due to stats collection might have bug
    // TODO check the logic in datasource::get_statistics_with_limit()
    let Ok(stats) = StatisticsContext::new().compute(plan, &StatisticsArgs::new()) else {
        return false;
    };

    if let Some(byte_size) = stats.total_byte_size.get_value() {
        *byte_size != 0 && *byte_size < threshold_byte_size
    } else if let Some(num_rows) = stats.num_rows.get_value() {
        *num_rows != 0 && *num_rows < threshold_num_rows
    } else {
        false
    }
}

/// Whether a `CollectLeft` (broadcast) hash join is correct for `join_type` in
/// Ballista's distributed execution.
///
/// `CollectLeft` replicates the build (left) side to every probe task, and each
/// task processes only its own slice of the probe (right) side. Output rows that
/// are determined by a single probe-side row are therefore produced exactly
/// once. Join types that emit rows on behalf of the build side — unmatched outer
/// rows, or semi/anti/mark rows that depend on a build row's global match status
/// — would instead be emitted independently by every task, producing duplicate
/// or spurious rows. Only join types whose output is driven entirely by the
/// probe side are safe to broadcast.
///
/// `join_type` must be the join type *after* any build-side swap, since the
/// build side is always the left input of the resulting `HashJoinExec`.
pub(crate) fn collect_left_broadcast_safe(join_type: JoinType) -> bool {
    matches!(
        join_type,
        JoinType::Inner
            | JoinType::Right
            | JoinType::RightSemi
            | JoinType::RightAnti
            | JoinType::RightMark
    )
}

/// Predicate that checks whether the given join type supports input swapping.
#[deprecated(since = "45.0.0", note = "use JoinType::supports_swap instead")]
#[allow(dead_code)]
pub(crate) fn supports_swap(join_type: JoinType) -> bool {
    join_type.supports_swap()
}

/// This function returns the new join type we get after swapping the given
/// join's inputs.
#[deprecated(since = "45.0.0", note = "use datafusion-functions-nested instead")]
#[allow(dead_code)]
pub(crate) fn swap_join_type(join_type: JoinType) -> JoinType {
    join_type.swap()
}

/// This function swaps the inputs of the given join operator.
/// This function is public so other downstream projects can use it
/// to construct `HashJoinExec` with right side as the build side.
#[deprecated(since = "45.0.0", note = "use HashJoinExec::swap_inputs instead")]
pub fn swap_hash_join(
    hash_join: &HashJoinExec,
    partition_mode: PartitionMode,
) -> Result<Arc<dyn ExecutionPlan>> {
    hash_join.swap_inputs(partition_mode)
}

/// Swaps inputs of `NestedLoopJoinExec` and wraps it into `ProjectionExec` is required
#[deprecated(since = "45.0.0", note = "use NestedLoopJoinExec::swap_inputs")]
#[allow(dead_code)]
pub(crate) fn swap_nl_join(join: &NestedLoopJoinExec) -> Result<Arc<dyn ExecutionPlan>> {
    join.swap_inputs()
}

/// Swaps join sides for filter column indices and produces new `JoinFilter` (if exists).
#[deprecated(since = "45.0.0", note = "use filter.map(JoinFilter::swap) instead")]
#[allow(dead_code)]
fn swap_join_filter(filter: Option<&JoinFilter>) -> Option<JoinFilter> {
    filter.map(JoinFilter::swap)
}

#[deprecated(since = "45.0.0", note = "use JoinFilter::swap instead")]
#[allow(dead_code)]
pub(crate) fn swap_filter(filter: &JoinFilter) -> JoinFilter {
    filter.swap()
}

impl PhysicalOptimizerRule for JoinSelection {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        // First, we make pipeline-fixing modifications to joins so as to accommodate
        // unbounded inputs. Each pipeline-fixing subrule, which is a function
        // of type `PipelineFixerSubrule`, takes a single [`PipelineStatePropagator`]
        // argument storing state variables that indicate the unboundedness status
        // of the current [`ExecutionPlan`] as we traverse the plan tree.
        let subrules: Vec<Box<PipelineFixerSubrule>> = vec![
            Box::new(hash_join_convert_symmetric_subrule),
            Box::new(hash_join_swap_subrule),
        ];
        let new_plan = plan
            .transform_up(|p| apply_subrules(p, &subrules, config))
            .data()?;
        // Next, we apply another subrule that tries to optimize joins using any
        // statistics their inputs might have.
        // - For a hash join with partition mode [`PartitionMode::Auto`], we will
        //   make a cost-based decision to select which `PartitionMode` mode
        //   (`Partitioned`/`CollectLeft`) is optimal. If the statistics information
        //   is not available, we will fall back to [`PartitionMode::Partitioned`].
        // - We optimize/swap join sides so that the left (build) side of the join
        //   is the small side. If the statistics information is not available, we
        //   do not modify join sides.
        // - We will also swap left and right sides for cross joins so that the left
        //   side is the small side.
        let config = &config.optimizer;
        let collect_threshold_byte_size = config.hash_join_single_partition_threshold;
        let collect_threshold_num_rows = config.hash_join_single_partition_threshold_rows;
        new_plan
            .transform_up(|plan| {
                statistical_join_selection_subrule(
                    plan,
                    collect_threshold_byte_size,
                    collect_threshold_num_rows,
                )
            })
            .data()
    }

    fn name(&self) -> &str {
        "join_selection"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// Tries to create a [`HashJoinExec`] in [`PartitionMode::CollectLeft`] when possible.
///
/// This function will first consider the given join type and check whether the
/// `CollectLeft` mode is applicable. Otherwise, it will try to swap the join sides.
/// When the `ignore_threshold` is false, this function will also check left
/// and right sizes in bytes or rows.
pub(crate) fn try_collect_left(
    hash_join: &HashJoinExec,
    ignore_threshold: bool,
    threshold_byte_size: usize,
    threshold_num_rows: usize,
) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    let left = hash_join.left();
    let right = hash_join.right();

    let left_can_collect = ignore_threshold
        || supports_collect_by_thresholds(
            &**left,
            threshold_byte_size,
            threshold_num_rows,
        );
    let right_can_collect = ignore_threshold
        || supports_collect_by_thresholds(
            &**right,
            threshold_byte_size,
            threshold_num_rows,
        );

    // Swapping into `CollectLeft` puts the current right onto the build side,
    // and `HashJoinExec` requires the build side to have exactly one partition
    // in that mode. Ballista has no post-`JoinSelection` distribution pass to
    // fix this, so any swap that would break the invariant must be skipped.
    let right_one_partition = right.output_partitioning().partition_count() == 1;
    match (left_can_collect, right_can_collect) {
        (true, true) => {
            // Don't swap null-aware anti joins as they have specific side requirements
            if hash_join.join_type().supports_swap()
                && !hash_join.null_aware
                && right_one_partition
                && should_swap_join_order(&**left, &**right)?
            {
                Ok(Some(hash_join.swap_inputs(PartitionMode::CollectLeft)?))
            } else {
                Ok(Some(Arc::new(
                    hash_join
                        .builder()
                        .with_partition_mode(PartitionMode::CollectLeft)
                        .build()?,
                )))
            }
        }
        (true, false) => Ok(Some(Arc::new(
            hash_join
                .builder()
                .with_partition_mode(PartitionMode::CollectLeft)
                .build()?,
        ))),
        (false, true) => {
            // Don't swap null-aware anti joins as they have specific side requirements
            if hash_join.join_type().supports_swap()
                && !hash_join.null_aware
                && right_one_partition
            {
                hash_join.swap_inputs(PartitionMode::CollectLeft).map(Some)
            } else {
                Ok(None)
            }
        }
        (false, false) => Ok(None),
    }
}
/// Creates a partitioned hash join execution plan, swapping inputs if beneficial.
///
/// Checks if the join order should be swapped based on the join type and input statistics.
/// If swapping is optimal and supported, creates a swapped partitioned hash join; otherwise,
/// creates a standard partitioned hash join.
pub(crate) fn partitioned_hash_join(
    hash_join: &HashJoinExec,
) -> Result<Arc<dyn ExecutionPlan>> {
    let left = hash_join.left();
    let right = hash_join.right();
    // Don't swap null-aware anti joins as they have specific side requirements
    if hash_join.join_type().supports_swap()
        && !hash_join.null_aware
        && should_swap_join_order(&**left, &**right)?
    {
        hash_join.swap_inputs(PartitionMode::Partitioned)
    } else {
        // Keep this copied rule aligned with upstream DataFusion. An Auto join
        // that cannot be selected by size still requires CollectLeft when it is
        // null-aware; Ballista's distributed planner later coalesces the probe
        // side so this mode runs in exactly one task.
        let partition_mode = if hash_join.null_aware {
            PartitionMode::CollectLeft
        } else {
            PartitionMode::Partitioned
        };

        Ok(Arc::new(
            hash_join
                .builder()
                .with_partition_mode(partition_mode)
                .build()?,
        ))
    }
}

/// This subrule tries to modify a given plan so that it can
/// optimize hash and cross joins in the plan according to available statistical information.
fn statistical_join_selection_subrule(
    plan: Arc<dyn ExecutionPlan>,
    collect_threshold_byte_size: usize,
    collect_threshold_num_rows: usize,
) -> Result<Transformed<Arc<dyn ExecutionPlan>>> {
    let transformed = if let Some(hash_join) = plan.downcast_ref::<HashJoinExec>() {
        match hash_join.partition_mode() {
            PartitionMode::Auto => try_collect_left(
                hash_join,
                false,
                collect_threshold_byte_size,
                collect_threshold_num_rows,
            )?
            .map_or_else(
                || partitioned_hash_join(hash_join).map(Some),
                |v| Ok(Some(v)),
            )?,
            PartitionMode::CollectLeft => try_collect_left(hash_join, true, 0, 0)?
                .map_or_else(
                    || partitioned_hash_join(hash_join).map(Some),
                    |v| Ok(Some(v)),
                )?,
            PartitionMode::Partitioned => {
                let left = hash_join.left();
                let right = hash_join.right();
                // Keep this branch aligned with upstream DataFusion: a
                // null-aware join is not swapped, but its partition mode is not
                // changed here. Ballista's distributed planner is responsible
                // for lowering it to a single-task CollectLeft join.
                if hash_join.join_type().supports_swap()
                    && !hash_join.null_aware
                    && should_swap_join_order(&**left, &**right)?
                {
                    hash_join
                        .swap_inputs(PartitionMode::Partitioned)
                        .map(Some)?
                } else {
                    None
                }
            }
        }
    } else if let Some(cross_join) = plan.downcast_ref::<CrossJoinExec>() {
        let left = cross_join.left();
        let right = cross_join.right();
        if right.properties().output_partitioning().partition_count() > 1 {
            None
        } else if should_swap_join_order(&**left, &**right)? {
            cross_join.swap_inputs().map(Some)?
        } else {
            None
        }
    } else if let Some(nl_join) = plan.downcast_ref::<NestedLoopJoinExec>() {
        let left = nl_join.left();
        let right = nl_join.right();
        // next few lines are different from original datafusion rule
        // partition count of right side has to be equal one to be
        // able to swap inputs
        if right.properties().output_partitioning().partition_count() > 1 {
            None
        } else if nl_join.join_type().supports_swap()
            && should_swap_join_order(&**left, &**right)?
        {
            nl_join.swap_inputs().map(Some)?
        } else {
            None
        }
    } else {
        None
    };

    Ok(if let Some(transformed) = transformed {
        Transformed::yes(transformed)
    } else {
        Transformed::no(plan)
    })
}

/// Pipeline-fixing join selection subrule.
pub type PipelineFixerSubrule =
    dyn Fn(Arc<dyn ExecutionPlan>, &ConfigOptions) -> Result<Arc<dyn ExecutionPlan>>;

/// Converts a hash join to a symmetric hash join if both its inputs are
/// unbounded and incremental.
///
/// This subrule checks if a hash join can be replaced with a symmetric hash join when dealing
/// with unbounded (infinite) inputs on both sides. This replacement avoids pipeline breaking and
/// preserves query runnability. If the replacement is applicable, this subrule makes this change;
/// otherwise, it leaves the input unchanged.
///
/// # Arguments
/// * `input` - The current state of the pipeline, including the execution plan.
/// * `config_options` - Configuration options that might affect the transformation logic.
///
/// # Returns
/// An `Option` that contains the `Result` of the transformation. If the transformation is not applicable,
/// it returns `None`. If applicable, it returns `Some(Ok(...))` with the modified pipeline state,
/// or `Some(Err(...))` if an error occurs during the transformation.
fn hash_join_convert_symmetric_subrule(
    input: Arc<dyn ExecutionPlan>,
    config_options: &ConfigOptions,
) -> Result<Arc<dyn ExecutionPlan>> {
    // Check if the current plan node is a HashJoinExec.
    if let Some(hash_join) = input.downcast_ref::<HashJoinExec>() {
        let left_unbounded = hash_join.left.boundedness().is_unbounded();
        let left_incremental = matches!(
            hash_join.left.pipeline_behavior(),
            EmissionType::Incremental | EmissionType::Both
        );
        let right_unbounded = hash_join.right.boundedness().is_unbounded();
        let right_incremental = matches!(
            hash_join.right.pipeline_behavior(),
            EmissionType::Incremental | EmissionType::Both
        );
        // Process only if both left and right sides are unbounded and incrementally emit.
        if left_unbounded && right_unbounded & left_incremental & right_incremental {
            // Determine the partition mode based on configuration.
            let mode = if config_options.optimizer.repartition_joins {
                StreamJoinPartitionMode::Partitioned
            } else {
                StreamJoinPartitionMode::SinglePartition
            };
            // A closure to determine the required sort order for each side of the join in the SymmetricHashJoinExec.
            // This function checks if the columns involved in the filter have any specific ordering requirements.
            // If the child nodes (left or right side of the join) already have a defined order and the columns used in the
            // filter predicate are ordered, this function captures that ordering requirement. The identified order is then
            // used in the SymmetricHashJoinExec to maintain bounded memory during join operations.
            // However, if the child nodes do not have an inherent order, or if the filter columns are unordered,
            // the function concludes that no specific order is required for the SymmetricHashJoinExec. This approach
            // ensures that the symmetric hash join operation only imposes ordering constraints when necessary,
            // based on the properties of the child nodes and the filter condition.
            let determine_order = |side: JoinSide| -> Option<LexOrdering> {
                hash_join
                    .filter()
                    .map(|filter| {
                        filter.column_indices().iter().any(
                            |ColumnIndex {
                                 index,
                                 side: column_side,
                             }| {
                                // Skip if column side does not match the join side.
                                if *column_side != side {
                                    return false;
                                }
                                // Retrieve equivalence properties and schema based on the side.
                                let (equivalence, schema) = match side {
                                    JoinSide::Left => (
                                        hash_join.left().equivalence_properties(),
                                        hash_join.left().schema(),
                                    ),
                                    JoinSide::Right => (
                                        hash_join.right().equivalence_properties(),
                                        hash_join.right().schema(),
                                    ),
                                    JoinSide::None => return false,
                                };

                                let name = schema.field(*index).name();
                                let col = Arc::new(Column::new(name, *index)) as _;
                                // Check if the column is ordered.
                                equivalence.get_expr_properties(col).sort_properties
                                    != SortProperties::Unordered
                            },
                        )
                    })
                    .unwrap_or(false)
                    .then(|| {
                        match side {
                            JoinSide::Left => hash_join.left().output_ordering(),
                            JoinSide::Right => hash_join.right().output_ordering(),
                            JoinSide::None => unreachable!(),
                        }
                        .cloned()
                    })
                    .flatten()
            };

            // Determine the sort order for both left and right sides.
            let left_order = determine_order(JoinSide::Left);
            let right_order = determine_order(JoinSide::Right);

            return SymmetricHashJoinExec::try_new(
                Arc::clone(hash_join.left()),
                Arc::clone(hash_join.right()),
                hash_join.on().to_vec(),
                hash_join.filter().cloned(),
                hash_join.join_type(),
                hash_join.null_equality(),
                left_order,
                right_order,
                mode,
            )
            .map(|exec| Arc::new(exec) as _);
        }
    }
    Ok(input)
}

/// This subrule will swap build/probe sides of a hash join depending on whether
/// one of its inputs may produce an infinite stream of records. The rule ensures
/// that the left (build) side of the hash join always operates on an input stream
/// that will produce a finite set of records. If the left side can not be chosen
/// to be "finite", the join sides stay the same as the original query.
/// ```text
/// For example, this rule makes the following transformation:
///
///
///
///           +--------------+              +--------------+
///           |              |  unbounded   |              |
///    Left   | Infinite     |    true      | Hash         |\true
///           | Data source  |--------------| Repartition  | \   +--------------+       +--------------+
///           |              |              |              |  \  |              |       |              |
///           +--------------+              +--------------+   - |  Hash Join   |-------| Projection   |
///                                                            - |              |       |              |
///           +--------------+              +--------------+  /  +--------------+       +--------------+
///           |              |  unbounded   |              | /
///    Right  | Finite       |    false     | Hash         |/false
///           | Data Source  |--------------| Repartition  |
///           |              |              |              |
///           +--------------+              +--------------+
///
///
///
///           +--------------+              +--------------+
///           |              |  unbounded   |              |
///    Left   | Finite       |    false     | Hash         |\false
///           | Data source  |--------------| Repartition  | \   +--------------+       +--------------+
///           |              |              |              |  \  |              | true  |              | true
///           +--------------+              +--------------+   - |  Hash Join   |-------| Projection   |-----
///                                                            - |              |       |              |
///           +--------------+              +--------------+  /  +--------------+       +--------------+
///           |              |  unbounded   |              | /
///    Right  | Infinite     |    true      | Hash         |/true
///           | Data Source  |--------------| Repartition  |
///           |              |              |              |
///           +--------------+              +--------------+
///
/// ```
pub fn hash_join_swap_subrule(
    mut input: Arc<dyn ExecutionPlan>,
    _config_options: &ConfigOptions,
) -> Result<Arc<dyn ExecutionPlan>> {
    if let Some(hash_join) = input.downcast_ref::<HashJoinExec>()
        && hash_join.left.boundedness().is_unbounded()
        && !hash_join.right.boundedness().is_unbounded()
        && !hash_join.null_aware
        && matches!(
            *hash_join.join_type(),
            JoinType::Inner | JoinType::Left | JoinType::LeftSemi | JoinType::LeftAnti
        )
    {
        input = swap_join_according_to_unboundedness(hash_join)?;
    }
    Ok(input)
}

/// This function swaps sides of a hash join to make it runnable even if one of
/// its inputs are infinite. Note that this is not always possible; i.e.
/// [`JoinType::Full`], [`JoinType::Right`], [`JoinType::RightAnti`] and
/// [`JoinType::RightSemi`] can not run with an unbounded left side, even if
/// we swap join sides. Therefore, we do not consider them here.
/// This function is crate public as it is useful for downstream projects
/// to implement, or experiment with, their own join selection rules.
pub(crate) fn swap_join_according_to_unboundedness(
    hash_join: &HashJoinExec,
) -> Result<Arc<dyn ExecutionPlan>> {
    let partition_mode = hash_join.partition_mode();
    let join_type = hash_join.join_type();
    match (*partition_mode, *join_type) {
        (
            _,
            JoinType::Right | JoinType::RightSemi | JoinType::RightAnti | JoinType::Full,
        ) => internal_err!("{join_type} join cannot be swapped for unbounded input."),
        (PartitionMode::Partitioned, _) => {
            hash_join.swap_inputs(PartitionMode::Partitioned)
        }
        (PartitionMode::CollectLeft, _) => {
            hash_join.swap_inputs(PartitionMode::CollectLeft)
        }
        (PartitionMode::Auto, _) => {
            // Use `PartitionMode::Partitioned` as default if `Auto` is selected.
            hash_join.swap_inputs(PartitionMode::Partitioned)
        }
    }
}

/// Apply given `PipelineFixerSubrule`s to a given plan. This plan, along with
/// auxiliary boundedness information, is in the `PipelineStatePropagator` object.
fn apply_subrules(
    mut input: Arc<dyn ExecutionPlan>,
    subrules: &Vec<Box<PipelineFixerSubrule>>,
    config_options: &ConfigOptions,
) -> Result<Transformed<Arc<dyn ExecutionPlan>>> {
    for subrule in subrules {
        input = subrule(input, config_options)?;
    }
    Ok(Transformed::yes(input))
}

// See tests in datafusion/core/tests/physical_optimizer

#[cfg(test)]
mod test {
    use std::sync::Arc;

    use super::collect_left_broadcast_safe;
    use datafusion::{
        arrow::datatypes::{DataType, Field, Schema},
        common::{ColumnStatistics, JoinSide, JoinType, Statistics, stats::Precision},
        config::ConfigOptions,
        logical_expr::Operator,
        physical_plan::{
            ExecutionPlan,
            expressions::{BinaryExpr, Column},
            joins::utils::{ColumnIndex, JoinFilter},
            test::exec::StatisticsExec,
        },
    };

    // A CollectLeft broadcast replicates the build (left) side to every probe
    // task. Only join types whose output is driven entirely by the probe (right)
    // side may be broadcast; any type that emits rows on behalf of the build side
    // would duplicate them across tasks. This locks down the full set so a new or
    // reclassified `JoinType` can't silently become broadcastable.
    #[test]
    fn collect_left_broadcast_safe_matches_probe_driven_join_types() {
        let safe = [
            JoinType::Inner,
            JoinType::Right,
            JoinType::RightSemi,
            JoinType::RightAnti,
            JoinType::RightMark,
        ];
        let unsafe_types = [
            JoinType::Left,
            JoinType::Full,
            JoinType::LeftSemi,
            JoinType::LeftAnti,
            JoinType::LeftMark,
        ];
        for join_type in safe {
            assert!(
                collect_left_broadcast_safe(join_type),
                "{join_type:?} should be safe to broadcast"
            );
        }
        for join_type in unsafe_types {
            assert!(
                !collect_left_broadcast_safe(join_type),
                "{join_type:?} must not be broadcast"
            );
        }
    }
    //
    // join selection should not change order of joins for
    // nested loop join as we're not able to insert new CoalescePartitions
    // when stages are created
    //
    // more details at:
    // https://github.com/apache/datafusion-ballista/issues/1304
    //
    #[rstest::rstest(
        join_type,
        case::inner(JoinType::Inner),
        case::left(JoinType::Left),
        case::right(JoinType::Right),
        case::full(JoinType::Full)
    )]
    #[tokio::test]
    async fn test_nl_join_with_swap(join_type: JoinType) {
        use std::sync::Arc;

        use datafusion::{
            config::ConfigOptions,
            physical_optimizer::PhysicalOptimizerRule,
            physical_plan::{displayable, joins::NestedLoopJoinExec},
        };

        use crate::physical_optimizer::join_selection::JoinSelection;

        let (big, small) = create_big_and_small();

        let join = Arc::new(
            NestedLoopJoinExec::try_new(
                Arc::clone(&big),
                Arc::clone(&small),
                nl_join_filter(),
                &join_type,
                None,
            )
            .unwrap(),
        ) as Arc<dyn ExecutionPlan>;

        let optimized_join = JoinSelection::new()
            .optimize(join.clone(), &ConfigOptions::new())
            .unwrap();

        assert_eq!(
            displayable(join.as_ref()).one_line().to_string(),
            displayable(optimized_join.as_ref()).one_line().to_string()
        );
    }

    //
    // join selection should not change order of joins for
    // cross join as we're not able to insert new CoalescePartitions
    // when stages are created
    //
    #[tokio::test]
    async fn test_cross_join_with_swap() {
        use std::sync::Arc;

        use datafusion::{
            config::ConfigOptions,
            physical_optimizer::PhysicalOptimizerRule,
            physical_plan::{displayable, joins::CrossJoinExec},
        };

        use crate::physical_optimizer::join_selection::JoinSelection;

        let (big, small) = create_big_and_small();

        let join = Arc::new(CrossJoinExec::new(Arc::clone(&big), Arc::clone(&small)))
            as Arc<dyn ExecutionPlan>;

        let optimized_join = JoinSelection::new()
            .optimize(join.clone(), &ConfigOptions::new())
            .unwrap();

        assert_eq!(
            displayable(join.as_ref()).one_line().to_string(),
            displayable(optimized_join.as_ref()).one_line().to_string()
        );
    }

    #[test]
    fn partitioned_null_aware_anti_join_is_not_swapped() {
        use datafusion::{
            common::NullEquality,
            physical_optimizer::PhysicalOptimizerRule,
            physical_plan::joins::{HashJoinExec, PartitionMode},
        };

        use crate::physical_optimizer::join_selection::JoinSelection;

        // The large left and small right sides would normally be swapped by
        // statistical join selection. Keep this rule aligned with upstream
        // DataFusion: a null-aware anti join retains both its orientation and
        // its existing partition mode. Distributed lowering happens later.
        let (big, small) = create_big_and_small();
        let join = Arc::new(
            HashJoinExec::try_new(
                Arc::clone(&big),
                Arc::clone(&small),
                vec![(
                    Arc::new(Column::new("big_col", 0)) as _,
                    Arc::new(Column::new("small_col", 0)) as _,
                )],
                None,
                &JoinType::LeftAnti,
                None,
                PartitionMode::Partitioned,
                NullEquality::NullEqualsNothing,
                true,
            )
            .unwrap(),
        ) as Arc<dyn ExecutionPlan>;

        let optimized = JoinSelection::new()
            .optimize(join, &ConfigOptions::new())
            .unwrap();
        let hash_join = optimized
            .downcast_ref::<HashJoinExec>()
            .expect("null-aware join should remain a HashJoinExec");

        assert_eq!(*hash_join.join_type(), JoinType::LeftAnti);
        assert_eq!(*hash_join.partition_mode(), PartitionMode::Partitioned);
        assert!(hash_join.null_aware);
    }

    #[test]
    fn unbounded_input_rule_does_not_swap_null_aware_anti_join() {
        use datafusion::{
            arrow::datatypes::SchemaRef,
            common::NullEquality,
            execution::{SendableRecordBatchStream, TaskContext},
            physical_plan::{
                EmptyRecordBatchStream,
                joins::{HashJoinExec, PartitionMode},
                streaming::{PartitionStream, StreamingTableExec},
            },
        };

        use crate::physical_optimizer::join_selection::hash_join_swap_subrule;

        #[derive(Debug)]
        struct EmptyPartitionStream(SchemaRef);

        impl PartitionStream for EmptyPartitionStream {
            fn schema(&self) -> &SchemaRef {
                &self.0
            }

            fn execute(&self, _ctx: Arc<TaskContext>) -> SendableRecordBatchStream {
                Box::pin(EmptyRecordBatchStream::new(Arc::clone(&self.0)))
            }
        }

        let schema =
            Arc::new(Schema::new(vec![Field::new("key", DataType::Int32, false)]));
        let left = Arc::new(
            StreamingTableExec::try_new(
                Arc::clone(&schema),
                vec![Arc::new(EmptyPartitionStream(Arc::clone(&schema)))],
                None,
                vec![],
                true,
                None,
            )
            .unwrap(),
        ) as Arc<dyn ExecutionPlan>;
        let right = Arc::new(StatisticsExec::new(
            Statistics::new_unknown(&schema),
            schema.as_ref().clone(),
        )) as Arc<dyn ExecutionPlan>;
        let join = Arc::new(
            HashJoinExec::try_new(
                Arc::clone(&left),
                Arc::clone(&right),
                vec![(
                    Arc::new(Column::new("key", 0)) as _,
                    Arc::new(Column::new("key", 0)) as _,
                )],
                None,
                &JoinType::LeftAnti,
                None,
                PartitionMode::Partitioned,
                NullEquality::NullEqualsNothing,
                true,
            )
            .unwrap(),
        ) as Arc<dyn ExecutionPlan>;

        let optimized = hash_join_swap_subrule(Arc::clone(&join), &ConfigOptions::new())
            .expect(
                "the unbounded-input rule must not try to create a null-aware RightAnti",
            );

        assert!(Arc::ptr_eq(&optimized, &join));
    }

    fn create_big_and_small() -> (Arc<dyn ExecutionPlan>, Arc<dyn ExecutionPlan>) {
        let big = Arc::new(StatisticsExec::new(
            big_statistics(),
            Schema::new(vec![Field::new("big_col", DataType::Int32, false)]),
        ));

        let small = Arc::new(StatisticsExec::new(
            small_statistics(),
            Schema::new(vec![Field::new("small_col", DataType::Int32, false)]),
        ));
        (big, small)
    }

    /// Return statistics for small table
    fn small_statistics() -> Statistics {
        let (threshold_num_rows, threshold_byte_size) = get_thresholds();
        Statistics {
            num_rows: Precision::Inexact(threshold_num_rows / 128),
            total_byte_size: Precision::Inexact(threshold_byte_size / 128),
            column_statistics: vec![ColumnStatistics::new_unknown()],
        }
    }

    /// Return statistics for big table
    fn big_statistics() -> Statistics {
        let (threshold_num_rows, threshold_byte_size) = get_thresholds();
        Statistics {
            num_rows: Precision::Inexact(threshold_num_rows * 2),
            total_byte_size: Precision::Inexact(threshold_byte_size * 2),
            column_statistics: vec![ColumnStatistics::new_unknown()],
        }
    }
    /// Get table thresholds: (num_rows, byte_size)
    fn get_thresholds() -> (usize, usize) {
        let optimizer_options = ConfigOptions::new().optimizer;
        (
            optimizer_options.hash_join_single_partition_threshold_rows,
            optimizer_options.hash_join_single_partition_threshold,
        )
    }
    // Regression for https://github.com/apache/datafusion-ballista/issues/1681
    //
    // `JoinSelection` must not swap a `HashJoinExec(CollectLeft)` join's
    // inputs in a way that puts a multi-partition reader on the build side.
    // Ballista's pipeline has no `EnforceDistribution` pass after this rule,
    // so the swapped plan reaches the executor unchanged and trips
    // `HashJoinExec::execute`'s assertion that `left_partitions == 1` in
    // `CollectLeft` mode.
    #[tokio::test]
    async fn collect_left_swap_preserves_one_partition_build() {
        use datafusion::{
            common::NullEquality,
            config::ConfigOptions,
            physical_expr::expressions::Column,
            physical_optimizer::PhysicalOptimizerRule,
            physical_plan::{
                ExecutionPlanProperties, coalesce_partitions::CoalescePartitionsExec,
                joins::HashJoinExec, joins::PartitionMode,
            },
        };

        use crate::physical_optimizer::join_selection::JoinSelection;

        let schema = Schema::new(vec![Field::new("k", DataType::Int32, false)]);

        // Build side: 1 logical partition (e.g. a Ballista broadcast
        // ShuffleReaderExec) but BIG total_byte_size.
        let big_inner = Arc::new(StatisticsExec::new(
            Statistics {
                num_rows: Precision::Exact(10_000),
                total_byte_size: Precision::Exact(1_000_000),
                column_statistics: vec![ColumnStatistics::new_unknown()],
            },
            schema.clone(),
        ));
        let left =
            Arc::new(CoalescePartitionsExec::new(big_inner)) as Arc<dyn ExecutionPlan>;
        assert_eq!(left.output_partitioning().partition_count(), 1);

        // Probe side: 2 partitions (the raw StatisticsExec default), SMALL
        // total_byte_size. Stand-in for a multi-partition hash shuffle reader.
        let right = Arc::new(StatisticsExec::new(
            Statistics {
                num_rows: Precision::Exact(3_000),
                total_byte_size: Precision::Exact(200_000),
                column_statistics: vec![ColumnStatistics::new_unknown()],
            },
            schema.clone(),
        )) as Arc<dyn ExecutionPlan>;
        assert!(right.output_partitioning().partition_count() > 1);

        let on = vec![(
            Arc::new(Column::new_with_schema("k", &left.schema()).unwrap()) as _,
            Arc::new(Column::new_with_schema("k", &right.schema()).unwrap()) as _,
        )];

        let join = Arc::new(
            HashJoinExec::try_new(
                Arc::clone(&left),
                Arc::clone(&right),
                on,
                None,
                &JoinType::Inner,
                None,
                PartitionMode::CollectLeft,
                NullEquality::NullEqualsNothing,
                false,
            )
            .unwrap(),
        ) as Arc<dyn ExecutionPlan>;

        let optimized = JoinSelection::new()
            .optimize(join, &ConfigOptions::new())
            .unwrap();

        // `swap_inputs` for Inner wraps the join in a ProjectionExec to
        // restore the output column order. Walk the tree to find the join.
        fn find_hash_join(plan: &Arc<dyn ExecutionPlan>) -> Option<&HashJoinExec> {
            if let Some(hj) = plan.downcast_ref::<HashJoinExec>() {
                return Some(hj);
            }
            for child in plan.children() {
                if let Some(hj) = find_hash_join(child) {
                    return Some(hj);
                }
            }
            None
        }

        let hj =
            find_hash_join(&optimized).expect("HashJoinExec missing from optimized plan");

        assert_eq!(*hj.partition_mode(), PartitionMode::CollectLeft);
        assert_eq!(
            hj.left().output_partitioning().partition_count(),
            1,
            "JoinSelection swapped a CollectLeft join's inputs and ended up \
             with a multi-partition reader on the build side, which violates \
             CollectLeft's invariant",
        );
        assert_eq!(
            hj.right().output_partitioning().partition_count(),
            2,
            "JoinSelection swapped a CollectLeft join's inputs and ended up \
             with a multi-partition reader on the build side, which violates \
             CollectLeft's invariant",
        );
    }

    /// Create join filter for NLJoinExec with expression `big_col > small_col`
    /// where both columns are 0-indexed and come from left and right inputs respectively
    fn nl_join_filter() -> Option<JoinFilter> {
        let column_indices = vec![
            ColumnIndex {
                index: 0,
                side: JoinSide::Left,
            },
            ColumnIndex {
                index: 0,
                side: JoinSide::Right,
            },
        ];
        let intermediate_schema = Schema::new(vec![
            Field::new("big_col", DataType::Int32, false),
            Field::new("small_col", DataType::Int32, false),
        ]);
        let expression = Arc::new(BinaryExpr::new(
            Arc::new(Column::new_with_schema("big_col", &intermediate_schema).unwrap()),
            Operator::Gt,
            Arc::new(Column::new_with_schema("small_col", &intermediate_schema).unwrap()),
        )) as _;

        Some(JoinFilter::new(
            expression,
            column_indices,
            Arc::new(intermediate_schema),
        ))
    }
}
