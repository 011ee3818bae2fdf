//! `accelsql cluster scheduler|executor|local`: a Ballista cluster whose executors are accelsql
//! nodes, started from this binary.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use accelsql_cluster::{
    ClusterAuth, ExecutorOptions, LocalCluster, LocalClusterOptions, NodeOptions, READY_PREFIX,
    SchedulerOptions,
};
use accelsql_engine::SchedulerConfig;
use clap::Subcommand;

use crate::error::CliError;

/// How a cluster process (or a client of the cluster) proves itself and checks its peers.
#[derive(Debug, Clone, Default, clap::Args)]
pub(crate) struct ClusterAuthArgs {
    /// The cluster's secret (`accelsql cluster secret --out FILE` makes one; owner-only): every
    /// connection between the cluster's processes and clients is mutual TLS from it. Without
    /// it (or --tls-*) the processes listen on loopback only.
    #[arg(long, value_name = "FILE")]
    pub(crate) secret_file: Option<PathBuf>,
    /// Mutual TLS with your own certificates instead: this process's certificate (PEM, valid
    /// for server and client authentication, naming the host peers connect to).
    #[arg(long, value_name = "FILE", requires_all = ["tls_key", "tls_ca"], conflicts_with = "secret_file")]
    pub(crate) tls_cert: Option<PathBuf>,
    /// The key of --tls-cert (owner-only).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub(crate) tls_key: Option<PathBuf>,
    /// The authority whose certificates this process accepts from its peers.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub(crate) tls_ca: Option<PathBuf>,
}

impl ClusterAuthArgs {
    /// The authentication these options ask for.
    pub(crate) fn auth(&self) -> Result<ClusterAuth, CliError> {
        ClusterAuth::from_options(
            self.secret_file.as_deref(),
            self.tls_cert.as_deref(),
            self.tls_key.as_deref(),
            self.tls_ca.as_deref(),
        )
        .map_err(cluster_err)
    }
}

