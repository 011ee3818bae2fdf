//! A cluster of 3 executors in this process (scheduler and executors on tokio tasks, talking
//! gRPC over 127.0.0.1): queries give the answers one node gives, `iproc()` is the node that
//! processed the row, and failures are coded errors, not hangs.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use accelsql_cluster::{
    ClusterAuth, ClusterClient, ConfigureEngine, ExecutorOptions, NodeOptions, SchedulerHandle,
    SchedulerOptions, run_executor, start_scheduler,
};
use accelsql_engine::datafusion::arrow::array::{ArrayRef, Int64Array, RecordBatch};
use accelsql_engine::datafusion::arrow::datatypes::DataType;
use accelsql_engine::datafusion::logical_expr::ColumnarValue;
use accelsql_engine::gpu_scheduler::GpuSharing;
use accelsql_engine::{Engine, EngineOptions, InstanceContext, ScalarUdf, SchedulerConfig};

pub(crate) const NODES: usize = 3;

/// `times_node(x)`: x * 10 + the number of the node it ran on — a Rust UDF every node has.
fn times_node(node: i64) -> ScalarUdf {
    ScalarUdf::builder("times_node")
        .inputs([DataType::Int64])
        .returns(DataType::Int64)
        .cpu(
            move |_: &InstanceContext, rows: usize, args: &[ColumnarValue]| {
                let a = args[0].to_array(rows)?;
                let a = a.as_any().downcast_ref::<Int64Array>().unwrap();
                Ok(Arc::new(
                    a.iter()
                        .map(|v| v.map(|v| v * 10 + node))
                        .collect::<Int64Array>(),
                ) as ArrayRef)
            },
        )
        .build()
        .unwrap()
}

/// `gpu_where(x)`: node * 100 + the index of the device its instance is pinned to (-1 on the
/// CPU); requires a GPU.
fn gpu_where() -> ScalarUdf {
    where_udf("gpu_where", None)
}

/// `gpu_where_declared(x)`: [`gpu_where`], declaring 8 GiB of device memory per instance.
fn gpu_where_declared() -> ScalarUdf {
    where_udf("gpu_where_declared", Some(8 << 30))
}

fn where_udf(name: &str, device_memory: Option<u64>) -> ScalarUdf {
    let mut builder = ScalarUdf::builder(name)
        .inputs([DataType::Int64])
        .returns(DataType::Int64)
        .accelerator("GpuNvidia")
        .unwrap();
    if let Some(bytes) = device_memory {
        builder = builder.device_memory(bytes);
    }
    builder
        .cpu(|ctx: &InstanceContext, rows: usize, _: &[ColumnarValue]| {
            let device = ctx.device.as_ref().map_or(-1, |d| i64::from(d.index));
            let value = ctx.node_id as i64 * 100 + device;
            Ok(Arc::new(Int64Array::from(vec![value; rows])) as ArrayRef)
        })
        .build()
        .unwrap()
}

/// When each GPU batch ran: (node, (client, statement), start, end).
type GpuRuns =
    Arc<std::sync::Mutex<Vec<(usize, (i64, u64), std::time::Instant, std::time::Instant)>>>;

/// `slow_gpu(x)`: sleeps 20 ms per batch on a GPU (required) and records when, where and for
/// which statement (the client is `x / 1_000_000`: client engines number statements alike).
fn slow_gpu(runs: GpuRuns) -> ScalarUdf {
    ScalarUdf::builder("slow_gpu")
        .inputs([DataType::Int64])
        .returns(DataType::Int64)
        .accelerator("GpuNvidia")
        .unwrap()
        .cpu(
            move |ctx: &InstanceContext, rows: usize, args: &[ColumnarValue]| {
                let start = std::time::Instant::now();
                let client = match &args[0] {
                    ColumnarValue::Array(a) if !a.is_empty() => {
                        a.as_any().downcast_ref::<Int64Array>().unwrap().value(0) / 1_000_000
                    }
                    _ => -1,
                };
                std::thread::sleep(Duration::from_millis(20));
                runs.lock().unwrap().push((
                    ctx.node_id,
                    (client, ctx.statement_id),
                    start,
                    std::time::Instant::now(),
                ));
                Ok(Arc::new(Int64Array::from(vec![1; rows])) as ArrayRef)
            },
        )
        .build()
        .unwrap()
}

fn gpu_runs() -> GpuRuns {
    static RUNS: std::sync::OnceLock<GpuRuns> = std::sync::OnceLock::new();
    Arc::clone(RUNS.get_or_init(GpuRuns::default))
}

pub(crate) struct TestCluster {
    pub(crate) scheduler: SchedulerHandle,
    executors: Vec<tokio::task::JoinHandle<()>>,
    /// Holds the cluster's secret.
    pub(crate) secret_dir: tempfile::TempDir,
}

impl TestCluster {
    /// A client's authentication: the cluster's secret.
    pub(crate) fn auth(&self) -> ClusterAuth {
        ClusterAuth::from_secret_file(&self.secret_dir.path().join("secret")).unwrap()
    }
}

