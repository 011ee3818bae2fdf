//! The GPU built-ins through SQL on a CUDA device: a real GPU, or the fake CUDA driver of
//! `scripts/fake-cuda` (kernels run on the host), with which `scripts/test-all.sh` runs this file.
//!
//! Every statement runs twice: on an engine that has the device and on one without GPUs. On the
//! first, each built-in call must be placed on the GPU and run GPU batches with no CPU fallback
//! (`accelsql.udf_calls`); both must return the same rows, NULLs in the same places and floats
//! within 1e-9 relative. Without a device that opens, each test prints
//! `SKIPPED (no CUDA device)` and passes; with `ACCELSQL_REQUIRE_GPU` set it fails instead.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic: that is a failed test

mod common;

use std::sync::OnceLock;

use accelsql_engine::{Engine, SchedulerConfig};
use common::{engine_with_affine, open_gpu_engine, texts, values, with_tables};

/// Taken by each test for its whole run: the tests share one engine, and an optional call whose
/// GPU lease is busy (another test's statement) would wait for it, or run on the CPU with
/// `accelsql.optional_gpu_when_busy = 'cpu'`.
static GPU_TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The query vector of the vector statements.
const QUERY: &str = "array_repeat(CAST(0.25 AS FLOAT), 64)";

/// The engine with a GPU shared by the tests, or why there is none (looked for once).
fn gpu_engine() -> &'static Result<Engine, String> {
    static ENGINE: OnceLock<Result<Engine, String>> = OnceLock::new();
    ENGINE.get_or_init(open_gpu_engine)
}

/// The engine with a GPU, or a visible skip (see `gpu::device_or_skip`).
macro_rules! require_gpu {
    ($name:expr) => {
        match accelsql_engine::udf_runtime::gpu::device_or_skip($name, gpu_engine()) {
            Some(engine) => engine,
            None => return,
        }
    };
}

/// Runs `sql` on the GPU engine and on an engine without GPUs; asserts that the GPU engine ran
/// `udf` on the GPU (GPU batches, no fallback) and that both returned the same rows. Returns
/// the number of rows and of NULL values compared.
async fn agrees(gpu: &Engine, udf: &str, sql: &str) -> (usize, usize) {
    // Without GPUs, but with simulated ones where the GPU is required (they run the CPU code).
    let gpus = usize::from(udf == "affine");
    let cpu = engine_with_affine(SchedulerConfig::default().with_simulated_gpus(gpus)).unwrap();
    let on_gpu = with_tables(gpu.session()).await;
    let on_cpu = with_tables(cpu.session()).await;
    let expected = values(&on_cpu.sql(sql).await.unwrap());
    let before = on_gpu
        .sql("SELECT count(*) FROM accelsql.udf_calls")
        .await
        .unwrap();
    let before: usize = texts(&before, 0)[0].parse().unwrap();
    let got = values(&on_gpu.sql(sql).await.unwrap());

    let calls = on_gpu
        .sql(&format!(
            "SELECT udf, placement, gpu_batches, cpu_fallback_batches, reason
             FROM accelsql.udf_calls ORDER BY statement_id, call_id OFFSET {before}"
        ))
        .await
        .unwrap();
    let udfs = texts(&calls, 0);
    let at = udfs
        .iter()
        .position(|u| u == udf)
        .unwrap_or_else(|| panic!("{udf} is not among the calls {udfs:?} of: {sql}"));
    assert_eq!(
        texts(&calls, 1)[at],
        "GPU",
        "placement of {udf} ({}) in: {sql}",
        texts(&calls, 4)[at]
    );
    let gpu_batches: u64 = texts(&calls, 2)[at].parse().unwrap();
    let fallback: u64 = texts(&calls, 3)[at].parse().unwrap();
    assert!(gpu_batches > 0, "{udf} ran no GPU batches: {sql}");
    assert_eq!(fallback, 0, "{udf} fell back to the CPU: {sql}");

    (got.len(), same_rows(&got, &expected, sql))
}

/// Asserts that `got` (from the GPU) and `expected` (from the CPU) are the same rows: NULLs in the
/// same places, floats within 1e-9 relative; the number of NULLs.
fn same_rows(got: &[Vec<Option<f64>>], expected: &[Vec<Option<f64>>], sql: &str) -> usize {
    assert_eq!(got.len(), expected.len(), "row count of: {sql}");
    let mut nulls = 0;
    for (i, (g, e)) in got.iter().zip(expected).enumerate() {
        assert_eq!(g.len(), e.len());
        for (c, (g, e)) in g.iter().zip(e).enumerate() {
            match (g, e) {
                (None, None) => nulls += 1,
                (Some(g), Some(e)) => {
                    let scale = 1f64.max(g.abs()).max(e.abs());
                    assert!(
                        (g - e).abs() <= 1e-9 * scale,
                        "row {i} column {c}: GPU {g} vs CPU {e} in: {sql}"
                    );
                }
                _ => panic!("row {i} column {c}: GPU {g:?} vs CPU {e:?} in: {sql}"),
            }
        }
    }
    nulls
}

#[tokio::test]
async fn vector_built_ins_run_on_the_gpu_and_agree_with_the_cpu() {
    let gpu = require_gpu!("vector_built_ins_run_on_the_gpu_and_agree_with_the_cpu");
    let _turn = GPU_TURN.lock().await;
    for (udf, sql) in [
        (
            "cosine_similarity",
            format!("SELECT id, cosine_similarity(emb, {QUERY}) FROM emb ORDER BY id"),
        ),
        (
            "l2_distance",
            format!("SELECT id, l2_distance(emb, {QUERY}) FROM emb ORDER BY id"),
        ),
        (
            "dot_product",
            "SELECT id, dot_product(emb, emb) FROM emb ORDER BY id".to_string(),
        ),
    ] {
        let (rows, nulls) = agrees(gpu, udf, &sql).await;
        assert_eq!(rows, 3000, "{sql}");
        assert_eq!(nulls, 3000 / 13, "the NULL embeddings give NULL: {sql}");
    }
}

