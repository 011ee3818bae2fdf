//! GPU placement, leases and errors through SQL, on simulated devices.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic: that is a failed test

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use accelsql_engine::datafusion::arrow::array::{
    Array, ArrayRef, Int64Array, RecordBatch, StringArray,
};
use accelsql_engine::datafusion::arrow::datatypes::DataType;
use accelsql_engine::datafusion::logical_expr::ColumnarValue;
use accelsql_engine::{
    AcceleratorRequest, Engine, InstanceContext, Placement, ScalarUdf, SchedulerConfig, testing,
};

fn engine(gpus: usize) -> Engine {
    let engine = Engine::with_config(SchedulerConfig::default().with_simulated_gpus(gpus)).unwrap();
    testing::register_fixtures(&engine).unwrap();
    engine
}

/// Every value of column `col` of the result, as text.
fn column(batches: &[RecordBatch], col: usize) -> Vec<String> {
    let mut out = Vec::new();
    for b in batches {
        let a = accelsql_engine::datafusion::arrow::compute::cast(b.column(col), &DataType::Utf8)
            .unwrap();
        let a = a.as_any().downcast_ref::<StringArray>().unwrap();
        out.extend((0..a.len()).map(|i| a.value(i).to_string()));
    }
    out
}

#[tokio::test]
async fn a_required_call_runs_pinned_to_a_leased_device() {
    let s = engine(2).session();
    let b = s
        .sql("SELECT gpu_probe_required(x) FROM (VALUES (1), (2), (3)) t(x)")
        .await
        .unwrap();
    let v = column(&b, 0);
    assert_eq!(v.len(), 3);
    assert!(v.iter().all(|d| d == "0" || d == "1"), "{v:?}");
}

#[tokio::test]
async fn two_required_calls_in_one_select_fail_with_22069() {
    let s = engine(2).session();
    let e = s
        .sql("SELECT gpu_probe_required() AS a, gpu_probe_required() AS b")
        .await
        .unwrap_err();
    assert_eq!(e.code(), "22069");
    assert!(e.to_string().contains(
        "Accelerator device request failed for a user defined function (requested types: GpuNvidia). \
         Impossible Accelerator Device Request: Insufficient accelerator resources to execute all user defined functions concurrently."
    ), "{e}");
    // The session stays usable and the lease was never taken.
    assert_eq!(column(&s.sql("SELECT 1").await.unwrap(), 0), ["1"]);
    assert!(s.engine().lease_queue().snapshot().holder.is_none());
}

#[tokio::test]
async fn required_calls_win_over_optional_ones_then_left_to_right() {
    let s = engine(1).session();
    let b = s
        .sql("SELECT gpu_probe_optional(), gpu_probe_required()")
        .await
        .unwrap();
    assert_eq!(
        (column(&b, 0), column(&b, 1)),
        (vec!["<invalid>".to_string()], vec!["0".to_string()])
    );
    let b = s
        .sql("SELECT gpu_probe_optional() AS a, gpu_probe_optional() AS b, cpu_probe()")
        .await
        .unwrap();
    // Volatile: two identical calls stay two calls, and only the first gets the GPU.
    assert_eq!(column(&b, 0), ["0"]);
    assert_eq!(column(&b, 1), ["<invalid>"]);
    assert_eq!(column(&b, 2), ["<invalid>"]);
}

#[tokio::test]
async fn each_sub_select_union_branch_and_cte_is_its_own_block() {
    let s = engine(2).session();
    let b = s
        .sql("SELECT gpu_probe_required() AS outer_call, inner_call FROM (SELECT gpu_probe_required() AS inner_call) sub")
        .await
        .unwrap();
    assert!(column(&b, 0)[0] != "<invalid>" && column(&b, 1)[0] != "<invalid>");
    let b = s
        .sql("SELECT gpu_probe_required() UNION ALL SELECT gpu_probe_required()")
        .await
        .unwrap();
    assert_eq!(column(&b, 0).len(), 2);
    let b = s
        .sql("WITH c AS (SELECT gpu_probe_required() AS d) SELECT d, gpu_probe_required() FROM c")
        .await
        .unwrap();
    assert!(!column(&b, 1)[0].contains("invalid"));
    let b = s
        .sql("SELECT gpu_probe_required() FROM (VALUES (1)) t(x) WHERE x IN (SELECT 1 WHERE gpu_probe_required() IS NOT NULL)")
        .await
        .unwrap();
    assert_eq!(column(&b, 0).len(), 1);
}

