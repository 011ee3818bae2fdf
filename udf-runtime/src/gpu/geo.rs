//! `haversine_km` on the GPU: the kernel in `cuda/geo.cu` and its Rust entry point.

use std::sync::Arc;

use accelsql_gpu_scheduler::DeviceInfo;
use arrow::array::Float64Array;
use arrow::datatypes::DataType;
use cudarc::driver::{CudaStream, PushKernelArg};

use super::launch::{arguments, check_doubles, float64, rows_arg, thread_per_row};
use super::{DeviceColumn, DeviceOperand, ElementType, GpuColumnarKernel, GpuDevice, KernelSource};
use crate::Result;
use crate::kernels::Operand;
use crate::kernels::geo::EARTH_RADIUS_KM;

const FUNCTION: &str = "haversine_km";

/// The CUDA source of the geo kernels.
pub fn geo_source() -> KernelSource {
    KernelSource::new("geo", include_str!("cuda/geo.cu")).with_option("--fmad=false")
}

/// `haversine_km(lat1, lon1, lat2, lon2)` (degrees, DOUBLE columns or scalars) on `device`:
/// the same values as the CPU kernel [`crate::kernels::geo::haversine_km_operands`] to within
/// the last bits of CUDA's `sin`/`cos`/`asin` (a few ULP), NULL where an argument is NULL.
///
/// Fails like the CPU kernel on arguments that are not DOUBLE or do not fit `rows`
/// ([`crate::RuntimeError::InvalidArgument`]), and with the GPU errors of
/// [`GpuDevice::open`] and [`GpuDevice::run_columnar`].
pub fn haversine_km(device: &DeviceInfo, rows: usize, args: &[Operand; 4]) -> Result<Float64Array> {
    check_doubles(FUNCTION, rows, args)?;
    let gpu = GpuDevice::open(device)?;
    let out = gpu.run_columnar(&Haversine, rows, args)?;
    float64(&gpu, FUNCTION, out)
}

/// The [`GpuColumnarKernel`] of `haversine_km`.
struct Haversine;

impl GpuColumnarKernel for Haversine {
    fn name(&self) -> &str {
        FUNCTION
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
        let [lat1, lon1, lat2, lon2] = arguments(device, FUNCTION, args)?;
        let function = device.function(&geo_source(), "haversine_km")?;
        let cfg = thread_per_row(device, rows)?;
        let n = rows_arg(device, rows)?;
        let radius = EARTH_RADIUS_KM;
        let flags = [lat1, lon1, lat2, lon2].map(DeviceOperand::scalar_flag);
        let mut out = DeviceColumn::alloc(device, stream, ElementType::F64, rows, false)?;
        let mut launch = stream.launch_builder(&function);
        // The order and types of `haversine_km` in cuda/geo.cu.
        launch.arg(lat1.array().values()).arg(&flags[0]);
        launch.arg(lon1.array().values()).arg(&flags[1]);
        launch.arg(lat2.array().values()).arg(&flags[2]);
        launch.arg(lon2.array().values()).arg(&flags[3]);
        launch.arg(&n).arg(&radius).arg(out.values_mut());
        // SAFETY: the arguments match the kernel's parameters in number, order and type
        // (pointer, int ×4; long long; double; double*); every operand is DOUBLE (checked before
        // the run) with `rows` values, or one for a scalar, which the kernel reads at index 0;
        // the output holds `rows` doubles, and the kernel writes only indices below `rows`.
        unsafe { launch.launch(cfg) }.map_err(|e| device.error("launching haversine_km", e))?;
        drop(launch);
        Ok(out)
    }
}
