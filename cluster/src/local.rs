//! `accelsql cluster local`: a scheduler and N executors as child processes on 127.0.0.1, for
//! trying a cluster out and for tests; every process it started stops with it.

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::error::{config_err, process_err};
use crate::security::{ClusterAuth, private_dir};
use crate::{ClusterError, Result};

/// The line a scheduler started with `--wait-for-executors N` prints once N have registered.
pub const READY_PREFIX: &str = "executors registered: ";

/// How to start a local cluster.
#[derive(Debug, Clone)]
pub struct LocalClusterOptions {
    /// The `accelsql` binary the processes run (`accelsql cluster scheduler|executor`).
    pub program: PathBuf,
    /// How many executors (nodes).
    pub executors: usize,
    /// Simulated GPUs per executor (`None`: what the environment gives each).
    pub simulated_gpus_per_executor: Option<usize>,
    /// Tasks each executor runs at once (0: one per core).
    pub vcores: usize,
    /// The longest a statement's task may hold an executor's GPU lease (`None`: the
    /// executors' default, 600 s).
    pub max_lease_hold: Option<Duration>,
    /// How long to wait for every executor to register.
    pub start_timeout: Duration,
    /// How long an executor may be silent before the scheduler drops it and stops the queries
    /// that were running.
    pub executor_timeout: Duration,
    /// Whether the processes authenticate each other with a secret the cluster makes (true by
    /// default; [`LocalCluster::secret_file`] names it). Without, they trust anyone on
    /// loopback.
    pub secret: bool,
}

impl LocalClusterOptions {
    /// `executors` executors of `program`, environment devices, 60 s to start.
    pub fn new(program: impl Into<PathBuf>, executors: usize) -> Self {
        Self {
            program: program.into(),
            executors,
            simulated_gpus_per_executor: None,
            vcores: 0,
            max_lease_hold: None,
            start_timeout: Duration::from_secs(60),
            executor_timeout: Duration::from_secs(15),
            secret: true,
        }
    }
}

/// A running local cluster; dropping it kills (and reaps) every process it started.
#[derive(Debug)]
pub struct LocalCluster {
    scheduler: String,
    /// The scheduler first, then executor k at index k + 1.
    processes: Vec<Child>,
    /// Whether [`newly_stopped`](Self::newly_stopped) has reported each process's end.
    reported: Vec<bool>,
    /// The owner-only directory holding the cluster's secret, removed when the cluster stops.
    secret_dir: Option<PathBuf>,
    /// How it was started (executors restart with the same settings).
    options: LocalClusterOptions,
    /// `--secret-file FILE` when the cluster has a secret.
    secret_args: Vec<String>,
}

/// Starts `command` (a process of `program`, described as `what` in errors); the child gets
/// SIGTERM if this process dies without stopping it.
fn spawn(program: &std::path::Path, command: &mut Command, what: &str) -> Result<Child> {
    // If this process dies without stopping them (SIGKILL), the children get SIGTERM.
    #[cfg(target_os = "linux")]
    // SAFETY: prctl(2) is async-signal-safe; the closure allocates nothing.
    unsafe {
        command.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
            Ok(())
        });
    }
    command.spawn().map_err(|e| ClusterError::Process {
        message: format!("cannot start the {what} ({}): {e}", program.display()),
    })
}

