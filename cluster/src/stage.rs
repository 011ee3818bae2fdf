//! The executors' execution engine: Ballista's, with each task holding its job's share of its
//! node's GPU lease while it runs, when its plan has GPU-placed calls, and recording its calls
//! in the node's `accelsql.udf_calls`.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::oneshot;

use crate::client::{NODE_LOST, is_broken_connection};
use crate::yielding::yield_each_batch;
use tokio::time::Instant;

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
        // Stoppable between batches (a timeout, a cancel), however long one operator works.
        let plan = yield_each_batch(plan)?;
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
        // An uncoded failure to read another node's shuffle output over a connection that
        // broke (its executor was killed): the node was lost, not the query wrong.
        "22000" | "XX000" if is_broken_connection(&e.to_string()) => EngineError::Relayed {
            code: NODE_LOST,
            message: format!(
                "[{NODE_LOST}] the query stopped: a node of the cluster stopped answering while \
                 another read its data (its executor stopped or the network failed); run it \
                 again. Detail: {}",
                e.to_string().lines().next().unwrap_or_default()
            ),
        },
        "XX000" => EngineError::from_remote_datafusion_text(&e.to_string()).unwrap_or(e),
        _ => e,
    };
    DataFusionError::Execution(e.to_string())
}

/// What one run of a task needs, owned (it runs in a tokio task of its own).
struct Task {
    inner: Arc<dyn QueryStageExecutor>,
    statement: String,
    plan: Arc<dyn ExecutionPlan>,
    engine: Engine,
    label: String,
}

impl Task {
    /// Runs the stage under the node's lease of its job; says on `held` when it holds devices.
    async fn run(
        self,
        task_id: usize,
        context: Arc<TaskContext>,
        held: oneshot::Sender<()>,
    ) -> Result<Vec<ShuffleWritePartition>> {
        let lease = self
            .engine
            .lease_for_plan(&self.plan, &self.statement, self.label.clone())
            .await
            .map_err(|e| coded(e.into_datafusion()))?;
        if lease.holds_devices() {
            let _ = held.send(());
        }
        let done = self.inner.execute_query_stage(task_id, context).await;
        // Before the scheduler hears of the task's end, so the client that reads
        // `accelsql.udf_calls` after its statement finds its calls there.
        self.engine
            .record_task_calls(&self.plan, &self.statement, &lease);
        drop(lease);
        done.map_err(coded)
    }
}

/// Stops a task's run unless disarmed: kills its plan's script workers and aborts its tokio
/// task. Dropped armed when the scheduler cancels the task (its job cancelled or failed).
struct StopTask {
    engine: Engine,
    plan: Arc<dyn ExecutionPlan>,
    task: tokio::task::AbortHandle,
    armed: bool,
}

impl StopTask {
    fn now(&self) {
        self.engine.kill_plan_workers(&self.plan);
        self.task.abort();
    }
}

impl Drop for StopTask {
    fn drop(&mut self) {
        if self.armed {
            self.now();
        }
    }
}

/// Which limit stops a task.
#[derive(Debug, Clone, Copy)]
enum Limit {
    /// The statement's timeout.
    Statement(Duration),
    /// The node's `--max-lease-hold`.
    Hold(Duration),
}

/// Sleeps until `deadline`; forever without one.
async fn sleep_until_some(deadline: Option<Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
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
        let (held, mut holds_devices) = oneshot::channel();
        let task = Task {
            inner: Arc::clone(&self.inner),
            statement: self.statement.clone(),
            plan: Arc::clone(&self.plan),
            engine: self.engine.clone(),
            label: self.label.clone(),
        };
        // The task runs apart from this future: a script's run blocks its thread, and a future
        // blocked there cannot be stopped. This one always can: dropped (the job cancelled) or
        // past a limit, it kills the plan's script workers, which ends the run at once.
        let mut work = tokio::spawn(task.run(task_id, context, held));
        let mut stop = StopTask {
            engine: self.engine.clone(),
            plan: Arc::clone(&self.plan),
            task: work.abort_handle(),
            armed: true,
        };
        let statement_deadline = self.timeout.map(|limit| (Instant::now() + limit, limit));
        let mut hold_deadline: Option<(Instant, Duration)> = None;
        let mut waiting_for_lease = true;
        loop {
            // The nearer of the two limits.
            let limit = match (statement_deadline, hold_deadline) {
                (Some(s), Some(h)) if h.0 < s.0 => Some((h.0, Limit::Hold(h.1))),
                (Some(s), _) => Some((s.0, Limit::Statement(s.1))),
                (None, Some(h)) => Some((h.0, Limit::Hold(h.1))),
                (None, None) => None,
            };
            tokio::select! {
                joined = &mut work => {
                    stop.armed = false;
                    return joined.unwrap_or_else(|e| {
                        Err(DataFusionError::Execution(format!("{}: the task failed: {e}", self.label)))
                    });
                }
                lease = &mut holds_devices, if waiting_for_lease => {
                    waiting_for_lease = false;
                    // A task that holds the GPUs longer than the node allows gives them up
                    // (57G03).
                    if lease.is_ok() {
                        hold_deadline = self
                            .engine
                            .max_lease_hold_for(&self.plan)
                            .map(|limit| (Instant::now() + limit, limit));
                    }
                }
                () = sleep_until_some(limit.map(|(at, _)| at)) => {
                    let Some((_, which)) = limit else { continue };
                    stop.now();
                    // The run ends once its workers are dead; wait (briefly) for the task to
                    // let its lease go before reporting.
                    let _ = tokio::time::timeout(Duration::from_secs(5), &mut work).await;
                    stop.armed = false;
                    let error = match which {
                        Limit::Hold(limit) => EngineError::LeaseHeldTooLong { limit },
                        Limit::Statement(limit) => EngineError::StatementTimeout { limit },
                    };
                    return Err(coded(error.into_datafusion()));
                }
            }
        }
    }

    /// None: the scheduler adds a task's operator metrics to its stage's, node by node, and
    /// refuses a task whose plan has another number of nodes than the stage's first — which
    /// the tasks of one stage have whenever the scheduler cut a branch of a `UNION ALL` away
    /// for some of them. A refused report is a lost task: its result partition went missing
    /// (a row of `SELECT x FROM t UNION ALL SELECT 5` was dropped) or its job never ended.
    /// Ballista skips an empty list; accelsql reads no stage metrics.
    fn collect_plan_metrics(&self) -> Vec<MetricsSet> {
        Vec::new()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shuffle_read_from_a_killed_node_is_a_lost_node_not_a_data_error() {
        let broken = DataFusionError::ArrowError(
            Box::new(datafusion::arrow::error::ArrowError::IpcError(
                "code: 'Unknown error', message: \"h2 protocol error: error reading a body \
                 from connection\""
                    .into(),
            )),
            None,
        );
        let text = coded(broken).to_string();
        assert!(text.contains("[58K02]"), "{text}");
        // A failure of the data itself keeps its own code.
        let zero = coded(DataFusionError::ArrowError(
            Box::new(datafusion::arrow::error::ArrowError::DivideByZero),
            None,
        ))
        .to_string();
        assert!(
            zero.contains("[22012]") || zero.contains("[22000]"),
            "{zero}"
        );
        assert!(!zero.contains("58K02"), "{zero}");
    }
}