#[tokio::test]
async fn with_zero_gpus_required_calls_fail_and_optional_calls_use_the_cpu() {
    let s = engine(0).session();
    let e = s.sql("SELECT gpu_probe_required()").await.unwrap_err();
    assert_eq!(e.code(), "22069");
    assert!(
        e.to_string().contains("No GPU is present") && e.to_string().contains("gpu_probe_required"),
        "{e}"
    );
    let b = s.sql("SELECT gpu_probe_optional()").await.unwrap();
    assert_eq!(column(&b, 0), ["<invalid>"]);
}

#[tokio::test]
async fn explain_shows_each_call_its_placement_and_why() {
    let s = engine(1).session();
    let b = s
        .sql("EXPLAIN SELECT gpu_probe_optional(), gpu_probe_required()")
        .await
        .unwrap();
    let kinds = column(&b, 0);
    let plans = column(&b, 1);
    let i = kinds
        .iter()
        .position(|k| k == "gpu_placement")
        .expect("placement row");
    assert!(
        plans[i].contains("gpu_probe_required() in block 1: GPU (required, first in its block"),
        "{}",
        plans[i]
    );
    assert!(
        plans[i]
            .contains("gpu_probe_optional() in block 1: CPU (GPUs taken by gpu_probe_required()"),
        "{}",
        plans[i]
    );
    // Plain EXPLAIN never takes the lease.
    assert_eq!(s.engine().lease_queue().snapshot().totals.granted, 0);
}

#[tokio::test]
async fn a_udf_returning_the_wrong_length_is_a_coded_error() {
    let s = engine(1).session();
    let e = s
        .sql("SELECT bad_length_gpu(x) FROM (VALUES (1), (2)) t(x)")
        .await
        .unwrap_err();
    assert_eq!(e.code(), "22E02");
    assert!(e.to_string().contains("3 rows for a batch of 2"), "{e}");
    assert!(
        s.engine().lease_queue().snapshot().holder.is_none(),
        "a failed statement releases its devices"
    );
    assert_eq!(column(&s.sql("SELECT 2").await.unwrap(), 0), ["2"]);
}

#[tokio::test]
async fn system_tables_describe_devices_leases_and_calls() {
    let s = engine(2).session();
    let b = s
        .sql("SELECT param_value FROM exa_metadata WHERE param_name = 'acceleratorDeviceGpuNvidiaCount'")
        .await
        .unwrap();
    assert_eq!(column(&b, 0), ["2"]);
    let b = s
        .sql("SELECT count(*) FROM accelsql.gpu_devices WHERE simulated")
        .await
        .unwrap();
    assert_eq!(column(&b, 0), ["2"]);
    s.sql("SELECT gpu_probe_required(x) FROM (VALUES (1), (2)) t(x)")
        .await
        .unwrap();
    let b = s
        .sql("SELECT udf, placement, rows_in, devices FROM accelsql.udf_calls")
        .await
        .unwrap();
    assert_eq!(column(&b, 0), ["gpu_probe_required"]);
    assert_eq!(column(&b, 1), ["GPU"]);
    assert_eq!(column(&b, 2), ["2"]);
    let b = s
        .sql("SELECT state FROM accelsql.gpu_leases")
        .await
        .unwrap();
    assert_eq!(column(&b, 0), ["released"]);
    let b = s.sql("SELECT iproc(), nproc()").await.unwrap();
    assert_eq!(
        (column(&b, 0), column(&b, 1)),
        (vec!["0".to_string()], vec!["1".to_string()])
    );
}

