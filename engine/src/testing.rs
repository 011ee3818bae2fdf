//! Fixture UDFs for tests and sqllogictest suites. Never registered by the product: a test
//! harness registers them with [`register_fixtures`].
//!
//! - `gpu_probe_required()` / `gpu_probe_optional()` / `cpu_probe()`: return the index of the
//!   device their instance was pinned to, or `'<invalid>'` on the CPU (one row per input row;
//!   any arguments are accepted and ignored).
//! - `slow_gpu(ms)`: sleeps `ms` milliseconds per batch on the GPU (required), returns `ms`.
//! - `bad_length_gpu()`: a broken implementation that returns one row too many.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, Int64Array, StringArray};
use datafusion::arrow::datatypes::DataType;
use datafusion::logical_expr::ColumnarValue;

use crate::{AcceleratorRequest, Engine, InstanceContext, Result, ScalarUdf};

fn probe(name: &str, request: AcceleratorRequest) -> Result<ScalarUdf> {
    ScalarUdf::builder(name)
        .variadic()
        .returns(DataType::Utf8)
        .accelerator_request(request)
        .cpu(|ctx: &InstanceContext, rows: usize, _: &[ColumnarValue]| {
            let value = ctx
                .device
                .as_ref()
                .map_or_else(|| "<invalid>".to_string(), |d| d.index.to_string());
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

/// Registers every fixture UDF in `engine`.
pub fn register_fixtures(engine: &Engine) -> Result<()> {
    for udf in fixtures()? {
        engine.register_scalar_udf(udf)?;
    }
    Ok(())
}
