//! The GPU built-ins through SQL on a CUDA device: a real GPU, or the fake CUDA driver of
//! `scripts/fake-cuda` (kernels run on the host), with which `scripts/test-all.sh` runs this file.
//!
//! Every statement runs twice: on an engine that has the device and on one without GPUs. On the
//! first, each built-in call must be placed on the GPU and run GPU batches with no CPU fallback
//! (`accelsql.udf_calls`); both must return the same rows, NULLs in the same places and floats
//! within 1e-9 relative. Without a device that opens, each test prints
//! `SKIPPED (no CUDA device)` and passes; with `ACCELSQL_REQUIRE_GPU` set it fails instead.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic: that is a failed test

use std::sync::OnceLock;

use accelsql_engine::datafusion::arrow::array::{Array, Float64Array, RecordBatch, StringArray};
use accelsql_engine::datafusion::arrow::compute::cast;
use accelsql_engine::datafusion::arrow::datatypes::DataType;
use accelsql_engine::udf_runtime::gpu::{CudaLibraries, GpuDevice};
use accelsql_engine::{Engine, SchedulerConfig, Session};

/// Embeddings: 3000 rows of 64 FLOATs, every 13th NULL. Points and option inputs: 20000 rows
/// (three batches, two partitions), every 11th spot and latitude NULL.
const TABLES: [&str; 2] = [
    "CREATE TABLE emb AS
       SELECT id, CASE WHEN id % 13 = 0 THEN NULL ELSE emb END AS emb FROM (
         SELECT a.value AS id,
                array_agg(CAST(sin(a.value * 0.37 + b.value * 1.3) AS FLOAT) ORDER BY b.value) AS emb
         FROM generate_series(1, 3000) a, generate_series(1, 64) b GROUP BY a.value)",
    "CREATE TABLE pts AS
       SELECT value AS id,
              CASE WHEN value % 11 = 0 THEN NULL ELSE 89 * sin(value * 0.7) END AS lat1,
              179 * cos(value * 1.1) AS lon1, 89 * cos(value * 0.3) AS lat2,
              179 * sin(value * 0.9) AS lon2,
              CASE WHEN value % 11 = 0 THEN NULL ELSE 100 + 50 * sin(value * 0.5) END AS spot,
              100 + 50 * cos(value * 0.2) AS strike, 0.1 + 2 * abs(sin(value * 0.13)) AS years,
              0.05 * abs(cos(value * 0.17)) AS rate, 0.05 + 0.5 * abs(sin(value * 0.11)) AS vol
       FROM generate_series(1, 20000)",
];

/// Taken by each test for its whole run: the tests share one engine, and an optional call whose
/// GPU lease is busy (another test's statement) runs on the CPU by design.
static GPU_TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The query vector of the vector statements.
const QUERY: &str = "array_repeat(CAST(0.25 AS FLOAT), 64)";

/// An engine whose GPUs are real CUDA devices (or the fake driver's), or why there is none.
fn gpu_engine() -> &'static Result<Engine, String> {
    static ENGINE: OnceLock<Result<Engine, String>> = OnceLock::new();
    ENGINE.get_or_init(|| {
        if !CudaLibraries::probe().usable() {
            return Err("the CUDA driver or NVRTC library is missing".into());
        }
        let config = SchedulerConfig {
            simulated_gpus: None,
            ..SchedulerConfig::from_env().map_err(|e| e.to_string())?
        };
        let engine = Engine::with_config(config).map_err(|e| e.to_string())?;
        let mut reasons = vec!["NVML reports no devices".to_string()];
        for device in engine.devices() {
            match GpuDevice::open(device) {
                Ok(_) => return Ok(engine),
                Err(e) => reasons.push(e.to_string()),
            }
        }
        Err(reasons.join("; "))
    })
}

/// The engine with a GPU, or a visible skip.
macro_rules! require_gpu {
    ($name:expr) => {
        match gpu_engine() {
            Ok(engine) => engine,
            Err(why) if std::env::var_os("ACCELSQL_REQUIRE_GPU").is_some() => {
                panic!("ACCELSQL_REQUIRE_GPU is set but there is no CUDA device: {why}")
            }
            Err(why) => {
                use std::io::Write as _;
                let _ = writeln!(
                    std::io::stderr(),
                    "SKIPPED (no CUDA device): {} ({why})",
                    $name
                );
                return;
            }
        }
    };
}

async fn with_tables(session: Session) -> Session {
    for table in TABLES {
        session.sql(table).await.unwrap();
    }
    session
}

/// Every value of the result, row by row, as `f64` (NULL as `None`).
fn values(batches: &[RecordBatch]) -> Vec<Vec<Option<f64>>> {
    let mut rows = Vec::new();
    for b in batches {
        let columns: Vec<Float64Array> = b
            .columns()
            .iter()
            .map(|c| {
                let c = cast(c, &DataType::Float64).unwrap();
                c.as_any().downcast_ref::<Float64Array>().unwrap().clone()
            })
            .collect();
        for r in 0..b.num_rows() {
            rows.push(
                columns
                    .iter()
                    .map(|c| c.is_valid(r).then(|| c.value(r)))
                    .collect(),
            );
        }
    }
    rows
}

/// Text of column `col` of every row.
fn texts(batches: &[RecordBatch], col: usize) -> Vec<String> {
    let mut out = Vec::new();
    for b in batches {
        let a = cast(b.column(col), &DataType::Utf8).unwrap();
        let a = a.as_any().downcast_ref::<StringArray>().unwrap();
        out.extend((0..a.len()).map(|i| a.value(i).to_string()));
    }
    out
}

/// Runs `sql` on the GPU engine and on an engine without GPUs; asserts that the GPU engine ran
/// `udf` on the GPU (GPU batches, no fallback) and that both returned the same rows. Returns
/// the number of rows and of NULL values compared.
async fn agrees(gpu: &Engine, udf: &str, sql: &str) -> (usize, usize) {
    let cpu = Engine::with_config(SchedulerConfig::default().with_simulated_gpus(0)).unwrap();
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

    assert_eq!(got.len(), expected.len(), "row count of: {sql}");
    let mut nulls = 0;
    for (i, (g, e)) in got.iter().zip(&expected).enumerate() {
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
    (got.len(), nulls)
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
