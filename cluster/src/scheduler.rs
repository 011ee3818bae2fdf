//! The cluster's scheduler, in this process: Ballista's scheduler with accelsql's functions
//! (so that it can decode the plans clients submit), push-staged, spreading tasks round-robin.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use accelsql_engine::SchedulerConfig as DeviceConfig;
use ballista_core::config::TaskSchedulingPolicy;
use ballista_core::extension::SessionConfigExt;
use ballista_core::serde::protobuf::scheduler_grpc_server::SchedulerGrpcServer;
use ballista_core::utils::{GrpcServerConfig, create_grpc_server};
use ballista_scheduler::cluster::{BallistaCluster, ClusterStateEvent};
use ballista_scheduler::config::{SchedulerConfig, TaskDistributionPolicy};
use ballista_scheduler::scheduler_process::create_scheduler;
use ballista_scheduler::scheduler_server::SchedulerServer;
use datafusion::execution::SessionStateBuilder;
use datafusion_proto::protobuf::{LogicalPlanNode, PhysicalPlanNode};
use futures::StreamExt;
use tokio::task::JoinHandle;
use tonic::transport::server::TcpIncoming;

use crate::affinity::NodeAffinity;
use crate::codec::ClusterCodec;
use crate::error::{config_err, process_err};
use crate::guard::{EventSink, GuardedScheduler};
use crate::metrics::{Render, SchedulerMetrics, start_http};
use crate::node::{ConfigureEngine, NodeOptions, session_state};
use crate::security::ClusterAuth;
use crate::{ClusterError, Result};

/// How to start a scheduler.
#[derive(Clone)]
pub struct SchedulerOptions {
    /// Where to listen (port 0: any free port; [`SchedulerHandle::address`] tells which).
    pub listen: SocketAddr,
    /// How long an executor may miss heartbeats (sent every 2 s) before the scheduler drops it
    /// and stops the queries that were running (15 s by default).
    pub executor_timeout: Duration,
    /// Where the scheduler reports executors joining and leaving (besides the `log` crate).
    pub events: Option<EventSink>,
    /// Registers the embedding application's UDFs, as on the nodes
    /// ([`NodeOptions::configure`]): the scheduler plans stages with their types. Its Rust SET
    /// RETURNS UDFs (aggregate functions) must be registered here; scalar UDFs it does not know
    /// are passed on to the executors by name.
    pub configure: Option<ConfigureEngine>,
    /// How the cluster's processes authenticate each other; without it the scheduler listens
    /// on loopback only.
    pub auth: ClusterAuth,
    /// The cluster's node count; `None`: the first executor to register sets it. Executors
    /// claiming another count, or a node number outside it, are refused.
    pub nodes: Option<usize>,
    /// Where to serve the operator's endpoint (`/metrics`, `/healthz`, `/readyz`; port 0: any
    /// free port, [`SchedulerHandle::http_address`] tells which); `None`: no endpoint. Off
    /// loopback only with the cluster's TLS.
    pub http: Option<SocketAddr>,
}

impl std::fmt::Debug for SchedulerOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SchedulerOptions")
            .field("listen", &self.listen)
            .field("executor_timeout", &self.executor_timeout)
            .field("events", &self.events.is_some())
            .field("configure", &self.configure.is_some())
            .field("auth", &self.auth)
            .field("nodes", &self.nodes)
            .field("http", &self.http)
            .finish()
    }
}

impl Default for SchedulerOptions {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 50050)),
            executor_timeout: Duration::from_secs(15),
            events: None,
            configure: None,
            auth: ClusterAuth::none(),
            nodes: None,
            http: None,
        }
    }
}

/// A running scheduler; dropping the handle stops it.
pub struct SchedulerHandle {
    address: SocketAddr,
    server: SchedulerServer<LogicalPlanNode, PhysicalPlanNode>,
    task: JoinHandle<()>,
    /// The operator's endpoint: its address and serving task.
    http: Option<(SocketAddr, JoinHandle<()>)>,
}

