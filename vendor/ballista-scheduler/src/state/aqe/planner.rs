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
use crate::physical_optimizer::filter_pushdown::FilterPushdown;
use crate::state::aqe::adapter::BallistaAdapter;
use crate::state::aqe::execution_plan::{
    AdaptiveDatafusionExec, ExchangeExec, RangeRepartitionRouting,
};
use crate::state::aqe::optimizer_rule::chaos_exec::ChaosCreatingRule;
use crate::state::aqe::optimizer_rule::{
    CoalescePartitionsRule, DelayJoinSelectionRule, DemoteUnsafeBroadcastJoinRule,
    DistributedExchangeRule, NormalizeInterleaveRule, ParallelWindowRule,
    PrefixWindowRule, PropagateEmptyExecRule, SelectJoinRule,
};
use crate::state::distributed_explain::handle_explain_plan;
use crate::state::execution_stage::StageOutput;
use ballista_core::JobId;
use ballista_core::execution_plans::ShuffleWriter;
use ballista_core::serde::scheduler::PartitionLocation;
use datafusion::common;
use datafusion::common::{HashMap, exec_err};
use datafusion::error::DataFusionError;
#[cfg(test)]
use datafusion::execution::config::SessionConfig;
use datafusion::execution::context::SessionContext;
use datafusion::execution::{SessionState, SessionStateBuilder};
use datafusion::logical_expr::LogicalPlan;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::{ExecutionPlan, ExecutionPlanProperties, displayable};
use datafusion::physical_planner::DefaultPhysicalPlanner;
use log::debug;
use std::collections::HashSet;
use std::fmt::{Debug, Formatter};
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use tokio::time::Instant;

type PhysicalOptimizerRuleRef =
    Arc<dyn datafusion::physical_optimizer::PhysicalOptimizerRule + Send + Sync>;

type RunnableStages = Option<Vec<AdaptiveStageInfo>>;
type CancellableStageIds = HashSet<usize>;

/// The `AdaptivePlanner` struct is responsible for managing the execution of distributed
/// physical plans in an adaptive manner. It handles the optimization, selection, and
/// cancellation of stages within a distributed query execution plan.
#[derive(Clone)]
pub struct AdaptivePlanner {
    /// Generates the next stage ID.
    /// Stage IDs are incremental and unique for each job.
    stage_id_generator: usize,
    /// The session state needed for optimizer calls.
    /// This also freezes the session configuration for a given job.
    session_state: SessionState,
    /// Physical planner used for this job
    physical_planner: Arc<DefaultPhysicalPlanner>,
    /// physical plan representing given job
    pub(crate) plan: Arc<dyn ExecutionPlan>,
    /// caches current runnable stages
    runnable_stage_cache: HashMap<usize, Arc<dyn ExecutionPlan>>,
    /// Unique identifier for the job, used to key this job's shuffle output.
    job_id: JobId,

    runnable_stage_output: HashMap<usize, StageOutput>,
}

impl Debug for AdaptivePlanner {
    fn fmt(&self, f: &mut Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdaptivePlanner")
            .field("job_id", &self.job_id)
            .finish()
    }
}

impl AdaptivePlanner {
    /// Creates a new `AdaptivePlanner` with the specified physical optimizer rules.
    ///
    /// # Arguments:
    /// * `state_builder` -  Session state builder,
    /// * `plan` - The physical execution plan for the job.
    /// * `job_id` - The unique identifier for the job.
    /// * `physical_optimizer_rules` - A list of physical optimizer rules to apply.
    ///
    /// # Returns
    /// A new instance of `AdaptivePlanner` or an error if the initialization fails.
    pub fn try_new_with_optimizers(
        state_builder: SessionStateBuilder,
        plan: Arc<dyn ExecutionPlan>,
        job_id: JobId,
        physical_optimizer_rules: Vec<PhysicalOptimizerRuleRef>,
    ) -> common::Result<Self> {
        let session_state =
            Self::create_session_state(state_builder, physical_optimizer_rules);
        let planner = DefaultPhysicalPlanner::default();
        let plan = planner.optimize_physical_plan(plan, &session_state, |_, _| {})?;

        Ok(Self {
            stage_id_generator: 0, // FIXME: compatibility issue with static where stages start from 1
            session_state,
            physical_planner: planner.into(),
            plan,
            runnable_stage_cache: HashMap::new(),
            job_id,
            runnable_stage_output: HashMap::new(),
        })
    }
    /// Creates a new `AdaptivePlanner` with default physical optimizer rules.
    ///
    /// # Arguments
    ///
    /// * `session_config` - The session configuration for the job.
    /// * `plan` - The physical execution plan for the job.
    /// * `job_id` - The unique identifier for the job.
    ///
    /// # Returns
    /// A new instance of `AdaptivePlanner` or an error if the initialization fails.
    #[cfg(test)]
    pub fn try_from_plan(
        session_config: &SessionConfig,
        plan: Arc<dyn ExecutionPlan>,
        job_id: JobId,
    ) -> common::Result<Self> {
        let plan_id_generator = Arc::new(AtomicUsize::new(0));
        let state_builder = SessionStateBuilder::new_with_default_features()
            .with_config(session_config.clone());
        Self::try_new_with_optimizers(
            state_builder,
            plan,
            job_id,
            Self::default_optimizers(plan_id_generator),
        )
    }

