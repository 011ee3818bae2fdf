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

use ballista_core::config::BallistaConfig;
use datafusion::physical_plan::StatisticsArgs;
use datafusion::physical_plan::statistics::StatisticsContext;
use datafusion::{
    arrow::compute::SortOptions,
    arrow::datatypes::{DataType, Schema},
    common::{
        ColumnStatistics, JoinType, NullEquality, Result, Statistics, exec_err,
        internal_err, plan_err, stats::Precision, tree_node::TreeNodeRecursion,
    },
    config::ConfigOptions,
    execution::{SendableRecordBatchStream, TaskContext},
    physical_expr::PhysicalExpr,
    physical_expr_common::physical_expr::fmt_sql,
    physical_plan::{
        DisplayAs, DisplayFormatType, Distribution, ExecutionPlan,
        ExecutionPlanProperties, PlanProperties, apply_expression_roots,
        joins::{
            HashJoinExec, HashJoinExecBuilder, JoinOn, PartitionMode, SortMergeJoinExec,
            utils::JoinFilter,
        },
    },
};
use log::debug;
use std::sync::Arc;

use crate::physical_optimizer::join_selection::collect_left_broadcast_safe;
use crate::state::aqe::execution_plan::ExchangeExec;
use crate::state::aqe::optimizer_rule::join_selection::SelectJoinRule;

/// has children of this join been
/// repartitioned
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JoinInputState {
    /// All inputs has been repartitioned
    /// which means this join can be resolved
    Repartitioned,
    /// State on join inputs is unknown
    Unknown,
}

#[derive(Debug)]
pub struct DynamicJoinSelectionExec {
    pub left: Arc<dyn ExecutionPlan>,
    pub right: Arc<dyn ExecutionPlan>,
    pub on: JoinOn,
    pub filter: Option<JoinFilter>,
    pub join_type: JoinType,
    pub projection: Option<Vec<usize>>,
    pub null_equality: NullEquality,
    pub properties: Arc<PlanProperties>,
    pub selection_state: JoinInputState,
    pub null_aware: bool,
    pub(crate) plan_id: usize,
}

impl ExecutionPlan for DynamicJoinSelectionExec {
    fn name(&self) -> &str {
        "DynamicJoinSelectionExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.left, &self.right]
    }

    /// Join keys and filter, same set the `HashJoinExec` / `SortMergeJoinExec`
    /// this resolves into would report.
    fn apply_expressions(
        &self,
        f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        let join_keys = self
            .on
            .iter()
            .flat_map(|(left, right)| [Arc::clone(left), Arc::clone(right)]);
        let filter = self
            .filter
            .iter()
            .map(|filter| Arc::clone(filter.expression()));
        apply_expression_roots(join_keys.chain(filter), f)
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        if children.len() != 2 {
            return internal_err!(
                "DynamicJoinSelectionExec expects 2 children, got {}",
                children.len()
            );
        }
        Ok(Arc::new(DynamicJoinSelectionExec {
            left: Arc::clone(&children[0]),
            right: Arc::clone(&children[1]),
            on: self.on.clone(),
            filter: self.filter.clone(),
            join_type: self.join_type,
            projection: self.projection.clone(),
            null_equality: self.null_equality,
            properties: Arc::clone(&self.properties),
            selection_state: self.selection_state.clone(),
            null_aware: self.null_aware,
            plan_id: self.plan_id,
        }))
    }

    fn execute(
        &self,
        _partition: usize,
        _context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        exec_err!(
            "Operator should not be executed; it should have been replaced by an optimizer rule."
        )
    }
}

impl DisplayAs for DynamicJoinSelectionExec {
    fn fmt_as(
        &self,
        t: DisplayFormatType,
        f: &mut std::fmt::Formatter,
    ) -> std::fmt::Result {
        match t {
            DisplayFormatType::Default | DisplayFormatType::Verbose => {
                let on = self
                    .on
                    .iter()
                    .map(|(c1, c2)| format!("({c1}, {c2})"))
                    .collect::<Vec<String>>()
                    .join(", ");
                let display_null_equality =
                    if self.null_equality == NullEquality::NullEqualsNull {
                        ", NullsEqual: true"
                    } else {
                        ""
                    };
                write!(
                    f,
                    "{}: plan_id={}, join_type={:?}, on=[{}]{}{}",
                    Self::static_name(),
                    self.plan_id,
                    self.join_type,
                    on,
                    self.filter.as_ref().map_or_else(
                        || "".to_string(),
                        |f| format!(", filter={}", f.expression())
                    ),
                    display_null_equality,
                )?;

                write!(
                    f,
                    " repartitioned={}",
                    matches!(self.selection_state, JoinInputState::Repartitioned)
                )?;

                Ok(())
            }
            DisplayFormatType::TreeRender => {
                let on = self
                    .on
                    .iter()
                    .map(|(c1, c2)| {
                        format!("({} = {})", fmt_sql(c1.as_ref()), fmt_sql(c2.as_ref()))
                    })
                    .collect::<Vec<String>>()
                    .join(", ");

                writeln!(f, "plan_id={}", self.plan_id)?;
                if self.join_type != JoinType::Inner {
                    writeln!(f, "join_type={:?}", self.join_type)?;
                }
                writeln!(f, "on={on}")?;

                if self.null_equality == NullEquality::NullEqualsNull {
                    writeln!(f, "NullsEqual: true")?;
                }

                writeln!(
                    f,
                    " repartitioned={}",
                    matches!(self.selection_state, JoinInputState::Repartitioned)
                )?;

                Ok(())
            }
        }
    }
}

pub enum JoinSelectionAction {
    /// Shuffle only the prospective build side, leaving the probe side
    /// untouched, and re-decide the join once the build side's *measured* size
    /// is known. See [`requires_build_staging`].
    ///
    /// The join itself is not carried: `SelectJoinRule` is already visiting the
    /// node this was resolved from, and staging changes none of its fields.
    StageBuildSide {
        /// Whether the build side is the join's right input rather than its
        /// left, which is exactly whether the resolver swapped the inputs.
        build_is_right: bool,
    },
    Repartition(Arc<DynamicJoinSelectionExec>),
    CollectLeft(Arc<HashJoinExec>),
    LateCollectLeft(Arc<HashJoinExec>),
    Hash(Arc<HashJoinExec>),
    Sort(Arc<SortMergeJoinExec>),
}

impl DynamicJoinSelectionExec {
    // this is required, as we do not want to implement
    // ExecutionPlan::required_input_distribution as other
    // datafusion planners are going to add repartition
    pub(crate) fn _required_input_distribution(&self) -> Vec<Distribution> {
        let (left_expr, right_expr) = self
            .on
            .iter()
            .map(|(l, r)| (Arc::clone(l), Arc::clone(r)))
            .unzip();
        vec![
            Distribution::KeyPartitioned(left_expr),
            Distribution::KeyPartitioned(right_expr),
        ]
    }

