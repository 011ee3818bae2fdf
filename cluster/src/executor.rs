//! One executor: Ballista's executor process whose function registry is an accelsql node's.

use std::path::PathBuf;
use std::sync::Arc;

use ballista_core::config::TaskSchedulingPolicy;
use ballista_core::extension::SessionConfigExt;
use ballista_executor::executor_process::{ExecutorProcessConfig, start_executor_process};

use crate::codec::ClusterCodec;
use crate::error::config_err;
use crate::node::{NodeOptions, function_registry};
use crate::stage::LeasingEngine;
use crate::{ClusterError, Result};

/// How to start an executor.
#[derive(Debug, Clone)]
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
        }
    }
}

/// A free TCP port on `host` (bound and released: another process could take it before the
/// executor does, which then fails to start with a clear error).
fn free_port(host: &str) -> Result<u16> {
    let listener = std::net::TcpListener::bind((host, 0)).map_err(|e| ClusterError::Process {
        message: format!("no free port on {host}: {e}"),
    })?;
    listener
        .local_addr()
        .map(|a| a.port())
        .map_err(|e| ClusterError::Process {
            message: format!("no free port on {host}: {e}"),
        })
}

/// Runs an executor until the scheduler stops it, it is interrupted (SIGINT/SIGTERM), or it
/// fails; registers with the scheduler first (an unreachable scheduler is an error).
pub async fn run_executor(options: ExecutorOptions) -> Result<()> {
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
    let engine = options.node.engine()?;
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
        None => (
            std::env::temp_dir().join(format!("accelsql-executor-{executor_id}")),
            true,
        ),
    };
    std::fs::create_dir_all(&work_dir).map_err(|e| ClusterError::Process {
        message: format!("the work directory {}: {e}", work_dir.display()),
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
        // accelsql's settings (`accelsql.memory_limit`, …) arrive with each task: the task's
        // configuration must know them to take them.
        override_config_producer: Some(Arc::new(|| {
            datafusion::prelude::SessionConfig::new_with_ballista()
                .with_option_extension(accelsql_engine::AccelsqlOptions::default())
        })),
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
    if own_work_dir {
        let _ = std::fs::remove_dir_all(&work_dir);
    }
    result.map_err(|e| ClusterError::Process {
        message: format!("executor of node {}: {e}", options.node.id),
    })
}
