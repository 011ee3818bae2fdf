//! The scheduler's gatekeeper: Ballista's scheduler service behind a check of every executor's
//! claim to a node (its number free and within the cluster's node count), and the one question
//! accelsql's clients ask the scheduler — how many nodes the cluster has.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ballista_core::config::BALLISTA_JOB_NAME;
use ballista_core::serde::protobuf::scheduler_grpc_server::SchedulerGrpc;
use ballista_core::serde::protobuf::{
    CancelJobParams, CancelJobResult, CleanJobDataParams, CleanJobDataResult,
    CreateUpdateSessionParams, CreateUpdateSessionResult, ExecuteQueryParams, ExecuteQueryResult,
    ExecutorRegistration, ExecutorStoppedParams, ExecutorStoppedResult, GetJobMetricsParams,
    GetJobMetricsResult, GetJobStatusParams, GetJobStatusResult, HeartBeatParams, HeartBeatResult,
    JobStatus, PollWorkParams, PollWorkResult, QueuedJob, RegisterExecutorParams,
    RegisterExecutorResult, RemoveSessionParams, RemoveSessionResult, UpdateTaskStatusParams,
    UpdateTaskStatusResult, job_status,
};
use ballista_scheduler::scheduler_server::SchedulerServer;
use datafusion_proto::protobuf::{LogicalPlanNode, PhysicalPlanNode};
use futures::StreamExt;
use tonic::{Request, Response, Status};

use crate::ClusterError;
use crate::affinity::node_and_count;

/// Receives one line for each notable event of a scheduler: an executor joined or was lost, a
/// job was stopped, an executor was refused or took a node over.
pub type EventSink = std::sync::Arc<dyn Fn(&str) + Send + Sync>;

/// The job id a client asks the status of to learn the cluster's shape (no job has it: Ballista
/// names jobs with 7 random letters and digits).
pub(crate) const CLUSTER_INFO_JOB: &str = "accelsql-cluster-info";

/// How the name of every job an accelsql client submits starts (a unique id follows): the
/// scheduler finds a job whose client went away by it.
pub(crate) const STATEMENT_JOB_PREFIX: &str = "accelsql-statement-";

type Inner = SchedulerServer<LogicalPlanNode, PhysicalPlanNode>;

/// Ballista's scheduler service with accelsql's checks in front of it.
pub(crate) struct GuardedScheduler {
    inner: Inner,
    /// The cluster's node count: fixed by `--nodes`, or by the first executor that registers.
    nodes: tokio::sync::Mutex<Option<usize>>,
    /// How recent a node's holder's last heartbeat must be for a new claim to the node to be
    /// refused; an older holder is taken for dead and replaced (an executor restarted).
    stale_after: Duration,
    events: Option<EventSink>,
    /// Counts the tasks executors report.
    metrics: std::sync::Arc<crate::metrics::SchedulerMetrics>,
}

/// Watches one job's status stream; dropped before the job ended, it cancels the job.
struct CancelUnfinished {
    inner: Inner,
    /// The job's id, from its first status.
    job: Option<String>,
    /// The job's unique name, where its client gave one.
    name: Option<String>,
    /// Whether the job succeeded or failed (nothing left to cancel).
    finished: bool,
    events: Option<EventSink>,
}

impl CancelUnfinished {
    fn observe(&mut self, item: &Result<GetJobStatusResult, Status>) {
        let Ok(GetJobStatusResult {
            status: Some(status),
            ..
        }) = item
        else {
            return;
        };
        if self.job.is_none() && !status.job_id.is_empty() {
            self.job = Some(status.job_id.clone());
        }
        if matches!(
            status.status,
            Some(job_status::Status::Successful(_) | job_status::Status::Failed(_))
        ) {
            self.finished = true;
        }
    }
}

impl Drop for CancelUnfinished {
    fn drop(&mut self) {
        if self.finished || (self.job.is_none() && self.name.is_none()) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let inner = self.inner.clone();
        let events = self.events.clone();
        let (job, name) = (self.job.take(), self.name.take());
        runtime.spawn(async move {
            let job = match (job, name) {
                (Some(job), _) => job,
                (None, Some(name)) => match unfinished_job_named(&inner, &name).await {
                    Some(job) => job,
                    None => return,
                },
                (None, None) => return,
            };
            let line = format!("job {job}: its client went away before it ended; cancelling it");
            log::info!("{line}");
            if let Some(events) = &events {
                events(&line);
            }
            let params = CancelJobParams {
                job_id: job.clone(),
            };
            if let Err(e) = SchedulerGrpc::cancel_job(&inner, Request::new(params)).await {
                log::warn!("job {job}: cancelling it failed: {e}");
            }
        });
    }
}