impl Drop for TestCluster {
    fn drop(&mut self) {
        for e in &self.executors {
            e.abort();
        }
    }
}

pub(crate) async fn start_cluster() -> TestCluster {
    start_cluster_with(&[2; NODES], None).await
}

/// A cluster whose node k has `gpus[k]` simulated GPUs.
/// Prints the cluster's error log lines (Ballista's included) with a failing test's output.
struct ErrorLog;

impl log::Log for ErrorLog {
    fn enabled(&self, m: &log::Metadata<'_>) -> bool {
        m.level() <= log::Level::Error
    }
    fn log(&self, r: &log::Record<'_>) {
        if self.enabled(r.metadata()) {
            eprintln!("LOG {}: {}", r.target(), r.args());
        }
    }
    fn flush(&self) {}
}
static ERROR_LOG: ErrorLog = ErrorLog;

async fn start_cluster_with(
    gpus: &[usize; NODES],
    max_lease_hold: Option<Duration>,
) -> TestCluster {
    start_cluster_sharing(gpus, max_lease_hold, [GpuSharing::Exclusive; NODES]).await
}

/// [`start_cluster_with`], node k sharing its GPUs as `sharing[k]` says.
async fn start_cluster_sharing(
    gpus: &[usize; NODES],
    max_lease_hold: Option<Duration>,
    sharing: [GpuSharing; NODES],
) -> TestCluster {
    let _ = log::set_logger(&ERROR_LOG);
    log::set_max_level(log::LevelFilter::Error);
    // Every process of these clusters authenticates with a secret: every query below runs
    // over mutual TLS (scheduler, task and Flight ports).
    let secret_dir = tempfile::tempdir().unwrap();
    let secret = secret_dir.path().join("secret");
    ClusterAuth::write_secret_file(&secret).unwrap();
    let scheduler = start_scheduler(SchedulerOptions {
        listen: "127.0.0.1:0".parse().unwrap(),
        auth: ClusterAuth::from_secret_file(&secret).unwrap(),
        ..SchedulerOptions::default()
    })
    .await
    .unwrap();
    let address = scheduler.address().to_string();
    let mut executors = Vec::new();
    for (node, &node_gpus) in gpus.iter().enumerate() {
        let mut options = NodeOptions::new(
            node,
            NODES,
            SchedulerConfig::default()
                .with_simulated_gpus(node_gpus)
                .with_gpu_sharing(sharing[node], None),
        );
        let configure: ConfigureEngine = Arc::new(move |e: &Engine| {
            e.register_scalar_udf(times_node(node as i64))?;
            e.register_scalar_udf(slow_gpu(gpu_runs()))?;
            e.register_scalar_udf(gpu_where_declared())?;
            e.register_scalar_udf(gpu_where())
        });
        options.configure = Some(configure);
        options.max_lease_hold = max_lease_hold;
        let mut executor = ExecutorOptions::new(address.clone(), options);
        executor.vcores = 2;
        executor.auth = ClusterAuth::from_secret_file(&secret).unwrap();
        executors.push(tokio::spawn(async move {
            if let Err(e) = run_executor(executor).await {
                eprintln!("executor {node}: {e}");
            }
        }));
    }
    scheduler
        .wait_for_executors(NODES, Duration::from_secs(30))
        .await
        .unwrap();
    TestCluster {
        scheduler,
        executors,
        secret_dir,
    }
}

/// A client engine of `cluster` (files as tables), with `times_node` known for planning.
pub(crate) async fn client(cluster: &TestCluster) -> Engine {
    let client = ClusterClient::connect(
        &cluster.scheduler.address().to_string(),
        cluster.auth(),
        None,
    )
    .await
    .unwrap();
    let engine = Engine::with_options(client.engine_options(EngineOptions {
        scheduler: SchedulerConfig::default().with_simulated_gpus(0),
        url_tables: true,
        ..EngineOptions::default()
    }))
    .unwrap();
    engine.register_scalar_udf(times_node(-1)).unwrap();
    engine.register_scalar_udf(gpu_where()).unwrap();
    engine.register_scalar_udf(gpu_where_declared()).unwrap();
    engine.register_scalar_udf(slow_gpu(gpu_runs())).unwrap();
    engine
}

/// One node in this process, for the reference answers.
fn single_node() -> Engine {
    Engine::with_options(EngineOptions {
        scheduler: SchedulerConfig::default().with_simulated_gpus(0),
        url_tables: true,
        ..EngineOptions::default()
    })
    .unwrap()
}

/// The cells of a result as text, as the engine's tests compare them.
pub(crate) fn rows(batches: &[RecordBatch]) -> Vec<Vec<String>> {
    accelsql_engine::testing::cells(batches).unwrap()
}

