//! [`ElementwiseF64`]: a ready-made GPU implementation for a DOUBLE function of DOUBLE arguments
//! computed row by row by one CUDA kernel, so that such a UDF needs only its CUDA C.

use std::sync::Arc;

use arrow::datatypes::DataType;
use cudarc::driver::{CudaStream, PushKernelArg};

use super::launch::{rows_arg, thread_per_row};
use super::{DeviceColumn, DeviceOperand, ElementType, GpuColumnarKernel, GpuDevice, KernelSource};
use crate::Result;

/// A [`GpuColumnarKernel`] that runs kernel `kernel` of `source`, which must have the form
///
/// ```c
/// extern "C" __global__ void kernel(const double* a1, int a1_scalar, /* …, */
///                                   const double* aN, int aN_scalar,
///                                   long long rows, double* out)
/// ```
///
/// with one thread per row (blocks of [`super::BLOCK_THREADS`]; threads at or past `rows` must
/// do nothing): argument `i` of row `r` is `ai[ai_scalar ? 0 : r]` (a constant argument is one
/// value, uploaded once per batch), and the row's result goes to `out[r]`. NULL rows are masked
/// by the runtime, so the kernel ignores NULLs. Register it with the engine's
/// `ScalarUdfBuilder::gpu_columnar`; for other shapes (lists, other types, NULL handling of its
/// own) implement [`GpuColumnarKernel`] as `geo.rs` does.
#[derive(Debug, Clone)]
pub struct ElementwiseF64 {
    source: KernelSource,
    kernel: String,
    arity: usize,
}

impl ElementwiseF64 {
    /// Kernel `kernel` of `source`, taking `arity` DOUBLE arguments.
    ///
    /// # Safety
    ///
    /// The kernel must have exactly the parameters shown on the type, for `arity` arguments, and
    /// must read and write only the elements described there: the launch passes those
    /// parameters, and CUDA cannot check a kernel's signature.
    pub unsafe fn new(source: KernelSource, kernel: impl Into<String>, arity: usize) -> Self {
        Self {
            source,
            kernel: kernel.into(),
            arity,
        }
    }
}

impl GpuColumnarKernel for ElementwiseF64 {
    fn name(&self) -> &str {
        &self.kernel
    }

    fn output_type(&self) -> DataType {
        DataType::Float64
    }

    fn evaluate_columnar(
        &self,
        device: &GpuDevice,
        stream: &Arc<CudaStream>,
        rows: usize,
        args: &[DeviceOperand<'_>],
    ) -> Result<DeviceColumn> {
        let name = &self.kernel;
        if args.len() != self.arity {
            return Err(device.fail(format!(
                "{name} takes {} arguments, got {}",
                self.arity,
                args.len()
            )));
        }
        if let Some((i, a)) = args
            .iter()
            .enumerate()
            .find(|(_, a)| a.array().element_type() != ElementType::F64)
        {
            return Err(device.fail(format!(
                "argument {} of {name} is {}, expected DOUBLE",
                i + 1,
                a.array().element_type().data_type()
            )));
        }
        let function = device.function(&self.source, name)?;
        let cfg = thread_per_row(device, rows)?;
        let n = rows_arg(device, rows)?;
        let flags: Vec<i32> = args.iter().map(DeviceOperand::scalar_flag).collect();
        let mut out = DeviceColumn::alloc(device, stream, ElementType::F64, rows, false)?;
        let mut launch = stream.launch_builder(&function);
        for (arg, flag) in args.iter().zip(&flags) {
            launch.arg(arg.array().values()).arg(flag);
        }
        launch.arg(&n).arg(out.values_mut());
        // SAFETY: `new`'s caller promised the kernel's parameters: a `double*` and an `int` per
        // argument (all DOUBLE, checked above; `rows` values each, or one for a scalar), the row
        // count, and the output of `rows` doubles; and that it stays within them.
        unsafe { launch.launch(cfg) }.map_err(|e| device.error(&format!("launching {name}"), e))?;
        drop(launch);
        Ok(out)
    }
}
