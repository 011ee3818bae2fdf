//! Built-in accelsql UDFs, registered in every engine. Each is `GpuNvidia|None`: it runs on the
//! GPU when its call is placed there and has a GPU implementation, else on the CPU, so every
//! built-in works with zero GPUs.
//!
//! | SQL | kind | file |
//! | --- | --- | --- |
//! | `haversine_km(lat1, lon1, lat2, lon2)` | scalar | `geo.rs` |
//! | `cosine_similarity(a, b)`, `dot_product(a, b)`, `l2_distance(a, b)` | scalar | `vectors.rs` |
//! | `black_scholes_call(…)`, `black_scholes_put(…)` | scalar | `options.rs` |
//! | `vector_topk(row_id, emb, query, k) EMITS (row_id, score)` | SET | `topk.rs` |
//!
//! The kernels themselves live in `accelsql_udf_runtime::kernels`; this module only adapts them:
//! arguments become [`Operand`]s (scalars stay scalars) and kernel errors keep their codes.

mod geo;
mod options;
mod topk;
mod vectors;

use std::sync::Arc;

use accelsql_gpu_scheduler::DeviceInfo;
use accelsql_udf_runtime::RuntimeError;
use accelsql_udf_runtime::kernels::Operand;
use accelsql_udf_runtime::kernels::options::OptionKind;
use accelsql_udf_runtime::kernels::vectors::VectorOp;
use datafusion::arrow::array::{Array, ArrayRef};
use datafusion::common::exec_datafusion_err;
use datafusion::error::DataFusionError;
use datafusion::logical_expr::ColumnarValue;

use crate::{EngineError, InstanceContext, Result, ScalarUdf, ScalarUdfBuilder, SetUdf};

/// The built-in scalar UDFs, in registration order.
pub(crate) fn builtin_udfs() -> Result<Vec<ScalarUdf>> {
    let mut udfs = vec![geo::haversine_km()?];
    for op in VectorOp::ALL {
        udfs.push(vectors::vector_function(op)?);
    }
    for kind in [OptionKind::Call, OptionKind::Put] {
        udfs.push(options::black_scholes(kind)?);
    }
    Ok(udfs)
}

/// The built-in SET (EMITS) UDFs, in registration order.
pub(crate) fn builtin_set_udfs() -> Result<Vec<SetUdf>> {
    Ok(vec![topk::vector_topk()?])
}

/// A scalar UDF's arguments as kernel operands: a column stays a column, a scalar becomes a
/// one-element array (never replicated to the batch's length).
pub(crate) fn operands(args: &[ColumnarValue]) -> datafusion::error::Result<Vec<Operand>> {
    args.iter()
        .map(|arg| match arg {
            ColumnarValue::Array(array) => Ok(Operand::Column(std::sync::Arc::clone(array))),
            ColumnarValue::Scalar(scalar) => Ok(Operand::Scalar(scalar.to_array()?)),
        })
        .collect()
}

/// [`operands`] of a built-in taking exactly `N` arguments (its signature guarantees `N`).
pub(crate) fn operands_of<const N: usize>(
    function: &str,
    args: &[ColumnarValue],
) -> datafusion::error::Result<[Operand; N]> {
    let given = args.len();
    operands(args)?
        .try_into()
        .map_err(|_| exec_datafusion_err!("{function} takes {N} arguments, got {given}"))
}

/// The device a GPU implementation runs on: the one its instance is pinned to. The engine only
/// chooses a GPU implementation for an instance pinned to a real device, so its absence is a
/// "no GPU" error (an optional call then runs the CPU implementation).
pub(crate) fn pinned_device(
    instance: &InstanceContext,
) -> datafusion::error::Result<&accelsql_gpu_scheduler::DeviceInfo> {
    instance.device.as_ref().ok_or_else(|| {
        kernel_error(RuntimeError::GpuUnavailable {
            message: "the instance is not pinned to a device".into(),
        })
    })
}

/// Gives `builder` a built-in's two implementations over `N` operands: `cpu`, and `gpu` on the
/// device its instance is pinned to. The argument count is checked and kernel errors keep their
/// codes.
pub(crate) fn with_kernels<const N: usize, A>(
    builder: ScalarUdfBuilder,
    function: &'static str,
    cpu: impl Fn(usize, &[Operand; N]) -> accelsql_udf_runtime::Result<A> + Send + Sync + 'static,
    gpu: impl Fn(&DeviceInfo, usize, &[Operand; N]) -> accelsql_udf_runtime::Result<A>
    + Send
    + Sync
    + 'static,
) -> ScalarUdfBuilder
where
    A: Array + 'static,
{
    builder
        .cpu(
            move |_: &InstanceContext,
                  rows: usize,
                  args: &[ColumnarValue]|
                  -> datafusion::error::Result<ArrayRef> {
                let args = operands_of::<N>(function, args)?;
                Ok(Arc::new(cpu(rows, &args).map_err(kernel_error)?))
            },
        )
        .gpu(
            move |instance: &InstanceContext,
                  rows: usize,
                  args: &[ColumnarValue]|
                  -> datafusion::error::Result<ArrayRef> {
                let args = operands_of::<N>(function, args)?;
                let device = pinned_device(instance)?;
                Ok(Arc::new(gpu(device, rows, &args).map_err(kernel_error)?))
            },
        )
}

/// A kernel's error for DataFusion, keeping its code (e.g. `[22U20] cosine_similarity: …`).
pub(crate) fn kernel_error(e: RuntimeError) -> DataFusionError {
    EngineError::Runtime(e).into_datafusion()
}