    /// Creates a new `AdaptivePlanner` with default physical optimizer rules.
    ///
    /// # Arguments
    ///
    /// * `ctx` - The session context
    /// * `logical_plan` - The logical plan for the job.
    /// * `job_id` - The unique identifier for the job.
    ///
    /// # Returns
    /// A new instance of `AdaptivePlanner` or an error if the initialization fails.
    pub async fn try_new(
        ctx: &SessionContext,
        logical_plan: &LogicalPlan,
        job_id: JobId,
    ) -> common::Result<Self> {
        // session state with very limited set of optimizers.
        // this optimizer set will be executed only once, before
        // running standard set of optimizers, which will
        // after each stage.
        let plan_id_generator = Arc::new(AtomicUsize::new(0));

        let plan_preparation_state_builder = SessionStateBuilder::from(ctx.state());
        let plan_preparation_state = Self::create_session_state(
            plan_preparation_state_builder,
            Self::plan_preparation_optimizers(plan_id_generator.clone()),
        );

        let plan = plan_preparation_state
            .create_physical_plan(logical_plan)
            .await?;

        let plan = handle_explain_plan(&job_id, ctx, logical_plan, plan)
            .await
            .map_err(|e| DataFusionError::Execution(e.to_string()))?;

        let state_builder = SessionStateBuilder::from(ctx.state());
        Self::try_new_with_optimizers(
            state_builder,
            plan,
            job_id,
            Self::default_optimizers(plan_id_generator),
        )
    }
    /// Cancels a stage by its ID.
    ///
    /// # Arguments
    /// * `stage_id` - The ID of the stage to cancel.
    ///
    /// # Returns
    /// A `Result` indicating success or failure.
    pub fn cancel_stage(&mut self, stage_id: usize) -> common::Result<()> {
        // TODO consider marking cancelled stage
        let _ = self.runnable_stage_cache.remove(&stage_id);
        Ok(())
    }

    /// Whether `stage_id` is still part of the current plan. A replan can drop
    /// a stage that already has tasks in flight; their completions arrive after
    /// the stage has left the cache.
    pub fn is_stage_active(&self, stage_id: usize) -> bool {
        self.runnable_stage_cache.contains_key(&stage_id)
    }

    /// Attaches range-repartition-recovered range boundaries to the
    /// boundary `ExchangeExec` for `stage_id`. Called right after the
    /// completed range-repartition stage's partition mapping is resolved;
    /// the routing carries the cuts + routing expression that downstream
    /// task specialization needs to build per-partition range filters.
    ///
    /// Errors if `stage_id` has no `ExchangeExec` to park on — the caller
    /// is responsible for ensuring the stage boundary is an `ExchangeExec`,
    /// so downstream read-side filter injection has something to hook into.
    pub(super) fn set_repartition_routing(
        &mut self,
        stage_id: usize,
        routing: RangeRepartitionRouting,
    ) -> common::Result<()> {
        let stage = self.runnable_stage_cache.get(&stage_id).ok_or_else(|| {
            DataFusionError::Internal(format!(
                "set_repartition_routing: stage {stage_id} not in runnable cache"
            ))
        })?;
        let exchange = stage.downcast_ref::<ExchangeExec>().ok_or_else(|| {
            DataFusionError::Internal(format!(
                "set_repartition_routing: stage {stage_id} boundary is {}, \
                 not ExchangeExec — nowhere to park cuts for downstream filter",
                stage.name()
            ))
        })?;
        exchange.resolve_range_repartition_routing(routing);
        Ok(())
    }

