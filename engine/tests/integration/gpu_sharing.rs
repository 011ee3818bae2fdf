//! Sharing a GPU by memory (`gpu_sharing = 'memory'`) through SQL, on simulated devices of
//! 80 GiB: statements whose calls declare their device memory run side by side while their
//! reservations fit, the next one waits and says why, a call without a declaration still gets
//! every device, system tables and EXPLAIN ANALYZE show the reservations, and scripts declare
//! theirs with `%perInstanceRequiredAcceleratorMemory`.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic: that is a failed test

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::helpers::{run, until};
use accelsql_engine::datafusion::arrow::array::{ArrayRef, Int64Array};
use accelsql_engine::datafusion::arrow::datatypes::DataType;
use accelsql_engine::datafusion::logical_expr::ColumnarValue;
use accelsql_engine::gpu_scheduler::GpuSharing;
use accelsql_engine::{
    AcceleratorRequest, Engine, EngineError, EngineOptions, InstanceContext, ScalarUdf,
    SchedulerConfig, Session, testing,
};
use futures::StreamExt;

const GIB: u64 = 1 << 30;

/// Gates the `held` UDFs wait for, by number (0: none): a test opens its own when it has seen
/// what it needs while the statements hold their leases, however slow the machine.
static GATES: [AtomicBool; 4] = [const { AtomicBool::new(false) }; 4];

fn open(gate: usize) {
    GATES[gate].store(true, Ordering::SeqCst);
}

/// `name(g)`: waits for gate `g` (at most 60 s; 0: no wait) on a required GPU, declaring
/// `memory` per instance; returns `g`.
fn held(name: &str, memory: Option<u64>, instances: usize) -> ScalarUdf {
    let mut builder = ScalarUdf::builder(name)
        .inputs([DataType::Int64])
        .returns(DataType::Int64)
        .accelerator_request(AcceleratorRequest::Required)
        .instance_limit(instances);
    if let Some(bytes) = memory {
        builder = builder.device_memory(bytes);
    }
    builder
        .cpu(|_: &InstanceContext, rows: usize, args: &[ColumnarValue]| {
            let gate = match &args[0] {
                ColumnarValue::Scalar(s) => s.to_string().parse::<usize>().unwrap_or(0),
                ColumnarValue::Array(a) => a
                    .as_any()
                    .downcast_ref::<Int64Array>()
                    .map_or(0, |a| a.value(0) as usize),
            };
            if gate > 0 {
                // The wait hands this runtime worker's other tasks (the test's) to others.
                tokio::task::block_in_place(|| {
                    let since = Instant::now();
                    while !GATES[gate % GATES.len()].load(Ordering::SeqCst)
                        && since.elapsed() < Duration::from_secs(60)
                    {
                        std::thread::sleep(Duration::from_millis(2));
                    }
                });
            }
            Ok(Arc::new(Int64Array::from(vec![gate as i64; rows])) as ArrayRef)
        })
        .build()
        .unwrap()
}

fn engine(sharing: GpuSharing, gpus: usize) -> Engine {
    let engine = Engine::with_options(EngineOptions {
        scheduler: SchedulerConfig::default()
            .with_simulated_gpus(gpus)
            .with_gpu_sharing(sharing, None),
        ..EngineOptions::default()
    })
    .unwrap();
    testing::register_fixtures(&engine).unwrap();
    engine
        .register_scalar_udf(held("mem30", Some(30 * GIB), 1))
        .unwrap();
    engine
        .register_scalar_udf(held("mem10x4", Some(10 * GIB), 4))
        .unwrap();
    engine
        .register_scalar_udf(held("huge", Some(75 * GIB), 1))
        .unwrap();
    engine.register_scalar_udf(held("whole", None, 1)).unwrap();
    engine
}

