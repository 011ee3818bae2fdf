//! Registers a GPU-capable scalar UDF (CPU fallback), a GPU-required one and a SET EMITS UDF,
//! queries them, and shows where each call ran.
//! Run: `ACCELSQL_SIMULATED_GPUS=2 cargo run -p accelsql-examples --example gpu_scalar_udf`.

use std::sync::Arc;

use accelsql_engine::datafusion::arrow::array::{ArrayRef, Float64Array, Int64Array};
use accelsql_engine::datafusion::arrow::datatypes::{DataType, Field};
use accelsql_engine::datafusion::arrow::util::pretty::pretty_format_batches;
use accelsql_engine::datafusion::logical_expr::ColumnarValue;
use accelsql_engine::{Engine, InstanceContext, ScalarUdf, SetUdf};

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
        .sql("SELECT udf, placement, reason, devices, rows_in FROM accelsql.udf_calls")
        .await?;
    println!("{}", pretty_format_batches(&calls)?);
    Ok(())
}
