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

    // The shell, as a user runs it.
    let out = Command::new(BIN)
        .args([
            "--cluster",
            &address,
            "--nodes",
            "3",
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
        let client = ClusterClient::connect(&address, 3).await.unwrap();
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
