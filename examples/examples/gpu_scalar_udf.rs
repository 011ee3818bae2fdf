//! Registers a scalar UDF with a CPU and a CUDA implementation (optional GPU, so it falls back
//! to the CPU), the same UDF with the GPU required, and a SET EMITS UDF; queries them, and shows
//! where each call ran.
//!
//! Run: `cargo run -p accelsql-examples --example gpu_scalar_udf` (on a machine with an NVIDIA
//! GPU the CUDA kernel runs; without one the optional call runs on the CPU and the required one
//! fails with 22069), or with `ACCELSQL_SIMULATED_GPUS=2` (simulated devices: placement and
//! leases as on GPUs, the CPU implementation computes). `bash scripts/fake-cuda/build.sh` and
//! `LD_LIBRARY_PATH=target/fake-cuda` run the kernel on the host through a fake CUDA driver.

use std::sync::Arc;

use accelsql_engine::datafusion::arrow::array::{ArrayRef, Float64Array, Int64Array};
use accelsql_engine::datafusion::arrow::datatypes::{DataType, Field};
use accelsql_engine::datafusion::arrow::util::pretty::pretty_format_batches;
use accelsql_engine::datafusion::logical_expr::ColumnarValue;
use accelsql_engine::udf_runtime::gpu::{ElementwiseF64, KernelSource};
use accelsql_engine::{Engine, InstanceContext, ScalarUdf, SetUdf};

/// The CUDA C of `scale`, compiled by NVRTC for each device on first use (and cached). Each
/// argument is a pointer and a flag: a scalar argument (the factor, usually) is one value,
/// uploaded once per batch, that every row reads at index 0. NULL rows are masked by the
/// runtime, so the kernel ignores NULLs.
const SCALE_CU: &str = r#"
extern "C" __global__ void scale(const double* x, int x_scalar, const double* by, int by_scalar,
                                 long long rows, double* out) {
    long long r = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (r < rows) out[r] = x[x_scalar ? 0 : r] * by[by_scalar ? 0 : r];
}
"#;

/// The GPU implementation of `scale`: the runtime cuts each batch into chunks, moves them to the
/// pinned device, launches the kernel one thread per row and brings the column back. (Kernels of
/// other shapes implement `GpuColumnarKernel` themselves, as `udf-runtime/src/gpu/geo.rs` does.)
fn scale_on_gpu() -> ElementwiseF64 {
    // SAFETY: SCALE_CU's kernel has ElementwiseF64's parameters for 2 arguments and touches
    // only rows below `rows`.
    unsafe { ElementwiseF64::new(KernelSource::new("scale", SCALE_CU), "scale", 2) }
}

/// `scale(x, factor)`: x * factor on the CPU: the fallback, and the reference the GPU
/// implementation must agree with.
fn scale(
    _ctx: &InstanceContext,
    _rows: usize,
    args: &[ColumnarValue],
) -> accelsql_engine::datafusion::error::Result<ArrayRef> {
    let arrays = ColumnarValue::values_to_arrays(args)?;
    let (x, f) = (as_f64(&arrays[0])?, as_f64(&arrays[1])?);
    Ok(Arc::new(
        x.iter()
            .zip(f.iter())
            .map(|(x, f)| Some(x? * f?))
            .collect::<Float64Array>(),
    ))
}

fn as_f64(a: &ArrayRef) -> accelsql_engine::datafusion::error::Result<&Float64Array> {
    a.as_any().downcast_ref::<Float64Array>().ok_or_else(|| {
        accelsql_engine::datafusion::error::DataFusionError::Execution("expected DOUBLE".into())
    })
}

/// `stats(x) EMITS (n, mean, device)`: one row per group, computed by one instance, which says
/// which GPU it was pinned to (-1 on the CPU).
fn stats(
    ctx: &InstanceContext,
    rows: usize,
    args: &[ArrayRef],
) -> accelsql_engine::datafusion::error::Result<Vec<ArrayRef>> {
    let x = as_f64(&args[0])?;
    let mean = x.iter().flatten().sum::<f64>() / rows.max(1) as f64;
    let device = ctx.device.as_ref().map_or(-1, |d| i64::from(d.index));
    Ok(vec![
        Arc::new(Int64Array::from(vec![rows as i64])),
        Arc::new(Float64Array::from(vec![mean])),
        Arc::new(Int64Array::from(vec![device])),
    ])
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let engine = Engine::new()?;
    engine.register_scalar_udf(
        ScalarUdf::builder("scale")
            .inputs([DataType::Float64, DataType::Float64])
            .returns(DataType::Float64)
            .accelerator("GpuNvidia|None")?
            .instance_limit(4)
            .cpu(scale)
            .gpu_columnar(scale_on_gpu())
            .build()?,
    )?;
    engine.register_scalar_udf(
        ScalarUdf::builder("scale_on_gpu")
            .inputs([DataType::Float64, DataType::Float64])
            .returns(DataType::Float64)
            .accelerator("GpuNvidia")?
            .cpu(scale)
            .gpu_columnar(scale_on_gpu())
            .build()?,
    )?;
    engine.register_set_udf(
        SetUdf::builder("stats")
            .inputs([DataType::Float64])
            .emits([
                Field::new("n", DataType::Int64, false),
                Field::new("mean", DataType::Float64, false),
                Field::new("device", DataType::Int64, false),
            ])
            .accelerator("GpuNvidia|None")?
            .cpu(stats)
            .build()?,
    )?;
    let session = engine.session();
    session
        .sql("CREATE TABLE t(k VARCHAR, x DOUBLE) AS VALUES ('a', 1.0), ('a', 2.5), ('b', 4.0)")
        .await?;

    println!("GPUs: {}", engine.devices().len());
    let optional = session
        .sql("SELECT x, scale(x, 2.0) AS doubled FROM t")
        .await?;
    println!("{}", pretty_format_batches(&optional)?);
    match session
        .sql("SELECT x, scale_on_gpu(x, 3.0) AS tripled FROM t")
        .await
    {
        Ok(batches) => println!("{}", pretty_format_batches(&batches)?),
        Err(e) => println!("required GPU call: {e}"),
    }
    // A SET EMITS call: one run per GROUP BY group, rows named by its EMITS clause.
    let groups = session
        .sql("SELECT k, stats(x) FROM t GROUP BY k ORDER BY k")
        .await?;
    println!("{}", pretty_format_batches(&groups)?);
    let calls = session
        .sql("SELECT udf, placement, reason, devices, rows_in, gpu_batches FROM accelsql.udf_calls")
        .await?;
    println!("{}", pretty_format_batches(&calls)?);
    Ok(())
}