    pub(crate) fn to_actual_join(
        &self,
        config: &ConfigOptions,
    ) -> Result<JoinSelectionAction> {
        // `datafusion.optimizer.prefer_hash_join` is deliberately NOT consulted
        // here. It is a *planner* flag: DataFusion applies it when it builds the
        // physical plan, and `DelayJoinSelectionRule` then maps both
        // `HashJoinExec` and `SortMergeJoinExec` onto this node, so the flag has
        // already had its effect by the time AQE runs. Re-reading it would apply
        // the same preference twice, and — since the two `CollectLeft` arms below
        // produce a hash join unconditionally — it would only ever apply to one
        // of the three paths that can emit one. AQE picks its strategy from
        // runtime evidence instead: broadcast thresholds and the build-side fit
        // check.
        //
        // Both broadcast thresholds come from Ballista's own config so that a
        // single set of keys governs broadcast selection under both the static
        // planner (`maybe_promote_to_broadcast`) and AQE. A byte threshold of 0
        // disables broadcast promotion entirely, matching the static planner.
        // The row threshold is only consulted as a fallback when byte-size
        // statistics are absent.
        let bc = config
            .extensions
            .get::<BallistaConfig>()
            .cloned()
            .unwrap_or_default();
        let threshold_collect_left_join_bytes = bc.broadcast_join_threshold_bytes();
        let threshold_collect_left_join_rows = bc.broadcast_join_threshold_rows();
        let max_build_bytes = bc.hash_join_max_build_partition_bytes();

        // The resolver collects the smaller side onto the build (left) input,
        // swapping the inputs when the right side is the smaller one (the
        // `swap_inputs` calls in `SelectJoinRule`). Derive that decision once,
        // up front, so every size check below measures the input the executor
        // actually builds from rather than `self.left` unconditionally.
        // `supports_swap_join_order` is true when the *left* is the larger side,
        // so a swap moves the build onto `self.right`.
        // Null-aware anti joins are only valid as LeftAnti and therefore cannot
        // participate in the size-driven input swap.
        let swap_inputs = !self.null_aware
            && SelectJoinRule::supports_swap_join_order(
                self.left.as_ref(),
                self.right.as_ref(),
            )?;
        let build_side = if swap_inputs { &self.right } else { &self.left };

        let build_max_partition_bytes = max_per_partition_build_bytes(build_side);

        // Broadcast eligibility is a property of the build side alone, since that
        // is the side replicated to every probe task. Testing both sides and
        // OR-ing the results would promote the join whenever *either* side fit,
        // including when the swap then picks the other, over-threshold side to
        // broadcast.
        //
        // The `!= 0` guard sits here rather than inside
        // `supports_collect_by_thresholds`: that helper falls back to the row
        // check when the byte threshold is 0/absent, so gating at this level is
        // what makes a 0 threshold disable both the byte and row broadcast paths.
        let under_threshold = threshold_collect_left_join_bytes != 0
            && Self::supports_collect_by_thresholds(
                build_side.as_ref(),
                threshold_collect_left_join_bytes,
                threshold_collect_left_join_rows,
            );

        // A `CollectLeft` join broadcasts the build side to every probe task,
        // which is only correct for join types that never emit rows on behalf of
        // the build side. Evaluate that against the join type the resolver ends
        // up with, which the swap rewrites, and skip the broadcast when it would
        // be unsafe.
        let build_side_join_type = if swap_inputs {
            self.join_type.swap()
        } else {
            self.join_type
        };

        let stats_left = StatisticsContext::new()
            .compute(self.left.as_ref(), &StatisticsArgs::new())?;
        let stats_right = StatisticsContext::new()
            .compute(self.right.as_ref(), &StatisticsArgs::new())?;
        let (build_stats, probe_stats) = if swap_inputs {
            (&stats_right, &stats_left)
        } else {
            (&stats_left, &stats_right)
        };
        let build_size_known = match build_stats.total_byte_size.get_value() {
            Some(bytes) => *bytes != 0,
            None => build_stats
                .num_rows
                .get_value()
                .is_some_and(|rows| *rows != 0),
        };

        // A null-aware anti join must collect its build side and run its probe
        // side in one task. Reject a disabled broadcast or a build side known
        // to exceed the threshold. Unknown sizes are allowed because file scans
        // commonly lose exact statistics before AQE first resolves the join.
        if self.null_aware
            && (threshold_collect_left_join_bytes == 0
                || (build_size_known && !under_threshold))
        {
            return plan_err!(
                "Null-aware anti join requires single-task execution, but its build side does not fit ballista.optimizer.broadcast_join_threshold_bytes ({threshold_collect_left_join_bytes} bytes)"
            );
        }

        let partition_mode = if self.null_aware
            || (under_threshold && collect_left_broadcast_safe(build_side_join_type))
        {
            PartitionMode::CollectLeft
        } else {
            PartitionMode::Partitioned
        };

        // Repartitioning exists to give the resolver measured statistics. When
        // the inputs are already co-partitioned there is nothing to wait for,
        // so resolve now instead of inserting an exchange that reshuffles data
        // already in the right place (TPC-H q18 moved 60M rows twice).
        let selection_state = if self.selection_state == JoinInputState::Repartitioned
            || self.inputs_already_partitioned(config)
        {
            JoinInputState::Repartitioned
        } else {
            JoinInputState::Unknown
        };

        let action = match (&selection_state, partition_mode) {
            (JoinInputState::Unknown, PartitionMode::CollectLeft) => self
                .to_hash_join(PartitionMode::CollectLeft)
                .map(JoinSelectionAction::CollectLeft),
            // Null-aware anti joins require single-task `CollectLeft` even
            // though both sides are already shuffled.
            (JoinInputState::Repartitioned, PartitionMode::CollectLeft)
                if self.null_aware =>
            {
                self.to_hash_join(PartitionMode::CollectLeft)
                    .map(JoinSelectionAction::LateCollectLeft)
            }
            // Both inputs are already shuffled, so broadcasting would pay for
            // the shuffle and the broadcast. Decide hash-vs-sort on build fit.
            (
                JoinInputState::Repartitioned,
                PartitionMode::Partitioned | PartitionMode::CollectLeft,
            ) if hash_build_fits(max_build_bytes, build_max_partition_bytes) => self
                .to_hash_join(PartitionMode::Partitioned)
                .map(JoinSelectionAction::Hash),
            (
                JoinInputState::Repartitioned,
                PartitionMode::Partitioned | PartitionMode::CollectLeft,
            ) => self.to_sort_merge_join().map(JoinSelectionAction::Sort),
            (JoinInputState::Unknown, PartitionMode::Partitioned) => {
                // Staging fires at most once per join: once it does one child is
                // an `ExchangeExec`, and this guard never passes again.
                if bc.stage_build_side_enabled()
                    && !self.left.is::<ExchangeExec>()
                    && !self.right.is::<ExchangeExec>()
                    && requires_build_staging(
                        build_stats,
                        probe_stats,
                        build_side_join_type,
                        threshold_collect_left_join_bytes,
                        bc.stage_build_side_min_probe_ratio(),
                        bc.stage_build_side_max_estimate_multiple(),
                    )
                {
                    Ok(JoinSelectionAction::StageBuildSide {
                        build_is_right: swap_inputs,
                    })
                } else {
                    Ok(JoinSelectionAction::Repartition(Arc::new(
                        self.to_partitioned(),
                    )))
                }
            }
            // this method calculates partition mode, and at the moment it
            // can't calculate it as PartitionMode::Auto
            (_, PartitionMode::Auto) => internal_err!("this case should not be possible"),
        }?;

        let action_label = match &action {
            JoinSelectionAction::StageBuildSide { .. } => "StageBuildSide",
            JoinSelectionAction::Repartition(_) => "Repartition",
            JoinSelectionAction::CollectLeft(_) => "CollectLeft(broadcast)",
            JoinSelectionAction::LateCollectLeft(_) => "LateCollectLeft(broadcast)",
            JoinSelectionAction::Hash(_) => "Hash(Partitioned)",
            JoinSelectionAction::Sort(_) => "SortMerge(Partitioned)",
        };

        debug!(
            "AQE join decision plan_id={} action={} partition_mode={:?} build_side={} \
             under_threshold={} \
             build_max_partition_bytes={:?} hash_join_max_build_partition_bytes={} \
             left=(rows={:?}, bytes={:?}) right=(rows={:?}, bytes={:?}) \
             byte_threshold={} row_threshold={}",
            self.plan_id,
            action_label,
            partition_mode,
            if swap_inputs { "right" } else { "left" },
            under_threshold,
            build_max_partition_bytes,
            max_build_bytes,
            stats_left.num_rows,
            stats_left.total_byte_size,
            stats_right.num_rows,
            stats_right.total_byte_size,
            threshold_collect_left_join_bytes,
            threshold_collect_left_join_rows,
        );

        Ok(action)
    }

    pub(crate) fn to_hash_join(
        &self,
        partition_mode: PartitionMode,
    ) -> Result<Arc<HashJoinExec>> {
        let hash_join_exec = HashJoinExecBuilder::new(
            self.left.clone(),
            self.right.clone(),
            self.on.clone(),
            self.join_type,
        )
        .with_filter(self.filter.clone())
        .with_projection(self.projection.clone())
        .with_partition_mode(partition_mode)
        .with_null_equality(self.null_equality)
        .with_null_aware(self.null_aware)
        .build()?;

        Ok(Arc::new(hash_join_exec))
    }