    pub(super) fn finalise_stage_internal(
        &mut self,
        stage_id: usize,
        partitions: Vec<Vec<PartitionLocation>>,
    ) -> common::Result<()> {
        // stage has finished, stage partitions should be resolved,
        // and it has to be removed from active stages cache.
        // Removing stage is important as this will help us to
        // identify stages to cancel.

        match self
            .runnable_stage_cache
            .remove(&stage_id)
            .as_ref()
            .map(|stage| {
                (
                    stage.downcast_ref::<ExchangeExec>(),
                    stage.downcast_ref::<AdaptiveDatafusionExec>(),
                )
            }) {
            Some((Some(stage), None)) => {
                stage.resolve_shuffle_partitions(partitions);
                self.replan_stages()?;
                Ok(())
            }
            Some((None, Some(stage))) => {
                stage.resolve_shuffle_partitions(partitions);
                self.replan_stages()?;
                Ok(())
            }
            _ => exec_err!(
                "cant find stage_id {} or stage root node is incorrect ",
                stage_id
            ),
        }
    }
    /// update stage outputs for a given stage id.
    /// this method to be called for each task completed,
    /// in order to track exchange location
    pub fn update_exchange_locations(
        &mut self,
        stage_id: usize,
        partitions: Vec<PartitionLocation>,
    ) -> common::Result<()> {
        if let Some(stage_output) = self.runnable_stage_output.get_mut(&stage_id) {
            for partition in partitions {
                stage_output.add_partition(partition)
            }
            Ok(())
        } else {
            exec_err!("Can't find active stage to update stage outputs")
        }
    }

    pub fn remove_exchange_locations(&mut self, stage_id: usize, executor_id: &str) {
        if let Some(stage_output) = self.runnable_stage_output.get_mut(&stage_id) {
            stage_output
                .partition_locations
                .iter_mut()
                .for_each(|(_partition, locs)| {
                    locs.retain(|loc| loc.executor_meta.id != executor_id);
                });
        }
    }

    /// Once all tasks have completed, pop the accumulated stage output as a
    /// K-shaped `Vec<Vec<PartitionLocation>>` (or the broadcast-shape variant)
    /// *without* parking it on the ExchangeExec. Caller can post-process
    /// (e.g. range-repartition overlap remap) before calling
    /// [`resolve_stage_partitions`](Self::resolve_stage_partitions).
    pub fn take_stage_output_partitions(
        &mut self,
        stage_id: usize,
    ) -> common::Result<Vec<Vec<PartitionLocation>>> {
        let stage = self.runnable_stage_cache.get(&stage_id).ok_or(
            datafusion::error::DataFusionError::Execution(
                "Can't find active cache resolve".into(),
            ),
        )?;
        let is_broadcast = stage
            .downcast_ref::<ExchangeExec>()
            .map(|e| e.broadcast)
            .unwrap_or(false);

        let output_partition_count = stage.output_partitioning().partition_count();
        let stage_output = if is_broadcast {
            self.runnable_stage_output
                .remove(&stage_id)
                .ok_or(datafusion::error::DataFusionError::Execution(
                    "Can't find active stage to resolve".into(),
                ))?
                .partition_locations_broadcast()
        } else {
            self.runnable_stage_output
                .remove(&stage_id)
                .ok_or(datafusion::error::DataFusionError::Execution(
                    "Can't find active stage to resolve".into(),
                ))?
                .partition_locations(output_partition_count)
        };
        Ok(stage_output)
    }

    /// Save the given partition list on the stage's ExchangeExec and trigger a replan.
    pub fn resolve_stage_partitions(
        &mut self,
        stage_id: usize,
        partitions: Vec<Vec<PartitionLocation>>,
    ) -> common::Result<()> {
        self.finalise_stage_internal(stage_id, partitions)
    }