/// The subcommands of `accelsql cluster`.
#[derive(Debug, Subcommand)]
pub(crate) enum ClusterCommand {
    /// Start a scheduler. Its first line of output is `scheduler: HOST:PORT`; SIGINT/SIGTERM
    /// stops it.
    Scheduler {
        /// Address and port to listen on (port 0: any free port). Without --secret-file (or
        /// --tls-*), loopback only.
        #[arg(long, value_name = "HOST:PORT", default_value = "127.0.0.1:50050")]
        listen: SocketAddr,
        /// The cluster's node count: executors claiming another count, or a node number
        /// outside it, are refused (by default the first executor to register sets it).
        #[arg(long, value_name = "N")]
        nodes: Option<usize>,
        /// Print `executors registered: N` once N executors have registered.
        #[arg(long, value_name = "N")]
        wait_for_executors: Option<usize>,
        /// Drop an executor silent this long (it heartbeats every 2 s) and stop the queries
        /// that were running (error 58C02 to their clients).
        #[arg(long, value_name = "SECONDS", default_value_t = 15)]
        executor_timeout: u64,
        /// Serve the operator's endpoint at HOST:PORT: `/metrics` (Prometheus' text format),
        /// `/healthz`, `/readyz`. On a cluster without a secret it must be loopback; with one
        /// it is HTTPS asking for the cluster's client certificate. Its line of output is
        /// `http: HOST:PORT`.
        #[arg(long, value_name = "HOST:PORT")]
        http: Option<SocketAddr>,
        #[command(flatten)]
        auth: ClusterAuthArgs,
    },
    /// Start an executor: node K of N, with its own devices and GPU lease queue. Runs until
    /// the scheduler stops it or SIGINT/SIGTERM.
    Executor {
        /// The scheduler, HOST:PORT.
        #[arg(long, value_name = "HOST:PORT")]
        scheduler: String,
        /// This node's number, 0..N (`iproc()`); the scheduler refuses a number another running
        /// executor holds.
        #[arg(long, value_name = "K", default_value_t = 0)]
        node_id: usize,
        /// The number of nodes (`nproc()`); by default the scheduler's.
        #[arg(long, value_name = "N")]
        nodes: Option<usize>,
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
        /// Serve the operator's endpoint at HOST:PORT: `/metrics` (Prometheus' text format),
        /// `/healthz`, `/readyz`. On a cluster without a secret it must be loopback; with one
        /// it is HTTPS asking for the cluster's client certificate. Its line of output is
        /// `http: HOST:PORT`.
        #[arg(long, value_name = "HOST:PORT")]
        http: Option<SocketAddr>,
        #[command(flatten)]
        gpu_sharing: crate::gpu::sharing::GpuSharingArgs,
        #[command(flatten)]
        script_user: crate::script_user::ScriptUserArgs,
        #[command(flatten)]
        auth: ClusterAuthArgs,
    },
    /// Start a scheduler and N executors on 127.0.0.1 as child processes, with a secret of
    /// their own. The first line of output is `scheduler: HOST:PORT`, the second
    /// `secret-file: PATH` (clients pass it as --secret-file); runs until interrupted, then
    /// stops every process it started and removes the secret.
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
        /// The longest one of a statement's tasks may hold an executor's GPU lease, in
        /// seconds (57G03 past it); a client's own bound (`serve --max-lease-hold`) applies
        /// too, whichever is smaller.
        #[arg(long, value_name = "SECONDS", default_value_t = 600.0)]
        max_lease_hold: f64,
    },
    /// Write a new cluster secret (owner-only, 0600) for --secret-file; refuses to overwrite.
    Secret {
        /// The file to create.
        #[arg(long, value_name = "FILE")]
        out: PathBuf,
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
        max_lease_hold,
    } = command
    {
        if !(max_lease_hold.is_finite() && max_lease_hold > 0.0) {
            return Err(CliError::Terminal(format!(
                "--max-lease-hold must be a positive number of seconds, not {max_lease_hold}"
            )));
        }
        return local(
            executors,
            simulated_gpus_per_executor,
            vcores,
            std::time::Duration::from_secs_f64(max_lease_hold),
        );
    }
    if let ClusterCommand::Secret { out } = &command {
        ClusterAuth::write_secret_file(out).map_err(cluster_err)?;
        eprintln!(
            "accelsql cluster: wrote a new secret to {} (owner-only); give it to every process \
             of the cluster and its clients as --secret-file",
            out.display()
        );
        return Ok(ExitCode::SUCCESS);
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        // Statements plan and run on these threads (see STATEMENT_STACK_BYTES).
        .thread_stack_size(accelsql_engine::STATEMENT_STACK_BYTES)
        .build()
        .map_err(|e| CliError::Terminal(format!("cannot start the async runtime: {e}")))?;
    runtime.block_on(async move {
        match command {
            ClusterCommand::Scheduler {
                listen,
                nodes,
                wait_for_executors,
                executor_timeout,
                http,
                auth,
            } => {
                let options = SchedulerOptions {
                    listen,
                    nodes,
                    http,
                    executor_timeout: Duration::from_secs(executor_timeout.max(1)),
                    auth: auth.auth()?,
                    ..SchedulerOptions::default()
                };
                scheduler(options, wait_for_executors).await
            }
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
                http,
                gpu_sharing,
                script_user,
                auth,
            } => {
                script_user.apply()?;
                if !(max_lease_hold.is_finite() && max_lease_hold > 0.0) {
                    return Err(CliError::Terminal(format!(
                        "--max-lease-hold must be a positive number of seconds, not \
                         {max_lease_hold}"
                    )));
                }
                // Each executor applies its own node's sharing setting.
                let mut devices = gpu_sharing.apply(SchedulerConfig::from_env()?)?;
                if let Some(n) = simulated_gpus {
                    devices = devices.with_simulated_gpus(n);
                }
                if let Some(list) = gpus {
                    devices = devices.with_visible_devices(list);
                }
                // 0: the scheduler says.
                let mut node = NodeOptions::new(node_id, nodes.unwrap_or(0), devices);
                node.max_lease_hold = Some(std::time::Duration::from_secs_f64(max_lease_hold));
                let mut options = ExecutorOptions::new(scheduler, node);
                options.vcores = vcores;
                options.bind_host = bind_host;
                options.work_dir = work_dir;
                options.auth = auth.auth()?;
                options.http = http;
                options.events = Some(std::sync::Arc::new(|line: &str| {
                    // `node K: http: HOST:PORT`: the endpoint's line, as `serve` prints it.
                    match line.split_once(": http: ") {
                        Some((_, at)) => println!("http: {at}"),
                        None => eprintln!("accelsql cluster executor: {line}"),
                    }
                }));
                accelsql_cluster::run_executor(options)
                    .await
                    .map_err(cluster_err)?;
                Ok(ExitCode::SUCCESS)
            }
            ClusterCommand::Local { .. } | ClusterCommand::Secret { .. } => Ok(ExitCode::SUCCESS),
        }
    })
}

async fn scheduler(
    mut options: SchedulerOptions,
    wait: Option<usize>,
) -> Result<ExitCode, CliError> {
    let events: accelsql_cluster::EventSink =
        std::sync::Arc::new(|line: &str| eprintln!("accelsql cluster scheduler: {line}"));
    options.events = Some(events);
    let handle = accelsql_cluster::start_scheduler(options)
        .await
        .map_err(cluster_err)?;
    // The first line of output: scripts and `cluster local` wait for it.
    say(&format!("scheduler: {}", handle.address()))?;
    if let Some(http) = handle.http_address() {
        say(&format!("http: {http}"))?;
    }
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
    max_lease_hold: std::time::Duration,
) -> Result<ExitCode, CliError> {
    let program = std::env::current_exe()
        .map_err(|e| CliError::Terminal(format!("cannot find this program's path: {e}")))?;
    let mut options = LocalClusterOptions::new(program, executors);
    options.simulated_gpus_per_executor = simulated_gpus;
    options.vcores = vcores;
    options.max_lease_hold = Some(max_lease_hold);
    let mut cluster = LocalCluster::start(&options).map_err(cluster_err)?;
    say(&format!("scheduler: {}", cluster.scheduler()))?;
    let secret = cluster
        .secret_file()
        .map(|f| f.display().to_string())
        .unwrap_or_default();
    say(&format!("secret-file: {secret}"))?;
    eprintln!(
        "accelsql cluster: {executors} executor(s) registered; connect with \
         `accelsql --cluster {} --secret-file {secret}`; SIGINT/SIGTERM stops every process",
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
