//! `accelsql cluster scheduler|executor|local`: a Ballista cluster whose executors are accelsql
//! nodes, started from this binary.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use accelsql_cluster::{
    ExecutorOptions, LocalCluster, LocalClusterOptions, NodeOptions, READY_PREFIX, SchedulerOptions,
};
use accelsql_engine::SchedulerConfig;
use clap::Subcommand;

use crate::error::CliError;

/// The subcommands of `accelsql cluster`.
#[derive(Debug, Subcommand)]
pub(crate) enum ClusterCommand {
    /// Start a scheduler. Its first line of output is `scheduler: HOST:PORT`; SIGINT/SIGTERM
    /// stops it.
    Scheduler {
        /// Address and port to listen on (port 0: any free port).
        #[arg(long, value_name = "HOST:PORT", default_value = "127.0.0.1:50050")]
        listen: SocketAddr,
        /// Print `executors registered: N` once N executors have registered.
        #[arg(long, value_name = "N")]
        wait_for_executors: Option<usize>,
        /// Drop an executor silent this long (it heartbeats every 2 s) and stop the queries
        /// that were running (error 58C02 to their clients).
        #[arg(long, value_name = "SECONDS", default_value_t = 15)]
        executor_timeout: u64,
    },
    /// Start an executor: node K of N, with its own devices and GPU lease queue. Runs until
    /// the scheduler stops it or SIGINT/SIGTERM.
    Executor {
        /// The scheduler, HOST:PORT.
        #[arg(long, value_name = "HOST:PORT")]
        scheduler: String,
        /// This node's number, 0..N (`iproc()`).
        #[arg(long, value_name = "K", default_value_t = 0)]
        node_id: usize,
        /// The number of nodes (`nproc()`).
        #[arg(long, value_name = "N", default_value_t = 1)]
        nodes: usize,
        /// The node's GPUs, listed as CUDA_VISIBLE_DEVICES lists them (indices or UUIDs; the
        /// default is CUDA_VISIBLE_DEVICES, else every GPU NVML sees). Executors sharing a
        /// machine should get different GPUs (or share ACCELSQL_DEVICE_LOCK_DIR).
        #[arg(long, value_name = "LIST")]
        gpus: Option<String>,
        /// Use N simulated GPUs instead of NVML (overrides ACCELSQL_SIMULATED_GPUS).
        #[arg(long, value_name = "N")]
        simulated_gpus: Option<usize>,
        /// Tasks run at once (0: one per core).
        #[arg(long, value_name = "N", default_value_t = 0)]
        vcores: usize,
        /// Address to listen on; other executors and the scheduler connect to it.
        #[arg(long, value_name = "HOST", default_value = "127.0.0.1")]
        bind_host: String,
        /// Where shuffle files go (a temporary directory by default).
        #[arg(long, value_name = "DIR")]
        work_dir: Option<PathBuf>,
        /// The longest one of a statement's tasks may hold this node's GPU lease, in seconds;
        /// past it the task fails with 57G03 and the lease goes to the next in line.
        #[arg(long, value_name = "SECONDS", default_value_t = 600.0)]
        max_lease_hold: f64,
    },
    /// Start a scheduler and N executors on 127.0.0.1 as child processes. The first line of
    /// output is `scheduler: HOST:PORT`; runs until interrupted, then stops every process it
    /// started.
    Local {
        /// How many executors (nodes).
        #[arg(long, value_name = "N", default_value_t = 3)]
        executors: usize,
        /// Simulated GPUs per executor.
        #[arg(long, value_name = "N")]
        simulated_gpus_per_executor: Option<usize>,
        /// Tasks each executor runs at once (0: one per core).
        #[arg(long, value_name = "N", default_value_t = 0)]
        vcores: usize,
    },
}

fn cluster_err(e: accelsql_cluster::ClusterError) -> CliError {
    CliError::Cluster(Box::new(e))
}

fn say(line: &str) -> Result<(), CliError> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}")
        .and_then(|()| out.flush())
        .map_err(|e| CliError::Output(format!("cannot write to standard output: {e}")))
}

