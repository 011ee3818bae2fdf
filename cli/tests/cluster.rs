//! `accelsql cluster local`'s processes (a scheduler and 3 executors of this binary on
//! 127.0.0.1): queries from a client session, the shell's `--cluster`, and an executor killed
//! in the middle of a query.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;
use std::time::{Duration, Instant};

use accelsql_cluster::{ClusterClient, LocalCluster, LocalClusterOptions, NODE_LOST};
use accelsql_engine::datafusion::arrow::array::RecordBatch;
use accelsql_engine::{Engine, EngineOptions, SchedulerConfig};

const BIN: &str = env!("CARGO_BIN_EXE_accelsql");

/// The cells of a result as text, as the engine's tests compare them.
fn rows(batches: &[RecordBatch]) -> Vec<Vec<String>> {
    accelsql_engine::testing::cells(batches).unwrap()
}

fn options() -> EngineOptions {
    EngineOptions {
        scheduler: SchedulerConfig::default().with_simulated_gpus(0),
        url_tables: true,
        ..EngineOptions::default()
    }
}

/// Whether process `pid` exists.
fn alive(pid: u32) -> bool {
    // SAFETY: signal 0 only checks that the process exists.
    unsafe { libc::kill(pid as libc::pid_t, 0) == 0 }
}

#[test]
fn a_local_cluster_runs_queries_survives_a_lost_executor_and_stops_every_process() {
    let dir = tempfile::tempdir().unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let single = Engine::with_options(options()).unwrap().session();
    runtime.block_on(async {
        for (i, n) in [1000, 2000, 3000].into_iter().enumerate() {
            let path = dir.path().join(format!("f{i}.parquet"));
            single
                .sql(&format!(
                    "COPY (SELECT value AS x FROM generate_series(1, {n})) TO '{}' STORED AS PARQUET",
                    path.display()
                ))
                .await
                .unwrap();
        }
    });
    let table = format!("'{}/'", dir.path().display());

    let mut local = LocalClusterOptions::new(BIN, 3);
    local.simulated_gpus_per_executor = Some(1);
    local.executor_timeout = Duration::from_secs(4);
    let mut cluster = LocalCluster::start(&local).unwrap();
    let pids: Vec<u32> = (0..3).map(|k| cluster.executor_pid(k).unwrap()).collect();
    let address = cluster.scheduler().to_string();
    let secret = cluster.secret_file().unwrap().display().to_string();

    // The shell, as a user runs it.
    let out = Command::new(BIN)
        .args([
            "--cluster",
            &address,
            "--secret-file",
            &secret,
            "--format",
            "csv",
            "-c",
        ])
        .arg(format!(
            "SELECT iproc() AS node, count(*) AS n FROM {table} GROUP BY iproc() ORDER BY node"
        ))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let nodes: Vec<&str> = text.lines().skip(1).map(|l| &l[..1]).collect();
    assert_eq!(nodes, ["0", "1", "2"], "{text}");
    let total: i64 = text
        .lines()
        .skip(1)
        .map(|l| l.split(',').nth(1).unwrap().parse::<i64>().unwrap())
        .sum();
    assert_eq!(total, 6000, "{text}");

    // A long query loses node 2 half-way: a coded error, in bounded time.
    let engine = runtime.block_on(async {
        let client = ClusterClient::connect(&address, cluster.auth().unwrap(), None)
            .await
            .unwrap();
        Engine::with_options(client.engine_options(options())).unwrap()
    });
    let session = engine.session();
    let slow = format!(
        "SELECT count(*) FROM {table} a, generate_series(1, 30000) g WHERE sqrt(CAST(a.x * g.value AS DOUBLE)) > 10"
    );
    let start = Instant::now();
    let running = runtime.spawn({
        let session = engine.session();
        let slow = slow.clone();
        async move { session.sql(&slow).await }
    });
    std::thread::sleep(Duration::from_millis(1500));
    cluster.kill_executor(2).unwrap();
    let outcome =
        runtime.block_on(async { tokio::time::timeout(Duration::from_secs(60), running).await });
    let outcome = outcome
        .expect("a lost node must fail the query, not hang it")
        .unwrap();
    match outcome {
        Err(e) => {
            assert_eq!(e.code(), NODE_LOST, "{e}");
        }
        // Finished before the kill took effect (a fast machine): then it must be right.
        Ok(batches) => {
            let want = runtime.block_on(single.sql(&slow)).unwrap();
            assert_eq!(rows(&batches), rows(&want));
            eprintln!("the query finished before node 2 was killed");
        }
    }
    assert!(start.elapsed() < Duration::from_secs(60));

    // Later queries run on the nodes that are left, with the right answer.
    let sql = format!("SELECT count(*), sum(x) FROM {table}");
    let got = runtime.block_on(session.sql(&sql)).unwrap();
    assert_eq!(rows(&got), [["6000", "7003000"]]);
    let nodes = runtime
        .block_on(session.sql(&format!("SELECT DISTINCT iproc() FROM {table} ORDER BY 1")))
        .unwrap();
    assert_eq!(rows(&nodes), [["0"], ["1"]]);

    // Dropping the cluster stops every process it started.
    drop(cluster);
    for pid in pids {
        assert!(!alive(pid), "executor process {pid} still runs");
    }
}

