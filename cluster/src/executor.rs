//! One executor: Ballista's executor process whose function registry is an accelsql node's.

use std::path::PathBuf;
use std::sync::Arc;

use accelsql_engine::udf_runtime::scratch::remove_abandoned_dirs;
use arrow_flight::flight_service_server::FlightServiceServer;
use ballista_core::config::TaskSchedulingPolicy;
use ballista_core::error::BallistaError;
use ballista_core::extension::SessionConfigExt;
use ballista_core::utils::create_grpc_server;
use ballista_executor::ArrowFlightServerProvider;
use ballista_executor::executor_process::{ExecutorProcessConfig, start_executor_process};
use ballista_executor::flight_service::BallistaFlightService;
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use tonic::transport::ServerTlsConfig;

use crate::codec::ClusterCodec;
use crate::error::config_err;
use crate::info::cluster_nodes;
use crate::node::{NodeOptions, function_registry};
use crate::security::ClusterAuth;
use crate::stage::LeasingEngine;
use crate::{ClusterError, Result};

/// How to start an executor.
#[derive(Clone)]
pub struct ExecutorOptions {
    /// The scheduler, `HOST:PORT`.
    pub scheduler: String,
    /// The node this executor is: number, node count, devices, UDFs.
    pub node: NodeOptions,
    /// The address to listen on (the scheduler and other executors connect to it).
    pub bind_host: String,
    /// The Arrow Flight port other executors fetch shuffle data from (0: any free port).
    pub port: u16,
    /// The gRPC port the scheduler pushes tasks to (0: any free port).
    pub grpc_port: u16,
    /// How many tasks run at once (0: one per core).
    pub vcores: usize,
    /// Where shuffle files go (a fresh temporary directory when `None`).
    pub work_dir: Option<PathBuf>,
    /// How it proves itself to the scheduler and the other executors, and checks them; without
    /// it the executor listens on loopback only.
    pub auth: ClusterAuth,
    /// Where to serve the operator's endpoint (`/metrics` of this node, `/healthz`,
    /// `/readyz`); `None`: no endpoint. Off loopback only with the cluster's TLS.
    pub http: Option<std::net::SocketAddr>,
    /// Where the executor reports where its endpoint listens (besides the `log` crate).
    pub events: Option<crate::EventSink>,
}

impl std::fmt::Debug for ExecutorOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExecutorOptions")
            .field("scheduler", &self.scheduler)
            .field("node", &self.node)
            .field("bind_host", &self.bind_host)
            .field("port", &self.port)
            .field("grpc_port", &self.grpc_port)
            .field("vcores", &self.vcores)
            .field("work_dir", &self.work_dir)
            .field("auth", &self.auth)
            .field("http", &self.http)
            .field("events", &self.events.is_some())
            .finish()
    }
}

impl ExecutorOptions {
    /// Node `node` of a cluster whose scheduler is at `scheduler`, on 127.0.0.1, any free ports.
    pub fn new(scheduler: impl Into<String>, node: NodeOptions) -> Self {
        Self {
            scheduler: scheduler.into(),
            node,
            bind_host: "127.0.0.1".into(),
            port: 0,
            grpc_port: 0,
            vcores: 0,
            work_dir: None,
            auth: ClusterAuth::none(),
            http: None,
            events: None,
        }
    }
}

/// A free TCP port on `host`, one this process has not handed out before.
///
/// Ballista binds the port itself, so the port is only tried here and released: whatever
/// binds it in between makes the executor's start fail. Two things keep that from happening
/// in practice. Ports come from below the kernel's ephemeral range (where it picks ports for
/// `bind(…:0)` and outgoing connections), so a scheduler, Flight server or client socket
/// opened meanwhile never lands on one; and a process-wide cursor, started at a place drawn
/// from the process id and the clock, walks that range, so executors started at once in one
/// process (or in several) do not pick the same port. Without a usable range below the
/// ephemeral one the kernel picks, as `bind(…:0)` does.
fn free_port(host: &str) -> Result<u16> {
    use std::sync::atomic::{AtomicU32, Ordering};
    static CURSOR: AtomicU32 = AtomicU32::new(u32::MAX);
    const LOWEST: u32 = 10_000;
    let no_port = |e: std::io::Error| ClusterError::Process {
        message: format!("no free port on {host}: {e}"),
    };
    let ephemeral_low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u32>().ok())
        .filter(|&low| low > LOWEST + 1_000 && low <= u32::from(u16::MAX));
    if let Some(high) = ephemeral_low {
        let span = high - LOWEST;
        if CURSOR.load(Ordering::Relaxed) == u32::MAX {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.subsec_nanos());
            let seed = std::process::id().wrapping_mul(7_919) ^ nanos;
            let _ = CURSOR.compare_exchange(
                u32::MAX,
                seed % span,
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
        }
        for _ in 0..512 {
            let offset = CURSOR.fetch_add(1, Ordering::Relaxed) % span;
            let Ok(port) = u16::try_from(LOWEST + offset) else {
                continue;
            };
            if std::net::TcpListener::bind((host, port)).is_ok() {
                return Ok(port);
            }
        }
    }
    let listener = std::net::TcpListener::bind((host, 0)).map_err(no_port)?;
    Ok(listener.local_addr().map_err(no_port)?.port())
}