/// Starts a scheduler on a tokio runtime (the caller's), listening on `options.listen`.
pub async fn start_scheduler(options: SchedulerOptions) -> Result<SchedulerHandle> {
    options
        .auth
        .check_listen(&options.listen.ip().to_string(), "the scheduler")?;
    if options.nodes == Some(0) {
        return config_err!("a cluster has at least one node");
    }
    let listener = tokio::net::TcpListener::bind(options.listen)
        .await
        .map_err(|e| ClusterError::Process {
            message: format!("the scheduler cannot listen on {}: {e}", options.listen),
        })?;
    let address = listener.local_addr().map_err(|e| ClusterError::Process {
        message: format!("the scheduler's address: {e}"),
    })?;
    // The scheduler decodes submitted plans: it needs every function name a plan may hold. It
    // runs no UDF itself, so it has no devices.
    let mut node = NodeOptions::new(0, 1, DeviceConfig::default().with_simulated_gpus(0));
    node.configure = options.configure.clone();
    let engine = node.engine()?;
    let state = session_state(&engine);
    let affinity = Arc::new(NodeAffinity::default());
    let config = SchedulerConfig {
        bind_host: address.ip().to_string(),
        external_host: address.ip().to_string(),
        bind_port: address.port(),
        scheduling_policy: TaskSchedulingPolicy::PushStaged,
        // Partition p runs on node p mod N (see `affinity.rs`).
        task_distribution: TaskDistributionPolicy::Custom(Arc::clone(&affinity) as _),
        executor_timeout_seconds: options.executor_timeout.as_secs().max(1),
        expire_dead_executor_interval_seconds: 2,
        // A failed task fails its query: Ballista's retries and stage rollbacks were seen to
        // return wrong answers (see `stop_jobs_of_lost_executor`).
        task_max_failures: 1,
        stage_max_failures: 1,
        override_physical_codec: Some(Arc::new(ClusterCodec::for_scheduler(engine))),
        // The scheduler's connections to executors carry its certificate.
        override_create_grpc_client_endpoint: options.auth.endpoint_override(),
        // A job's accelsql settings (`accelsql.memory_limit`, …) reach its tasks only if the
        // scheduler's session configuration knows them.
        override_config_producer: Some(Arc::new(|| {
            datafusion::prelude::SessionConfig::new_with_ballista()
                .with_option_extension(accelsql_engine::AccelsqlOptions::default())
        })),
        override_session_builder: Some(Arc::new(move |config| {
            Ok(SessionStateBuilder::new_from_existing(state.clone())
                .with_config(config)
                .build())
        })),
        ..SchedulerConfig::default()
    };
    let config = Arc::new(config);
    let cluster = BallistaCluster::new_from_config(&config).await?;
    let server =
        create_scheduler::<LogicalPlanNode, PhysicalPlanNode>(cluster, Arc::clone(&config)).await?;
    let mut events = server.state.executor_manager.cluster_state_events().await?;
    let metrics = Arc::new(SchedulerMetrics::new());
    let http = match options.http {
        Some(at) => {
            let watched = server.clone();
            let metrics = Arc::clone(&metrics);
            let render: Render = Arc::new(move || {
                let watched = watched.clone();
                let metrics = Arc::clone(&metrics);
                Box::pin(async move {
                    let executors = watched
                        .state
                        .executor_manager
                        .get_executors_state()
                        .await
                        .map_or(0, |e| e.len());
                    metrics.render(executors)
                })
            });
            Some(start_http(at, &options.auth, "the scheduler", render).await?)
        }
        None => None,
    };
    let guard = GuardedScheduler::new(
        server.clone(),
        options.nodes,
        // Three missed heartbeats (sent every 2 s): the holder of a node is taken for dead.
        Duration::from_secs(6).min(options.executor_timeout),
        options.events.clone(),
        Arc::clone(&metrics),
    );
    let mut builder = create_grpc_server(&GrpcServerConfig::default());
    if let Some(tls) = options.auth.server_tls() {
        builder = builder
            .tls_config(tls)
            .map_err(|e| ClusterError::Insecure {
                message: format!("the scheduler's TLS: {e}"),
            })?;
    }
    let service = SchedulerGrpcServer::new(guard)
        .max_encoding_message_size(config.grpc_server_max_encoding_message_size as usize)
        .max_decoding_message_size(config.grpc_server_max_decoding_message_size as usize);
    let router = builder.add_service(service);
    let incoming = TcpIncoming::from(listener).with_nodelay(Some(true));
    let watching = server.clone();
    let events_sink = options.events.clone();
    let watch_metrics = Arc::clone(&metrics);
    let task = tokio::spawn(async move {
        let serve = async {
            if let Err(e) = router.serve_with_incoming(incoming).await {
                log::error!("the scheduler stopped: {e}");
            }
        };
        // A lost executor stops every running job: Ballista would run the lost tasks again
        // elsewhere, and that recovery was seen to return wrong answers (Ballista 55.0.0, a
        // hash join whose executor was killed mid-query), so a query fails instead.
        let watch = async {
            while let Some(event) = events.next().await {
                match event {
                    ClusterStateEvent::RemovedExecutor { executor_id } => {
                        affinity.left(&executor_id);
                        watch_metrics.executor_lost();
                        stop_jobs_of_lost_executor(
                            &watching,
                            &executor_id,
                            events_sink.as_ref(),
                            &watch_metrics,
                        )
                        .await;
                    }
                    ClusterStateEvent::RegisteredExecutor { executor_id } => {
                        affinity.joined(&executor_id);
                        if let Some(sink) = &events_sink {
                            sink(&format!(
                                "{} joined the cluster ({executor_id})",
                                node_of_executor(&executor_id)
                            ));
                        }
                    }
                }
            }
        };
        tokio::join!(serve, watch);
    });
    Ok(SchedulerHandle {
        address,
        server,
        task,
        http,
    })
}

