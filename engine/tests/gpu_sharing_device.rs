//! Sharing one CUDA device by memory (`gpu_sharing = 'memory'`), on a real GPU or the fake CUDA
//! driver of `scripts/fake-cuda` (devices of `ACCELSQL_FAKE_CUDA_MEMORY_MIB`, default 1024 MiB,
//! so 921.6 MiB reservable): two statements whose `affine` calls declare 400 MiB each run
//! their kernels on the device at the same time, a third waits, naming the device and how short
//! it is; a run whose reservation is small takes more, smaller chunks and gives the same rows.
//! Without a device that opens, each test prints `SKIPPED (no CUDA device)` and passes; with
//! `ACCELSQL_REQUIRE_GPU` set it fails instead.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic: that is a failed test

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use accelsql_engine::datafusion::arrow::datatypes::DataType;
use accelsql_engine::gpu_scheduler::GpuSharing;
use accelsql_engine::udf_runtime::gpu::{CudaLibraries, GpuDevice, chunks_submitted};
use accelsql_engine::{Engine, ScalarUdf, SchedulerConfig};
use common::{affine_cpu, affine_gpu, texts, values, with_tables};

const MIB: u64 = 1 << 20;

/// Holds every `pause` call until the test opens it: statements then hold their leases for as
/// long as the test needs, however slow the machine.
static GATE: AtomicBool = AtomicBool::new(false);

/// The first CUDA device alone, shared by memory, with `affine` declared at `bytes` per
/// instance as `name` (one instance per call), or why there is none.
fn shared_engine(udfs: &[(&str, u64)]) -> Result<Engine, String> {
    if !CudaLibraries::probe().usable() {
        return Err("the CUDA driver or NVRTC library is missing".into());
    }
    let config = SchedulerConfig {
        simulated_gpus: None,
        ..SchedulerConfig::from_env().map_err(|e| e.to_string())?
    }
    .with_visible_devices("0")
    .with_gpu_sharing(GpuSharing::Memory, None);
    let engine = Engine::with_config(config).map_err(|e| e.to_string())?;
    let device = engine
        .devices()
        .first()
        .cloned()
        .ok_or("NVML reports no devices")?;
    GpuDevice::open(&device).map_err(|e| e.to_string())?;
    // `pause(x)`: x, once the test opens the gate (at most 60 s later), on the CPU.
    let pause = ScalarUdf::builder("pause")
        .inputs([DataType::Float64])
        .returns(DataType::Float64)
        .cpu(
            |_: &accelsql_engine::InstanceContext,
             rows: usize,
             args: &[accelsql_engine::datafusion::logical_expr::ColumnarValue]| {
                // The wait hands this runtime worker's other tasks (the test's own) to others.
                tokio::task::block_in_place(|| {
                    let since = Instant::now();
                    while !GATE.load(Ordering::SeqCst) && since.elapsed() < Duration::from_secs(60)
                    {
                        std::thread::sleep(Duration::from_millis(5));
                    }
                });
                args[0].to_array(rows)
            },
        )
        .build()
        .map_err(|e| e.to_string())?;
    engine
        .register_scalar_udf(pause)
        .map_err(|e| e.to_string())?;
    for (name, bytes) in udfs {
        let udf = ScalarUdf::builder(*name)
            .inputs([DataType::Float64, DataType::Float64, DataType::Float64])
            .returns(DataType::Float64)
            .accelerator("GpuNvidia")
            .map(|b| b.instance_limit(1).device_memory(*bytes))
            .and_then(|b| b.cpu(affine_cpu).gpu_columnar(affine_gpu()).build())
            .map_err(|e| e.to_string())?;
        engine.register_scalar_udf(udf).map_err(|e| e.to_string())?;
    }
    Ok(engine)
}

