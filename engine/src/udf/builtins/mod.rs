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
use accelsql_udf_runtime::kernels::Operand;
use accelsql_udf_runtime::kernels::options::OptionKind;
use accelsql_udf_runtime::kernels::vectors::VectorOp;
use datafusion::arrow::array::{Array, ArrayRef};
use datafusion::common::exec_datafusion_err;
use datafusion::logical_expr::ColumnarValue;

pub(crate) use crate::udf::kernel::{kernel_error, operands, pinned_device};
use crate::{InstanceContext, Result, ScalarUdf, ScalarUdfBuilder, SetUdf};

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