    /// Replans the stages by applying physical optimizations.
    ///
    /// # Returns
    /// A `Result` indicating success or failure.
    fn replan_stages(&mut self) -> common::Result<()> {
        let interval = Instant::now();
        let mut plan = self.plan.clone();

        debug!(
            "Distributed physical plan (before optimization):\n{}\n",
            displayable(plan.as_ref()).indent(false)
        );

        plan = self.physical_planner.optimize_physical_plan(
            plan.clone(),
            &self.session_state,
            |_, _| {},
        )?;

        debug!(
            "Distributed physical plan (after optimization):\n{}\n",
            displayable(plan.as_ref()).indent(false)
        );

        self.plan = plan;

        debug!(
            "Total time taken for stage replan: {:?}",
            interval.elapsed()
        );

        Ok(())
    }
    /// Retrieves the runnable stages from the current plan.
    ///
    /// # Returns
    /// A `Result` containing the runnable stages or `None` if no stages are runnable.
    #[cfg(test)]
    pub(crate) fn runnable_stages(&mut self) -> common::Result<RunnableStages> {
        let (runnable_stages, _) = self.actionable_stages()?;

        Ok(runnable_stages)
    }

    /// Returns a tuple of `(RunnableStages, CancellableStageIds)`:
    /// - `RunnableStages`: A list of executable stages, or `None` if no more stages can run
    /// - `CancellableStageIds`: Stage IDs that should be canceled
    ///
    /// Stages are derived from the current physical plan on each call.
    pub fn actionable_stages(
        &mut self,
    ) -> common::Result<(RunnableStages, CancellableStageIds)> {
        match self.identify_runnable_stages()? {
            None => {
                let stages_to_cancel = self
                    .runnable_stage_cache
                    .keys()
                    .cloned()
                    .collect::<HashSet<_>>();
                Ok((None, stages_to_cancel))
            }
            Some(stages) => {
                let config = self.session_state.config().options();
                let (stage_ids, shuffle_writers) = stages
                    .into_iter()
                    .map(|plan| {
                        // Run the coalesce rule per-stage: the root of `plan` is
                        // the stage's wrapper exchange, so the rule's walker sees
                        // only this stage's input exchanges as the alignment
                        // group. This avoids cross-stage gluing and stale state
                        // that would arise if the rule walked the entire residual
                        // plan in `default_optimizers()`.
                        let plan = CoalescePartitionsRule.optimize(plan, config)?;
                        BallistaAdapter::adapt_to_ballista(plan, &self.job_id, config)
                            .map(|w| (w.plan.stage_id(), w))
                    })
                    .collect::<common::Result<(HashSet<_>, Vec<_>)>>()?;

                let stages_to_cancel = self
                    .runnable_stage_cache
                    .keys()
                    .filter(|s| !stage_ids.contains(s))
                    .cloned()
                    .collect::<HashSet<_>>();

                Ok((Some(shuffle_writers), stages_to_cancel))
            }
        }
    }
    /// Finds and returns the runnable stages from the current plan.
    ///
    /// # Returns
    /// A `Result` containing the runnable stages or `None` if no stages are runnable.
    pub(crate) fn identify_runnable_stages(
        &mut self,
    ) -> common::Result<Option<Vec<Arc<dyn ExecutionPlan>>>> {
        let mut runnable_stages = Vec::new();

        Self::find_runnable_exchanges(&self.plan, &mut runnable_stages);
        if !runnable_stages.is_empty() {
            let mut runnable = Vec::new();
            for exec in runnable_stages.into_iter() {
                match exec.downcast_ref::<ExchangeExec>() {
                    Some(exchange) if exchange.inactive_stage => continue,
                    Some(exchange) if exchange.stage_id().is_none() => {
                        exchange.set_stage_id(self.stage_id_generator);
                        // keeping stage in stage cache
                        // so we can process updates
                        self.runnable_stage_cache
                            .insert(self.stage_id_generator, exec.clone());
                        // keeping track of stage outputs
                        self.runnable_stage_output
                            .insert(self.stage_id_generator, Default::default());
                        // incrementing stage id
                        self.stage_id_generator += 1;
                        runnable.push(exec);
                    }
                    Some(_) => {
                        runnable.push(exec);
                    }
                    None => exec_err!("It is not a exchange")?,
                }
            }

            Ok(Some(runnable))
        } else if let Some(root) = self.plan.downcast_ref::<AdaptiveDatafusionExec>() {
            // shuffle writer has finished
            // there is no more runnable stages
            if root.shuffle_created() {
                Ok(None)
            } else if root.stage_id().is_some() {
                // root schema has stage id attached
                // previously
                Ok(Some(vec![self.plan.clone()]))
            } else {
                root.set_stage_id(self.stage_id_generator);
                root.set_final_plan();
                // keeping stage in stage cache
                // so we can process updates
                self.runnable_stage_cache
                    .insert(self.stage_id_generator, self.plan.clone());
                // keeping track of stage outputs
                self.runnable_stage_output
                    .insert(self.stage_id_generator, Default::default());
                // incrementing stage id
                self.stage_id_generator += 1;

                Ok(Some(vec![self.plan.clone()]))
            }
        } else {
            exec_err!("Plan root is not a AdaptiveDatafusionExec")
        }
    }
    /// Inspects and retrieves the IDs of runnable stages for testing purposes.
    ///
    /// # Returns
    /// A `Result` containing a set of runnable stage IDs.
    #[cfg(test)]
    pub(crate) fn inspect_runnable_stages(
        &self,
    ) -> common::Result<std::collections::HashSet<usize>> {
        let mut runnable_stages = Vec::new();
        Self::find_runnable_exchanges(&self.plan, &mut runnable_stages);

        runnable_stages
            .into_iter()
            .map(|exec| {
                exec.downcast_ref::<ExchangeExec>()
                    .ok_or_else(|| {
                        datafusion::common::DataFusionError::Plan(
                            "ExchangeExec expected".into(),
                        )
                    })
                    .map(|e| e.stage_id().unwrap())
            })
            .collect()
    }
    /// Retrieves the current physical plan.
    ///
    /// # Returns
    /// A reference to the current physical plan.
    #[cfg(test)]
    pub fn current_plan(&self) -> &dyn ExecutionPlan {
        self.plan.as_ref()
    }
    /// Returns the default set of physical optimizer rules.
    ///
    /// # Returns
    /// A vector of default physical optimizer rules.
    fn default_optimizers(
        plan_id_generator: Arc<AtomicUsize>,
    ) -> Vec<PhysicalOptimizerRuleRef> {
        let mut physical_optimizers: Vec<Arc<dyn PhysicalOptimizerRule + Send + Sync>> =
            vec![];

        // Must run first: the rules below rewrite union branches independently,
        // which an InterleaveExec cannot survive. EnforceDistribution re-forms
        // the interleave later in this same chain when it is still valid.
        physical_optimizers.push(Arc::new(NormalizeInterleaveRule::default()));

        // changing plan before other built in optimizers kick in
        physical_optimizers.push(Arc::new(PropagateEmptyExecRule::default()));

        // select actual join implementation based on current runtime information
        physical_optimizers
            .push(Arc::new(SelectJoinRule::new(plan_id_generator.clone())));

        // add default datafusion set of optimizers
        // physical_optimizers.extend(
        //     datafusion::physical_optimizer::optimizer::PhysicalOptimizer::new().rules,
        // );
        //
        physical_optimizers.extend(Self::datafusion_optimizers());

        // Rewrite bounded RANGE-frame windows into a range-shuffle so BWAG's
        // single-partition constraint is not a serial bottleneck. Runs AFTER
        // DataFusion's optimizer chain (EnforceSorting, RepartitionFileScans,
        // …) so we see the fully-materialized SortExec placement — placement
        // we peel and re-plant so RSE#1 sits *below* the pipeline-break Sort,
        // letting the sketch fully report before ORRE routes. Must still run
        // before DistributedExchangeRule — the rule emits an ORRE that DE
        // picks up as the shuffle-boundary K-space source.
        physical_optimizers.push(Arc::new(ParallelWindowRule));

        // Sibling of ParallelWindowRule for UNBOUNDED PRECEDING frames. Same
        // chain position: the two gate on complementary frame shapes, so
        // their relative order is irrelevant. Shares the plan-id generator
        // because it plants its own state-sync ExchangeExec.
        physical_optimizers
            .push(Arc::new(PrefixWindowRule::new(plan_id_generator.clone())));

        // `DistributedExchangeRule` should be the last plan mutator rule in the chain
        physical_optimizers
            .push(Arc::new(DistributedExchangeRule::new(plan_id_generator)));

        physical_optimizers
    }

