//! Fixture UDFs for tests and sqllogictest suites. Never registered by the product: a test
//! harness registers them with [`register_fixtures`].
//!
//! - `gpu_probe_required()` / `gpu_probe_optional()` / `cpu_probe()`: return the index of the
//!   device their instance was pinned to, or `'<invalid>'` on the CPU (one row per input row;
//!   any arguments are accepted and ignored).
//! - `slow_gpu(ms)`: sleeps `ms` milliseconds per batch on the GPU (required), returns `ms`.
//! - `bad_length_gpu()`: a broken implementation that returns one row too many.
//! - `explode(n) EMITS (i BIGINT)`: SCALAR EMITS; each input row emits `1..=n` (none for n ≤ 0).
//! - `group_probe(x…) EMITS (rows BIGINT, device VARCHAR)`: SET EMITS, `GpuNvidia|None`; one row
//!   per group: its row count and the device its instance was pinned to (or `'<invalid>'`).
//! - `gpu_group_probe(x…)`: the same, `GpuNvidia` (required).
//! - `group_sum(x DOUBLE) RETURNS DOUBLE`: SET RETURNS (an aggregate), `GpuNvidia|None`.
//! - `bad_emits(x…) EMITS (a BIGINT)`: a broken SET EMITS implementation that returns a string.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, Float64Array, Int64Array, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, Float64Type, Int64Type};
use datafusion::common::exec_datafusion_err;
use datafusion::logical_expr::ColumnarValue;

use crate::{AcceleratorRequest, Engine, InstanceContext, Result, ScalarUdf, SetUdf};

fn device_label(ctx: &InstanceContext) -> String {
    ctx.device
        .as_ref()
        .map_or_else(|| "<invalid>".to_string(), |d| d.index.to_string())
}

fn group_probe(name: &str, request: AcceleratorRequest) -> Result<SetUdf> {
    SetUdf::builder(name)
        .variadic()
        .emits([
            Field::new("rows", DataType::Int64, false),
            Field::new("device", DataType::Utf8, false),
        ])
        .accelerator_request(request)
        .cpu(|ctx: &InstanceContext, rows: usize, _: &[ArrayRef]| {
            Ok(vec![
                Arc::new(Int64Array::from(vec![rows as i64])) as ArrayRef,
                Arc::new(StringArray::from(vec![device_label(ctx)])) as ArrayRef,
            ])
        })
        .build()
}

/// The SET and EMITS fixture UDFs, for a test to register.
pub fn set_fixtures() -> Result<Vec<SetUdf>> {
    let explode = SetUdf::builder("explode")
        .scalar_input()
        .inputs([DataType::Int64])
        .emits([Field::new("i", DataType::Int64, false)])
        .cpu(|_: &InstanceContext, _: usize, args: &[ArrayRef]| {
            let n = args[0]
                .as_primitive_opt::<Int64Type>()
                .ok_or_else(|| exec_datafusion_err!("explode: argument is not BIGINT"))?;
            let values: Vec<i64> = n.iter().flat_map(|n| 1..=n.unwrap_or(0)).collect();
            Ok(vec![Arc::new(Int64Array::from(values)) as ArrayRef])
        })
        .build()?;
    let sum = SetUdf::builder("group_sum")
        .inputs([DataType::Float64])
        .returns(DataType::Float64)
        .accelerator_request(AcceleratorRequest::Preferred)
        .cpu(|_: &InstanceContext, _: usize, args: &[ArrayRef]| {
            let x = args[0]
                .as_primitive_opt::<Float64Type>()
                .ok_or_else(|| exec_datafusion_err!("group_sum: argument is not DOUBLE"))?;
            let total: f64 = x.iter().flatten().sum();
            Ok(vec![Arc::new(Float64Array::from(vec![total])) as ArrayRef])
        })
        .build()?;
    let bad = SetUdf::builder("bad_emits")
        .variadic()
        .emits([Field::new("a", DataType::Int64, true)])
        .cpu(|_: &InstanceContext, _: usize, _: &[ArrayRef]| {
            Ok(vec![Arc::new(StringArray::from(vec!["x"])) as ArrayRef])
        })
        .build()?;
    Ok(vec![
        explode,
        group_probe("group_probe", AcceleratorRequest::Preferred)?,
        group_probe("gpu_group_probe", AcceleratorRequest::Required)?,
        sum,
        bad,
    ])
}