/// Runs an executor until the scheduler stops it, it is interrupted (SIGINT/SIGTERM), or it
/// fails; registers with the scheduler first. An unreachable scheduler (08001), refused
/// credentials (28K01) or a node number the scheduler refuses (08K04) end it within seconds.
///
/// A node count of 0 in `options.node` asks the scheduler for the cluster's.
pub async fn run_executor(mut options: ExecutorOptions) -> Result<()> {
    options
        .auth
        .check_listen(&options.bind_host, "the executor")?;
    let Some((host, port)) = options.scheduler.rsplit_once(':') else {
        return config_err!(
            "the scheduler address {} is not HOST:PORT",
            options.scheduler
        );
    };
    let Ok(scheduler_port) = port.parse::<u16>() else {
        return config_err!(
            "the scheduler address {} has no valid port",
            options.scheduler
        );
    };
    // The first call: a wrong secret or an unknown cluster size is found and named here.
    let known = cluster_nodes(&options.scheduler, &options.auth).await?;
    match (known, options.node.count) {
        (None, 0) => {
            return config_err!(
                "the scheduler at {} does not know the cluster's size yet: give this first \
                 executor --nodes N (or the scheduler --nodes N)",
                options.scheduler
            );
        }
        (Some(n), 0) => options.node.count = n,
        _ => {}
    }
    let engine = options.node.engine()?;
    // The operator's endpoint lives as long as this function runs.
    let _http = match options.http {
        Some(at) => {
            let what = format!("the executor of node {}", options.node.id);
            let render = crate::metrics::executor_render(engine.clone());
            let (bound, task) =
                crate::metrics::start_http(at, &options.auth, &what, render).await?;
            let line = format!("node {}: http: {bound}", options.node.id);
            log::info!("{line}");
            if let Some(events) = &options.events {
                events(&line);
            }
            Some(AbortOnDrop(task))
        }
        None => None,
    };
    let registry = Arc::new(function_registry(&engine));
    let port = match options.port {
        0 => free_port(&options.bind_host)?,
        p => p,
    };
    let grpc_port = match options.grpc_port {
        0 => free_port(&options.bind_host)?,
        p => p,
    };
    let vcores = match options.vcores {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        n => n,
    };
    let executor_id = format!(
        "node-{}-of-{}-{}",
        options.node.id,
        options.node.count,
        ballista_core::ids::new_instance_id()
    );
    // The work directory (shuffle files, spills) must exist before the first task: Ballista's
    // own default names a temporary directory it has already removed, and two tasks arriving
    // at once then race to create it (one fails with "File exists").
    let (work_dir, own_work_dir) = match &options.work_dir {
        Some(dir) => (dir.clone(), false),
        None => {
            // Those of executors that were killed (SIGKILL leaves no chance to clean up).
            remove_abandoned_dirs(&std::env::temp_dir(), WORK_DIR_PREFIX);
            let name = format!("{WORK_DIR_PREFIX}{}-{executor_id}", std::process::id());
            (std::env::temp_dir().join(name), true)
        }
    };
    std::fs::create_dir_all(&work_dir).map_err(|e| ClusterError::Process {
        message: format!("the work directory {}: {e}", work_dir.display()),
    })?;
    // A directory of our own goes when the executor does: on return, and also when the
    // future is dropped (an embedding program aborts the task, or its runtime shuts down).
    let _work_dir_guard = own_work_dir.then(|| RemoveOnDrop(work_dir.clone()));
    // One runtime for every task (its spill folder and file caches), as an engine shares one
    // across its sessions. Ballista's default builds one per session, and with it a spill
    // folder that is made and removed again for each of a client's statements.
    let runtime = RuntimeEnvBuilder::new()
        .with_temp_file_path(&work_dir)
        .build_arc()
        .map_err(|e| ClusterError::Process {
            message: format!("the executor's runtime: {e}"),
        })?;
    let config = ExecutorProcessConfig {
        // `node-K-of-N-…`: the scheduler places partition p on node p mod N by it.
        executor_id,
        bind_host: options.bind_host.clone(),
        external_host: Some(options.bind_host.clone()),
        port,
        grpc_port,
        scheduler_host: host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string(),
        scheduler_port,
        scheduler_connect_timeout_seconds: 10,
        vcores,
        task_scheduling_policy: TaskSchedulingPolicy::PushStaged,
        work_dir: Some(work_dir.to_string_lossy().into_owned()),
        print_thread_info: false,
        executor_heartbeat_interval_seconds: 2,
        override_function_registry: Some(registry),
        override_physical_codec: Some(Arc::new(ClusterCodec::for_node(
            options.node.id,
            engine.clone(),
        ))),
        override_execution_engine: Some(Arc::new(LeasingEngine::new(engine.clone()))),
        override_runtime_producer: Some(Arc::new(move |_| Ok(Arc::clone(&runtime)))),
        // The task port and the Flight port require the cluster's certificate; the
        // executor's own connections (to the scheduler, to other executors' Flight ports)
        // present it.
        grpc_server_tls: options.auth.server_tls(),
        override_arrow_flight_service: options.auth.server_tls().map(secure_flight_service),
        override_create_grpc_client_endpoint: options.auth.endpoint_override(),
        // accelsql's settings (`accelsql.memory_limit`, …) arrive with each task: the task's
        // configuration must know them to take them.
        override_config_producer: Some({
            let secure = options.auth.endpoint_override();
            Arc::new(move || {
                let config = datafusion::prelude::SessionConfig::new_with_ballista()
                    .with_option_extension(accelsql_engine::AccelsqlOptions::default());
                // A task's shuffle reads fetch from other executors with the certificate.
                match &secure {
                    Some(secure) => config
                        .with_ballista_override_create_grpc_client_endpoint(Arc::clone(secure)),
                    None => config,
                }
            })
        }),
        ..ExecutorProcessConfig::default()
    };
    log::info!(
        "executor of node {} of {}: flight port {port}, grpc port {grpc_port}, scheduler {}",
        options.node.id,
        options.node.count,
        options.scheduler
    );
    // The engine lives as long as the executor: its lease queue and device locks are the node's.
    let result = start_executor_process(Arc::new(config)).await;
    drop(engine);
    result.map_err(|e| {
        let text = e.to_string();
        // The scheduler's refusal carries its code; keep it.
        let refusal = format!("[{}]", ClusterError::NODE_REFUSED);
        match text.find(&refusal) {
            Some(at) => ClusterError::NodeRefused {
                message: format!(
                    "executor of node {}: the scheduler refused it: {}",
                    options.node.id,
                    text[at + refusal.len()..].trim().trim_end_matches('"')
                ),
            },
            None => ClusterError::Process {
                message: format!("executor of node {}: {text}", options.node.id),
            },
        }
    })
}