#[test]
fn the_shell_refuses_an_unreachable_cluster_at_once() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let start = Instant::now();
    let out = Command::new(BIN)
        .args([
            "--cluster",
            &format!("127.0.0.1:{port}"),
            "--nodes",
            "2",
            "-c",
            "SELECT 1",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("[08001]"), "{err}");
    assert!(start.elapsed() < Duration::from_secs(10));
}

/// Waits up to `limit` for `done`.
fn eventually(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if done() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    done()
}

#[test]
fn scripts_run_in_the_executors_processes_and_their_workers_die_with_a_killed_executor() {
    let data = tempfile::tempdir().unwrap();
    let seen = tempfile::tempdir().unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let single = Engine::with_options(options()).unwrap().session();
    runtime.block_on(async {
        for i in 0..3 {
            let path = data.path().join(format!("f{i}.parquet"));
            single
                .sql(&format!(
                    "COPY (SELECT value AS x FROM generate_series(1, 3000)) TO '{}' STORED AS PARQUET",
                    path.display()
                ))
                .await
                .unwrap();
        }
    });
    let table = format!("'{}/'", data.path().display());

    let mut cluster = LocalCluster::start(&LocalClusterOptions::new(BIN, 3)).unwrap();
    let executors: Vec<u32> = (0..3).map(|k| cluster.executor_pid(k).unwrap()).collect();
    let address = cluster.scheduler().to_string();
    let engine = runtime.block_on(async {
        let client = ClusterClient::connect(&address, cluster.auth().unwrap(), None)
            .await
            .unwrap();
        Engine::with_options(client.engine_options(options())).unwrap()
    });
    let session = engine.session();
    // Each worker notes its node and process, then works slowly (3000 rows × 2 ms per node).
    runtime
        .block_on(session.sql(&format!(
            "CREATE PYTHON3 SCALAR SCRIPT noted(x BIGINT) RETURNS BIGINT AS\n\
             import os, time\n\
             open(os.path.join('{}', 'node%d-%d' % (exa.meta.node_id, os.getpid())), 'w').close()\n\
             def run(ctx):\n    time.sleep(0.002)\n    return ctx.x\n/",
            seen.path().display()
        )))
        .unwrap();
    let workers = |node: Option<usize>| -> Vec<u32> {
        std::fs::read_dir(seen.path())
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter_map(|name| {
                let (n, pid) = name.strip_prefix("node")?.split_once('-')?;
                let n: usize = n.parse().ok()?;
                (node.is_none() || node == Some(n)).then(|| pid.parse().ok())?
            })
            .collect()
    };

    let running = runtime.spawn({
        let session = engine.session();
        let sql = format!("SELECT count(*) FROM {table} WHERE noted(x) > 0");
        async move { session.sql(&sql).await }
    });
    // Every node has started its workers (the script runs in the executors' processes).
    assert!(
        eventually(Duration::from_secs(30), || (0..3)
            .all(|n| !workers(Some(n)).is_empty())),
        "workers seen: {:?}",
        workers(None)
    );
    for pid in workers(None) {
        assert!(!executors.contains(&pid));
    }
    let node2 = workers(Some(2));
    cluster.kill_executor(2).unwrap();
    let outcome = runtime
        .block_on(async { tokio::time::timeout(Duration::from_secs(60), running).await })
        .expect("a lost node must fail the query, not hang it")
        .unwrap();
    if let Err(e) = &outcome {
        assert_eq!(e.code(), NODE_LOST, "{e}");
    }
    // The killed executor's workers die with it; the others end with their tasks.
    assert!(
        eventually(Duration::from_secs(10), || node2.iter().all(|&p| !alive(p))),
        "node 2's workers {node2:?} outlived their executor"
    );
    assert!(
        eventually(Duration::from_secs(30), || workers(None)
            .iter()
            .all(|&p| !alive(p))),
        "workers left running: {:?}",
        workers(None)
            .into_iter()
            .filter(|&p| alive(p))
            .collect::<Vec<_>>()
    );
    drop(cluster);
}