fn probe(name: &str, request: AcceleratorRequest) -> Result<ScalarUdf> {
    ScalarUdf::builder(name)
        .variadic()
        .returns(DataType::Utf8)
        .accelerator_request(request)
        .cpu(|ctx: &InstanceContext, rows: usize, _: &[ColumnarValue]| {
            let value = device_label(ctx);
            Ok(Arc::new(StringArray::from(vec![value; rows])) as ArrayRef)
        })
        .build()
}

/// The fixture UDFs, for a test to register.
pub fn fixtures() -> Result<Vec<ScalarUdf>> {
    let slow = ScalarUdf::builder("slow_gpu")
        .inputs([DataType::Int64])
        .returns(DataType::Int64)
        .accelerator_request(AcceleratorRequest::Required)
        .cpu(|_: &InstanceContext, rows: usize, args: &[ColumnarValue]| {
            let ms = ColumnarValue::values_to_arrays(args)?;
            let ms = ms[0]
                .as_any()
                .downcast_ref::<Int64Array>()
                .map(|a| {
                    if a.is_empty() || a.is_null(0) {
                        0
                    } else {
                        a.value(0)
                    }
                })
                .unwrap_or(0);
            std::thread::sleep(std::time::Duration::from_millis(ms.max(0) as u64));
            Ok(Arc::new(Int64Array::from(vec![ms; rows])) as ArrayRef)
        })
        .build()?;
    let bad = ScalarUdf::builder("bad_length_gpu")
        .variadic()
        .returns(DataType::Int64)
        .accelerator_request(AcceleratorRequest::Preferred)
        .cpu(|_: &InstanceContext, rows: usize, _: &[ColumnarValue]| {
            Ok(Arc::new(Int64Array::from(vec![1; rows + 1])) as ArrayRef)
        })
        .build()?;
    Ok(vec![
        probe("gpu_probe_required", AcceleratorRequest::Required)?,
        probe("gpu_probe_optional", AcceleratorRequest::Preferred)?,
        probe("cpu_probe", AcceleratorRequest::None)?,
        slow,
        bad,
    ])
}

/// The cells of a result as text, row by row (`"NULL"` for nulls): what tests compare.
pub fn cells(
    batches: &[datafusion::arrow::array::RecordBatch],
) -> datafusion::error::Result<Vec<Vec<String>>> {
    let mut out = Vec::new();
    for batch in batches {
        let columns = batch
            .columns()
            .iter()
            .map(|c| datafusion::arrow::compute::cast(c, &DataType::Utf8))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        for row in 0..batch.num_rows() {
            out.push(
                columns
                    .iter()
                    .map(|c| {
                        let c = c.as_string::<i32>();
                        if c.is_null(row) {
                            "NULL".to_string()
                        } else {
                            c.value(row).to_string()
                        }
                    })
                    .collect(),
            );
        }
    }
    Ok(out)
}

/// The rows of a result as text, cells joined by `|` (see [`cells`]).
pub fn rows(
    batches: &[datafusion::arrow::array::RecordBatch],
) -> datafusion::error::Result<Vec<String>> {
    Ok(cells(batches)?.into_iter().map(|r| r.join("|")).collect())
}

/// Runs `sql` in `session`: its rows as [`rows`] gives them, or its error with the SQL.
pub async fn query_rows(
    session: &crate::Session,
    sql: &str,
) -> std::result::Result<Vec<String>, String> {
    let batches = session.sql(sql).await.map_err(|e| format!("{sql}\n{e}"))?;
    rows(&batches).map_err(|e| format!("{sql}\n{e}"))
}

/// An engine with `gpus` simulated GPUs and every fixture UDF (what most engine tests start
/// from).
pub fn fixture_engine(gpus: usize) -> Result<Engine> {
    let engine = Engine::with_options(crate::EngineOptions {
        scheduler: crate::SchedulerConfig::default().with_simulated_gpus(gpus),
        ..crate::EngineOptions::default()
    })?;
    register_fixtures(&engine)?;
    Ok(engine)
}

/// Registers every fixture UDF in `engine`.
pub fn register_fixtures(engine: &Engine) -> Result<()> {
    for udf in fixtures()? {
        engine.register_scalar_udf(udf)?;
    }
    for udf in set_fixtures()? {
        engine.register_set_udf(udf)?;
    }
    Ok(())
}
