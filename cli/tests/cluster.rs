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

/// A multi-threaded runtime for a test's client side.
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// Writes one Parquet file per entry of `sizes` into `dir` (column `x` = 1..=size) with a
/// single-node engine; the table's location as SQL text (`'DIR/'`).
fn parquet_fixture(
    runtime: &tokio::runtime::Runtime,
    dir: &std::path::Path,
    sizes: &[u64],
) -> String {
    let single = Engine::with_options(options()).unwrap().session();
    runtime.block_on(async {
        for (i, n) in sizes.iter().enumerate() {
            let path = dir.join(format!("f{i}.parquet"));
            single
                .sql(&format!(
                    "COPY (SELECT value AS x FROM generate_series(1, {n})) TO '{}' STORED AS PARQUET",
                    path.display()
                ))
                .await
                .unwrap();
        }
    });
    format!("'{}/'", dir.display())
}

/// A client engine of `cluster`, authenticated with its secret.
fn cluster_engine(runtime: &tokio::runtime::Runtime, cluster: &LocalCluster) -> Engine {
    runtime.block_on(async {
        let client = ClusterClient::connect(cluster.scheduler(), cluster.auth().unwrap(), None)
            .await
            .unwrap();
        Engine::with_options(client.engine_options(options())).unwrap()
    })
}

/// A folder the scripts' workers note themselves in: writable by everyone, since an executor
/// run as root runs its workers as `nobody`.
fn workers_dir() -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    dir
}

/// Whether process `pid` exists.
fn alive(pid: u32) -> bool {
    // SAFETY: signal 0 only checks that the process exists.
    unsafe { libc::kill(pid as libc::pid_t, 0) == 0 }
}