/// A required GPU UDF that sleeps and records when it ran.
fn recording_udf(log: Arc<Mutex<Vec<(Instant, Instant)>>>) -> ScalarUdf {
    ScalarUdf::builder("recorded_gpu")
        .inputs([DataType::Int64])
        .returns(DataType::Int64)
        .accelerator_request(AcceleratorRequest::Required)
        .cpu(
            move |_: &InstanceContext, rows: usize, _: &[ColumnarValue]| {
                let start = Instant::now();
                std::thread::sleep(Duration::from_millis(5));
                log.lock().unwrap().push((start, Instant::now()));
                Ok(Arc::new(Int64Array::from(vec![1; rows])) as ArrayRef)
            },
        )
        .build()
        .unwrap()
}

async fn concurrent_sessions_never_overlap(n: usize) {
    let engine = engine(2);
    let log: Arc<Mutex<Vec<(Instant, Instant)>>> = Arc::default();
    engine
        .register_scalar_udf(recording_udf(Arc::clone(&log)))
        .unwrap();
    let mut tasks = Vec::new();
    for _ in 0..n {
        let session = engine.session();
        tasks.push(tokio::spawn(async move {
            session.sql("SELECT recorded_gpu(1)").await.map(|b| b.len())
        }));
    }
    for t in tasks {
        t.await.unwrap().unwrap();
    }
    let mut runs = log.lock().unwrap().clone();
    assert_eq!(runs.len(), n);
    runs.sort();
    for w in runs.windows(2) {
        assert!(w[0].1 <= w[1].0, "GPU statements overlapped");
    }
    assert_eq!(engine.lease_queue().snapshot().totals.granted, n as u64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_sessions_with_gpu_calls_are_serialized() {
    concurrent_sessions_never_overlap(2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fifty_sessions_with_gpu_calls_are_serialized() {
    concurrent_sessions_never_overlap(50).await;
}

/// The waiter's last call: the holder's call, recorded when its stream ends, may be recorded
/// after it.
fn last_probe(engine: &Engine) -> accelsql_engine::UdfCallRecord {
    engine
        .recent_calls()
        .into_iter()
        .rev()
        .find(|c| c.decision.udf == "gpu_probe_optional")
        .expect("a gpu_probe_optional call")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_wait_timeout_setting_bounds_the_wait_and_optional_calls_wait_unless_set_to_cpu() {
    let engine = engine(1);
    let holder = engine.session();
    let mut stream = holder.sql_stream("SELECT slow_gpu(2000)").await.unwrap();
    // Polling starts execution: the lease is taken on the first poll.
    let running = tokio::spawn(async move {
        use futures::StreamExt;
        while stream.next().await.is_some() {}
    });
    let start = Instant::now();
    while engine.lease_queue().snapshot().holder.is_none() {
        assert!(start.elapsed() < Duration::from_secs(5));
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let waiter = engine.session();
    let e = waiter
        .sql("SET accelsql.gpu_wait_timeout = '50ms'; SELECT gpu_probe_required()")
        .await
        .unwrap_err();
    assert_eq!(e.code(), "57G01");
    // The holder by statement and session, not by its SQL (another session's).
    assert!(
        e.to_string().contains("of session"),
        "names the holder: {e}"
    );
    assert!(!e.to_string().contains("slow_gpu"), "without its SQL: {e}");
    // With `optional_gpu_when_busy = 'cpu'` an optional call does not wait: it runs on the
    // CPU while the lease is busy.
    let started = Instant::now();
    let b = waiter
        .sql("SET accelsql.optional_gpu_when_busy = 'cpu'; SELECT gpu_probe_optional()")
        .await
        .unwrap();
    assert_eq!(column(&b, 0), ["<invalid>"]);
    assert!(
        started.elapsed() < Duration::from_millis(1500),
        "it did not wait for the 2 s holder"
    );
    let last = last_probe(&engine);
    assert_eq!(last.decision.placement, Placement::Cpu);
    assert!(
        last.decision.reason.contains("lease was busy") && last.decision.reason.contains("'cpu'"),
        "{:?}",
        last.decision
    );
    // By default (as in Exasol) it waits for the GPU like a required call; a wait that times out
    // runs it on the CPU (it is optional).
    let b = waiter
        .sql("RESET accelsql.optional_gpu_when_busy; SELECT gpu_probe_optional()")
        .await
        .unwrap();
    assert_eq!(column(&b, 0), ["<invalid>"]);
    let last = last_probe(&engine);
    assert_eq!(last.decision.placement, Placement::Cpu);
    assert!(
        last.decision.reason.contains("timed out"),
        "{:?}",
        last.decision
    );
    let b = waiter
        .sql("RESET accelsql.gpu_wait_timeout; SELECT gpu_probe_optional()")
        .await
        .unwrap();
    assert!(
        started.elapsed() >= Duration::from_millis(1500),
        "it waited for the 2 s holder"
    );
    assert_eq!(column(&b, 0), ["0"]);
    let last = last_probe(&engine);
    assert_eq!(last.decision.placement, Placement::Gpu);
    assert!(
        last.decision.reason.contains("waited for the GPU lease"),
        "{:?}",
        last.decision
    );
    assert!(last.lease_wait.unwrap() > Duration::from_millis(500));
    running.await.unwrap();
    let e = waiter
        .sql("SET accelsql.gpu_wait_timeout = 'soon'; SELECT gpu_probe_required()")
        .await
        .unwrap_err();
    assert_eq!(e.code(), "22E03");
}

/// A UDF of one session: `device_of(x)` gives its instance's device index, or -1 on the CPU.
fn device_udf(accelerator: &str) -> ScalarUdf {
    ScalarUdf::builder("device_of")
        .inputs([DataType::Int64])
        .returns(DataType::Int64)
        .accelerator(accelerator)
        .unwrap()
        .cpu(|ctx: &InstanceContext, rows: usize, _: &[ColumnarValue]| {
            let device = ctx.device.as_ref().map_or(-1, |d| i64::from(d.index));
            Ok(Arc::new(Int64Array::from(vec![device; rows])) as ArrayRef)
        })
        .build()
        .unwrap()
}

#[tokio::test]
async fn a_session_udf_is_placed_like_an_engine_udf_and_only_its_session_sees_it() {
    let engine = engine(1);
    let (s, other) = (engine.session(), engine.session());
    s.register_scalar_udf(device_udf("GpuNvidia")).unwrap();
    assert_eq!(
        column(&s.sql("SELECT device_of(1)").await.unwrap(), 0),
        ["0"]
    );
    let e = s
        .sql("SELECT device_of(1) AS a, device_of(2) AS b")
        .await
        .unwrap_err();
    assert_eq!(e.code(), "22069");
    assert!(other.sql("SELECT device_of(1)").await.is_err());
    // Registering the name again replaces the session's own UDF.
    s.register_scalar_udf(device_udf("GpuNvidia|None")).unwrap();
    let b = s
        .sql("SELECT device_of(1) AS a, device_of(2) AS b")
        .await
        .unwrap();
    assert_eq!(
        (column(&b, 0), column(&b, 1)),
        (vec!["0".to_string()], vec!["-1".to_string()])
    );
    // Names of engine UDFs and built-in functions are taken.
    let taken = |name: &str| {
        ScalarUdf::builder(name)
            .returns(DataType::Int64)
            .cpu(|_: &InstanceContext, rows: usize, _: &[ColumnarValue]| {
                Ok(Arc::new(Int64Array::from(vec![0; rows])) as ArrayRef)
            })
            .build()
            .unwrap()
    };
    for name in ["gpu_probe_required", "abs", "sum"] {
        let e = s.register_scalar_udf(taken(name)).unwrap_err();
        assert_eq!(e.code(), "42E01", "{name}: {e}");
    }
}

/// Found by the fuzzer: the lease of a failed GPU statement was released a moment after its
/// error reached the caller (when the aborted plan task was dropped), so a caller checking right
/// away saw it held. Now a statement holds nothing once its error, or its end, is seen.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lease_is_free_once_a_statement_ends_or_fails() {
    let s = engine(2).session();
    s.sql("CREATE TABLE t AS SELECT value AS id, 'v' || CAST(value AS VARCHAR) AS s FROM generate_series(1, 300)")
        .await
        .unwrap();
    for i in 0..300 {
        let failing = s
            .sql("SELECT gpu_probe_required(), CAST(s AS BIGINT) FROM t WHERE id > 0")
            .await;
        assert!(failing.is_err());
        let queue = s.engine().lease_queue().snapshot();
        assert!(
            queue.holder.is_none(),
            "held after the error, run {i}: {:?}",
            queue.holder
        );
        s.sql("SELECT gpu_probe_required() FROM t").await.unwrap();
        let queue = s.engine().lease_queue().snapshot();
        assert!(
            queue.holder.is_none(),
            "held after the end, run {i}: {:?}",
            queue.holder
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_statement_whose_reader_stops_loses_the_lease_after_max_lease_hold() {
    use accelsql_engine::EngineOptions;
    use futures::StreamExt;
    let engine = Engine::with_options(EngineOptions {
        scheduler: SchedulerConfig::default().with_simulated_gpus(1),
        max_lease_hold: Some(Duration::from_millis(300)),
        ..EngineOptions::default()
    })
    .unwrap();
    testing::register_fixtures(&engine).unwrap();
    let reader = engine.session();
    reader
        .sql("SET datafusion.execution.batch_size = 1")
        .await
        .unwrap();
    // 100 one-row batches of 20 ms each: 2 s of GPU work; the reader takes one and stops.
    let mut stream = reader
        .sql_stream("SELECT slow_gpu(20) FROM generate_series(1, 100)")
        .await
        .unwrap();
    stream.next().await.unwrap().unwrap();
    let started = Instant::now();
    let other = engine.session().sql("SELECT slow_gpu(1)").await.unwrap();
    assert_eq!(column(&other, 0), ["1"]);
    assert!(
        started.elapsed() < Duration::from_millis(1500),
        "the other statement waited {:?}",
        started.elapsed()
    );
    // The stopped statement reports why when it is read again.
    let e = loop {
        match stream.next().await {
            Some(Ok(_)) => continue,
            Some(Err(e)) => break accelsql_engine::EngineError::from(e),
            None => panic!("the statement should have been stopped"),
        }
    };
    assert_eq!(e.code(), "57G03", "{e}");
    // A statement read promptly is not limited by it... as long as it ends within the limit;
    // one without a GPU call has no limit at all.
    let b = engine
        .session()
        .sql("SELECT count(*) FROM generate_series(1, 1000)")
        .await
        .unwrap();
    assert_eq!(column(&b, 0), ["1000"]);
}

#[tokio::test]
async fn gpu_calls_get_their_input_in_large_batches() {
    let plan_of = |gpus: usize| async move {
        let s = engine(gpus).session();
        s.sql(
            "CREATE TABLE pts AS SELECT CAST(value AS DOUBLE) AS a FROM generate_series(1, 50000)",
        )
        .await
        .unwrap();
        let sum = s
            .sql("SELECT sum(haversine_km(a / 1000, a / 500, 0.5, 0.25)) FROM pts")
            .await
            .unwrap();
        let plan = s
            .sql("EXPLAIN ANALYZE SELECT sum(haversine_km(a / 1000, a / 500, 0.5, 0.25)) FROM pts")
            .await
            .unwrap();
        (column(&sum, 0), column(&plan, 1).join("\n"))
    };
    // Placed on the GPU: the aggregate's input is coalesced (4 DOUBLE-wide rows: up to 1M).
    let (on_gpu, plan) = plan_of(1).await;
    assert!(
        plan.contains("CoalesceBatchesExec: target_batch_size=1048576"),
        "{plan}"
    );
    // On the CPU nothing changes, and the answers agree (up to the summation order).
    let (on_cpu, plan) = plan_of(0).await;
    assert!(!plan.contains("CoalesceBatchesExec"), "{plan}");
    let (g, c): (f64, f64) = (on_gpu[0].parse().unwrap(), on_cpu[0].parse().unwrap());
    assert!((g - c).abs() <= 1e-12 * c.abs(), "{g} vs {c}");
}