    pub fn to_sort_merge_join(&self) -> Result<Arc<SortMergeJoinExec>> {
        //let null_equals_null = self.null_equality == NullEquality::NullEqualsNull;
        let sort_options = vec![SortOptions::default(); self.on.len()];
        Ok(Arc::new(SortMergeJoinExec::try_new(
            Arc::clone(&self.left),
            Arc::clone(&self.right),
            self.on.clone(),
            self.filter.clone(),
            self.join_type,
            sort_options,
            self.null_equality,
        )?))
    }
    // this method has been taken from datafusion
    // join selection optimizer rule
    fn supports_collect_by_thresholds(
        plan: &dyn ExecutionPlan,
        threshold_byte_size: usize,
        threshold_num_rows: usize,
    ) -> bool {
        // Currently we do not trust the 0 value from stats, due to stats collection might have bug
        // TODO check the logic in datasource::get_statistics_with_limit()
        let Ok(stats) = StatisticsContext::new().compute(plan, &StatisticsArgs::new())
        else {
            return false;
        };

        if let Some(byte_size) = stats.total_byte_size.get_value() {
            return *byte_size != 0 && *byte_size < threshold_byte_size;
        }

        // `total_byte_size` is unknown, which is the common case rather than the
        // exception: DataFusion discards it on every join, and rebuilding it in
        // `Statistics::calculate_total_byte_size` only works when every column has
        // a fixed width, so one `Utf8` column loses it for good.
        //
        // A row count on its own says nothing about how much data a broadcast
        // would replicate to every probe task, so estimate the size and hold it
        // to the same byte threshold. The row threshold is kept as an additional
        // ceiling, so this can only ever reject a broadcast the row rule would
        // have allowed, never introduce a new one.
        let Some(num_rows) = stats.num_rows.get_value().copied() else {
            return false;
        };

        if num_rows == 0 || num_rows >= threshold_num_rows {
            return false;
        }

        estimate_output_byte_size(&plan.schema(), num_rows, &stats.column_statistics)
            .is_some_and(|estimated| estimated < threshold_byte_size)
    }

    /// Whether both inputs already satisfy the distribution this join needs.
    ///
    /// An equi-join leaves its output partitioned on both sides of every join
    /// key, so a downstream join on the other key is already co-partitioned.
    /// `satisfaction` consults equivalence classes and sees that.
    fn inputs_already_partitioned(&self, config: &ConfigOptions) -> bool {
        let partitions = config.execution.target_partitions;
        self._required_input_distribution()
            .iter()
            .zip([&self.left, &self.right])
            .all(|(required, input)| {
                let current = input.output_partitioning();
                current.partition_count() == partitions
                    && current.satisfaction(
                        required,
                        input.equivalence_properties(),
                        false,
                    ) == datafusion::physical_expr::PartitioningSatisfaction::Exact
            })
    }

    pub(crate) fn to_partitioned(&self) -> Self {
        Self {
            left: self.left.clone(),
            right: self.right.clone(),
            on: self.on.clone(),
            filter: self.filter.clone(),
            join_type: self.join_type,
            projection: self.projection.clone(),
            null_equality: self.null_equality,
            properties: self.properties.clone(),
            selection_state: JoinInputState::Repartitioned,
            null_aware: self.null_aware,
            plan_id: self.plan_id,
        }
    }

    pub(crate) fn from_hash_join(
        hash_join: &HashJoinExec,
        plan_id: usize,
    ) -> Result<Arc<DynamicJoinSelectionExec>> {
        Ok(Arc::new(DynamicJoinSelectionExec {
            left: Arc::clone(hash_join.left()),
            right: Arc::clone(hash_join.right()),
            on: hash_join.on().to_vec(),
            filter: hash_join.filter().cloned(),
            join_type: *hash_join.join_type(),
            projection: hash_join.projection.as_deref().map(|p| p.to_vec()),
            null_equality: hash_join.null_equality,
            properties: Arc::clone(hash_join.properties()),
            selection_state: JoinInputState::Unknown,
            null_aware: hash_join.null_aware,
            plan_id,
        }))
    }
    /// will return true if all upstream [ExchangeExec] has been resolved
    /// and all other [DynamicJoinSelectionExec].
    ///
    /// Method will short circuit on first resolved [ExchangeExec],
    /// as there must not be any unresolved [ExchangeExec], in any if
    /// its children.
    pub(crate) fn upstream_resolved(&self) -> bool {
        fn has_join_or_unresolved_exchange(plan: &Arc<dyn ExecutionPlan>) -> bool {
            if let Some(exchange) = plan.downcast_ref::<ExchangeExec>() {
                // this should be fine, once we find first resolved
                // exchange it should not have any unresolved shuffles later
                // nor dynamic joins
                return !exchange.shuffle_created();
            };

            plan.downcast_ref::<DynamicJoinSelectionExec>().is_some()
                || plan
                    .children()
                    .iter()
                    .any(|c| has_join_or_unresolved_exchange(c))
        }

        let left_has_join = has_join_or_unresolved_exchange(&self.left);
        let right_has_join = has_join_or_unresolved_exchange(&self.right);

        !(left_has_join || right_has_join)
    }

    pub(crate) fn from_sort_join(
        merge_join: &SortMergeJoinExec,
        plan_id: usize,
    ) -> Result<Arc<DynamicJoinSelectionExec>> {
        Ok(Arc::new(DynamicJoinSelectionExec {
            left: Arc::clone(merge_join.left()),
            right: Arc::clone(merge_join.right()),
            on: merge_join.on().to_vec(),
            filter: merge_join.filter().clone(),
            join_type: merge_join.join_type(),
            projection: None,
            null_equality: merge_join.null_equality,
            properties: Arc::clone(merge_join.properties()),
            selection_state: JoinInputState::Unknown,
            null_aware: false,
            plan_id,
        }))
    }
}

/// Whether to shuffle only the prospective build side now and re-decide the
/// join once its measured size is known, rather than shuffling both sides.
///
/// [`JoinSelectionAction::Repartition`] shuffles both inputs at once, which for
/// a fact-table probe side commits to the single most expensive stage in the
/// query *before* any measurement exists. When the build side's size is only a
/// guess, that guess is the sole reason the join is not a broadcast, and the
/// probe side dwarfs it, one cheap stage buys an exact number and often flips
/// the join to `CollectLeft`, leaving the probe side never shuffled at all.
///
/// Staging serialises two shuffles that would otherwise run concurrently, so the
/// deferral costs at most the *smaller* side's runtime; `min_probe_ratio` is
/// what bounds the cost of being wrong.
///
/// `max_estimate_multiple` is measured evidence rather than a round number:
/// TPC-H q8's filtered `part` scan estimates roughly 10x over budget, because
/// the planner falls back to `default_filter_selectivity` for `p_type = '...'`,
/// and measures three orders of magnitude under it. A raw fact-table scan sits
/// far beyond this multiple and is shuffled without the extra round trip.
fn requires_build_staging(
    build_stats: &Statistics,
    probe_stats: &Statistics,
    build_side_join_type: JoinType,
    broadcast_threshold_bytes: usize,
    min_probe_ratio: usize,
    max_estimate_multiple: usize,
) -> bool {
    // Measuring can only change the decision if `CollectLeft` is reachable at
    // all, and that is a property of the post-swap join type alone: no size
    // makes a `Full`, or a left-sided semi/anti/outer, join broadcastable.
    if !collect_left_broadcast_safe(build_side_join_type) {
        return false;
    }

    if broadcast_threshold_bytes == 0 {
        return false;
    }

    let Precision::Inexact(build_bytes) = build_stats.total_byte_size else {
        return false;
    };

    if build_bytes < broadcast_threshold_bytes {
        return false;
    }

    if build_bytes > broadcast_threshold_bytes.saturating_mul(max_estimate_multiple) {
        return false;
    }

    // A missing probe-side size declines: with nothing to compare against there
    // is no evidence the round trip pays off.
    let Some(probe_bytes) = probe_stats.total_byte_size.get_value().copied() else {
        return false;
    };

    probe_bytes >= build_bytes.saturating_mul(min_probe_ratio)
}

/// Whether the build (left) side of a `Partitioned` hash join fits the
/// per-slot memory budget. A `max_build_bytes` of 0 disables the check (the
/// join always uses hash join); an unknown build size (`build_max_partition_bytes
/// == None`) is treated as fitting too, since there is no evidence to force a
/// fallback.
fn hash_build_fits(
    max_build_bytes: usize,
    build_max_partition_bytes: Option<usize>,
) -> bool {
    if max_build_bytes == 0 {
        return true;
    }
    match build_max_partition_bytes {
        Some(bytes) => bytes <= max_build_bytes,
        None => true, // unknown size → don't force a fallback
    }
}