impl LocalCluster {
    /// Starts the scheduler, reads its address from its first line of output, starts the
    /// executors (node k of N each), and waits until all have registered.
    pub fn start(options: &LocalClusterOptions) -> Result<Self> {
        if options.executors == 0 {
            return config_err!("a local cluster needs at least one executor");
        }
        let secret_dir = if options.secret {
            Some(private_dir("accelsql-cluster")?)
        } else {
            None
        };
        let secret_file = secret_dir.as_ref().map(|dir| dir.join("secret"));
        // From here on, dropping `cluster` stops whatever has started and removes the secret.
        let mut cluster = Self {
            scheduler: String::new(),
            processes: Vec::new(),
            reported: Vec::new(),
            secret_dir,
            options: options.clone(),
            secret_args: Vec::new(),
        };
        if let Some(file) = &secret_file {
            ClusterAuth::write_secret_file(file)?;
            cluster.secret_args = vec!["--secret-file".into(), file.to_string_lossy().into_owned()];
        }
        let secret_args = &cluster.secret_args;
        let mut scheduler = spawn(
            &options.program,
            Command::new(&options.program)
                .args(["cluster", "scheduler", "--listen", "127.0.0.1:0"])
                .args(["--nodes", &options.executors.to_string()])
                .args(secret_args)
                .args(["--wait-for-executors", &options.executors.to_string()])
                .args([
                    "--executor-timeout",
                    &options.executor_timeout.as_secs().max(1).to_string(),
                ])
                .stdin(Stdio::null())
                .stdout(Stdio::piped()),
            "scheduler",
        )?;
        let stdout = scheduler.stdout.take();
        cluster.processes.push(scheduler);
        cluster.reported.push(false);
        let Some(stdout) = stdout else {
            return process_err!("the scheduler's output cannot be read");
        };
        let (lines_tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout)
                .lines()
                .map_while(std::result::Result::ok)
            {
                if lines_tx.send(line).is_err() {
                    break;
                }
            }
        });
        let deadline = Instant::now() + options.start_timeout;
        let first = cluster.next_line(&lines, deadline)?;
        let Some(address) = first.strip_prefix("scheduler: ") else {
            return process_err!("the scheduler said {first:?} instead of its address");
        };
        cluster.scheduler = address.to_string();
        for node in 0..options.executors {
            let child = cluster.spawn_executor(node)?;
            cluster.processes.push(child);
            cluster.reported.push(false);
        }
        loop {
            let line = cluster.next_line(&lines, deadline)?;
            if line.starts_with(READY_PREFIX) {
                break;
            }
        }
        // The scheduler's later lines are not needed; keep draining them so it never blocks.
        std::thread::spawn(move || while lines.recv().is_ok() {});
        Ok(cluster)
    }

    /// Starts an executor process for node `node`.
    fn spawn_executor(&self, node: usize) -> Result<Child> {
        let options = &self.options;
        let mut command = Command::new(&options.program);
        command
            .args(["cluster", "executor", "--scheduler", &self.scheduler])
            .args(["--node-id", &node.to_string()])
            .args(["--nodes", &options.executors.to_string()])
            .args(["--vcores", &options.vcores.to_string()])
            .args(&self.secret_args)
            .stdin(Stdio::null())
            .stdout(Stdio::null());
        if let Some(gpus) = options.simulated_gpus_per_executor {
            command.args(["--simulated-gpus", &gpus.to_string()]);
        }
        if let Some(hold) = options.max_lease_hold {
            command.args(["--max-lease-hold", &hold.as_secs_f64().to_string()]);
        }
        spawn(
            &options.program,
            &mut command,
            &format!("executor of node {node}"),
        )
    }

    /// The next line the scheduler printed; an error if it or an executor stopped first, or
    /// the deadline passed.
    fn next_line(&mut self, lines: &mpsc::Receiver<String>, deadline: Instant) -> Result<String> {
        loop {
            for (i, child) in self.processes.iter_mut().enumerate() {
                if let Ok(Some(status)) = child.try_wait() {
                    let who = match i {
                        0 => "the scheduler".to_string(),
                        k => format!("the executor of node {}", k - 1),
                    };
                    return process_err!("{who} stopped while the cluster was starting ({status})");
                }
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return process_err!(
                    "the cluster did not start in time (executors not registered)"
                );
            }
            match lines.recv_timeout(left.min(Duration::from_millis(200))) {
                Ok(line) => return Ok(line),
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    return process_err!("the scheduler closed its output while starting");
                }
            }
        }
    }

    /// The scheduler's address, `HOST:PORT`.
    pub fn scheduler(&self) -> &str {
        &self.scheduler
    }

    /// The file holding the cluster's secret (owner-only; removed when the cluster stops), if
    /// it has one: clients pass it as `--secret-file`.
    pub fn secret_file(&self) -> Option<PathBuf> {
        self.secret_dir.as_ref().map(|dir| dir.join("secret"))
    }

    /// How a client of this cluster authenticates: its secret, or nothing.
    pub fn auth(&self) -> Result<ClusterAuth> {
        match self.secret_file() {
            Some(file) => ClusterAuth::from_secret_file(&file),
            None => Ok(ClusterAuth::none()),
        }
    }

    /// The number of executors.
    pub fn executors(&self) -> usize {
        self.processes.len().saturating_sub(1)
    }

    /// The process id of node `node`'s executor, if it is running.
    pub fn executor_pid(&self, node: usize) -> Option<u32> {
        self.processes.get(node + 1).map(Child::id)
    }

    /// Kills node `node`'s executor (as a crash would) and reaps it.
    pub fn kill_executor(&mut self, node: usize) -> Result<()> {
        let Some(child) = self.processes.get_mut(node + 1) else {
            return config_err!("there is no node {node}");
        };
        child.kill().map_err(|e| ClusterError::Process {
            message: format!("cannot kill the executor of node {node}: {e}"),
        })?;
        let _ = child.wait();
        Ok(())
    }

    /// Starts a new executor for node `node`, as an operator restarts a crashed one: the old
    /// process is killed first if it still runs. The scheduler hands the node to the newcomer
    /// once the old holder no longer answers (at once after a crash); queries reach the node
    /// again from then on.
    pub fn restart_executor(&mut self, node: usize) -> Result<()> {
        if node + 1 >= self.processes.len() {
            return config_err!("there is no node {node}");
        }
        self.kill_executor(node)?;
        let child = self.spawn_executor(node)?;
        self.processes[node + 1] = child;
        self.reported[node + 1] = false;
        Ok(())
    }

    /// The processes that stopped since the last call (without waiting): `None` for the
    /// scheduler, `Some(k)` for node k's executor, with how it ended.
    pub fn newly_stopped(&mut self) -> Vec<(Option<usize>, ExitStatus)> {
        let mut out = Vec::new();
        for (i, child) in self.processes.iter_mut().enumerate() {
            if self.reported.get(i).copied().unwrap_or(true) {
                continue;
            }
            if let Ok(Some(status)) = child.try_wait() {
                self.reported[i] = true;
                out.push(((i > 0).then(|| i - 1), status));
            }
        }
        out
    }

    /// Stops every process: SIGTERM first, SIGKILL for any still running after two seconds.
    pub fn stop(mut self) {
        self.stop_all();
    }

    fn stop_all(&mut self) {
        for child in self.processes.iter_mut().rev() {
            if let Ok(None) = child.try_wait() {
                // SAFETY: kill(2) on the pid of a child we have not reaped yet.
                unsafe {
                    libc::kill(child.id() as libc::pid_t, libc::SIGTERM);
                }
            }
        }
        let deadline = Instant::now() + Duration::from_secs(2);
        for child in self.processes.iter_mut() {
            loop {
                match child.try_wait() {
                    Ok(Some(_)) | Err(_) => break,
                    Ok(None) if Instant::now() >= deadline => {
                        let _ = child.kill();
                        let _ = child.wait();
                        break;
                    }
                    Ok(None) => std::thread::sleep(Duration::from_millis(20)),
                }
            }
        }
        if let Some(dir) = self.secret_dir.take() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        self.stop_all();
    }
}