async fn until(what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < Duration::from_secs(30), "never: {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_statements_that_fit_run_on_one_device_at_once_and_a_third_waits() {
    let found = shared_engine(&[("affine400", 400 * MIB)]);
    let Some(engine) = accelsql_engine::udf_runtime::gpu::device_or_skip(
        "two_statements_that_fit_run_on_one_device_at_once_and_a_third_waits",
        &found,
    ) else {
        return;
    };
    // `pause` holds each statement, its lease granted, until the gate opens.
    let sql = "SELECT affine400(pause(CAST(value AS DOUBLE)), 2.0, 1.0) \
               FROM generate_series(1, 40000)";
    let (a, b, c) = (engine.session(), engine.session(), engine.session());
    let run = |s: accelsql_engine::Session| {
        tokio::spawn(async move {
            s.sql("SET datafusion.execution.target_partitions = 1")
                .await
                .unwrap();
            values(&s.sql(sql).await.unwrap()).len()
        })
    };
    let first = run(a);
    let second = run(b);
    let queue = engine.lease_queue().clone();
    until("both hold", || queue.snapshot().holders.len() == 2).await;
    let snap = queue.snapshot();
    for h in &snap.holders {
        assert_eq!(h.reserved.len(), 1);
        assert_eq!((h.reserved[0].index, h.reserved[0].bytes), (0, 400 * MIB));
    }
    // A third of 400 MiB does not fit beside them (921.6 MiB reservable): it waits.
    let third = run(c);
    until("the third waits", || queue.snapshot().waiting.len() == 1).await;
    let reason = queue.snapshot().waiting[0].reason.clone();
    assert!(reason.starts_with("GPU 0 is "), "{reason}");
    assert!(reason.contains("short"), "{reason}");
    assert_eq!(queue.snapshot().holders.len(), 2);
    tokio::time::sleep(Duration::from_millis(200)).await;
    GATE.store(true, Ordering::SeqCst);
    for t in [first, second, third] {
        assert_eq!(t.await.unwrap(), 40000);
    }
    // The third started only after one of the first two had ended.
    let recent = queue.snapshot().recent;
    assert_eq!(recent.len(), 3);
    let waited: Vec<bool> = recent
        .iter()
        .map(|r| r.waited >= Duration::from_millis(200))
        .collect();
    assert_eq!(waited.iter().filter(|w| **w).count(), 1, "{recent:?}");
    // All three ran their kernels on the device, none fell back to the CPU.
    let calls = engine
        .session()
        .sql(
            "SELECT gpu_batches, cpu_fallback_batches, reserved_bytes FROM accelsql.udf_calls \
             WHERE udf = 'affine400'",
        )
        .await
        .unwrap();
    assert_eq!(texts(&calls, 0).len(), 3);
    assert!(
        texts(&calls, 0).iter().all(|n| n != "0"),
        "{:?}",
        texts(&calls, 0)
    );
    assert!(texts(&calls, 1).iter().all(|n| n == "0"));
    assert!(
        texts(&calls, 2)
            .iter()
            .all(|n| *n == (400 * MIB).to_string())
    );
    let snap = engine.lease_queue().snapshot();
    assert!(snap.holders.is_empty() && snap.memory.iter().all(|m| m.reserved == 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_stays_within_its_reservation_by_taking_smaller_chunks() {
    let found = shared_engine(&[("affine_roomy", 512 * MIB), ("affine_tight", 256 << 10)]);
    let Some(engine) = accelsql_engine::udf_runtime::gpu::device_or_skip(
        "a_run_stays_within_its_reservation_by_taking_smaller_chunks",
        &found,
    ) else {
        return;
    };
    let s = with_tables(engine.session()).await;
    s.sql("SET datafusion.execution.batch_size = 20000")
        .await
        .unwrap();
    let mut chunks = Vec::new();
    let mut rows = Vec::new();
    for udf in ["affine_roomy", "affine_tight"] {
        let before = chunks_submitted();
        let sql = format!("SELECT id, {udf}(lat2, 2.0, 1.0) FROM pts ORDER BY id");
        rows.push(values(&s.sql(&sql).await.unwrap()));
        chunks.push(chunks_submitted() - before);
    }
    assert_eq!(rows[0], rows[1], "the same rows either way");
    // 256 KiB: chunks of about 40 KiB, a few thousand rows; 512 MiB: a batch a chunk.
    assert!(chunks[1] >= 4 * chunks[0], "chunks: {chunks:?}");
    let calls = s
        .sql("SELECT udf, cpu_fallback_batches FROM accelsql.udf_calls ORDER BY statement_id")
        .await
        .unwrap();
    assert_eq!(texts(&calls, 1), ["0", "0"], "both ran on the device");
}