/// Skew-aware fit check for the build side of a `Partitioned` hash join: the
/// MAX (not average) per-partition materialized byte size. A single
/// oversized partition is enough to blow the per-slot memory pool even when
/// every other partition — and thus the average — is small; this is exactly
/// the shape of the Q18 OOM, so an average would have hidden the failure
/// mode this check exists to catch.
///
/// `build` must be the *post-swap* build input — `self.right` when
/// `SelectJoinRule::supports_swap_join_order` holds, `self.left` otherwise —
/// since that is the side the build task materializes. Measuring `self.left`
/// unconditionally validates a partition the build may never consume.
///
/// Reachability: at the one call site this feeds — the
/// `(JoinInputState::Repartitioned, PartitionMode::Partitioned)` arm of
/// `to_actual_join` — both children are `ExchangeExec`s that `SelectJoinRule`
/// inserted while resolving the prior `Repartition` action (see
/// `JoinSelectionAction::Repartition` in `join_selection.rs`), and
/// `upstream_resolved()` guarantees those shuffles have already finished. So
/// the actual, materialized per-partition byte sizes that
/// `CoalescePartitionsRule` reads (`ExchangeExec::shuffle_partitions()` ->
/// `PartitionLocation::partition_stats::num_bytes()`) are reachable here too,
/// and are used directly rather than falling back to an average.
///
/// Known gap: the sizes are pre-coalesce. `CoalescePartitionsRule` groups
/// neighboring upstream partitions, so a coalesced build partition can exceed
/// the budget this check passed. The grouping is not knowable here — the rule
/// fires later, per stage, in `AdaptivePlanner::actionable_stages()`, after
/// `SelectJoinRule` has already run inside `replan_stages()` — so a
/// coalesce-aware check would have to re-derive the bin-pack over a leaf set
/// that differs from the rule's own for chained joins. Left as-is:
/// `ballista.planner.coalesce.enabled` is `false` by default, so the gap is
/// inert unless coalescing is explicitly turned on.
///
/// Returns `None` (callers treat this as "fits", not as a forced fallback)
/// when `build` isn't an `ExchangeExec`, its shuffle hasn't resolved yet, or
/// the resolved shuffle has no partitions at all. A resolved shuffle whose
/// partitions are missing byte-size stats is not `None`: each such partition
/// contributes 0 bytes, so the result is `Some(0)` (or higher, if other
/// partitions do report sizes) — still small enough to be treated as fitting.
fn max_per_partition_build_bytes(build: &Arc<dyn ExecutionPlan>) -> Option<usize> {
    let exchange = build.downcast_ref::<ExchangeExec>()?;
    let partitions = exchange.shuffle_partitions()?;
    partitions
        .iter()
        .map(|locations| {
            locations
                .iter()
                .filter_map(|location| location.partition_stats.num_bytes())
                .sum::<u64>()
        })
        .max()
        .map(|bytes| bytes as usize)
}

/// Assumed width of a variable-width value when statistics carry no size for it.
/// Mirrors Spark's `StringType.defaultSize`, which serves the same purpose in
/// `EstimationUtils.getSizePerRow`.
const DEFAULT_VARIABLE_WIDTH_BYTES: usize = 20;

/// Assumed width of a binary value with no size in statistics. Mirrors Spark's
/// `BinaryType.defaultSize`.
const DEFAULT_BINARY_WIDTH_BYTES: usize = 100;

/// Estimates the size in bytes of `num_rows` rows of `schema`.
///
/// Used only when `Statistics::total_byte_size` is `Absent`. Each column
/// contributes the best figure available: its own `byte_size` statistic (which
/// is a total for the column's output, already scaled for filters and limits),
/// otherwise its fixed width times the row count, otherwise a default width.
///
/// Returns `None` if the estimate overflows, so the caller declines to broadcast
/// rather than wrapping around to a small number.
fn estimate_output_byte_size(
    schema: &Schema,
    num_rows: usize,
    column_statistics: &[ColumnStatistics],
) -> Option<usize> {
    schema
        .fields()
        .iter()
        .enumerate()
        .try_fold(0usize, |total, (idx, field)| {
            let column_bytes = match column_statistics
                .get(idx)
                .and_then(|c| c.byte_size.get_value().copied())
            {
                Some(byte_size) => byte_size,
                None => num_rows.checked_mul(estimated_value_width(field.data_type()))?,
            };
            total.checked_add(column_bytes)
        })
}