/// Starts `sql` in a task of its own; the task ends with its error, if any.
async fn start(s: &Session, sql: &str) -> tokio::task::JoinHandle<Option<EngineError>> {
    let mut stream = s.sql_stream(sql).await.unwrap();
    tokio::spawn(async move {
        while let Some(next) = stream.next().await {
            if let Err(e) = next {
                return Some(EngineError::from(e));
            }
        }
        None
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_statements_that_fit_share_a_device_and_a_third_waits_saying_why() {
    let engine = engine(GpuSharing::Memory, 1);
    let (a, b, c, viewer) = (
        engine.session(),
        engine.session(),
        engine.session(),
        engine.session(),
    );
    let first = start(&a, "SELECT mem30(1)").await;
    let second = start(&b, "SELECT mem30(1)").await;
    let queue = engine.lease_queue().clone();
    until("both hold", || queue.snapshot().holders.len() == 2).await;
    let third = start(&c, "SELECT mem30(0)").await;
    until("the third waits", || queue.snapshot().waiting.len() == 1).await;
    let leases = run(
        &viewer,
        "SELECT state, devices, reserved_bytes, wait_reason FROM accelsql.gpu_leases \
         WHERE state <> 'released' ORDER BY state",
    )
    .await;
    assert_eq!(leases.len(), 3, "{leases:?}");
    let gib30 = (30 * GIB).to_string();
    assert!(
        leases[0].starts_with(&format!("holding|0|{gib30}|")),
        "{leases:?}"
    );
    assert!(
        leases[1].starts_with(&format!("holding|0|{gib30}|")),
        "{leases:?}"
    );
    assert!(
        leases[2].starts_with(&format!("waiting|NULL|{gib30}|GPU 0 is 18.0 GiB short")),
        "{leases:?}"
    );
    let devices = run(
        &viewer,
        "SELECT gpu_sharing, memory_reserved, memory_reservable FROM accelsql.gpu_devices",
    )
    .await;
    assert_eq!(
        devices,
        vec![format!("memory|{}|{}", 60 * GIB, 12 * GIB)],
        "80 GiB, 10% headroom, two reservations of 30 GiB"
    );
    open(1);
    for t in [first, second, third] {
        assert!(t.await.unwrap().is_none());
    }
    let snap = queue.snapshot();
    assert!(snap.holders.is_empty() && snap.waiting.is_empty());
    assert!(snap.memory.iter().all(|m| m.reserved == 0));
    // The two that fit overlapped: both were granted before either was released.
    let recent: Vec<_> = snap.recent.iter().rev().take(3).collect();
    assert!(
        recent.iter().all(|r| r.reserved_bytes == 30 * GIB),
        "{recent:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn under_exclusive_sharing_the_same_statements_take_turns() {
    let engine = engine(GpuSharing::Exclusive, 1);
    let (a, b) = (engine.session(), engine.session());
    let first = start(&a, "SELECT mem30(2)").await;
    let queue = engine.lease_queue().clone();
    until("one holds", || queue.snapshot().holders.len() == 1).await;
    let second = start(&b, "SELECT mem30(0)").await;
    until("the other waits", || queue.snapshot().waiting.len() == 1).await;
    assert!(queue.snapshot().holders[0].whole);
    open(2);
    assert!(first.await.unwrap().is_none() && second.await.unwrap().is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_call_without_a_declaration_takes_every_device_even_when_memory_is_shared() {
    let engine = engine(GpuSharing::Memory, 2);
    let (a, b) = (engine.session(), engine.session());
    let small = start(&a, "SELECT mem30(3)").await;
    let queue = engine.lease_queue().clone();
    until("the small one holds", || {
        queue.snapshot().holders.len() == 1
    })
    .await;
    let whole = start(&b, "SELECT whole(0)").await;
    until("the whole one waits", || {
        queue.snapshot().waiting.len() == 1
    })
    .await;
    let reason = queue.snapshot().waiting[0].reason.clone();
    assert!(reason.contains("needs every GPU"), "{reason}");
    open(3);
    assert!(small.await.unwrap().is_none() && whole.await.unwrap().is_none());
    let last = queue.snapshot().recent.last().cloned().unwrap();
    assert_eq!(
        last.reserved_bytes, 0,
        "a whole-device lease reserves no bytes"
    );
}

#[tokio::test]
async fn explain_analyze_and_udf_calls_show_the_reservation() {
    let engine = engine(GpuSharing::Memory, 2);
    let s = engine.session();
    run(&s, "SET datafusion.execution.target_partitions = 4").await;
    run(&s, "SET datafusion.execution.batch_size = 8").await;
    let plan = run(
        &s,
        "EXPLAIN ANALYZE SELECT sum(mem10x4(0)) FROM generate_series(1, 64)",
    )
    .await
    .join("\n");
    assert!(
        plan.contains("reserved 10.0 GiB of device memory per instance"),
        "{plan}"
    );
    let calls = run(
        &s,
        "SELECT reserved_bytes FROM accelsql.udf_calls WHERE udf = 'mem10x4'",
    )
    .await;
    assert_eq!(calls.last().unwrap(), &(10 * GIB).to_string(), "{calls:?}");
    // Four instances of 10 GiB, two on each device: the lease reserved 40 GiB in all.
    let snap = engine.lease_queue().snapshot();
    assert_eq!(snap.recent.last().unwrap().reserved_bytes, 40 * GIB);
}

#[tokio::test]
async fn a_declaration_no_device_can_hold_fails_at_once() {
    let engine = engine(GpuSharing::Memory, 2);
    let s = engine.session();
    let e = s.sql("SELECT huge(0)").await.unwrap_err();
    assert_eq!(e.code(), "53G03", "{e}");
    assert!(
        e.to_string().contains("can reserve at most 72.0 GiB"),
        "{e}"
    );
    // The session goes on, and nothing is left reserved.
    assert_eq!(run(&s, "SELECT mem30(0)").await, vec!["0"]);
    assert!(
        engine
            .lease_queue()
            .snapshot()
            .memory
            .iter()
            .all(|m| m.reserved == 0)
    );
}

#[tokio::test]
async fn scripts_declare_their_device_memory() {
    let engine = engine(GpuSharing::Memory, 1);
    let s = engine.session();
    run(
        &s,
        "CREATE PYTHON3 SCALAR SCRIPT scored(x INT) RETURNS INT AS\n\
         %perInstanceRequiredAcceleratorDevices GpuNvidia;\n\
         %perInstanceRequiredAcceleratorMemory 6GiB;\n\
         def run(ctx):\n    return ctx.x * 2\n/",
    )
    .await;
    assert_eq!(run(&s, "SELECT scored(21)").await, vec!["42"]);
    let calls = run(
        &s,
        "SELECT placement, reserved_bytes FROM accelsql.udf_calls WHERE udf = 'scored'",
    )
    .await;
    assert_eq!(
        calls.last().unwrap(),
        &format!("GPU|{}", 6 * GIB),
        "{calls:?}"
    );
    let text = run(
        &s,
        "SELECT script_text FROM exa_all_scripts WHERE script_name = 'SCORED'",
    )
    .await;
    assert!(
        text[0].contains("%perInstanceRequiredAcceleratorMemory 6GiB;"),
        "{text:?}"
    );
    let e = s
        .sql(
            "CREATE PYTHON3 SCALAR SCRIPT bad(x INT) RETURNS INT AS\n\
             %perInstanceRequiredAcceleratorMemory plenty;\n\
             def run(ctx):\n    return 1\n/",
        )
        .await
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("perInstanceRequiredAcceleratorMemory"),
        "{e}"
    );
    assert!(e.to_string().contains("6GiB, 512MiB or 1.5GB"), "{e}");
}
