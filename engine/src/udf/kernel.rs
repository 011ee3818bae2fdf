//! What a UDF's kernels need from the UDF layer: arguments as kernel operands, the instance's
//! pinned device, and kernel errors that keep their codes. The built-ins use these too.

use accelsql_gpu_scheduler::DeviceInfo;
use accelsql_udf_runtime::kernels::Operand;
use accelsql_udf_runtime::{InstanceContext, RuntimeError};
use datafusion::error::DataFusionError;
use datafusion::logical_expr::ColumnarValue;

use crate::core::error::EngineError;

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

/// The device a GPU implementation runs on: the one its instance is pinned to. The engine only
/// chooses a GPU implementation for an instance pinned to a real device, so its absence is a
/// "no GPU" error (an optional call then runs the CPU implementation).
pub(crate) fn pinned_device(instance: &InstanceContext) -> datafusion::error::Result<&DeviceInfo> {
    instance.device.as_ref().ok_or_else(|| {
        kernel_error(RuntimeError::GpuUnavailable {
            message: "the instance is not pinned to a device".into(),
        })
    })
}

/// A kernel's error for DataFusion, keeping its code (e.g. `[22U20] cosine_similarity: …`).
pub(crate) fn kernel_error(e: RuntimeError) -> DataFusionError {
    EngineError::Runtime(e).into_datafusion()
}