/// Estimated width of a single value of `data_type`.
///
/// `DataType::primitive_width` covers the fixed-width types. It returns `None`
/// for `Boolean` and for the variable-width types, which are the cases handled
/// here.
fn estimated_value_width(data_type: &DataType) -> usize {
    if let Some(width) = data_type.primitive_width() {
        return width;
    }

    match data_type {
        DataType::Boolean => 1,
        DataType::Binary
        | DataType::LargeBinary
        | DataType::BinaryView
        | DataType::FixedSizeBinary(_) => DEFAULT_BINARY_WIDTH_BYTES,
        _ => DEFAULT_VARIABLE_WIDTH_BYTES,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::aqe::execution_plan::ExchangeExec;
    use ballista_core::serde::scheduler::{
        ExecutorMetadata, ExecutorOperatingSystemSpecification, ExecutorSpecification,
        PartitionId, PartitionLocation, PartitionStats,
    };
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    use datafusion::config::ExtensionOptions;
    use datafusion::physical_plan::Partitioning;
    use datafusion::physical_plan::displayable;
    use datafusion::physical_plan::empty::EmptyExec;
    use datafusion::physical_plan::expressions::Column;
    use datafusion::physical_plan::test::exec::StatisticsExec;

    const BYTE_THRESHOLD: usize = 10 * 1024 * 1024;
    const ROW_THRESHOLD: usize = 1_000_000;
    const MB: usize = 1024 * 1024;

    fn test_schema() -> Arc<Schema> {
        Arc::new(Schema::new(vec![Field::new("x", DataType::Int32, false)]))
    }

    /// A plan reporting `num_rows` with no `total_byte_size` and no per-column
    /// size, which is what a join output looks like.
    fn sizeless_stats_exec(
        num_rows: usize,
        fields: Vec<Field>,
    ) -> Arc<dyn ExecutionPlan> {
        let column_statistics = vec![ColumnStatistics::new_unknown(); fields.len()];
        Arc::new(StatisticsExec::new(
            Statistics {
                num_rows: Precision::Inexact(num_rows),
                total_byte_size: Precision::Absent,
                column_statistics,
            },
            Schema::new(fields),
        ))
    }

    fn supports_collect(plan: &Arc<dyn ExecutionPlan>) -> bool {
        DynamicJoinSelectionExec::supports_collect_by_thresholds(
            plan.as_ref(),
            BYTE_THRESHOLD,
            ROW_THRESHOLD,
        )
    }

    // A build side under the row threshold but far over the byte threshold must
    // not be broadcast. 900k rows of a string column is roughly 18 MB by the
    // default width, which every probe task would otherwise have to hold.
    #[test]
    fn does_not_collect_wide_rows_when_byte_size_is_unknown() {
        let plan = sizeless_stats_exec(
            900_000,
            vec![
                Field::new("name", DataType::Utf8, false),
                Field::new("address", DataType::Utf8, false),
            ],
        );

        assert!(!supports_collect(&plan));
    }

    // The estimate must not reject a build side that really is small: the same
    // row count over narrow fixed-width columns stays well inside the threshold.
    #[test]
    fn collects_narrow_rows_when_byte_size_is_unknown() {
        let plan = sizeless_stats_exec(
            100_000,
            vec![
                Field::new("a", DataType::Int32, false),
                Field::new("b", DataType::Int32, false),
            ],
        );

        assert!(supports_collect(&plan));
    }

    // A per-column `byte_size` is a measured total for that column, so it should
    // be preferred over the default width. Here it proves the column is small
    // even though the type is variable-width.
    #[test]
    fn prefers_column_byte_size_over_default_width() {
        let plan: Arc<dyn ExecutionPlan> = Arc::new(StatisticsExec::new(
            Statistics {
                num_rows: Precision::Inexact(900_000),
                total_byte_size: Precision::Absent,
                column_statistics: vec![ColumnStatistics {
                    byte_size: Precision::Exact(1024),
                    ..ColumnStatistics::new_unknown()
                }],
            },
            Schema::new(vec![Field::new("name", DataType::Utf8, false)]),
        ));

        assert!(supports_collect(&plan));
    }

    // A known `total_byte_size` is authoritative and must still short-circuit the
    // estimate, in both directions.
    #[test]
    fn known_total_byte_size_still_decides() {
        let over: Arc<dyn ExecutionPlan> = Arc::new(StatisticsExec::new(
            Statistics {
                num_rows: Precision::Inexact(10),
                total_byte_size: Precision::Exact(BYTE_THRESHOLD + 1),
                column_statistics: vec![ColumnStatistics::new_unknown()],
            },
            Schema::new(vec![Field::new("x", DataType::Int32, false)]),
        ));
        assert!(!supports_collect(&over));

        let under: Arc<dyn ExecutionPlan> = Arc::new(StatisticsExec::new(
            Statistics {
                num_rows: Precision::Inexact(10),
                total_byte_size: Precision::Exact(64),
                column_statistics: vec![ColumnStatistics::new_unknown()],
            },
            Schema::new(vec![Field::new("x", DataType::Int32, false)]),
        ));
        assert!(supports_collect(&under));
    }

    // The row threshold is retained as a ceiling, so a row count at or above it
    // is rejected without regard to how narrow the rows are.
    #[test]
    fn row_threshold_remains_a_ceiling() {
        let plan = sizeless_stats_exec(
            ROW_THRESHOLD,
            vec![Field::new("a", DataType::Int8, false)],
        );

        assert!(!supports_collect(&plan));
    }

    // Statistics with neither a size nor a row count carry no evidence that the
    // side is small.
    #[test]
    fn does_not_collect_without_any_statistics() {
        let plan: Arc<dyn ExecutionPlan> = Arc::new(StatisticsExec::new(
            Statistics {
                num_rows: Precision::Absent,
                total_byte_size: Precision::Absent,
                column_statistics: vec![ColumnStatistics::new_unknown()],
            },
            Schema::new(vec![Field::new("x", DataType::Int32, false)]),
        ));

        assert!(!supports_collect(&plan));
    }

    // Zero rows is treated as absent rather than as a very small side, matching
    // the existing distrust of a zero in statistics.
    #[test]
    fn does_not_collect_on_zero_rows() {
        let plan = sizeless_stats_exec(0, vec![Field::new("x", DataType::Int32, false)]);

        assert!(!supports_collect(&plan));
    }

    /// A single-column `Int32` source reporting exactly the statistics given.
    /// The wrappers around it differ only in how `total_byte_size` is filled.
    fn stats_exec_with(
        num_rows: Precision<usize>,
        total_byte_size: Precision<usize>,
    ) -> Arc<dyn ExecutionPlan> {
        Arc::new(StatisticsExec::new(
            Statistics {
                num_rows,
                total_byte_size,
                column_statistics: vec![ColumnStatistics::new_unknown()],
            },
            Schema::new(vec![Field::new("k", DataType::Int32, false)]),
        ))
    }

    /// A source reporting `num_rows` rows at 16 bytes each.
    fn stats_exec(num_rows: usize) -> Arc<dyn ExecutionPlan> {
        stats_exec_with(
            Precision::Inexact(num_rows),
            Precision::Inexact(num_rows * 16),
        )
    }

    /// A source that reports a row count but no byte-size statistic, so the
    /// resolver must fall back to the row-count broadcast threshold.
    fn stats_exec_rows_only(num_rows: usize) -> Arc<dyn ExecutionPlan> {
        stats_exec_with(Precision::Inexact(num_rows), Precision::Absent)
    }

    /// Core driver: runs the join-strategy decision for the given children with
    /// explicit Ballista broadcast thresholds and build-side staging setting.
    fn run_to_actual_join(
        left: Arc<dyn ExecutionPlan>,
        right: Arc<dyn ExecutionPlan>,
        join_type: JoinType,
        prefer_hash_join: bool,
        broadcast_threshold_bytes: usize,
        broadcast_threshold_rows: usize,
        stage_build_side: bool,
    ) -> JoinSelectionAction {
        let on: JoinOn =
            vec![(Arc::new(Column::new("k", 0)), Arc::new(Column::new("k", 0)))];
        let dj = DynamicJoinSelectionExec {
            properties: Arc::clone(left.properties()),
            left,
            right,
            on,
            filter: None,
            join_type,
            projection: None,
            null_equality: NullEquality::NullEqualsNothing,
            selection_state: JoinInputState::Unknown,
            null_aware: false,
            plan_id: 0,
        };
        let mut config = ConfigOptions::new();
        config.optimizer.prefer_hash_join = prefer_hash_join;
        let mut bc = BallistaConfig::default();
        bc.set(
            "optimizer.broadcast_join_threshold_bytes",
            &broadcast_threshold_bytes.to_string(),
        )
        .unwrap();
        bc.set(
            "optimizer.broadcast_join_threshold_rows",
            &broadcast_threshold_rows.to_string(),
        )
        .unwrap();
        bc.set("optimizer.stage_build_side", &stage_build_side.to_string())
            .unwrap();
        config.extensions.insert(bc);
        dj.to_actual_join(&config).unwrap()
    }

    /// Run the resolver's join-strategy decision for `join_type` with `left_rows`
    /// and `right_rows` on the two sides, both small enough to be collectable.
    fn actual_join_for(
        join_type: JoinType,
        left_rows: usize,
        right_rows: usize,
        prefer_hash_join: bool,
    ) -> JoinSelectionAction {
        // 10 MiB is large enough for the tiny StatisticsExec sides below to be
        // collectable, matching the default broadcast threshold.
        actual_join_with_threshold(
            join_type,
            left_rows,
            right_rows,
            prefer_hash_join,
            10 * 1024 * 1024,
        )
    }

    /// Same as [`actual_join_for`] but with an explicit
    /// `broadcast_join_threshold_bytes`, so tests can prove the Ballista config
    /// drives the byte cutoff (0 disables broadcast promotion).
    fn actual_join_with_threshold(
        join_type: JoinType,
        left_rows: usize,
        right_rows: usize,
        prefer_hash_join: bool,
        broadcast_threshold_bytes: usize,
    ) -> JoinSelectionAction {
        run_to_actual_join(
            stats_exec(left_rows),
            stats_exec(right_rows),
            join_type,
            prefer_hash_join,
            broadcast_threshold_bytes,
            // Large row threshold: byte stats are present here, so the row path
            // is never consulted; keep it out of the way of the byte decision.
            1_000_000,
            // The shipped default. These sides are far too small to stage, so
            // it only matters that the setting matches production.
            true,
        )
    }

    fn is_collected(action: &JoinSelectionAction) -> bool {
        matches!(
            action,
            JoinSelectionAction::CollectLeft(_) | JoinSelectionAction::LateCollectLeft(_)
        )
    }

    // With equal-sized sides (no swap) the resolver must collect a small build
    // side into a CollectLeft broadcast only for join types whose output is
    // driven by the probe side; everything that emits build-side rows must be
    // repartitioned instead. `prefer_hash_join` only selects the repartitioned
    // fallback (hash vs sort-merge), so the broadcast-safety decision must be
    // identical under both settings.
    #[test]
    fn to_actual_join_collects_only_broadcast_safe_join_types() {
        for prefer_hash_join in [true, false] {
            for join_type in [
                JoinType::Inner,
                JoinType::Left,
                JoinType::Right,
                JoinType::Full,
                JoinType::LeftSemi,
                JoinType::RightSemi,
                JoinType::LeftAnti,
                JoinType::RightAnti,
                JoinType::LeftMark,
                JoinType::RightMark,
            ] {
                let action = actual_join_for(join_type, 100, 100, prefer_hash_join);
                assert_eq!(
                    is_collected(&action),
                    collect_left_broadcast_safe(join_type),
                    "join_type {join_type:?} (prefer_hash_join={prefer_hash_join}): collected={}, expected safe={}",
                    is_collected(&action),
                    collect_left_broadcast_safe(join_type),
                );
            }
        }
    }

    // Safety is evaluated on the join type *after* the build-side swap. A LEFT
    // join with the smaller side on the right swaps to a (safe) RIGHT join and is
    // collected; a RIGHT join with the smaller side on the right swaps to an
    // (unsafe) LEFT join and must be repartitioned.
    #[test]
    fn to_actual_join_uses_post_swap_join_type() {
        assert!(
            is_collected(&actual_join_for(JoinType::Left, 1000, 10, true)),
            "LEFT with small right swaps to a safe RIGHT join and should collect"
        );
        assert!(
            !is_collected(&actual_join_for(JoinType::Right, 1000, 10, true)),
            "RIGHT with small right swaps to an unsafe LEFT join and must repartition"
        );
    }

    // The byte cutoff comes from `ballista.optimizer.broadcast_join_threshold_bytes`,
    // not DataFusion's `hash_join_single_partition_threshold`. `stats_exec(n)`
    // reports `n * 16` bytes, so the smaller side here is 1600 bytes. A threshold
    // above it collects; a threshold below it repartitions.
    #[test]
    fn broadcast_threshold_bytes_drives_collect_decision() {
        // smaller (left) side = 100 * 16 = 1600 bytes, larger = 16000 bytes
        assert!(
            is_collected(&actual_join_with_threshold(
                JoinType::Inner,
                100,
                1000,
                true,
                2000,
            )),
            "smaller side (1600 B) is under a 2000 B threshold and must collect"
        );
        assert!(
            !is_collected(&actual_join_with_threshold(
                JoinType::Inner,
                100,
                1000,
                true,
                1000,
            )),
            "neither side is under a 1000 B threshold, so the join must repartition"
        );
    }

    // When byte-size statistics are absent, the decision falls back to the
    // Ballista row-count threshold (`broadcast_join_threshold_rows`), not
    // DataFusion's `hash_join_single_partition_threshold_rows`.
    #[test]
    fn broadcast_threshold_rows_drives_fallback_decision() {
        // Byte-size is Absent on both sides, so only the row threshold applies.
        // Smaller side = 100 rows. A generous byte threshold keeps the byte
        // guard open so the row fallback is what decides.
        assert!(
            is_collected(&run_to_actual_join(
                stats_exec_rows_only(100),
                stats_exec_rows_only(1000),
                JoinType::Inner,
                true,
                10 * 1024 * 1024,
                200,
                true,
            )),
            "smaller side (100 rows) is under a 200-row threshold and must collect"
        );
        assert!(
            !is_collected(&run_to_actual_join(
                stats_exec_rows_only(100),
                stats_exec_rows_only(1000),
                JoinType::Inner,
                true,
                10 * 1024 * 1024,
                50,
                true,
            )),
            "neither side is under a 50-row threshold, so the join must repartition"
        );
    }

    // Broadcast eligibility must be judged on the side that actually becomes the
    // build input, not OR-ed across both. Byte-size statistics are absent on both
    // sides here, so the swap decision falls back to row count: the left has
    // fewer rows and therefore stays the build side. It is also by far the wider
    // side — roughly 40 KB estimated against the right's 4 KB — so broadcasting
    // it replicates more bytes to every probe task than the threshold intended,
    // even though the right side on its own passes the check.
    #[test]
    fn broadcast_eligibility_follows_the_build_side() {
        let mut left_fields = vec![Field::new("k", DataType::Int32, false)];
        left_fields.extend(
            (0..20).map(|i| Field::new(format!("wide{i}"), DataType::Utf8, false)),
        );
        // 100 rows * (4 B key + 20 columns * 20 B default width) ≈ 40 KB
        let left = sizeless_stats_exec(100, left_fields);
        // 1000 rows * 4 B ≈ 4 KB — under the threshold on its own
        let right =
            sizeless_stats_exec(1000, vec![Field::new("k", DataType::Int32, false)]);

        let action = run_to_actual_join(
            left,
            right,
            JoinType::Inner,
            true,
            // Between the right side's ~4 KB and the left side's ~40 KB.
            10_000,
            // Row ceiling well clear of both sides, so bytes decide.
            1_000_000,
            true,
        );

        assert!(
            !is_collected(&action),
            "the left side is the build (fewer rows) and is over the byte threshold, \
             so the join must repartition rather than broadcast it"
        );
    }

    // A threshold of 0 disables broadcast promotion entirely, matching the static
    // planner, even for a side small enough to collect under any positive cutoff.
    #[test]
    fn zero_broadcast_threshold_disables_collect() {
        assert!(
            !is_collected(&actual_join_with_threshold(JoinType::Inner, 1, 1, true, 0,)),
            "broadcast_join_threshold_bytes=0 must disable CollectLeft promotion"
        );
    }

    /// A source reporting `total_byte_size` with the given precision, shaped
    /// like one side of the TPC-H q8 `part`/`lineitem` join.
    fn sized_stats_exec(total_byte_size: Precision<usize>) -> Arc<dyn ExecutionPlan> {
        stats_exec_with(Precision::Inexact(1_000), total_byte_size)
    }

    /// The q8 shape: a filtered dimension scan whose size is a guess sitting
    /// just over the broadcast budget, against a fact table that dwarfs it.
    const STAGE_THRESHOLD: usize = 10 * MB;
    const GUESSED_BUILD_BYTES: usize = 100 * MB;
    const FACT_PROBE_BYTES: usize = 2000 * MB;

    /// Statistics carrying only a byte size, which is all
    /// [`requires_build_staging`] reads off each side.
    fn byte_stats(total_byte_size: Precision<usize>) -> Statistics {
        Statistics {
            num_rows: Precision::Inexact(1_000),
            total_byte_size,
            column_statistics: vec![],
        }
    }

    /// [`requires_build_staging`] for an `Inner` join under the shipped ratio
    /// and multiple. Reading those from `BallistaConfig::default()` rather than
    /// restating them means these tests pin the values a deployment runs with.
    fn stages(
        build: Precision<usize>,
        probe: Precision<usize>,
        broadcast_threshold_bytes: usize,
    ) -> bool {
        let bc = BallistaConfig::default();
        requires_build_staging(
            &byte_stats(build),
            &byte_stats(probe),
            JoinType::Inner,
            broadcast_threshold_bytes,
            bc.stage_build_side_min_probe_ratio(),
            bc.stage_build_side_max_estimate_multiple(),
        )
    }

    // Staging turns on a build side whose size is a *guess* over the budget,
    // against a probe side big enough that deferring its shuffle repays the
    // round trip. Each negative below removes exactly one of those properties.
    #[test]
    fn stages_only_a_guessed_build_side_against_a_much_larger_probe() {
        let ratio = BallistaConfig::default().stage_build_side_min_probe_ratio();

        assert!(
            stages(
                Precision::Inexact(GUESSED_BUILD_BYTES),
                Precision::Exact(FACT_PROBE_BYTES),
                STAGE_THRESHOLD
            ),
            "a guessed-large build side against a fact-table probe must stage"
        );
        assert!(
            !stages(
                Precision::Exact(GUESSED_BUILD_BYTES),
                Precision::Exact(FACT_PROBE_BYTES),
                STAGE_THRESHOLD
            ),
            "an exact size over budget is a fact, with nothing left to measure"
        );
        assert!(
            !stages(
                Precision::Inexact(GUESSED_BUILD_BYTES),
                Precision::Exact(GUESSED_BUILD_BYTES * (ratio - 1)),
                STAGE_THRESHOLD
            ),
            "a comparable probe side does not repay serialising the shuffles"
        );
        assert!(
            !stages(
                Precision::Inexact(GUESSED_BUILD_BYTES),
                Precision::Absent,
                STAGE_THRESHOLD
            ),
            "a missing probe size is no evidence the round trip pays off"
        );
    }

    // The broadcast budget bounds staging at both ends, and `0` disables it
    // along with the promotion it exists to reach.
    #[test]
    fn staging_is_bounded_by_the_broadcast_budget() {
        let multiple = BallistaConfig::default().stage_build_side_max_estimate_multiple();
        let far_over = STAGE_THRESHOLD * (multiple + 1);

        assert!(
            !stages(
                Precision::Inexact(STAGE_THRESHOLD - 1),
                Precision::Exact(FACT_PROBE_BYTES),
                STAGE_THRESHOLD
            ),
            "a build side already under budget is not what forced Partitioned"
        );
        assert!(
            !stages(
                Precision::Inexact(far_over),
                Precision::Exact(far_over * 1_000),
                STAGE_THRESHOLD
            ),
            "past the multiple no measurement brings the side under budget"
        );
        assert!(
            !stages(
                Precision::Inexact(GUESSED_BUILD_BYTES),
                Precision::Exact(FACT_PROBE_BYTES),
                0
            ),
            "broadcast promotion disabled leaves no decision to revisit"
        );
    }

    // The shipped defaults are what the benchmark numbers were measured under,
    // so pin them here rather than only in the generated config docs.
    #[test]
    fn stage_build_side_ships_the_documented_defaults() {
        let bc = BallistaConfig::default();

        assert!(bc.stage_build_side_enabled());
        assert_eq!(bc.stage_build_side_min_probe_ratio(), 10);
        assert_eq!(bc.stage_build_side_max_estimate_multiple(), 32);
    }

    /// Runs the resolver over the q8 shape for `join_type`, staging on or off.
    fn q8_shaped_action(
        join_type: JoinType,
        stage_build_side: bool,
    ) -> JoinSelectionAction {
        run_to_actual_join(
            sized_stats_exec(Precision::Inexact(GUESSED_BUILD_BYTES)),
            sized_stats_exec(Precision::Exact(FACT_PROBE_BYTES)),
            join_type,
            true,
            STAGE_THRESHOLD,
            ROW_THRESHOLD,
            stage_build_side,
        )
    }

    // Staging pays off only where `CollectLeft` is reachable, which is a
    // property of the post-swap join type alone. The left side is the smaller
    // one here, so `supports_swap_join_order` is false and the post-swap type
    // equals the declared one, making `collect_left_broadcast_safe` the oracle.
    // Looping all ten means a join type added to DataFusion cannot slip through
    // untested — which two hand-partitioned lists would have let it do.
    #[test]
    fn stages_exactly_the_join_types_that_can_broadcast() {
        for join_type in [
            JoinType::Inner,
            JoinType::Left,
            JoinType::Right,
            JoinType::Full,
            JoinType::LeftSemi,
            JoinType::RightSemi,
            JoinType::LeftAnti,
            JoinType::RightAnti,
            JoinType::LeftMark,
            JoinType::RightMark,
        ] {
            let action = q8_shaped_action(join_type, true);
            assert_eq!(
                matches!(action, JoinSelectionAction::StageBuildSide { .. }),
                collect_left_broadcast_safe(join_type),
                "join_type {join_type:?}: staging must follow broadcast safety",
            );
        }
    }

    #[test]
    fn stage_build_side_config_turns_the_behaviour_off() {
        assert!(matches!(
            q8_shaped_action(JoinType::Inner, false),
            JoinSelectionAction::Repartition(_)
        ));
    }

    // Staging must fire at most once. Once a child is an exchange the resolver
    // falls through to `Repartition`, which shuffles the remaining side and
    // reuses the exchange already in place.
    #[test]
    fn does_not_stage_again_once_a_child_is_an_exchange() {
        let staged: Arc<dyn ExecutionPlan> = Arc::new(ExchangeExec::new(
            sized_stats_exec(Precision::Inexact(GUESSED_BUILD_BYTES)),
            None,
            0,
        ));

        let action = run_to_actual_join(
            staged,
            sized_stats_exec(Precision::Exact(FACT_PROBE_BYTES)),
            JoinType::Inner,
            true,
            STAGE_THRESHOLD,
            ROW_THRESHOLD,
            true,
        );

        assert!(matches!(action, JoinSelectionAction::Repartition(_)));
    }

    /// Constructs a minimal `DynamicJoinSelectionExec` around the given children.
    /// Properties are borrowed from the left child — correct enough for unit tests
    /// that only exercise `children_resolved`.
    fn make_dynamic_join(
        left: Arc<dyn ExecutionPlan>,
        right: Arc<dyn ExecutionPlan>,
    ) -> DynamicJoinSelectionExec {
        DynamicJoinSelectionExec {
            properties: Arc::clone(left.properties()),
            left,
            right,
            on: vec![],
            filter: None,
            join_type: JoinType::Inner,
            projection: None,
            null_equality: NullEquality::NullEqualsNothing,
            selection_state: JoinInputState::Unknown,
            null_aware: false,
            plan_id: 0,
        }
    }

    #[test]
    fn children_resolved_returns_true_for_simple_leaves() {
        let schema = test_schema();
        let left = Arc::new(EmptyExec::new(schema.clone())) as Arc<dyn ExecutionPlan>;
        let right = Arc::new(EmptyExec::new(schema)) as Arc<dyn ExecutionPlan>;

        let dj = make_dynamic_join(left, right);

        assert!(
            dj.upstream_resolved(),
            "plain EmptyExec children carry no exchange or nested join — must be resolved"
        );
    }

    #[test]
    fn children_resolved_returns_false_for_unresolved_left_exchange() {
        let schema = test_schema();
        let leaf = Arc::new(EmptyExec::new(schema.clone())) as Arc<dyn ExecutionPlan>;
        // ExchangeExec::new starts with shuffle_partitions = None → not resolved
        let unresolved_exchange =
            Arc::new(ExchangeExec::new(leaf.clone(), None, 0)) as Arc<dyn ExecutionPlan>;
        let right = Arc::new(EmptyExec::new(schema)) as Arc<dyn ExecutionPlan>;

        let dj = make_dynamic_join(unresolved_exchange, right);

        assert!(
            !dj.upstream_resolved(),
            "an unresolved ExchangeExec on the left must block resolution"
        );
    }

    #[test]
    fn children_resolved_returns_false_for_unresolved_right_exchange() {
        let schema = test_schema();
        let leaf = Arc::new(EmptyExec::new(schema.clone())) as Arc<dyn ExecutionPlan>;
        let left = Arc::new(EmptyExec::new(schema)) as Arc<dyn ExecutionPlan>;
        let unresolved_exchange =
            Arc::new(ExchangeExec::new(leaf, None, 0)) as Arc<dyn ExecutionPlan>;

        let dj = make_dynamic_join(left, unresolved_exchange);

        assert!(
            !dj.upstream_resolved(),
            "an unresolved ExchangeExec on the right must block resolution"
        );
    }

    #[test]
    fn children_resolved_returns_true_when_both_exchanges_resolved() {
        let schema = test_schema();
        let leaf = Arc::new(EmptyExec::new(schema)) as Arc<dyn ExecutionPlan>;

        let left_exchange = ExchangeExec::new(leaf.clone(), None, 0);
        left_exchange.resolve_shuffle_partitions(vec![]);

        let right_exchange = ExchangeExec::new(leaf, None, 1);
        right_exchange.resolve_shuffle_partitions(vec![]);

        let dj = make_dynamic_join(
            Arc::new(left_exchange) as Arc<dyn ExecutionPlan>,
            Arc::new(right_exchange) as Arc<dyn ExecutionPlan>,
        );

        assert!(
            dj.upstream_resolved(),
            "exchanges with resolved shuffle partitions must not block resolution"
        );
    }

    #[test]
    fn children_resolved_returns_false_when_left_child_is_dynamic_join() {
        let schema = test_schema();
        let leaf = Arc::new(EmptyExec::new(schema)) as Arc<dyn ExecutionPlan>;

        // Inner join whose children are plain leaves — still blocks the outer one
        let inner = Arc::new(make_dynamic_join(leaf.clone(), leaf.clone()))
            as Arc<dyn ExecutionPlan>;

        let outer = make_dynamic_join(inner, leaf);

        assert!(
            !outer.upstream_resolved(),
            "a DynamicJoinSelectionExec nested in the left child must block resolution"
        );
    }

    #[test]
    fn children_resolved_returns_false_when_right_child_is_dynamic_join() {
        let schema = test_schema();
        let leaf = Arc::new(EmptyExec::new(schema)) as Arc<dyn ExecutionPlan>;

        let inner = Arc::new(make_dynamic_join(leaf.clone(), leaf.clone()))
            as Arc<dyn ExecutionPlan>;

        let outer = make_dynamic_join(leaf, inner);

        assert!(
            !outer.upstream_resolved(),
            "a DynamicJoinSelectionExec nested in the right child must block resolution"
        );
    }

    /// Builds a resolved `ExchangeExec` with one shuffle partition per entry in
    /// `per_partition_bytes`, each reporting that many bytes via a single
    /// `PartitionLocation`. Mirrors `test/coalesce_rule.rs`'s
    /// `partitions_with_byte_sizes` helper (same synthetic-stats pattern),
    /// duplicated here since that helper lives in a sibling private test
    /// module this file can't reach.
    fn test_exchange_with_partition_bytes(
        per_partition_bytes: &[usize],
    ) -> Arc<dyn ExecutionPlan> {
        let schema = test_schema();
        let input = Arc::new(EmptyExec::new(schema)) as Arc<dyn ExecutionPlan>;
        let n = per_partition_bytes.len();
        let exchange =
            ExchangeExec::new(input, Some(Partitioning::UnknownPartitioning(n)), 0);

        let partitions = per_partition_bytes
            .iter()
            .enumerate()
            .map(|(idx, &bytes)| {
                vec![PartitionLocation {
                    map_partition_id: 0,
                    partition_id: PartitionId {
                        job_id: "".into(),
                        stage_id: 0,
                        partition_id: idx,
                    },
                    executor_meta: ExecutorMetadata {
                        id: "".to_string(),
                        host: "".to_string(),
                        port: 0,
                        grpc_port: 0,
                        specification: ExecutorSpecification::default().with_vcores(0),
                        os_info: ExecutorOperatingSystemSpecification::default(),
                    },
                    partition_stats: PartitionStats::new(
                        Some(1),
                        None,
                        Some(bytes as u64),
                    ),
                    file_id: None,
                    is_sort_shuffle: false,
                }]
            })
            .collect();
        exchange.resolve_shuffle_partitions(partitions);

        Arc::new(exchange) as Arc<dyn ExecutionPlan>
    }

    // Q18 OOMed on one fat partition while the average partition was small, so
    // the fit check must key off the MAX per-partition build size, not the
    // average — an average would have hidden exactly the skew that caused the
    // OOM.
    #[test]
    fn max_per_partition_build_bytes_takes_the_max() {
        let build = test_exchange_with_partition_bytes(&[100 * MB, 400 * MB]);
        assert_eq!(max_per_partition_build_bytes(&build), Some(400 * MB));
    }

    /// Builds a `ConfigOptions` with `prefer_hash_join = true` and a Ballista
    /// `hash_join_max_build_partition_bytes` set to `max_build_bytes`, via the
    /// string-keyed `BallistaConfig::set` path (the same path
    /// `run_to_actual_join` above uses for other Ballista settings) since
    /// there is no fluent setter for this key yet.
    ///
    /// Broadcast promotion is switched off (`broadcast_join_threshold_bytes = 0`)
    /// so the build-fit tests below exercise the `Partitioned` path without a
    /// `CollectLeft` decision shadowing it.
    ///
    /// `prefer_hash_join` is set to `false` deliberately — the hostile value. AQE
    /// does not consult it, so every test below that asserts a `HashJoinExec`
    /// would fail if that ever regressed.
    fn config_with_max_build(max_build_bytes: usize) -> ConfigOptions {
        let mut config = ConfigOptions::new();
        config.optimizer.prefer_hash_join = false;
        let mut bc = BallistaConfig::default();
        bc.set(
            "optimizer.hash_join_max_build_partition_bytes",
            &max_build_bytes.to_string(),
        )
        .unwrap();
        bc.set("optimizer.broadcast_join_threshold_bytes", "0")
            .unwrap();
        config.extensions.insert(bc);
        config
    }

    /// Renders the `ExecutionPlan` a `JoinSelectionAction` resolves to, so
    /// tests can assert on `displayable(..).indent(false).to_string()` rather
    /// than matching on the action's structure.
    fn resolved_plan(action: &JoinSelectionAction) -> Arc<dyn ExecutionPlan> {
        match action {
            JoinSelectionAction::StageBuildSide { .. } => {
                unreachable!("staging carries no resolved plan to render")
            }
            JoinSelectionAction::Repartition(exec) => {
                Arc::clone(exec) as Arc<dyn ExecutionPlan>
            }
            JoinSelectionAction::CollectLeft(exec) => {
                Arc::clone(exec) as Arc<dyn ExecutionPlan>
            }
            JoinSelectionAction::LateCollectLeft(exec) => {
                Arc::clone(exec) as Arc<dyn ExecutionPlan>
            }
            JoinSelectionAction::Hash(exec) => Arc::clone(exec) as Arc<dyn ExecutionPlan>,
            JoinSelectionAction::Sort(exec) => Arc::clone(exec) as Arc<dyn ExecutionPlan>,
        }
    }

    /// The probe side used by the build-fit tests below: bigger in total than
    /// any build side they set up, so `supports_swap_join_order` is false, no
    /// swap happens, and `left` stays the build. Its own per-partition size is
    /// irrelevant — only the build side is measured.
    const PROBE_PARTITION_BYTES: &[usize] = &[600 * MB];

    // A build partition over the configured max falls back to SortMergeJoin,
    // even though `prefer_hash_join` is true — the fit check overrides the
    // preference rather than the other way around.
    #[test]
    fn build_over_threshold_falls_back_to_sort_merge_join() {
        // 500 MB build > the 200 MB budget
        let exec =
            repartitioned_join_between_exchanges(&[500 * MB], PROBE_PARTITION_BYTES);
        let action = exec
            .to_actual_join(&config_with_max_build(200 * MB))
            .unwrap();
        let rendered = displayable(resolved_plan(&action).as_ref())
            .indent(false)
            .to_string();
        assert!(rendered.contains("SortMergeJoinExec"), "{rendered}");
    }

    // A build partition within the configured max keeps the Partitioned hash
    // join `prefer_hash_join` selected.
    #[test]
    fn build_within_threshold_uses_partitioned_hash_join() {
        // 50 MB build < the 200 MB budget
        let exec =
            repartitioned_join_between_exchanges(&[50 * MB], PROBE_PARTITION_BYTES);
        let action = exec
            .to_actual_join(&config_with_max_build(200 * MB))
            .unwrap();
        let rendered = displayable(resolved_plan(&action).as_ref())
            .indent(false)
            .to_string();
        assert!(rendered.contains("HashJoinExec"), "{rendered}");
        assert!(rendered.contains("mode=Partitioned"), "{rendered}");
    }

    /// Builds a `DynamicJoinSelectionExec` in `Repartitioned` state whose *both*
    /// children are resolved `ExchangeExec`s with the given per-partition byte
    /// sizes. This is the shape `SelectJoinRule` produces after resolving a
    /// `Repartition` action, and the only shape in which the swap can move the
    /// build side onto `right`.
    fn repartitioned_join_between_exchanges(
        left_partition_bytes: &[usize],
        right_partition_bytes: &[usize],
    ) -> DynamicJoinSelectionExec {
        let left = test_exchange_with_partition_bytes(left_partition_bytes);
        let right = test_exchange_with_partition_bytes(right_partition_bytes);
        // Both exchanges wrap test_schema(), whose sole field is named "x".
        let on: JoinOn =
            vec![(Arc::new(Column::new("x", 0)), Arc::new(Column::new("x", 0)))];
        DynamicJoinSelectionExec {
            properties: Arc::clone(left.properties()),
            left,
            right,
            on,
            filter: None,
            join_type: JoinType::Inner,
            projection: None,
            null_equality: NullEquality::NullEqualsNothing,
            selection_state: JoinInputState::Repartitioned,
            null_aware: false,
            plan_id: 0,
        }
    }

    // The fit check must measure the input the build task actually runs. The
    // left side is the larger one in total (400 MB against 303 MB), so
    // `SelectJoinRule` swaps the inputs and the right becomes the build — and
    // the right carries a 300 MB partition, over the 200 MB budget. Measuring
    // the pre-swap left would see only its 100 MB max and keep the hash join,
    // leaving the build task to OOM on a partition the check never looked at.
    #[test]
    fn build_fit_check_measures_the_post_swap_build_side() {
        let exec = repartitioned_join_between_exchanges(
            &[100 * MB, 100 * MB, 100 * MB, 100 * MB], // total 400 MB, max 100 MB
            &[MB, MB, MB, 300 * MB],                   // total 303 MB, max 300 MB
        );

        let action = exec
            .to_actual_join(&config_with_max_build(200 * MB))
            .unwrap();
        let rendered = displayable(resolved_plan(&action).as_ref())
            .indent(false)
            .to_string();
        assert!(rendered.contains("SortMergeJoinExec"), "{rendered}");
    }

    // The mirror case: same partition shapes, sides exchanged, so the left is
    // now the smaller total and no swap happens. The build stays on the left,
    // and its 300 MB partition is what must be measured. Pins that the fix
    // selects by the swap decision rather than blanket-switching to the right.
    #[test]
    fn build_fit_check_stays_on_the_left_when_no_swap_happens() {
        let exec = repartitioned_join_between_exchanges(
            &[MB, MB, MB, 300 * MB], // total 303 MB, max 300 MB
            &[100 * MB, 100 * MB, 100 * MB, 100 * MB], // total 400 MB, max 100 MB
        );

        let action = exec
            .to_actual_join(&config_with_max_build(200 * MB))
            .unwrap();
        let rendered = displayable(resolved_plan(&action).as_ref())
            .indent(false)
            .to_string();
        assert!(rendered.contains("SortMergeJoinExec"), "{rendered}");
    }

    // `datafusion.optimizer.prefer_hash_join` is a planner flag that DataFusion
    // has already applied by the time `DelayJoinSelectionRule` folds both join
    // operators into this node, so AQE must not consult it again. A build side
    // that fits stays a Partitioned hash join under either setting; the strategy
    // follows runtime evidence, not the flag.
    #[test]
    fn prefer_hash_join_does_not_affect_the_aqe_decision() {
        for prefer_hash_join in [true, false] {
            let exec =
                repartitioned_join_between_exchanges(&[50 * MB], PROBE_PARTITION_BYTES);
            let mut config = config_with_max_build(200 * MB);
            config.optimizer.prefer_hash_join = prefer_hash_join;

            let action = exec.to_actual_join(&config).unwrap();
            let rendered = displayable(resolved_plan(&action).as_ref())
                .indent(false)
                .to_string();

            assert!(
                rendered.contains("HashJoinExec")
                    && rendered.contains("mode=Partitioned"),
                "prefer_hash_join={prefer_hash_join} must not change the decision: {rendered}"
            );
        }
    }

    // `hash_join_max_build_partition_bytes = 0` disables the check entirely,
    // matching the design contract: 0 always fits regardless of build size.
    #[test]
    fn zero_threshold_disables_the_check() {
        let exec =
            repartitioned_join_between_exchanges(&[500 * MB], PROBE_PARTITION_BYTES);
        let action = exec.to_actual_join(&config_with_max_build(0)).unwrap();
        let rendered = displayable(resolved_plan(&action).as_ref())
            .indent(false)
            .to_string();
        assert!(rendered.contains("HashJoinExec"), "{rendered}");
    }
}
