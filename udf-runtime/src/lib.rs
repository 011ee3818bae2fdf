//! How accelsql UDF code runs: UDF annotations, instance contexts and pools, the GPU side
//! (cudarc) and script runtimes (Python worker processes). Depends on the gpu-scheduler, never on
//! DataFusion.

pub mod annotations;
mod error;
pub mod gpu;
pub mod instance;
pub mod kernels;
pub mod prerequisite;
pub mod scratch;
pub mod script;

/// The cudarc this crate drives CUDA with: GPU implementations ([`GpuColumnarKernel`]) launch
/// their kernels with its `CudaStream::launch_builder`.
pub use cudarc;

pub use annotations::AcceleratorRequest;
pub use error::{BadOutputValueInfo, PythonExceptionInfo, Result, RuntimeError};
pub use gpu::{GpuColumnarKernel, GpuDevice};
pub use instance::{
    DeviceMemoryLimit, DeviceMemoryProbe, InstanceContext, InstancePool, InstanceSlot,
    InstanceStorage, ProcessRegistry, StatementInfo,
};