/// Three Parquet files of 100, 200 and 300 rows in a fresh directory.
async fn parquet_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let s = single_node().session();
    for (i, n) in [100, 200, 300].into_iter().enumerate() {
        let path = dir.path().join(format!("part{i}.parquet"));
        s.sql(&format!(
            "COPY (SELECT value AS x, value % 7 AS k FROM generate_series(1, {n})) TO '{}' STORED AS PARQUET",
            path.display()
        ))
        .await
        .unwrap();
    }
    dir
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cluster_spreads_files_over_nodes_and_agrees_with_one_node() {
    let cluster = start_cluster().await;
    let engine = client(&cluster).await;
    let dir = parquet_dir().await;
    let table = format!("'{}/'", dir.path().display());
    let s = engine.session();

    // One file per node: every node processed rows, and the counts add up.
    let by_node = rows(
        &s.sql(&format!(
            "SELECT iproc() AS node, nproc() AS nodes, count(*) AS n FROM {table} GROUP BY iproc(), nproc() ORDER BY node"
        ))
        .await
        .unwrap(),
    );
    let nodes: Vec<&str> = by_node.iter().map(|r| r[0].as_str()).collect();
    assert_eq!(nodes, ["0", "1", "2"], "{by_node:?}");
    assert!(by_node.iter().all(|r| r[1] == "3"), "{by_node:?}");
    // Partition p (here file p) runs on node p mod 3: the 100-, 200- and 300-row files.
    let counts: Vec<&str> = by_node.iter().map(|r| r[2].as_str()).collect();
    assert_eq!(counts, ["100", "200", "300"], "{by_node:?}");

    // The Rust UDF ran on the node that read the row: its last digit is that node.
    let udf = rows(
        &s.sql(&format!(
            "SELECT count(*) FROM {table} WHERE times_node(x) % 10 <> iproc()"
        ))
        .await
        .unwrap(),
    );
    assert_eq!(udf, [["0"]]);

    // This session's own tables: written here, read through the cluster (the plan carries
    // their rows).
    s.sql("CREATE TABLE t(a BIGINT)").await.unwrap();
    s.sql("INSERT INTO t VALUES (1), (2), (3)").await.unwrap();
    // Ballista gives each task its own copy of an in-memory scan, without the scan's LIMIT.
    let one = rows(&s.sql("SELECT a FROM t LIMIT 1").await.unwrap());
    assert_eq!(one.len(), 1, "{one:?}");
    // What Ballista's plan encoding would change runs in the client (a series of no column).
    let series = rows(
        &s.sql("SELECT count(*) FROM (SELECT 'a' AS d FROM range(1000)) WHERE d IN ('a', 'b')")
            .await
            .unwrap(),
    );
    assert_eq!(series, [["1000"]]);
    // An executor's uncoded DataFusion error keeps the code it has on one node.
    let e = s
        .sql("SELECT x / 0 FROM (VALUES (1)) t(x)")
        .await
        .unwrap_err();
    assert_eq!(e.code(), "22000", "{e}");
    let sum = rows(&s.sql("SELECT sum(a), max(nproc()) FROM t").await.unwrap());
    assert_eq!(sum, [["6", "3"]]);
    // accelsql.gpu_devices answers for every node (2 simulated GPUs each), not the client.
    let devices = rows(
        &s.sql("SELECT node, count(*) FROM accelsql.gpu_devices GROUP BY node ORDER BY node")
            .await
            .unwrap(),
    );
    assert_eq!(devices, [["0", "2"], ["1", "2"], ["2", "2"]]);
    // Read without a shuffle too: each node's rows once.
    let nodes = rows(
        &s.sql("SELECT node FROM accelsql.gpu_devices ORDER BY node")
            .await
            .unwrap(),
    );
    assert_eq!(nodes, [["0"], ["0"], ["1"], ["1"], ["2"], ["2"]]);
    // A call that ran in the client (a plan the cluster cannot carry) is recorded there, with
    // no node; the client's own times_node adds -1.
    let here = rows(&s.sql("SELECT times_node(1) FROM range(3)").await.unwrap());
    assert_eq!(here, [["9"], ["9"], ["9"]]);
    let calls = rows(
        &s.sql(
            "SELECT node IS NULL, sum(rows_in) FROM accelsql.udf_calls \
             WHERE statement_id = (SELECT max(statement_id) FROM accelsql.udf_calls) GROUP BY 1",
        )
        .await
        .unwrap(),
    );
    assert_eq!(calls, [["true", "3"]]);

    // Built-ins, aggregates over a shuffle, a join, ORDER BY LIMIT: the answers of one node.
    let local = single_node().session();
    for sql in [
        "SELECT k, count(*), sum(x), min(x), max(x) FROM {t} GROUP BY k ORDER BY k",
        "SELECT a.k, count(*) FROM {t} a JOIN (SELECT DISTINCT k FROM {t} WHERE k < 3) b ON a.k = b.k GROUP BY a.k ORDER BY a.k",
        "SELECT x, upper(CAST(x AS VARCHAR)) FROM {t} ORDER BY x DESC LIMIT 5",
        "SELECT count(DISTINCT x), avg(x) FROM {t}",
        "SELECT k, x, row_number() OVER (PARTITION BY k ORDER BY x DESC) AS r FROM {t} ORDER BY k, r LIMIT 12",
        "SELECT k, sum(x) OVER (ORDER BY k RANGE BETWEEN 1 PRECEDING AND CURRENT ROW) FROM (SELECT DISTINCT k FROM {t}) s JOIN {t} USING (k) ORDER BY 1, 2 LIMIT 7",
        "SELECT CASE WHEN x % 2 = 0 THEN 'even' ELSE 'odd' END AS parity, count(*), sum(x) FROM {t} GROUP BY 1 ORDER BY 1",
        "SELECT k, count(*) FROM {t} GROUP BY k HAVING count(*) > 85 ORDER BY k",
        "SELECT x FROM {t} WHERE x IN (SELECT x * 3 FROM {t} WHERE x < 5) ORDER BY x",
        "SELECT k, string_agg(CAST(x AS VARCHAR), ',' ORDER BY x) FROM {t} WHERE x < 15 GROUP BY k ORDER BY k",
        "SELECT approx_distinct(x), median(x), round(stddev(CAST(x AS DOUBLE)), 6) FROM {t}",
        "SELECT k, max(x) - min(x), bool_and(x > 0) FROM {t} GROUP BY ROLLUP (k) ORDER BY k NULLS LAST",
        "SELECT a.x, b.x FROM {t} a LEFT JOIN {t} b ON a.x = b.x * 100 WHERE a.x < 3 ORDER BY a.x, b.x",
        "SELECT x FROM {t} WHERE x < 3 UNION ALL SELECT x FROM {t} WHERE x > 295 ORDER BY x",
        // A branch of one row beside a scanned one: a task that reads no file of the scan
        // runs a plan of another shape than its stage's other tasks.
        "SELECT x FROM {t} WHERE x < 3 UNION ALL SELECT 5 ORDER BY x",
        "SELECT count(*) FROM (SELECT 5 UNION ALL SELECT x FROM {t} WHERE x < 3)",
        "SELECT 1 AS v UNION ALL SELECT (SELECT max(x) FROM {t}) ORDER BY v",
        "SELECT x FROM {t} WHERE x < 3 UNION ALL SELECT (SELECT max(x) FROM {t}) ORDER BY x",
        "SELECT x, k FROM {t} ORDER BY k DESC, x LIMIT 4",
    ] {
        let sql = sql.replace("{t}", &table);
        let want = rows(&local.sql(&sql).await.unwrap());
        let got = rows(&s.sql(&sql).await.unwrap());
        assert_eq!(got, want, "{sql}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn scripts_created_after_the_cluster_started_run_on_its_nodes() {
    let cluster = start_cluster().await;
    let engine = client(&cluster).await;
    let dir = parquet_dir().await;
    let table = format!("'{}/'", dir.path().display());
    let s = engine.session();
    let local = single_node().session();
    let ddl = [
        "CREATE PYTHON3 SCALAR SCRIPT twice(x BIGINT) RETURNS BIGINT AS\ndef run(ctx):\n    return 2 * ctx.x\n/",
        "CREATE PYTHON3 SCALAR SCRIPT where_am_i(x BIGINT) RETURNS BIGINT AS\ndef run(ctx):\n    return int(exa.meta.node_id)\n/",
        "CREATE PYTHON3 SCALAR SCRIPT lib() RETURNS INT AS\ndef triple(v):\n    return 3 * v\n/",
        "CREATE PYTHON3 SCALAR SCRIPT use_lib(x BIGINT) RETURNS BIGINT AS\nlib = exa.import_script('LIB')\ndef run(ctx):\n    return lib.triple(ctx.x)\n/",
        "CREATE CONNECTION my_conn TO 'https://example.com/data' USER 'reader' IDENTIFIED BY 'secret'",
        "CREATE PYTHON3 SCALAR SCRIPT conn_of(x BIGINT) RETURNS VARCHAR(100) AS\ndef run(ctx):\n    c = exa.get_connection('MY_CONN')\n    return c.address + ' ' + c.user\n/",
        "CREATE PYTHON3 SET SCRIPT total(x BIGINT) RETURNS BIGINT AS\ndef run(ctx):\n    s = 0\n    while True:\n        s += ctx.x\n        if not ctx.next():\n            break\n    return s\n/",
        "CREATE PYTHON3 SET SCRIPT evens(x BIGINT) EMITS (v BIGINT, n BIGINT) AS\ndef run(ctx):\n    n = 0\n    while True:\n        n += 1\n        if ctx.x % 2 == 0:\n            ctx.emit(ctx.x, n)\n        if not ctx.next():\n            break\n/",
        "CREATE PYTHON3 SET SCRIPT group_node(x BIGINT) RETURNS BIGINT AS\ndef run(ctx):\n    return int(exa.meta.node_id)\n/",
        "CREATE PYTHON3 SET SCRIPT group_node_rows(x BIGINT) EMITS (node BIGINT, n BIGINT) AS\ndef run(ctx):\n    n = 1\n    while ctx.next():\n        n += 1\n    ctx.emit(int(exa.meta.node_id), n)\n/",
        "CREATE PYTHON3 SCALAR SCRIPT dyn(x BIGINT) EMITS (...) AS\ndef run(ctx):\n    ctx.emit(ctx.x, 2 * ctx.x)\n/",
        "CREATE PYTHON3 SCALAR SCRIPT node_rows(x BIGINT) EMITS (node BIGINT, x2 BIGINT) AS\ndef run(ctx):\n    ctx.emit(int(exa.meta.node_id), ctx.x)\n    ctx.emit(int(exa.meta.node_id), -ctx.x)\n/",
    ];
    for sql in ddl {
        s.sql(sql).await.unwrap();
        local.sql(sql).await.unwrap();
    }

    // Each row's script call ran on the node that read the row.
    let by_node = rows(
        &s.sql(&format!(
            "SELECT iproc(), min(where_am_i(x)), max(where_am_i(x)), count(*) FROM {table} GROUP BY iproc() ORDER BY 1"
        ))
        .await
        .unwrap(),
    );
    assert_eq!(by_node.len(), NODES, "{by_node:?}");
    for (node, row) in by_node.iter().enumerate() {
        assert_eq!(
            row[..3],
            [node.to_string(), node.to_string(), node.to_string()],
            "{by_node:?}"
        );
    }

    // Scalar and SET RETURNS scripts, imports and connections: the answers of one node.
    for sql in [
        "SELECT sum(twice(x)), count(*) FROM {t}",
        "SELECT k, sum(use_lib(x)), max(conn_of(x)) FROM {t} GROUP BY k ORDER BY k",
        "SELECT k, total(x), sum(x) FROM {t} GROUP BY k ORDER BY k",
        "SELECT total(x) FROM {t}",
        "SELECT k, total(twice(x)) FROM {t} WHERE x % 3 = 0 GROUP BY k ORDER BY k",
        "SELECT count(*), sum(v), count(DISTINCT n) > 40 FROM (SELECT evens(x) FROM {t} GROUP BY k)",
        "SELECT k, v FROM (SELECT k, evens(x) FROM {t} GROUP BY k) ORDER BY k, v LIMIT 9",
        "SELECT count(*), sum(x2), sum(abs(x2)) FROM (SELECT node_rows(x) FROM {t})",
        "SELECT count(*), sum(b) FROM (SELECT dyn(x) EMITS (a BIGINT, b BIGINT) FROM {t})",
    ] {
        let sql = sql.replace("{t}", &table);
        let want = rows(&local.sql(&sql).await.unwrap());
        let got = rows(&s.sql(&sql).await.unwrap());
        assert_eq!(got, want, "{sql}");
    }

    // A SCALAR EMITS script ran where its rows were read: on every node.
    let emitted = rows(
        &s.sql(&format!(
            "SELECT node, count(*) FROM (SELECT node_rows(x) FROM {table}) GROUP BY node ORDER BY node"
        ))
        .await
        .unwrap(),
    );
    let nodes: Vec<&str> = emitted.iter().map(|r| r[0].as_str()).collect();
    assert_eq!(nodes, ["0", "1", "2"], "{emitted:?}");

    // GROUP BY iproc() with a SET script: one group per node, the totals add up.
    let groups = rows(
        &s.sql(&format!(
            "SELECT iproc() AS n, total(x) FROM {table} GROUP BY iproc() ORDER BY n"
        ))
        .await
        .unwrap(),
    );
    let nodes: Vec<&str> = groups.iter().map(|r| r[0].as_str()).collect();
    assert_eq!(nodes, ["0", "1", "2"], "{groups:?}");
    let sum: i64 = groups.iter().map(|r| r[1].parse::<i64>().unwrap()).sum();
    assert_eq!(sum, 70_300);

    // GROUP BY iproc(): group k's SET script runs on node k, as in Exasol (RETURNS and EMITS).
    let placed = rows(
        &s.sql(&format!(
            "SELECT iproc() AS k, group_node(x) FROM {table} GROUP BY iproc() ORDER BY k"
        ))
        .await
        .unwrap(),
    );
    assert_eq!(placed, [["0", "0"], ["1", "1"], ["2", "2"]]);
    let emitted = rows(
        &s.sql(&format!(
            "SELECT node, n FROM (SELECT group_node_rows(x) FROM {table} GROUP BY iproc()) ORDER BY node"
        ))
        .await
        .unwrap(),
    );
    assert_eq!(emitted, [["0", "100"], ["1", "200"], ["2", "300"]]);

    // A script replaced after the first queries: the executors run the new code at once.
    s.sql("CREATE OR REPLACE PYTHON3 SCALAR SCRIPT twice(x BIGINT) RETURNS BIGINT AS\ndef run(ctx):\n    return 20 * ctx.x\n/")
        .await
        .unwrap();
    let replaced = rows(
        &s.sql(&format!("SELECT sum(twice(x)) FROM {table}"))
            .await
            .unwrap(),
    );
    assert_eq!(replaced, [["1406000"]]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_required_gpu_call_runs_on_each_nodes_own_leased_devices() {
    let cluster = start_cluster().await;
    let engine = client(&cluster).await;
    let dir = parquet_dir().await;
    let s = engine.session();
    let sql = format!(
        "SELECT n, min(g), max(g), count(*) FROM (SELECT iproc() AS n, gpu_where(x) AS g FROM '{}/') GROUP BY n ORDER BY n",
        dir.path().display()
    );
    let got = rows(&s.sql(&sql).await.unwrap());
    assert_eq!(got.len(), NODES, "{got:?}");
    for (node, row) in got.iter().enumerate() {
        let (min, max): (i64, i64) = (row[1].parse().unwrap(), row[2].parse().unwrap());
        // Each node's instances are pinned to that node's two devices, never the CPU.
        let base = node as i64 * 100;
        assert_eq!(row[0], node.to_string(), "{got:?}");
        assert!(base <= min && max <= base + 1, "node {node}: {row:?}");
    }
    // accelsql.udf_calls says where the call ran: one row per node, with that node's rows,
    // devices and lease wait (the 100-, 200- and 300-row files on nodes 0, 1 and 2).
    let calls = rows(
        &s.sql(
            "SELECT node, placement, devices IN ('0', '1', '0,1'), instances > 0, rows_in, rows_out, \
             lease_wait_ms >= 0 FROM accelsql.udf_calls WHERE udf = 'gpu_where' ORDER BY node",
        )
        .await
        .unwrap(),
    );
    let want: Vec<Vec<String>> = [(0, 100), (1, 200), (2, 300)]
        .iter()
        .map(|(node, n)| {
            [
                &node.to_string(),
                "GPU",
                "true",
                "true",
                &n.to_string(),
                &n.to_string(),
                "true",
            ]
            .map(String::from)
            .to_vec()
        })
        .collect();
    assert_eq!(calls, want);
    // The nodes answer for the client in full; a session that may not see every session's calls
    // gets only its own statements' rows (another user's call rows are not shown to it).
    let other = engine.session();
    other.set_user("mallory", false);
    assert_eq!(count_calls(&other).await, [["0"]]);
    let own = engine.session();
    own.set_user("carol", false);
    own.sql(&sql).await.unwrap();
    assert_eq!(count_calls(&own).await, [["3"]]);
    assert_eq!(count_calls(&other).await, [["0"]]);
    assert_eq!(count_calls(&s).await, [["6"]]);
    // accelsql.gpu_leases shows each node's own lease queue: every node leased and released.
    let leases = rows(
        &s.sql(
            "SELECT node, count(*) > 0 FROM accelsql.gpu_leases WHERE state = 'released' \
             GROUP BY node ORDER BY node",
        )
        .await
        .unwrap(),
    );
    assert_eq!(leases, [["0", "true"], ["1", "true"], ["2", "true"]]);
    // The decision was made once, in the client: EXPLAIN shows it.
    let explain = rows(&s.sql(&format!("EXPLAIN {sql}")).await.unwrap());
    assert!(
        explain
            .iter()
            .any(|r| r[1].contains("gpu_where() in block") && r[1].contains("GPU")),
        "{explain:?}"
    );

    // A node without GPUs fails a required call with 22069, naming itself.
    drop(cluster);
    let cluster = start_cluster_with(&[2, 0, 2], None).await;
    let engine = client(&cluster).await;
    let e = engine.session().sql(&sql).await.unwrap_err();
    assert_eq!(e.code(), "22069", "{e}");
    assert!(
        e.to_string().contains("node 1 of the cluster has no GPU"),
        "{e}"
    );
}

/// The `gpu_where` rows of `accelsql.udf_calls` that `session` sees.
async fn count_calls(session: &accelsql_engine::Session) -> Vec<Vec<String>> {
    rows(
        &session
            .sql("SELECT count(*) FROM accelsql.udf_calls WHERE udf = 'gpu_where'")
            .await
            .unwrap(),
    )
}

/// Each executor applies its own node's GPU sharing setting: node 0 shares by memory (its
/// calls reserve what they declare), nodes 1 and 2 lease whole devices.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn each_node_shares_its_gpus_as_its_own_setting_says() {
    let cluster = start_cluster_sharing(
        &[2; NODES],
        None,
        [
            GpuSharing::Memory,
            GpuSharing::Exclusive,
            GpuSharing::Exclusive,
        ],
    )
    .await;
    let engine = client(&cluster).await;
    let dir = parquet_dir().await;
    let s = engine.session();
    let sql = format!(
        "SELECT n, min(g), count(*) FROM (SELECT iproc() AS n, gpu_where_declared(x) AS g FROM '{}/') GROUP BY n",
        dir.path().display()
    );
    assert_eq!(rows(&s.sql(&sql).await.unwrap()).len(), NODES);
    let calls = rows(
        &s.sql(
            "SELECT node, placement, reserved_bytes FROM accelsql.udf_calls \
             WHERE udf = 'gpu_where_declared' ORDER BY node",
        )
        .await
        .unwrap(),
    );
    let gib8 = (8u64 << 30).to_string();
    assert_eq!(
        calls,
        [
            ["0", "GPU", gib8.as_str()],
            ["1", "GPU", "NULL"],
            ["2", "GPU", "NULL"]
        ]
    );
    let devices = rows(
        &s.sql(
            "SELECT node, min(gpu_sharing), max(gpu_sharing) FROM accelsql.gpu_devices \
             GROUP BY node ORDER BY node",
        )
        .await
        .unwrap(),
    );
    assert_eq!(
        devices,
        [
            ["0", "memory", "memory"],
            ["1", "exclusive", "exclusive"],
            ["2", "exclusive", "exclusive"]
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_clients_gpu_statements_take_turns_on_each_node() {
    let cluster = start_cluster().await;
    let dir = parquet_dir().await;
    let mut clients = Vec::new();
    for c in 0..2 {
        let engine = client(&cluster).await;
        let sql = format!(
            "SELECT sum(y) FROM (SELECT slow_gpu(x + {}) AS y FROM '{}/' WHERE x % 50 = 0)",
            c * 1_000_000,
            dir.path().display()
        );
        clients.push(tokio::spawn(async move {
            let s = engine.session();
            let mut out = Vec::new();
            for _ in 0..2 {
                out.push(rows(&s.sql(&sql).await.unwrap()));
            }
            (engine, out)
        }));
    }
    let mut engines = Vec::new();
    for c in clients {
        let (engine, answers) = c.await.unwrap();
        for answer in answers {
            assert_eq!(answer, [["12"]]);
        }
        engines.push(engine);
    }
    // Each client's accelsql.udf_calls shows the nodes' records of its own statements only
    // (both clients number their statements 1, 2, ...): 2 statements of 12 rows each.
    for engine in engines {
        let calls = rows(
            &engine
                .session()
                .sql(
                    "SELECT count(DISTINCT statement_id), sum(rows_in), count(DISTINCT node) >= 2 \
                     FROM accelsql.udf_calls WHERE udf = 'slow_gpu'",
                )
                .await
                .unwrap(),
        );
        assert_eq!(calls, [["2", "24", "true"]]);
    }
    // On each node, GPU batches of different statements never overlap: each node's lease
    // queue serializes the statements' tasks there.
    let runs = gpu_runs().lock().unwrap().clone();
    let nodes: std::collections::HashSet<usize> = runs.iter().map(|r| r.0).collect();
    assert!(
        nodes.len() >= 2,
        "the work spread over the nodes: {nodes:?}"
    );
    for a in &runs {
        for b in &runs {
            if a.0 == b.0 && a.1 != b.1 {
                assert!(
                    a.3 <= b.2 || b.3 <= a.2,
                    "node {}: statements {:?} and {:?} overlapped",
                    a.0,
                    a.1,
                    b.1
                );
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_statement_timeout_stops_the_nodes_tasks_and_frees_their_leases() {
    let cluster = start_cluster().await;
    let s = client(&cluster).await.session();
    let dir = parquet_dir().await;
    create_hang(&s).await;
    s.sql("SET accelsql.statement_timeout = '2s'")
        .await
        .unwrap();
    stopped_with(&s, &dir, "57T01").await;
}

/// A node's `--max-lease-hold` stops a task that holds its GPUs too long (57G03).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_nodes_max_lease_hold_stops_a_task_holding_its_gpus() {
    let cluster = start_cluster_with(&[2; NODES], Some(Duration::from_secs(2))).await;
    let s = client(&cluster).await.session();
    let dir = parquet_dir().await;
    create_hang(&s).await;
    stopped_with(&s, &dir, "57G03").await;
}

/// `hang(x)`: a GPU script that sleeps a minute.
async fn create_hang(s: &accelsql_engine::Session) {
    s.sql(
        "CREATE PYTHON3 SCALAR SCRIPT hang(x BIGINT) RETURNS BIGINT AS\n\
         %perInstanceRequiredAcceleratorDevices GpuNvidia;\n\
         import time\n\
         def run(ctx):\n    time.sleep(60)\n    return ctx.x\n/",
    )
    .await
    .unwrap();
}

/// Runs `hang` over the files of `dir`, which must fail with `code` within seconds; then every
/// node's lease must be free well before the scripts' minute: the nodes stopped their tasks.
async fn stopped_with(s: &accelsql_engine::Session, dir: &tempfile::TempDir, code: &str) {
    let started = std::time::Instant::now();
    let e = s
        .sql(&format!(
            "SELECT sum(hang(x)) FROM '{}/'",
            dir.path().display()
        ))
        .await
        .unwrap_err();
    assert_eq!(e.code(), code, "{e}");
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
    s.sql("RESET accelsql.statement_timeout").await.unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    loop {
        let held = rows(
            &s.sql("SELECT count(*) FROM accelsql.gpu_leases WHERE state = 'holding'")
                .await
                .unwrap(),
        );
        if held == [["0"]] {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "a node still holds its lease: {held:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_function_unknown_to_the_executors_is_an_error_not_a_hang() {
    let cluster = start_cluster().await;
    let engine = client(&cluster).await;
    // Known to the client only.
    let client_only = ScalarUdf::builder("client_only")
        .inputs([DataType::Int64])
        .returns(DataType::Int64)
        .cpu(|_: &InstanceContext, rows: usize, _: &[ColumnarValue]| {
            Ok(Arc::new(Int64Array::from(vec![0; rows])) as ArrayRef)
        })
        .build()
        .unwrap();
    engine.register_scalar_udf(client_only).unwrap();
    let s = engine.session();
    let outcome = tokio::time::timeout(
        Duration::from_secs(60),
        s.sql("SELECT client_only(value) FROM generate_series(1, 10)"),
    )
    .await
    .expect("the query must fail, not hang");
    let e = outcome.unwrap_err();
    assert_eq!(e.code(), "42883", "{e}");
    let message = e.to_string();
    assert!(
        message.starts_with("[42883] the function client_only is not known to node "),
        "{message}"
    );
    // The session is still usable.
    let ok = rows(&s.sql("SELECT 1 + 1").await.unwrap());
    assert_eq!(ok, [["2"]]);
}

#[tokio::test]
async fn an_unreachable_scheduler_is_a_coded_error_at_connect() {
    // A port nothing listens on: bound, then closed.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let start = std::time::Instant::now();
    let e = ClusterClient::connect(&format!("127.0.0.1:{port}"), ClusterAuth::none(), Some(3))
        .await
        .unwrap_err();
    assert_eq!(e.code(), "08001", "{e}");
    assert!(start.elapsed() < Duration::from_secs(10));
}

/// A client keeps its connections to the scheduler and the executors between statements; one
/// whose connections were made on a runtime that has ended (a program that runs each statement
/// on a runtime of its own) makes new ones instead of failing.
#[test]
fn a_client_outlives_the_runtime_its_connections_were_made_on() {
    // The cluster's tasks run on their own runtime's threads for the whole test.
    let cluster_runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let cluster = cluster_runtime.block_on(start_cluster());
    let statement = || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    };
    let first = statement();
    let engine = first.block_on(client(&cluster));
    let sum = "SELECT sum(times_node(value) - times_node(value) + value) FROM \
               generate_series(1, 100)";
    for _ in 0..2 {
        let got = first.block_on(async { rows(&engine.session().sql(sum).await.unwrap()) });
        assert_eq!(got, [["5050"]]);
    }
    drop(first);
    for _ in 0..2 {
        let got = statement().block_on(async {
            tokio::time::timeout(Duration::from_secs(60), engine.session().sql(sum))
                .await
                .expect("a statement on a new runtime must not hang")
                .unwrap()
        });
        assert_eq!(rows(&got), [["5050"]]);
    }
    drop(engine);
    let _inside = cluster_runtime.enter();
    drop(cluster);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn stored_tables_are_read_by_the_nodes_and_written_through_one_log() {
    let cluster = start_cluster().await;
    let data = tempfile::tempdir().unwrap();
    let client = ClusterClient::connect(
        &cluster.scheduler.address().to_string(),
        cluster.auth(),
        None,
    )
    .await
    .unwrap();
    let engine = Engine::with_options(client.engine_options(EngineOptions {
        scheduler: SchedulerConfig::default().with_simulated_gpus(0),
        data_dir: Some(data.path().to_path_buf()),
        ..EngineOptions::default()
    }))
    .unwrap();
    let s = engine.session();
    s.sql("CREATE TABLE st (x BIGINT)").await.unwrap();
    // Three commits, three files.
    for i in 0..3 {
        s.sql(&format!(
            "INSERT INTO st SELECT value FROM generate_series({}, {})",
            i * 100 + 1,
            (i + 1) * 100
        ))
        .await
        .unwrap();
    }
    // The nodes read the table's files: every node a file, the rows once.
    let by_node = rows(
        &s.sql("SELECT iproc() AS node, count(*) FROM st GROUP BY iproc() ORDER BY node")
            .await
            .unwrap(),
    );
    let nodes: Vec<&str> = by_node.iter().map(|r| r[0].as_str()).collect();
    assert_eq!(nodes, ["0", "1", "2"], "{by_node:?}");
    assert_eq!(
        rows(&s.sql("SELECT sum(x), count(*) FROM st").await.unwrap()),
        [["45150", "300"]]
    );
    // Writes commit through the client's log; the nodes then read the new version.
    s.sql("UPDATE st SET x = -x WHERE x <= 10").await.unwrap();
    assert_eq!(
        rows(&s.sql("SELECT count(*) FROM st WHERE x < 0").await.unwrap()),
        [["10"]]
    );
    assert_eq!(
        rows(
            &s.sql("SELECT count(*) FROM st VERSION AS OF 1")
                .await
                .unwrap()
        ),
        [["100"]]
    );
    // Another client engine on the same data directory sees the same table.
    let other = Engine::with_options(EngineOptions {
        scheduler: SchedulerConfig::default().with_simulated_gpus(0),
        data_dir: Some(data.path().to_path_buf()),
        ..EngineOptions::default()
    })
    .unwrap();
    assert_eq!(
        rows(
            &other
                .session()
                .sql("SELECT count(*) FROM st WHERE x < 0")
                .await
                .unwrap()
        ),
        [["10"]]
    );
}
