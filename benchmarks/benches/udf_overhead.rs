//! UDF overhead: the same Rust CPU UDF over 10M rows through plain DataFusion (a `ScalarUDF`) and
//! through accelsql (a `GpuNvidia|None` UDF placed on the CPU: zero GPUs), in the same run.
//!
//! Run: `cargo bench -p accelsql-benchmarks --bench udf_overhead` (`ACCELSQL_BENCH_ROWS` overrides
//! the row count). Prints each median, min and max, and the ratio accelsql / DataFusion beside the
//! goal of the engine issue (within 5%).

use std::sync::Arc;
use std::time::{Duration, Instant};

use accelsql_engine::datafusion::arrow::array::{ArrayRef, Float64Array, RecordBatch};
use accelsql_engine::datafusion::arrow::datatypes::{DataType, Field, Schema};
use accelsql_engine::datafusion::catalog::MemTable;
use accelsql_engine::datafusion::common::exec_datafusion_err;
use accelsql_engine::datafusion::error::Result as DfResult;
use accelsql_engine::datafusion::logical_expr::{ColumnarValue, Volatility, create_udf};
use accelsql_engine::datafusion::prelude::{SessionConfig, SessionContext};
use accelsql_engine::{Engine, InstanceContext, ScalarUdf, SchedulerConfig};

const BATCH: usize = 8192;
const WARMUP: usize = 2;
const RUNS: usize = 11;
const QUERY: &str = "SELECT sum(poly(x)) FROM t";

/// The kernel both engines run: a small polynomial per row, NULL in → NULL out.
fn poly(args: &[ColumnarValue], rows: usize) -> DfResult<ArrayRef> {
    let x = args[0].to_array(rows)?;
    let x = x
        .as_any()
        .downcast_ref::<Float64Array>()
        .ok_or_else(|| exec_datafusion_err!("poly: expected DOUBLE"))?;
    let out: Float64Array = x
        .iter()
        .map(|v| v.map(|v| 3.0 * v * v + 2.0 * v + 1.0))
        .collect();
    Ok(Arc::new(out))
}

/// `rows` rows of x in `partitions` partitions of 8192-row batches (deterministic values).
fn table(rows: usize, partitions: usize) -> DfResult<Arc<MemTable>> {
    let schema = Arc::new(Schema::new(vec![Field::new("x", DataType::Float64, true)]));
    let mut parts = vec![Vec::new(); partitions];
    let mut start = 0;
    let mut i = 0;
    while start < rows {
        let n = BATCH.min(rows - start);
        let x: Float64Array = (start..start + n)
            .map(|r| Some((r % 1000) as f64 / 1000.0))
            .collect();
        let batch = RecordBatch::try_new(Arc::clone(&schema), vec![Arc::new(x)])?;
        parts[i % partitions].push(batch);
        start += n;
        i += 1;
    }
    Ok(Arc::new(MemTable::try_new(schema, parts)?))
}

async fn time_query<F, Fut>(run: F) -> DfResult<Vec<Duration>>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = DfResult<()>>,
{
    let mut samples = Vec::with_capacity(RUNS);
    for i in 0..WARMUP + RUNS {
        let start = Instant::now();
        run().await?;
        if i >= WARMUP {
            samples.push(start.elapsed());
        }
    }
    Ok(samples)
}

fn stats(mut samples: Vec<Duration>) -> (Duration, Duration, Duration) {
    samples.sort_unstable();
    let median = samples.get(samples.len() / 2).copied().unwrap_or_default();
    let min = samples.first().copied().unwrap_or_default();
    let max = samples.last().copied().unwrap_or_default();
    (median, min, max)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let rows: usize = std::env::var("ACCELSQL_BENCH_ROWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000_000);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let partitions = std::thread::available_parallelism().map_or(1, |n| n.get());
    let data = table(rows, partitions)?;

    // Plain DataFusion.
    let ctx =
        SessionContext::new_with_config(SessionConfig::new().with_target_partitions(partitions));
    ctx.register_table("t", Arc::clone(&data) as _)?;
    ctx.register_udf(create_udf(
        "poly",
        vec![DataType::Float64],
        DataType::Float64,
        Volatility::Volatile,
        Arc::new(|args: &[ColumnarValue]| {
            let rows = args
                .iter()
                .find_map(|a| match a {
                    ColumnarValue::Array(a) => Some(a.len()),
                    ColumnarValue::Scalar(_) => None,
                })
                .unwrap_or(1);
            poly(args, rows).map(ColumnarValue::Array)
        }),
    ));

    // accelsql: annotated GpuNvidia|None, zero GPUs, so the call is placed on the CPU.
    let engine = Engine::with_config(SchedulerConfig::default().with_simulated_gpus(0))?;
    engine.register_scalar_udf(
        ScalarUdf::builder("poly")
            .inputs([DataType::Float64])
            .returns(DataType::Float64)
            .accelerator("GpuNvidia|None")?
            .cpu(|_: &InstanceContext, rows: usize, args: &[ColumnarValue]| poly(args, rows))
            .build()?,
    )?;
    let session = engine.session();
    session
        .context()
        .register_table("t", Arc::clone(&data) as _)?;
    rt.block_on(session.sql(&format!(
        "SET datafusion.execution.target_partitions = {partitions}"
    )))?;

    // Same answer from both, then alternate the measurements so drift hits both alike.
    let a = rt.block_on(async { ctx.sql(QUERY).await?.collect().await })?;
    let b = rt.block_on(session.sql(QUERY))?;
    let show = |b: &[RecordBatch]| {
        accelsql_engine::datafusion::arrow::util::pretty::pretty_format_batches(b)
            .map(|t| t.to_string())
            .unwrap_or_default()
    };
    if show(&a) != show(&b) {
        return Err(format!("results differ:\n{}\n{}", show(&a), show(&b)).into());
    }
    let mut df_samples = Vec::new();
    let mut accel_samples = Vec::new();
    for _ in 0..3 {
        df_samples.extend(rt.block_on(time_query(|| async {
            ctx.sql(QUERY).await?.collect().await.map(|_| ())
        }))?);
        accel_samples.extend(rt.block_on(time_query(|| async {
            session
                .sql(QUERY)
                .await
                .map(|_| ())
                .map_err(|e| e.into_datafusion())
        }))?);
    }
    let (df_median, df_min, df_max) = stats(df_samples);
    let (ac_median, ac_min, ac_max) = stats(accel_samples);
    let ratio = ac_median.as_secs_f64() / df_median.as_secs_f64();
    let ms = |d: Duration| format!("{:.1} ms", d.as_secs_f64() * 1e3);
    println!(
        "udf-overhead: `{QUERY}` over {rows} rows, {partitions} partitions, {} runs each",
        3 * RUNS
    );
    println!(
        "{:<28} {:>10} {:>10} {:>10}",
        "engine", "median", "min", "max"
    );
    println!(
        "{:<28} {:>10} {:>10} {:>10}",
        "DataFusion ScalarUDF",
        ms(df_median),
        ms(df_min),
        ms(df_max)
    );
    println!(
        "{:<28} {:>10} {:>10} {:>10}",
        "accelsql (GpuNvidia|None→CPU)",
        ms(ac_median),
        ms(ac_min),
        ms(ac_max)
    );
    let verdict = if ratio <= 1.05 { "met" } else { "MISSED" };
    println!("ratio accelsql / DataFusion: {ratio:.3} (goal ≤ 1.05: {verdict})");
    Ok(())
}
