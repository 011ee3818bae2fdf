//! Shared by the GPU SQL tests (`gpu_sql.rs`, `gpu_faults.rs`): their tables, a Rust UDF with a
//! CUDA kernel (`affine`, through `ElementwiseF64`), the engine on real (or fake-driver) CUDA devices, and result readers.
#![allow(dead_code)] // each test file uses part of it

use std::sync::Arc;

use accelsql_engine::datafusion::arrow::array::{
    Array, ArrayRef, Float64Array, RecordBatch, StringArray,
};
use accelsql_engine::datafusion::arrow::compute::cast;
use accelsql_engine::datafusion::arrow::datatypes::DataType;
use accelsql_engine::datafusion::logical_expr::ColumnarValue;
use accelsql_engine::udf_runtime::gpu::{CudaLibraries, ElementwiseF64, GpuDevice, KernelSource};
use accelsql_engine::{Engine, InstanceContext, ScalarUdf, SchedulerConfig, Session};

/// Embeddings: 3000 rows of 64 FLOATs, every 13th NULL. Points and option inputs: 20000 rows
/// (three batches, two partitions), every 11th spot and latitude NULL.
pub(crate) const TABLES: [&str; 2] = [
    "CREATE TEMPORARY TABLE emb AS
       SELECT id, CASE WHEN id % 13 = 0 THEN NULL ELSE emb END AS emb FROM (
         SELECT a.value AS id,
                array_agg(CAST(sin(a.value * 0.37 + b.value * 1.3) AS FLOAT) ORDER BY b.value) AS emb
         FROM generate_series(1, 3000) a, generate_series(1, 64) b GROUP BY a.value)",
    "CREATE TEMPORARY TABLE pts AS
       SELECT value AS id,
              CASE WHEN value % 11 = 0 THEN NULL ELSE 89 * sin(value * 0.7) END AS lat1,
              179 * cos(value * 1.1) AS lon1, 89 * cos(value * 0.3) AS lat2,
              179 * sin(value * 0.9) AS lon2,
              CASE WHEN value % 11 = 0 THEN NULL ELSE 100 + 50 * sin(value * 0.5) END AS spot,
              100 + 50 * cos(value * 0.2) AS strike, 0.1 + 2 * abs(sin(value * 0.13)) AS years,
              0.05 * abs(cos(value * 0.17)) AS rate, 0.05 + 0.5 * abs(sin(value * 0.11)) AS vol
       FROM generate_series(1, 20000)",
];

/// `affine(x, a, b)` = a·x + b in CUDA C: a user's GPU implementation, as a Rust UDF brings it.
const AFFINE_CU: &str = r#"
extern "C" __global__ void affine(const double* x, int xs, const double* a, int as_,
                                  const double* b, int bs, long long rows, double* out) {
    long long r = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (r < rows) out[r] = a[as_ ? 0 : r] * x[xs ? 0 : r] + b[bs ? 0 : r];
}
"#;

/// The GPU implementation of `affine`.
pub(crate) fn affine_gpu() -> ElementwiseF64 {
    // SAFETY: AFFINE_CU's kernel has ElementwiseF64's parameters for 3 arguments and touches
    // only rows below `rows`.
    unsafe { ElementwiseF64::new(KernelSource::new("affine", AFFINE_CU), "affine", 3) }
}

/// The CPU implementation of `affine`.
pub(crate) fn affine_cpu(
    _: &InstanceContext,
    _rows: usize,
    args: &[ColumnarValue],
) -> accelsql_engine::datafusion::error::Result<ArrayRef> {
    let arrays = ColumnarValue::values_to_arrays(args)?;
    let f = |i: usize| arrays[i].as_any().downcast_ref::<Float64Array>().unwrap();
    let (x, a, b) = (f(0), f(1), f(2));
    Ok(Arc::new(
        (0..x.len())
            .map(|r| {
                (x.is_valid(r) && a.is_valid(r) && b.is_valid(r))
                    .then(|| a.value(r) * x.value(r) + b.value(r))
            })
            .collect::<Float64Array>(),
    ))
}

/// `config`'s engine with `affine` (GPU required) registered.
pub(crate) fn engine_with_affine(config: SchedulerConfig) -> Result<Engine, String> {
    let engine = Engine::with_config(config).map_err(|e| e.to_string())?;
    let udf = ScalarUdf::builder("affine")
        .inputs([DataType::Float64, DataType::Float64, DataType::Float64])
        .returns(DataType::Float64)
        .accelerator("GpuNvidia")
        .and_then(|b| b.cpu(affine_cpu).gpu_columnar(affine_gpu()).build())
        .map_err(|e| e.to_string())?;
    engine.register_scalar_udf(udf).map_err(|e| e.to_string())?;
    Ok(engine)
}

/// An engine (with `affine`) whose GPUs are real CUDA devices (or the fake driver's), or why
/// there is none.
pub(crate) fn open_gpu_engine() -> Result<Engine, String> {
    if !CudaLibraries::probe().usable() {
        return Err("the CUDA driver or NVRTC library is missing".into());
    }
    let config = SchedulerConfig {
        simulated_gpus: None,
        ..SchedulerConfig::from_env().map_err(|e| e.to_string())?
    };
    let engine = engine_with_affine(config)?;
    let mut reasons = vec!["NVML reports no devices".to_string()];
    for device in engine.devices() {
        match GpuDevice::open(device) {
            Ok(_) => return Ok(engine),
            Err(e) => reasons.push(e.to_string()),
        }
    }
    Err(reasons.join("; "))
}

/// `session` with the tables of [`TABLES`].
pub(crate) async fn with_tables(session: Session) -> Session {
    for table in TABLES {
        session.sql(table).await.unwrap();
    }
    session
}

/// Every value of the result, row by row, as `f64` (NULL as `None`).
pub(crate) fn values(batches: &[RecordBatch]) -> Vec<Vec<Option<f64>>> {
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
pub(crate) fn texts(batches: &[RecordBatch], col: usize) -> Vec<String> {
    let mut out = Vec::new();
    for b in batches {
        let a = cast(b.column(col), &DataType::Utf8).unwrap();
        let a = a.as_any().downcast_ref::<StringArray>().unwrap();
        out.extend((0..a.len()).map(|i| a.value(i).to_string()));
    }
    out
}