/// Cancels every running job after executor `executor_id` was lost.
async fn stop_jobs_of_lost_executor(
    server: &SchedulerServer<LogicalPlanNode, PhysicalPlanNode>,
    executor_id: &str,
    events: Option<&EventSink>,
    metrics: &SchedulerMetrics,
) {
    let node = node_of_executor(executor_id);
    if let Some(events) = events {
        events(&format!("{node} left the cluster ({executor_id})"));
    }
    let jobs = server.state.task_manager.get_running_job_cache();
    for job in jobs.keys() {
        let line = format!("{node} left the cluster: stopped job {job}");
        log::warn!("{line}");
        if let Some(events) = events {
            events(&line);
        }
        metrics.job_stopped();
        if let Err(e) = server.cancel_job(job.clone()).await {
            log::error!("cannot stop job {job}: {e}");
        }
    }
}

/// "node K" for an executor id `node-K-…` (as [`run_executor`](crate::run_executor) names
/// them), else the id.
pub(crate) fn node_of_executor(executor_id: &str) -> String {
    executor_id
        .strip_prefix("node-")
        .and_then(|rest| rest.split('-').next())
        .filter(|k| k.parse::<usize>().is_ok())
        .map_or_else(
            || format!("executor {executor_id}"),
            |k| format!("node {k}"),
        )
}

impl std::fmt::Debug for SchedulerHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SchedulerHandle")
            .field("address", &self.address)
            .finish()
    }
}

impl SchedulerHandle {
    /// The address executors and clients connect to.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// The ids of the executors registered now.
    pub async fn executors(&self) -> Result<Vec<String>> {
        let endpoints = self.executor_endpoints().await?;
        Ok(endpoints.into_iter().map(|(id, ..)| id).collect())
    }

    /// Each registered executor's id, host, Flight (data) port and task port.
    pub async fn executor_endpoints(&self) -> Result<Vec<(String, String, u16, u16)>> {
        let state = self
            .server
            .state
            .executor_manager
            .get_executors_state()
            .await?;
        Ok(state
            .into_iter()
            .map(|(meta, _, _)| (meta.id, meta.host, meta.port, meta.grpc_port))
            .collect())
    }

    /// Waits until at least `count` executors have registered; an error after `timeout`.
    pub async fn wait_for_executors(&self, count: usize, timeout: Duration) -> Result<()> {
        let start = Instant::now();
        loop {
            let have = self.executors().await?.len();
            if have >= count {
                return Ok(());
            }
            if start.elapsed() > timeout {
                return process_err!(
                    "{have} of {count} executors registered with the scheduler within {timeout:?}"
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The operator's HTTP endpoint's address ([`SchedulerOptions::http`]), if it has one.
    pub fn http_address(&self) -> Option<SocketAddr> {
        self.http.as_ref().map(|(at, _)| *at)
    }

    /// Stops serving.
    pub fn stop(self) {
        self.task.abort();
    }
}

impl Drop for SchedulerHandle {
    fn drop(&mut self) {
        self.task.abort();
        if let Some((_, http)) = &self.http {
            http.abort();
        }
    }
}
