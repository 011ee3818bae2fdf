//! How a built-in adapts its kernels to a UDF: arguments become kernel operands (scalars stay
//! scalars), the argument count is checked, and kernel errors keep their codes.

use std::sync::Arc;

use accelsql_gpu_scheduler::DeviceInfo;
use accelsql_udf_runtime::InstanceContext;
use accelsql_udf_runtime::kernels::Operand;
use datafusion::arrow::array::{Array, ArrayRef};
use datafusion::common::exec_datafusion_err;
use datafusion::logical_expr::ColumnarValue;

use crate::udf::definition::ScalarUdfBuilder;
use crate::udf::kernel::{kernel_error, operands, pinned_device};

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
