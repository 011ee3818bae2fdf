//! The executors' execution engine: Ballista's, with each task holding its job's share of its
//! node's GPU lease while it runs, when its plan has GPU-placed calls, and recording its calls
//! in the node's `accelsql.udf_calls`.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use accelsql_engine::{AccelsqlOptions, Engine, EngineError};
use ballista_core::JobId;
use ballista_core::serde::protobuf::{
    RuntimeStatsReport, ShuffleWritePartition, TaskColumnStats, WindowStateReport,
};
use ballista_executor::execution_engine::{
    DefaultExecutionEngine, ExecutionEngine, QueryStageExecutor,
};
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::TaskContext;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::metrics::MetricsSet;
use datafusion::prelude::SessionConfig;

/// Ballista's default execution engine whose tasks lease the node's GPUs.
pub(crate) struct LeasingEngine {
    inner: DefaultExecutionEngine,
    engine: Engine,
}

impl LeasingEngine {
    pub(crate) fn new(engine: Engine) -> Self {
        Self {
            inner: DefaultExecutionEngine::new(),
            engine,
        }
    }
}

impl ExecutionEngine for LeasingEngine {
    fn create_query_stage_exec(
        &self,
        job_id: JobId,
        stage_id: usize,
        task_id: usize,
        global_output_partition_ids: Vec<usize>,
        plan: Arc<dyn ExecutionPlan>,
        work_dir: &str,
        config: &SessionConfig,
    ) -> Result<Arc<dyn QueryStageExecutor>> {
        let label = format!("job {job_id} stage {stage_id} task {task_id}");
        let statement = job_id.to_string();
        let inner = self.inner.create_query_stage_exec(
            job_id,
            stage_id,
            task_id,
            global_output_partition_ids,
            Arc::clone(&plan),
            work_dir,
            config,
        )?;
        // The statement's timeout travels with its settings: a task past it stops here too,
        // freeing the node's lease and workers, whether or not the client is still there.
        let timeout = config
            .options()
            .extensions
            .get::<AccelsqlOptions>()
            .and_then(|own| own.statement_timeout().ok().flatten());
        Ok(Arc::new(LeasedStage {
            inner,
            statement,
            plan,
            engine: self.engine.clone(),
            label,
            timeout,
        }))
    }
}

/// `e` as plain text that starts with its accelsql code: Ballista sends a task's failure to the
/// scheduler in Debug form, where an accelsql error would lose its code and wording.
/// A DataFusion error that Ballista boxed in its own error type keeps the code it has unboxed
/// (`Arrow error: Divide by zero error` is 22000 on one node, and here too).
fn coded(e: DataFusionError) -> DataFusionError {
    let e = EngineError::from(e);
    let e = match e.code() {
        "XX000" => EngineError::from_remote_datafusion_text(&e.to_string()).unwrap_or(e),
        _ => e,
    };
    DataFusionError::Execution(e.to_string())
}

/// One task's stage executor, run under the node's lease.
struct LeasedStage {
    inner: Arc<dyn QueryStageExecutor>,
    /// The job: its tasks on this node share one lease.
    statement: String,
    plan: Arc<dyn ExecutionPlan>,
    engine: Engine,
    label: String,
    /// The statement's timeout (`accelsql.statement_timeout`), bounding this task from its start.
    timeout: Option<Duration>,
}

impl fmt::Debug for LeasedStage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.inner, f)
    }
}

impl fmt::Display for LeasedStage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.inner, f)
    }
}

#[async_trait::async_trait]
impl QueryStageExecutor for LeasedStage {
    async fn execute_query_stage(
        &self,
        task_id: usize,
        context: Arc<TaskContext>,
    ) -> Result<Vec<ShuffleWritePartition>> {
        let run = async {
            let lease = self
                .engine
                .lease_for_plan(&self.plan, &self.statement, self.label.clone())
                .await
                .map_err(|e| coded(e.into_datafusion()))?;
            let work = self.inner.execute_query_stage(task_id, context);
            let done = match self.engine.max_lease_hold() {
                // A task that holds the GPUs longer than the node allows gives them up (57G03).
                Some(limit) if lease.holds_devices() => {
                    tokio::time::timeout(limit, work).await.unwrap_or_else(|_| {
                        Err(EngineError::LeaseHeldTooLong { limit }.into_datafusion())
                    })
                }
                _ => work.await,
            };
            // Before the scheduler hears of the task's end, so the client that reads
            // `accelsql.udf_calls` after its statement finds its calls there.
            self.engine
                .record_task_calls(&self.plan, &self.statement, &lease);
            drop(lease);
            done.map_err(coded)
        };
        match self.timeout {
            // Dropping the task's future drops its plan (its script workers are killed) and
            // its lease.
            Some(limit) => tokio::time::timeout(limit, run).await.unwrap_or_else(|_| {
                Err(coded(
                    EngineError::StatementTimeout { limit }.into_datafusion(),
                ))
            }),
            None => run.await,
        }
    }

    fn collect_plan_metrics(&self) -> Vec<MetricsSet> {
        self.inner.collect_plan_metrics()
    }

    fn collect_runtime_stats_reports(&self) -> Vec<RuntimeStatsReport> {
        self.inner.collect_runtime_stats_reports()
    }

    fn collect_window_state_reports(&self) -> Result<Vec<WindowStateReport>> {
        self.inner.collect_window_state_reports()
    }

    fn collect_column_stats(&self) -> Vec<TaskColumnStats> {
        self.inner.collect_column_stats()
    }
}