/// The id of the one running job named `name`. A job just submitted may still be planned
/// before the scheduler runs it: looked for during up to 5 seconds.
async fn unfinished_job_named(inner: &Inner, name: &str) -> Option<String> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let running = inner.state.task_manager.get_running_job_cache();
        let mut named = Vec::new();
        for (id, job) in running.iter() {
            if job.execution_graph.read().await.job_name() == name {
                named.push(id.to_string());
            }
        }
        match named.len() {
            1 => return named.pop(),
            // Names are unique; two jobs with one name are not ours to guess between.
            2.. => return None,
            0 if tokio::time::Instant::now() >= deadline => return None,
            0 => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

/// Whether something accepts connections at `host:port` within a second.
async fn answers(host: &str, port: u16) -> bool {
    let connect = tokio::net::TcpStream::connect((host, port));
    matches!(
        tokio::time::timeout(Duration::from_secs(1), connect).await,
        Ok(Ok(_))
    )
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// A refusal of an executor, with the code its process reports.
fn refused(message: String) -> Status {
    Status::permission_denied(format!("[{}] {message}", ClusterError::NODE_REFUSED))
}

impl GuardedScheduler {
    pub(crate) fn new(
        inner: Inner,
        nodes: Option<usize>,
        stale_after: Duration,
        events: Option<EventSink>,
        metrics: std::sync::Arc<crate::metrics::SchedulerMetrics>,
    ) -> Self {
        Self {
            inner,
            nodes: tokio::sync::Mutex::new(nodes),
            stale_after,
            events,
            metrics,
        }
    }

    fn say(&self, line: &str) {
        log::warn!("{line}");
        if let Some(events) = &self.events {
            events(line);
        }
    }

    /// Admits `registration` (and runs `admit`, Ballista's own registration) or refuses it;
    /// one claim at a time, so two executors never both get a node.
    async fn admit<T>(
        &self,
        registration: Option<&ExecutorRegistration>,
        admit: impl Future<Output = Result<T, Status>>,
    ) -> Result<T, Status> {
        let Some(registration) = registration else {
            return Err(refused(
                "an executor registered without its metadata".into(),
            ));
        };
        let id = &registration.id;
        let Some((node, count)) = node_and_count(id) else {
            let line = format!(
                "refused executor {id:?}: its id names no node (accelsql's executors are \
                 `node-K-of-N-…`)"
            );
            self.say(&line);
            return Err(refused(line));
        };
        if registration.host.is_none() {
            return Err(refused(format!(
                "executor {id} registered without its host"
            )));
        }
        let mut nodes = self.nodes.lock().await;
        let cluster = nodes.unwrap_or(count);
        if count != cluster || node >= cluster {
            let line = format!(
                "refused executor {id}: it claims node {node} of {count}, and the cluster has \
                 {cluster} node(s), numbered 0 to {}",
                cluster.saturating_sub(1)
            );
            self.say(&line);
            return Err(refused(line));
        }
        let manager = &self.inner.state.executor_manager;
        let state = manager
            .get_executors_state()
            .await
            .map_err(|e| Status::internal(e.to_string()))?;
        for (holder, heartbeat, _) in state {
            if holder.id == *id || node_and_count(&holder.id).map(|(k, _)| k) != Some(node) {
                continue;
            }
            let age = heartbeat.map(|t| now_secs().saturating_sub(t.as_secs()));
            // A holder whose task port refuses connections has died (an executor restarted
            // right after a crash): its recent heartbeat does not keep the node.
            let recent = age.is_some_and(|age| age <= self.stale_after.as_secs());
            if recent && answers(&holder.host, holder.grpc_port).await {
                let line = format!(
                    "refused executor {id} at {}: node {node} is held by executor {} at {} \
                     (last heartbeat {}s ago)",
                    registration.host.as_deref().unwrap_or("?"),
                    holder.id,
                    holder.host,
                    age.unwrap_or(0)
                );
                self.say(&line);
                return Err(refused(line));
            }
            self.say(&format!(
                "executor {id} takes node {node} over from executor {}, {}",
                holder.id,
                match age {
                    Some(a) if recent => format!("whose task port no longer answers ({a}s)"),
                    Some(a) => format!("silent for {a}s"),
                    None => "never heard from".to_string(),
                }
            ));
            if let Err(e) = manager
                .remove_executor(
                    &holder.id,
                    Some(format!("node {node} was taken over by {id}")),
                )
                .await
            {
                log::error!("cannot remove executor {}: {e}", holder.id);
            }
        }
        let admitted = admit.await?;
        *nodes = Some(cluster);
        Ok(admitted)
    }
}

#[tonic::async_trait]
impl SchedulerGrpc for GuardedScheduler {
    async fn poll_work(
        &self,
        _request: Request<PollWorkParams>,
    ) -> Result<Response<PollWorkResult>, Status> {
        Err(refused(
            "this cluster pushes tasks to its executors; polling for work is refused".into(),
        ))
    }

    async fn register_executor(
        &self,
        request: Request<RegisterExecutorParams>,
    ) -> Result<Response<RegisterExecutorResult>, Status> {
        let registration = request.get_ref().metadata.clone();
        self.admit(registration.as_ref(), self.inner.register_executor(request))
            .await
    }

    async fn heart_beat_from_executor(
        &self,
        request: Request<HeartBeatParams>,
    ) -> Result<Response<HeartBeatResult>, Status> {
        // A heartbeat from an executor the scheduler does not know registers it (Ballista's
        // recovery after a scheduler restart): the same checks as a registration.
        let known = self
            .inner
            .state
            .executor_manager
            .get_executor_metadata(&request.get_ref().executor_id)
            .await
            .is_ok();
        if known {
            return self.inner.heart_beat_from_executor(request).await;
        }
        let registration = request.get_ref().metadata.clone();
        self.admit(
            registration.as_ref(),
            self.inner.heart_beat_from_executor(request),
        )
        .await
    }

    async fn update_task_status(
        &self,
        request: Request<UpdateTaskStatusParams>,
    ) -> Result<Response<UpdateTaskStatusResult>, Status> {
        let report = request.get_ref();
        self.metrics
            .tasks_reported(&report.executor_id, &report.task_status);
        self.inner.update_task_status(request).await
    }

    async fn create_update_session(
        &self,
        request: Request<CreateUpdateSessionParams>,
    ) -> Result<Response<CreateUpdateSessionResult>, Status> {
        self.inner.create_update_session(request).await
    }

    async fn remove_session(
        &self,
        request: Request<RemoveSessionParams>,
    ) -> Result<Response<RemoveSessionResult>, Status> {
        self.inner.remove_session(request).await
    }

    type ExecuteQueryPushStream = <Inner as SchedulerGrpc>::ExecuteQueryPushStream;

    /// Ballista's job submission, with one addition: a client that goes away before its job
    /// ends (its statement cancelled or timed out, its process killed, its connection lost)
    /// drops the job's status stream, and the job is cancelled, which stops its tasks on
    /// every executor and frees their leases and workers. Ballista alone would run it to the
    /// end for no one.
    async fn execute_query_push(
        &self,
        request: Request<ExecuteQueryParams>,
    ) -> Result<Response<Self::ExecuteQueryPushStream>, Status> {
        // Ballista sends a job's first status only when it ends: the job is found by its
        // name, which accelsql's clients make unique.
        let name = request
            .get_ref()
            .settings
            .iter()
            .find(|s| s.key == BALLISTA_JOB_NAME)
            .and_then(|s| s.value.clone())
            .filter(|name| name.starts_with(STATEMENT_JOB_PREFIX));
        let response = self.inner.execute_query_push(request).await?;
        let (metadata, statuses, extensions) = response.into_parts();
        let mut watch = CancelUnfinished {
            inner: self.inner.clone(),
            job: None,
            name,
            finished: false,
            events: self.events.clone(),
        };
        let statuses = statuses.inspect(move |item| watch.observe(item));
        Ok(Response::from_parts(
            metadata,
            Box::pin(statuses),
            extensions,
        ))
    }

    async fn execute_query(
        &self,
        request: Request<ExecuteQueryParams>,
    ) -> Result<Response<ExecuteQueryResult>, Status> {
        self.inner.execute_query(request).await
    }

    async fn get_job_status(
        &self,
        request: Request<GetJobStatusParams>,
    ) -> Result<Response<GetJobStatusResult>, Status> {
        if request.get_ref().job_id == CLUSTER_INFO_JOB {
            let nodes = *self.nodes.lock().await;
            return Ok(Response::new(GetJobStatusResult {
                status: Some(JobStatus {
                    job_id: CLUSTER_INFO_JOB.to_string(),
                    job_name: nodes.map_or_else(String::new, |n| format!("nodes={n}")),
                    status: Some(job_status::Status::Queued(QueuedJob { queued_at: 0 })),
                }),
                flight_proxy: None,
            }));
        }
        self.inner.get_job_status(request).await
    }

    async fn get_job_metrics(
        &self,
        request: Request<GetJobMetricsParams>,
    ) -> Result<Response<GetJobMetricsResult>, Status> {
        self.inner.get_job_metrics(request).await
    }

    async fn executor_stopped(
        &self,
        request: Request<ExecutorStoppedParams>,
    ) -> Result<Response<ExecutorStoppedResult>, Status> {
        self.inner.executor_stopped(request).await
    }

    async fn cancel_job(
        &self,
        request: Request<CancelJobParams>,
    ) -> Result<Response<CancelJobResult>, Status> {
        SchedulerGrpc::cancel_job(&self.inner, request).await
    }

    async fn clean_job_data(
        &self,
        request: Request<CleanJobDataParams>,
    ) -> Result<Response<CleanJobDataResult>, Status> {
        self.inner.clean_job_data(request).await
    }
}

/// The node count in the answer to a [`CLUSTER_INFO_JOB`] status request; `None` if the
/// scheduler does not know it yet.
pub(crate) fn nodes_of(result: &GetJobStatusResult) -> Option<usize> {
    result
        .status
        .as_ref()?
        .job_name
        .strip_prefix("nodes=")?
        .parse()
        .ok()
}