#[test]
fn a_local_cluster_runs_queries_survives_a_lost_executor_and_stops_every_process() {
    let dir = tempfile::tempdir().unwrap();
    let runtime = runtime();
    let single = Engine::with_options(options()).unwrap().session();
    let table = parquet_fixture(&runtime, dir.path(), &[1000, 2000, 3000]);

    let mut local = LocalClusterOptions::new(BIN, 3);
    local.simulated_gpus_per_executor = Some(1);
    local.executor_timeout = Duration::from_secs(4);
    let mut cluster = LocalCluster::start(&local).unwrap();
    let pids: Vec<u32> = (0..3).map(|k| cluster.executor_pid(k).unwrap()).collect();
    let address = cluster.scheduler().to_string();
    let secret = cluster.secret_file().unwrap().display().to_string();

    // The shell, as a user runs it.
    let out = Command::new(BIN)
        .env("ACCELSQL_DATA_DIR", ":memory:")
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
    let engine = cluster_engine(&runtime, &cluster);
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
        .env("ACCELSQL_DATA_DIR", ":memory:")
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
    let seen = workers_dir();
    let runtime = runtime();
    let table = parquet_fixture(&runtime, data.path(), &[3000, 3000, 3000]);

    let mut cluster = LocalCluster::start(&LocalClusterOptions::new(BIN, 3)).unwrap();
    let executors: Vec<u32> = (0..3).map(|k| cluster.executor_pid(k).unwrap()).collect();
    let engine = cluster_engine(&runtime, &cluster);
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
        .env("ACCELSQL_DATA_DIR", ":memory:")
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
        .env("ACCELSQL_DATA_DIR", ":memory:")
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
        .env("ACCELSQL_DATA_DIR", ":memory:")
        .args(["cluster", "secret", "--out"])
        .arg(&mine)
        .output()
        .unwrap();
    assert!(!again.status.success());

    let mut local = Command::new(BIN)
        .env("ACCELSQL_DATA_DIR", ":memory:")
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
        .env("ACCELSQL_DATA_DIR", ":memory:")
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
        .env("ACCELSQL_DATA_DIR", ":memory:")
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
    let runtime = runtime();
    let table = parquet_fixture(&runtime, data.path(), &[100, 100]);
    let mut local = LocalClusterOptions::new(BIN, 2);
    local.simulated_gpus_per_executor = Some(0);
    local.vcores = 1;
    local.executor_timeout = Duration::from_secs(4);
    let mut cluster = LocalCluster::start(&local).unwrap();
    let address = cluster.scheduler().to_string();
    let secret = cluster.secret_file().unwrap().display().to_string();
    let engine = cluster_engine(&runtime, &cluster);
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
        .env("ACCELSQL_DATA_DIR", ":memory:")
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

/// How long the cluster soak's clients run: 20 s in the test command;
/// `ACCELSQL_CLUSTER_SOAK_SECS` for longer runs by hand.
/// The nodes' `accelsql.gpu_leases` rows as text, for a failure's message (or why they could
/// not be read).
fn leases_of(runtime: &tokio::runtime::Runtime, session: &accelsql_engine::Session) -> String {
    let sql = "SELECT * FROM accelsql.gpu_leases";
    match runtime
        .block_on(async { tokio::time::timeout(Duration::from_secs(10), session.sql(sql)).await })
    {
        Ok(Ok(batches)) => format!("{:?}", rows(&batches)),
        Ok(Err(e)) => format!("unreadable: {e}"),
        Err(_) => "unreadable: no answer within 10 s".into(),
    }
}

fn cluster_soak_duration() -> Duration {
    std::env::var("ACCELSQL_CLUSTER_SOAK_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .map_or(Duration::from_secs(20), Duration::from_secs)
}

/// Clients keep running queries, Python scripts on the GPUs, and statements past their
/// timeout while executors are killed and restarted under them: every statement ends with the
/// right result or a coded error, every session stays usable, the restarted nodes come back,
/// and no script worker outlives its executor or its statement.
// It was quarantined for a while: after the soak, the check's query got no answer for a minute
// in 2 of 4 CI runs. The cause: when an executor was lost, Ballista's scheduler cancelled the
// tasks of the stages it rolled back on the surviving executor without giving their task slots
// back; after two such losses a node had no slot left and every partition bound to it waited
// forever. `vendor/ballista-scheduler` gives them back (see vendor/README.md).
#[test]
fn a_cluster_soak_with_executors_killed_and_restarted_loses_nothing() {
    const CLIENTS: usize = 4;
    let data = tempfile::tempdir().unwrap();
    let seen = workers_dir();
    let runtime = runtime();
    let table = parquet_fixture(&runtime, data.path(), &[2000, 2000]);
    let mut local = LocalClusterOptions::new(BIN, 2);
    local.simulated_gpus_per_executor = Some(1);
    local.vcores = 2;
    local.executor_timeout = Duration::from_secs(3);
    let mut cluster = LocalCluster::start(&local).unwrap();
    let engine = cluster_engine(&runtime, &cluster);
    // A GPU-required script: each instance holds its node's GPU lease while it runs, and notes
    // its worker's pid.
    runtime
        .block_on(engine.session().sql(&format!(
            "CREATE PYTHON3 SCALAR SCRIPT plus_one(x BIGINT) RETURNS BIGINT AS\n\
             %perInstanceRequiredAcceleratorDevices GpuNvidia;\n\
             import os\n\
             open(os.path.join('{}', str(os.getpid())), 'w').close()\n\
             def run(ctx):\n    return ctx.x + 1\n/",
            seen.path().display()
        )))
        .unwrap();
    let statements: Vec<(String, Option<Vec<Vec<String>>>)> = vec![
        (
            format!("SELECT count(*), sum(x) FROM {table}"),
            Some(vec![vec!["4000".into(), "4002000".into()]]),
        ),
        (
            format!("SELECT iproc() AS node, count(*) FROM {table} GROUP BY iproc() ORDER BY 1"),
            Some(vec![
                vec!["0".into(), "2000".into()],
                vec!["1".into(), "2000".into()],
            ]),
        ),
        (
            format!("SELECT sum(plus_one(x)) FROM {table}"),
            Some(vec![vec!["4006000".into()]]),
        ),
        // Past its session's 1-second timeout: never a result (a timeout, or its node lost
        // first). A quarter of a second per batch, for minutes.
        (
            format!(
                "SELECT count(*) FROM {table} a, generate_series(1, 5000000) g \
                 WHERE a.x <= 100 AND sqrt(CAST(a.x * g.value AS DOUBLE)) > 10"
            ),
            None,
        ),
    ];
    let statements = std::sync::Arc::new(statements);
    let deadline = Instant::now() + cluster_soak_duration();
    let clients: Vec<_> = (0..CLIENTS)
        .map(|c| {
            let session = engine.session();
            let statements = std::sync::Arc::clone(&statements);
            runtime.spawn(async move {
                session
                    .sql("ALTER SESSION SET QUERY_TIMEOUT = 1")
                    .await
                    .unwrap();
                let mut outcomes: Vec<std::result::Result<(), String>> = Vec::new();
                let mut i = c;
                while Instant::now() < deadline {
                    let (sql, want) = &statements[i % statements.len()];
                    i += 1;
                    let started = Instant::now();
                    let outcome = tokio::time::timeout(Duration::from_secs(60), session.sql(sql))
                        .await
                        .unwrap_or_else(|_| panic!("{sql} hung for 60 s"));
                    match (outcome, want) {
                        // Where a node was down, the scheduler ran its partition on another:
                        // the rows are all there, counted where they ran.
                        (Ok(batches), Some(want)) if sql.contains("iproc()") => {
                            let got = rows(&batches);
                            let count = |r: &[Vec<String>]| -> i64 {
                                r.iter().map(|row| row[1].parse::<i64>().unwrap()).sum()
                            };
                            assert_eq!(count(&got), count(want), "{sql}: {got:?}");
                            outcomes.push(Ok(()));
                        }
                        (Ok(batches), Some(want)) => {
                            assert_eq!(&rows(&batches), want, "{sql}");
                            outcomes.push(Ok(()));
                        }
                        (Ok(_), None) => panic!("{sql} outlived its timeout"),
                        (Err(e), _) => {
                            let code = e.code();
                            assert!(
                                [NODE_LOST, "57T01"].contains(&code),
                                "{sql}: an error without a soak's code: {e}"
                            );
                            // A timeout stops its statement within a few seconds.
                            if code == "57T01" {
                                assert!(started.elapsed() < Duration::from_secs(15), "{e}");
                            }
                            outcomes.push(Err(code.to_string()));
                        }
                    }
                }
                (session, outcomes)
            })
        })
        .collect();
    // A hostile client beside them: statements nested far too deep (54001 in the client,
    // before anything reaches the cluster), and a function that turns each row of the table
    // into megabytes past its session's budget on the executors (53200, or lost with a node).
    let hostile = {
        let session = engine.session();
        let grow = format!(
            "SELECT max(length(replace(repeat('x', 400000 + x), 'x', 'yyyyyyyyyyyyyyyy'))) \
             FROM {table}"
        );
        runtime.spawn(async move {
            session
                .sql("SET accelsql.memory_limit = '16MiB'")
                .await
                .unwrap();
            let deep = format!("SELECT 1{}", " + 1".repeat(20_000));
            let brackets = format!("SELECT {}1{}", "(".repeat(20_000), ")".repeat(20_000));
            let mut refused = std::collections::BTreeMap::<String, usize>::new();
            let mut answered = 0usize;
            while Instant::now() < deadline {
                for sql in [deep.as_str(), brackets.as_str(), grow.as_str()] {
                    let outcome = tokio::time::timeout(Duration::from_secs(60), session.sql(sql))
                        .await
                        .unwrap_or_else(|_| panic!("a hostile statement hung for 60 s"));
                    match outcome {
                        Ok(_) => answered += 1,
                        Err(e) => *refused.entry(e.code().to_string()).or_default() += 1,
                    }
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            (answered, refused)
        })
    };
    // Meanwhile a node crashes and is restarted every few seconds, alternately.
    let mut restarts = 0;
    while Instant::now() + Duration::from_secs(3) < deadline {
        std::thread::sleep(Duration::from_secs(3));
        let node = restarts % 2;
        cluster.restart_executor(node).unwrap();
        restarts += 1;
    }
    let (answered, refused) = runtime.block_on(hostile).unwrap();
    eprintln!("cluster soak: hostile statements answered {answered}, refused {refused:?}");
    assert_eq!(answered, 0, "{refused:?}");
    assert!(
        refused
            .keys()
            .all(|c| ["54001", "53200", NODE_LOST].contains(&c.as_str()))
            && refused.get("54001").copied().unwrap_or(0) > 0
            && refused.get("53200").copied().unwrap_or(0) > 0,
        "{refused:?}"
    );
    let mut sessions = Vec::new();
    let (mut ok, mut lost, mut timed_out) = (0, 0, 0);
    for client in clients {
        let (session, outcomes) = runtime.block_on(client).unwrap();
        for outcome in outcomes {
            match outcome {
                Ok(()) => ok += 1,
                Err(code) if code == NODE_LOST => lost += 1,
                Err(_) => timed_out += 1,
            }
        }
        sessions.push(session);
    }
    eprintln!(
        "cluster soak: {restarts} restarts; {ok} results, {lost} lost to a node, {timed_out} timed out"
    );
    assert!(restarts >= 2 && ok > 0 && timed_out > 0);

    // Both nodes answer again, and every session still works, on the GPUs too.
    for session in &sessions {
        runtime
            .block_on(session.sql("ALTER SESSION SET QUERY_TIMEOUT = 0"))
            .unwrap();
    }
    let (sql, want) = &statements[1];
    let mut last = String::new();
    // A statement sent while the scheduler still counts a just-killed executor may wait for
    // its loss to be noticed (a few seconds, more on a loaded machine): a slow attempt is
    // retried like a failed one, within the minute the nodes have to come back.
    assert!(
        eventually(Duration::from_secs(60), || {
            let query =
                async { tokio::time::timeout(Duration::from_secs(20), sessions[0].sql(sql)).await };
            match runtime.block_on(query) {
                Ok(Ok(b)) => {
                    last = format!("{:?}", rows(&b));
                    &rows(&b) == want.as_ref().unwrap()
                }
                Ok(Err(e)) => {
                    last = e.to_string();
                    false
                }
                Err(_) => {
                    last = format!("{sql} took more than 20 s");
                    false
                }
            }
        }),
        "the restarted nodes did not come back: {last}\nthe nodes' GPU leases: {}",
        leases_of(&runtime, &sessions[1])
    );
    for session in &sessions {
        let (sql, want) = &statements[2];
        let got = runtime.block_on(session.sql(sql)).unwrap();
        assert_eq!(&rows(&got), want.as_ref().unwrap());
    }
    // No worker outlives its statement or its executor.
    let workers = || -> Vec<u32> {
        std::fs::read_dir(seen.path())
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().into_string().ok()?.parse().ok())
            .collect()
    };
    assert!(!workers().is_empty());
    assert!(
        eventually(Duration::from_secs(15), || workers()
            .iter()
            .all(|&p| !alive(p))),
        "workers left running: {:?}",
        workers()
            .into_iter()
            .filter(|&p| alive(p))
            .collect::<Vec<_>>()
    );
    let pids: Vec<u32> = (0..2).filter_map(|k| cluster.executor_pid(k)).collect();
    drop(cluster);
    for pid in pids {
        assert!(!alive(pid), "executor process {pid} still runs");
    }
}

/// A statement its client gives up on (dropped, as a cancelled or timed-out statement is) stops
/// on the cluster too: the scheduler cancels the job, and the executors' script workers end at
/// once instead of running the job to its end for no one.
#[test]
fn a_statement_its_client_drops_stops_on_the_cluster() {
    let data = tempfile::tempdir().unwrap();
    let seen = workers_dir();
    let runtime = runtime();
    let table = parquet_fixture(&runtime, data.path(), &[3000, 3000]);
    let mut local = LocalClusterOptions::new(BIN, 2);
    local.simulated_gpus_per_executor = Some(0);
    local.vcores = 1;
    let cluster = LocalCluster::start(&local).unwrap();
    let engine = cluster_engine(&runtime, &cluster);
    // 3000 rows × 10 ms: half a minute per node if nothing stops it.
    runtime
        .block_on(engine.session().sql(&format!(
            "CREATE PYTHON3 SCALAR SCRIPT slow(x BIGINT) RETURNS BIGINT AS\n\
             import os, time\n\
             open(os.path.join('{}', str(os.getpid())), 'w').close()\n\
             def run(ctx):\n    time.sleep(0.01)\n    return ctx.x\n/",
            seen.path().display()
        )))
        .unwrap();
    let workers = || -> Vec<u32> {
        std::fs::read_dir(seen.path())
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().into_string().ok()?.parse().ok())
            .collect()
    };
    let running = runtime.spawn({
        let session = engine.session();
        let sql = format!("SELECT count(*) FROM {table} WHERE slow(x) > 0");
        async move { session.sql(&sql).await }
    });
    assert!(
        eventually(Duration::from_secs(30), || workers().len() >= 2),
        "workers seen: {:?}",
        workers()
    );
    let dropped = Instant::now();
    running.abort();
    assert!(
        eventually(Duration::from_secs(10), || workers()
            .iter()
            .all(|&p| !alive(p))),
        "the dropped statement's workers still run: {:?}",
        workers()
    );
    eprintln!(
        "workers gone {:?} after the statement was dropped",
        dropped.elapsed()
    );
    // The nodes are free for the next statement at once.
    let started = Instant::now();
    let got = runtime
        .block_on(
            engine
                .session()
                .sql(&format!("SELECT count(*) FROM {table}")),
        )
        .unwrap();
    assert_eq!(rows(&got), [["6000"]]);
    assert!(started.elapsed() < Duration::from_secs(10));
    drop(cluster);
}