    // at the moment we create default set of optimizers
    // ```
    // physical_optimizers.extend(PhysicalOptimizer::new().rules);
    // ```
    // as there are issues with some of them
    // TODO: replace this once we update to datafusion 55
    fn datafusion_optimizers() -> Vec<Arc<dyn PhysicalOptimizerRule + Send + Sync>> {
        datafusion::physical_optimizer::optimizer::PhysicalOptimizer::new()
            .rules
            .into_iter()
            .flat_map(|r| match r.name() {
                // Pushdown runs once, from `plan_preparation_optimizers`. AQE
                // re-optimizes after every stage completion, and pushing an
                // already-pushed filter appends it to the scan again: TPC-H
                // scans accumulated one copy per replan — six of
                // `r_name = EUROPE` in q2 — and every copy is evaluated per row
                // and again in the row-group pruning predicate.
                "FilterPushdown" => vec![],
                // `join_selection` promotes a small build side to `CollectLeft`
                // without restricting by join type -- safe in one process, but
                // Ballista runs one task per probe partition. Demote the unsafe
                // ones straight after, while `EnsureRequirements` can still add
                // the repartitions a `Partitioned` join needs.
                "join_selection" => {
                    vec![r, Arc::new(DemoteUnsafeBroadcastJoinRule::default())]
                }
                _ => vec![r],
            })
            .collect()
    }