/// Runs `accelsql cluster …`.
pub(crate) fn run(command: ClusterCommand) -> Result<ExitCode, CliError> {
    if let ClusterCommand::Local {
        executors,
        simulated_gpus_per_executor,
        vcores,
    } = command
    {
        return local(executors, simulated_gpus_per_executor, vcores);
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError::Terminal(format!("cannot start the async runtime: {e}")))?;
    runtime.block_on(async move {
        match command {
            ClusterCommand::Scheduler {
                listen,
                wait_for_executors,
                executor_timeout,
            } => scheduler(listen, wait_for_executors, executor_timeout).await,
            ClusterCommand::Executor {
                scheduler,
                node_id,
                nodes,
                gpus,
                simulated_gpus,
                vcores,
                bind_host,
                work_dir,
                max_lease_hold,
            } => {
                if !(max_lease_hold.is_finite() && max_lease_hold > 0.0) {
                    return Err(CliError::Terminal(format!(
                        "--max-lease-hold must be a positive number of seconds, not \
                         {max_lease_hold}"
                    )));
                }
                let mut devices = SchedulerConfig::from_env()?;
                if let Some(n) = simulated_gpus {
                    devices = devices.with_simulated_gpus(n);
                }
                if let Some(list) = gpus {
                    devices = devices.with_visible_devices(list);
                }
                let mut node = NodeOptions::new(node_id, nodes, devices);
                node.max_lease_hold = Some(std::time::Duration::from_secs_f64(max_lease_hold));
                let mut options = ExecutorOptions::new(scheduler, node);
                options.vcores = vcores;
                options.bind_host = bind_host;
                options.work_dir = work_dir;
                accelsql_cluster::run_executor(options)
                    .await
                    .map_err(cluster_err)?;
                Ok(ExitCode::SUCCESS)
            }
            ClusterCommand::Local { .. } => Ok(ExitCode::SUCCESS),
        }
    })
}

async fn scheduler(
    listen: SocketAddr,
    wait: Option<usize>,
    executor_timeout: u64,
) -> Result<ExitCode, CliError> {
    let events: accelsql_cluster::EventSink =
        std::sync::Arc::new(|line: &str| eprintln!("accelsql cluster scheduler: {line}"));
    let handle = accelsql_cluster::start_scheduler(SchedulerOptions {
        listen,
        events: Some(events),
        executor_timeout: Duration::from_secs(executor_timeout.max(1)),
        configure: None,
    })
    .await
    .map_err(cluster_err)?;
    // The first line of output: scripts and `cluster local` wait for it.
    say(&format!("scheduler: {}", handle.address()))?;
    let ready = async {
        if let Some(n) = wait {
            match handle
                .wait_for_executors(n, Duration::from_secs(3600))
                .await
            {
                Ok(()) => say(&format!("{READY_PREFIX}{n}")),
                Err(e) => Err(cluster_err(e)),
            }
        } else {
            std::future::pending().await
        }
    };
    tokio::select! {
        _ = crate::serve::shutdown_signal() => {}
        outcome = ready => {
            outcome?;
            crate::serve::shutdown_signal().await;
        }
    }
    handle.stop();
    Ok(ExitCode::SUCCESS)
}

fn local(
    executors: usize,
    simulated_gpus: Option<usize>,
    vcores: usize,
) -> Result<ExitCode, CliError> {
    let program = std::env::current_exe()
        .map_err(|e| CliError::Terminal(format!("cannot find this program's path: {e}")))?;
    let mut options = LocalClusterOptions::new(program, executors);
    options.simulated_gpus_per_executor = simulated_gpus;
    options.vcores = vcores;
    let mut cluster = LocalCluster::start(&options).map_err(cluster_err)?;
    say(&format!("scheduler: {}", cluster.scheduler()))?;
    eprintln!(
        "accelsql cluster: {executors} executor(s) registered; connect with \
         `accelsql --cluster {} --nodes {executors}`; SIGINT/SIGTERM stops every process",
        cluster.scheduler()
    );
    // Wait for a signal; a process that stops on its own ends the whole cluster.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError::Terminal(format!("cannot start the async runtime: {e}")))?;
    // Wait for a signal. An executor that stops is reported and the others go on (queries
    // then fail or are retried by Ballista); a scheduler that stops ends the cluster.
    let died = runtime.block_on(async {
        let watch = async {
            loop {
                for (node, status) in cluster.newly_stopped() {
                    match node {
                        Some(k) => eprintln!(
                            "accelsql cluster: the executor of node {k} stopped ({status}); \
                             the other nodes go on"
                        ),
                        None => return format!("the scheduler stopped ({status})"),
                    }
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        };
        tokio::select! {
            _ = crate::serve::shutdown_signal() => None,
            why = watch => Some(why),
        }
    });
    cluster.stop();
    match died {
        Some(why) => {
            eprintln!("accelsql cluster: {why}; stopped the others");
            Ok(ExitCode::from(crate::error::EXIT_OWN_FAILURE))
        }
        None => {
            eprintln!("accelsql cluster: stopped every process");
            Ok(ExitCode::SUCCESS)
        }
    }
}
