//! How accelsql UDF code runs: UDF annotations, instance contexts and pools, and the GPU side
//! (cudarc). Depends on the gpu-scheduler, never on DataFusion.

pub mod annotations;
mod error;
pub mod gpu;
pub mod instance;
pub mod kernels;

pub use annotations::AcceleratorRequest;
pub use error::{Result, RuntimeError};
pub use instance::{InstanceContext, InstancePool, InstanceSlot};