/// How the work directories that executors make for themselves are named (the process id and
/// the executor id follow).
const WORK_DIR_PREFIX: &str = "accelsql-executor-";

/// Removes a directory (and what is in it) when dropped.
struct RemoveOnDrop(PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The executor's Flight service (shuffle and result data) behind TLS that requires the
/// cluster's certificate from every client.
fn secure_flight_service(tls: ServerTlsConfig) -> Arc<ArrowFlightServerProvider> {
    Arc::new(move |work_dir, address, mut shutdown, grpc| {
        let tls = tls.clone();
        tokio::spawn(async move {
            let defaults = ExecutorProcessConfig::default();
            let service = FlightServiceServer::new(BallistaFlightService::new(work_dir))
                .max_decoding_message_size(defaults.grpc_max_decoding_message_size as usize)
                .max_encoding_message_size(defaults.grpc_max_encoding_message_size as usize);
            create_grpc_server(&grpc)
                .tls_config(tls)?
                .add_service(service)
                .serve_with_shutdown(address, shutdown.recv())
                .await
                .map_err(BallistaError::TonicError)
        })
    })
}

/// Aborts a task when dropped (the executor's HTTP endpoint ends with it).
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::free_port;

    #[test]
    fn free_ports_are_never_handed_out_twice_in_a_process() {
        let mut ports: Vec<u16> = (0..64)
            .map(|_| free_port("127.0.0.1").unwrap_or_default())
            .collect();
        assert!(ports.iter().all(|&p| p != 0));
        ports.sort_unstable();
        ports.dedup();
        assert_eq!(ports.len(), 64);
    }
}
