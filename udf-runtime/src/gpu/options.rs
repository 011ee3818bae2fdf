//! `black_scholes_call` / `black_scholes_put` on the GPU: the kernel in `cuda/options.cu` and
//! its Rust entry point.

use std::sync::Arc;

use accelsql_gpu_scheduler::DeviceInfo;
use arrow::array::Float64Array;
use arrow::datatypes::DataType;
use cudarc::driver::{CudaStream, PushKernelArg};

use super::launch::{arguments, check_doubles, float64, rows_arg, thread_per_row};
use super::{DeviceColumn, DeviceOperand, ElementType, GpuColumnarKernel, GpuDevice, KernelSource};
use crate::Result;
use crate::kernels::Operand;
use crate::kernels::options::OptionKind;

/// The CUDA source of the option-pricing kernels.
pub fn options_source() -> KernelSource {
    KernelSource::new("options", include_str!("cuda/options.cu")).with_option("--fmad=false")
}

/// `black_scholes_call` or `black_scholes_put` (by `kind`) of spot, strike, years, rate and
/// volatility (DOUBLE columns or scalars) on `device`, with the semantics of the CPU kernel
/// [`crate::kernels::options::black_scholes`]: the same expressions in the same order and the
/// same NULLs; values agree to within the last bits of CUDA's `exp`/`log`/`erfc` (a few ULP).
///
/// Fails like the CPU kernel on arguments that are not DOUBLE or do not fit `rows`
/// ([`crate::RuntimeError::InvalidArgument`]), and with the GPU errors of
/// [`GpuDevice::open`] and [`GpuDevice::run_columnar`].
pub fn black_scholes(
    device: &DeviceInfo,
    kind: OptionKind,
    rows: usize,
    args: &[Operand; 5],
) -> Result<Float64Array> {
    check_doubles(kind.name(), rows, args)?;
    let gpu = GpuDevice::open(device)?;
    let out = gpu.run_columnar(&BlackScholes(kind), rows, args)?;
    float64(&gpu, kind.name(), out)
}

/// The [`GpuColumnarKernel`] of `black_scholes_call` / `black_scholes_put`.
struct BlackScholes(OptionKind);

impl GpuColumnarKernel for BlackScholes {
    fn name(&self) -> &str {
        self.0.name()
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
        let [spot, strike, years, rate, volatility] = arguments(device, self.name(), args)?;
        let function = device.function(&options_source(), "black_scholes")?;
        let cfg = thread_per_row(device, rows)?;
        let n = rows_arg(device, rows)?;
        let put: i32 = match self.0 {
            OptionKind::Call => 0,
            OptionKind::Put => 1,
        };
        let flags = [spot, strike, years, rate, volatility].map(DeviceOperand::scalar_flag);
        let mut out = DeviceColumn::alloc(device, stream, ElementType::F64, rows, true)?;
        let (values, validity) = out.buffers_mut();
        let Some(validity) = validity else {
            return Err(device.fail("the output has no validity bitmap"));
        };
        let mut launch = stream.launch_builder(&function);
        // The order and types of `black_scholes` in cuda/options.cu.
        launch.arg(spot.array().values()).arg(&flags[0]);
        launch.arg(strike.array().values()).arg(&flags[1]);
        launch.arg(years.array().values()).arg(&flags[2]);
        launch.arg(rate.array().values()).arg(&flags[3]);
        launch.arg(volatility.array().values()).arg(&flags[4]);
        launch.arg(&n).arg(&put).arg(values).arg(validity);
        // SAFETY: the arguments match the kernel's parameters in number, order and type
        // (pointer, int ×5; long long; int; double*; unsigned int*); every operand is DOUBLE
        // (checked before the run) with `rows` values, or one for a scalar, read at index 0; the
        // output holds `rows` doubles and a zeroed bitmap of whole words for `rows` bits, and the
        // kernel writes only indices below `rows`.
        unsafe { launch.launch(cfg) }.map_err(|e| device.error("launching black_scholes", e))?;
        drop(launch);
        Ok(out)
    }
}