/// Sends SIGTERM to a process (by pid) when dropped: a failed test still stops what it started.
struct KillOnDrop(u32);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        // SAFETY: kill(2) on a pid this test started; a process already reaped only yields ESRCH.
        unsafe { libc::kill(self.0 as libc::pid_t, libc::SIGTERM) };
    }
}

/// Runs `accelsql cluster executor` with `args` against `scheduler`; it must end by itself
/// within 20 seconds, unsuccessfully: its standard error.
fn refused_executor(scheduler: &str, args: &[&str]) -> String {
    let start = Instant::now();
    let mut child = Command::new(BIN)
        .args([
            "cluster",
            "executor",
            "--scheduler",
            scheduler,
            "--vcores",
            "1",
        ])
        .args(["--simulated-gpus", "0"])
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let ended = eventually(Duration::from_secs(20), || {
        matches!(child.try_wait(), Ok(Some(_)))
    });
    if !ended {
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
    }
    let out = child.wait_with_output().unwrap();
    assert!(
        ended,
        "the refused executor {args:?} did not stop by itself"
    );
    assert!(!out.status.success(), "{args:?}");
    assert!(start.elapsed() < Duration::from_secs(20));
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn cluster_local_makes_a_secret_and_refuses_executors_without_it() {
    use std::io::BufRead;
    use std::os::unix::fs::PermissionsExt;

    // `cluster secret`: owner-only, never overwritten.
    let dir = tempfile::tempdir().unwrap();
    let mine = dir.path().join("secret");
    let out = Command::new(BIN)
        .args(["cluster", "secret", "--out"])
        .arg(&mine)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mode = std::fs::metadata(&mine).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let again = Command::new(BIN)
        .args(["cluster", "secret", "--out"])
        .arg(&mine)
        .output()
        .unwrap();
    assert!(!again.status.success());

    let mut local = Command::new(BIN)
        .args([
            "cluster",
            "local",
            "--executors",
            "1",
            "--simulated-gpus-per-executor",
            "0",
        ])
        .args(["--vcores", "1"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let pid = local.id();
    // Stopped by its pid even if an assertion below fails.
    let _stop = KillOnDrop(pid);
    let mut lines = std::io::BufReader::new(local.stdout.take().unwrap()).lines();
    let first = lines.next().unwrap().unwrap();
    let second = lines.next().unwrap().unwrap();
    let scheduler = first.strip_prefix("scheduler: ").expect(&first).to_string();
    let secret = second
        .strip_prefix("secret-file: ")
        .expect(&second)
        .to_string();
    let mode = std::fs::metadata(&secret).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);

    // A client with the secret runs queries; the node count comes from the scheduler.
    let out = Command::new(BIN)
        .args([
            "--cluster",
            &scheduler,
            "--secret-file",
            &secret,
            "--format",
            "csv",
        ])
        .args(["-c", "SELECT nproc() AS n"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "n\n1");
    // Without it: a coded refusal.
    let out = Command::new(BIN)
        .args(["--cluster", &scheduler, "-c", "SELECT 1"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("[28K01]"), "{err}");

    // Executors nobody should have started: no secret, another cluster's, a node that is
    // held. Each stops by itself, saying why.
    let err = refused_executor(&scheduler, &["--node-id", "0"]);
    assert!(err.contains("[28K01]"), "{err}");
    let wrong = mine.display().to_string();
    let err = refused_executor(&scheduler, &["--node-id", "0", "--secret-file", &wrong]);
    assert!(err.contains("[28K01]"), "{err}");
    let err = refused_executor(&scheduler, &["--node-id", "0", "--secret-file", &secret]);
    assert!(
        err.contains("[08K04]") && err.contains("node 0 is held"),
        "{err}"
    );
    // Off loopback without a secret: refused before it starts.
    let err = refused_executor(&scheduler, &["--bind-host", "0.0.0.0"]);
    assert!(err.contains("[F0000]"), "{err}");

    // SIGTERM stops the cluster and removes its secret.
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(pid as libc::pid_t, libc::SIGTERM) };
    assert!(eventually(Duration::from_secs(10), || matches!(
        local.try_wait(),
        Ok(Some(_))
    )));
    assert!(!std::path::Path::new(&secret).exists());
}

#[test]
fn an_executor_restarted_after_a_crash_takes_its_node_back() {
    let data = tempfile::tempdir().unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let single = Engine::with_options(options()).unwrap().session();
    runtime.block_on(async {
        for i in 0..2 {
            let path = data.path().join(format!("f{i}.parquet"));
            single
                .sql(&format!(
                    "COPY (SELECT value AS x FROM generate_series(1, 100)) TO '{}' STORED AS PARQUET",
                    path.display()
                ))
                .await
                .unwrap();
        }
    });
    let table = format!("'{}/'", data.path().display());
    let mut local = LocalClusterOptions::new(BIN, 2);
    local.simulated_gpus_per_executor = Some(0);
    local.vcores = 1;
    local.executor_timeout = Duration::from_secs(4);
    let mut cluster = LocalCluster::start(&local).unwrap();
    let address = cluster.scheduler().to_string();
    let secret = cluster.secret_file().unwrap().display().to_string();
    let engine = runtime.block_on(async {
        let client = ClusterClient::connect(&address, cluster.auth().unwrap(), None)
            .await
            .unwrap();
        Engine::with_options(client.engine_options(options())).unwrap()
    });
    let nodes_answering = |engine: &Engine| {
        runtime.block_on(async {
            let sql = format!("SELECT iproc() AS node FROM {table} GROUP BY iproc() ORDER BY 1");
            match engine.session().sql(&sql).await {
                Ok(batches) => rows(&batches).into_iter().map(|r| r[0].clone()).collect(),
                Err(_) => Vec::new(),
            }
        })
    };
    assert_eq!(nodes_answering(&engine), ["0", "1"]);

    // Node 1 crashes; a new executor for node 1 starts at once, before the scheduler has
    // missed a heartbeat. The dead holder's port no longer answers: the newcomer takes over.
    cluster.kill_executor(1).unwrap();
    let mut replacement = Command::new(BIN)
        .args([
            "cluster",
            "executor",
            "--scheduler",
            &address,
            "--node-id",
            "1",
        ])
        .args([
            "--secret-file",
            &secret,
            "--simulated-gpus",
            "0",
            "--vcores",
            "1",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let _stop = KillOnDrop(replacement.id());
    let back = eventually(Duration::from_secs(30), || {
        matches!(replacement.try_wait(), Ok(None)) && nodes_answering(&engine) == ["0", "1"]
    });
    let still_running = matches!(replacement.try_wait(), Ok(None));
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(replacement.id() as libc::pid_t, libc::SIGKILL) };
    let out = replacement.wait_with_output().unwrap();
    assert!(
        back && still_running,
        "the restarted executor did not take node 1 back: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    cluster.stop();
}