#[tokio::test]
async fn geo_and_option_built_ins_run_on_the_gpu_and_agree_with_the_cpu() {
    let gpu = require_gpu!("geo_and_option_built_ins_run_on_the_gpu_and_agree_with_the_cpu");
    let _turn = GPU_TURN.lock().await;
    for (udf, sql) in [
        (
            "haversine_km",
            "SELECT id, haversine_km(lat1, lon1, lat2, lon2) FROM pts ORDER BY id",
        ),
        (
            "black_scholes_call",
            "SELECT id, black_scholes_call(spot, strike, years, rate, vol) FROM pts ORDER BY id",
        ),
        (
            "black_scholes_put",
            "SELECT id, black_scholes_put(spot, strike, years, rate, vol) FROM pts ORDER BY id",
        ),
    ] {
        let (rows, nulls) = agrees(gpu, udf, sql).await;
        assert_eq!(rows, 20000, "{sql}");
        assert_eq!(nulls, 20000 / 11, "NULL inputs give NULL: {sql}");
    }
}

#[tokio::test]
async fn the_set_built_in_runs_on_the_gpu_and_agrees_with_the_cpu() {
    let gpu = require_gpu!("the_set_built_in_runs_on_the_gpu_and_agrees_with_the_cpu");
    let _turn = GPU_TURN.lock().await;
    let sql = format!(
        "SELECT row_id, score FROM (SELECT vector_topk(id, emb, {QUERY}, 7) FROM emb)
         ORDER BY score DESC, row_id"
    );
    let (rows, nulls) = agrees(gpu, "vector_topk", &sql).await;
    assert_eq!((rows, nulls), (7, 0));
}

#[tokio::test]
async fn a_rust_udf_with_a_cuda_kernel_runs_on_the_gpu_and_agrees_with_the_cpu() {
    let gpu = require_gpu!("a_rust_udf_with_a_cuda_kernel_runs_on_the_gpu_and_agrees_with_the_cpu");
    let _turn = GPU_TURN.lock().await;
    // A column and two scalars (uploaded once), then three columns; NULL latitudes give NULL.
    for sql in [
        "SELECT id, affine(lat1, 2.5, -1.0) FROM pts ORDER BY id",
        "SELECT id, affine(lat1, lon1, lat2) FROM pts ORDER BY id",
    ] {
        let (rows, nulls) = agrees(gpu, "affine", sql).await;
        assert_eq!((rows, nulls), (20000, 20000 / 11), "{sql}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_statements_share_the_gpu_and_all_agree_with_the_cpu() {
    let gpu = require_gpu!("concurrent_statements_share_the_gpu_and_all_agree_with_the_cpu");
    let _turn = GPU_TURN.lock().await;
    const AFFINE: &str = "SELECT id, affine(lat1, lon1, 0.5) FROM pts ORDER BY id";
    const HAVERSINE: &str = "SELECT id, haversine_km(lat1, lon1, lat2, lon2) FROM pts ORDER BY id";
    let cpu = engine_with_affine(SchedulerConfig::default().with_simulated_gpus(1)).unwrap();
    let on_cpu = with_tables(cpu.session()).await;
    let expected_affine = values(&on_cpu.sql(AFFINE).await.unwrap());
    let expected_haversine = values(&on_cpu.sql(HAVERSINE).await.unwrap());
    let before = texts(
        &gpu.session()
            .sql("SELECT count(*) FROM accelsql.udf_calls")
            .await
            .unwrap(),
        0,
    )[0]
    .parse::<usize>()
    .unwrap();

    // Six sessions at once: required and (by default) optional calls queue for the GPU; with
    // `optional_gpu_when_busy = 'cpu'` an optional one may run on the CPU instead. Every answer
    // must be right either way.
    let mut running = Vec::new();
    for i in 0..6 {
        let session = with_tables(gpu.session()).await;
        let sql = if i % 2 == 0 { AFFINE } else { HAVERSINE };
        running.push(tokio::spawn(async move {
            (sql, values(&session.sql(sql).await.unwrap()))
        }));
    }
    for task in running {
        let (sql, got) = task.await.unwrap();
        let expected = if sql == AFFINE {
            &expected_affine
        } else {
            &expected_haversine
        };
        same_rows(&got, expected, sql);
    }

    let calls = gpu
        .session()
        .sql(&format!(
            "SELECT udf, placement, gpu_batches, reason FROM accelsql.udf_calls
             ORDER BY statement_id, call_id OFFSET {before}"
        ))
        .await
        .unwrap();
    let (udfs, placements) = (texts(&calls, 0), texts(&calls, 1));
    assert_eq!(udfs.len(), 6, "{udfs:?}");
    for (i, udf) in udfs.iter().enumerate() {
        if udf == "affine" {
            assert_eq!(placements[i], "GPU", "a required call waits for the GPU");
            assert_ne!(texts(&calls, 2)[i], "0", "and runs there");
        } else if placements[i] == "CPU" {
            assert!(
                texts(&calls, 3)[i].contains("busy"),
                "{}",
                texts(&calls, 3)[i]
            );
        }
    }
    assert!(gpu.lease_queue().snapshot().holder.is_none());
}
