//! Registers a GPU-capable scalar UDF (CPU fallback) and a GPU-required one, queries them, and
//! shows where each call ran. Run: `ACCELSQL_SIMULATED_GPUS=2 cargo run -p accelsql-examples --example gpu_scalar_udf`.

use std::sync::Arc;

use accelsql_engine::datafusion::arrow::array::{ArrayRef, Float64Array};
use accelsql_engine::datafusion::arrow::datatypes::DataType;
use accelsql_engine::datafusion::arrow::util::pretty::pretty_format_batches;
use accelsql_engine::datafusion::logical_expr::ColumnarValue;
use accelsql_engine::{Engine, InstanceContext, ScalarUdf};

/// `scale(x, factor)`: x * factor. The same kernel serves as CPU and (on a real GPU) as the
/// reference; a CUDA implementation would be given with `.gpu(...)`.
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
            .build()?,
    )?;
    engine.register_scalar_udf(
        ScalarUdf::builder("scale_on_gpu")
            .inputs([DataType::Float64, DataType::Float64])
            .returns(DataType::Float64)
            .accelerator("GpuNvidia")?
            .cpu(scale)
            .build()?,
    )?;
    let session = engine.session();
    session
        .sql("CREATE TABLE t(x DOUBLE) AS VALUES (1.0), (2.5), (4.0)")
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
    let calls = session
        .sql("SELECT udf, placement, reason, devices, rows_in FROM accelsql.udf_calls")
        .await?;
    println!("{}", pretty_format_batches(&calls)?);
    Ok(())
}