    /// set of rules which will be executed ONCE before
    /// running standard set of physical optimizers
    fn plan_preparation_optimizers(
        plan_id_generator: Arc<AtomicUsize>,
    ) -> Vec<PhysicalOptimizerRuleRef> {
        vec![
            Arc::new(FilterPushdown::new()),
            Arc::new(DelayJoinSelectionRule::new(plan_id_generator)),
            Arc::new(ChaosCreatingRule::default()),
        ]
    }

    /// Creates a session state with the given configuration and optimizer rules.
    ///
    /// # Arguments
    /// * `session_builder` - The session builder.
    /// * `physical_optimizers` - A list of physical optimizer rules.
    ///
    /// # Returns
    /// A new `SessionState` instance.
    fn create_session_state(
        builder: SessionStateBuilder,
        physical_optimizers: Vec<PhysicalOptimizerRuleRef>,
    ) -> SessionState {
        builder
            .with_physical_optimizer_rules(physical_optimizers)
            .build()
    }

    /// Recursively finds runnable exchanges in the execution plan.
    ///
    /// # Arguments
    /// * `node` - The current execution plan node.
    /// * `runnable_stages` - A mutable reference to the list of runnable stages.
    ///
    /// # Returns
    /// A boolean indicating whether the current node or its children are runnable.
    fn find_runnable_exchanges(
        node: &Arc<dyn ExecutionPlan>,
        runnable_stages: &mut Vec<Arc<dyn ExecutionPlan>>,
    ) -> bool {
        if let Some(exchange) = node.downcast_ref::<ExchangeExec>()
            && exchange.shuffle_created()
        {
            // we found exchange which has partitions resolved or this stage is not
            // there is no need to progress any further as
            // all runnable children has been run

            false
        } else if let Some(exchange) = node.downcast_ref::<ExchangeExec>()
            && !exchange.shuffle_created()
        {
            // we found exchange which has not been resolved (run)
            // it is candidate to run if none of children is runnable

            let has_runnable_children = node
                .children()
                .into_iter()
                .any(|child| Self::find_runnable_exchanges(child, runnable_stages));

            // this exchange has NO runnable children
            // thus it can RUN
            if !has_runnable_children {
                runnable_stages.push(node.clone());
            }

            // if it had no runnable children now it is
            // runnable and has to indicate to parent
            true
        } else {
            #[allow(clippy::unnecessary_fold)]
            node.children()
                .into_iter()
                .map(|child| Self::find_runnable_exchanges(child, runnable_stages))
                .fold(false, |acc, s| acc || s) // NOTE: this one can not be changed to `any(|s| s)`
            // it has to iterate through all of them
        }
    }
}

/// Wraps stage plan with addition of references to previous stages
pub(crate) struct AdaptiveStageInfo {
    pub(crate) plan: Arc<dyn ShuffleWriter>,
    pub(crate) inputs: std::collections::HashMap<usize, StageOutput>,
}
