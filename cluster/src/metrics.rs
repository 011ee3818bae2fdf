//! The cluster processes' operator endpoint (`cluster scheduler|executor --http`): `/metrics`
//! in Prometheus' text format and `/healthz`, `/readyz`. An executor serves its node's metrics
//! (devices, lease queue, UDF calls, memory pool, spills, script workers: see
//! [`accelsql_ops::NodeMetrics`]), the scheduler the cluster's — executors registered and lost,
//! tasks by node and outcome, jobs stopped because an executor was lost. The endpoint has the
//! cluster's own login: on a cluster without a secret it listens on loopback only, as every
//! port of it does; with one it is HTTPS that asks for the cluster's client certificate.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;

use accelsql_ops::{NodeMetrics, OPENMETRICS_CONTENT_TYPE, encode_registry};
use axum::Router;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use ballista_core::serde::protobuf::task_status;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio::task::JoinHandle;

use crate::security::ClusterAuth;
use crate::{ClusterError, Result};

/// Labels: pairs of (name, value).
type Labels = Vec<(String, String)>;

/// The exposition text, made fresh for each scrape.
pub(crate) type Render =
    Arc<dyn Fn() -> Pin<Box<dyn Future<Output = String> + Send>> + Send + Sync>;

/// Starts the endpoint at `at` for `what` (e.g. "the executor of node 1"): refused off
/// loopback without the cluster's TLS. Returns the bound address and the serving task.
pub(crate) async fn start_http(
    at: SocketAddr,
    auth: &ClusterAuth,
    what: &str,
    render: Render,
) -> Result<(SocketAddr, JoinHandle<()>)> {
    auth.check_listen(&at.ip().to_string(), &format!("{what}'s HTTP endpoint"))?;
    let tls = auth.http_tls()?;
    let listener = tokio::net::TcpListener::bind(at)
        .await
        .map_err(|e| ClusterError::Process {
            message: format!("{what} cannot listen on {at} (HTTP): {e}"),
        })?;
    let bound = listener.local_addr().map_err(|e| ClusterError::Process {
        message: format!("{what}'s HTTP address: {e}"),
    })?;
    let app = Router::new()
        .route(
            "/metrics",
            get(move || {
                let render = Arc::clone(&render);
                async move {
                    (
                        [(header::CONTENT_TYPE, OPENMETRICS_CONTENT_TYPE)],
                        render().await,
                    )
                        .into_response()
                }
            }),
        )
        .merge(accelsql_ops::probes());
    let task = tokio::spawn(accelsql_ops::serve(
        listener,
        app,
        tls,
        accelsql_ops::Limits::default(),
    ));
    Ok((bound, task))
}

/// An executor's metrics: its node's, read from its engine at each scrape.
pub(crate) fn executor_render(engine: accelsql_engine::Engine) -> Render {
    let mut registry = Registry::with_prefix("accelsql");
    let node = NodeMetrics::register(&mut registry);
    let shared = Arc::new((registry, node, tokio::sync::Mutex::new(())));
    Arc::new(move || {
        let shared = Arc::clone(&shared);
        let engine = engine.clone();
        Box::pin(async move {
            let (registry, node, one) = &*shared;
            let _one = one.lock().await;
            node.update(&engine).await;
            encode_registry(registry)
        })
    })
}

/// The scheduler's metrics (see the module docs); shared by its gatekeeper, its watch of
/// executors, and its endpoint.
pub(crate) struct SchedulerMetrics {
    registry: Registry,
    tasks: Family<Labels, Counter>,
    executors: Gauge,
    executors_lost: Counter,
    jobs_stopped: Counter,
}

impl std::fmt::Debug for SchedulerMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SchedulerMetrics").finish_non_exhaustive()
    }
}

impl SchedulerMetrics {
    pub(crate) fn new() -> Self {
        let mut registry = Registry::with_prefix("accelsql_cluster");
        let tasks = Family::<Labels, Counter>::default();
        registry.register(
            "tasks",
            "Tasks ended, by node and outcome (successful, failed) as executors reported them",
            tasks.clone(),
        );
        let executors = Gauge::default();
        registry.register("executors", "Executors registered now", executors.clone());
        let executors_lost = Counter::default();
        registry.register(
            "executors_lost",
            "Executors dropped for missing heartbeats or stopping",
            executors_lost.clone(),
        );
        let jobs_stopped = Counter::default();
        registry.register(
            "jobs_stopped_by_lost_executor",
            "Running jobs stopped because an executor was lost (accelsql retries no task: \
             the statement fails with 58C02)",
            jobs_stopped.clone(),
        );
        Self {
            registry,
            tasks,
            executors,
            executors_lost,
            jobs_stopped,
        }
    }

    /// Counts the ended tasks of one status report from `executor_id`.
    pub(crate) fn tasks_reported(
        &self,
        executor_id: &str,
        statuses: &[ballista_core::serde::protobuf::TaskStatus],
    ) {
        let node = crate::affinity::node_and_count(executor_id)
            .map_or_else(|| "unknown".to_string(), |(k, _)| k.to_string());
        for status in statuses {
            let outcome = match status.status {
                Some(task_status::Status::Successful(_)) => "successful",
                Some(task_status::Status::Failed(_)) => "failed",
                _ => continue,
            };
            self.tasks
                .get_or_create(&vec![
                    ("node".to_string(), node.clone()),
                    ("outcome".to_string(), outcome.to_string()),
                ])
                .inc();
        }
    }

    /// Counts an executor lost.
    pub(crate) fn executor_lost(&self) {
        self.executors_lost.inc();
    }

    /// Counts a job stopped for a lost executor.
    pub(crate) fn job_stopped(&self) {
        self.jobs_stopped.inc();
    }

    /// The exposition text with `executors` registered now.
    pub(crate) fn render(&self, executors: usize) -> String {
        self.executors
            .set(i64::try_from(executors).unwrap_or(i64::MAX));
        encode_registry(&self.registry)
    }
}
