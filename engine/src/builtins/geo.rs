//! `haversine_km(lat1, lon1, lat2, lon2)`: great-circle distance in km between points in degrees.

use std::sync::Arc;

use accelsql_udf_runtime::gpu;
use accelsql_udf_runtime::kernels::geo;
use datafusion::arrow::array::ArrayRef;
use datafusion::arrow::datatypes::DataType;
use datafusion::logical_expr::ColumnarValue;

use super::{kernel_error, operands_of, pinned_device};
use crate::{AcceleratorRequest, InstanceContext, Result, ScalarUdf};

/// The `haversine_km` definition (CPU implementation; a GPU one is one `.gpu(…)` away).
pub(super) fn haversine_km() -> Result<ScalarUdf> {
    ScalarUdf::builder("haversine_km")
        .inputs(vec![DataType::Float64; 4])
        .returns(DataType::Float64)
        .accelerator_request(AcceleratorRequest::Preferred)
        .cpu(haversine_km_cpu)
        .gpu(haversine_km_gpu)
        .build()
}

/// The CPU implementation: coordinates that are constants in the query stay scalars.
fn haversine_km_cpu(
    _: &InstanceContext,
    rows: usize,
    args: &[ColumnarValue],
) -> datafusion::error::Result<ArrayRef> {
    let args = operands_of::<4>("haversine_km", args)?;
    let out = geo::haversine_km_operands(rows, &args).map_err(kernel_error)?;
    Ok(Arc::new(out))
}

fn haversine_km_gpu(
    instance: &InstanceContext,
    rows: usize,
    args: &[ColumnarValue],
) -> datafusion::error::Result<ArrayRef> {
    let args = operands_of::<4>("haversine_km", args)?;
    let device = pinned_device(instance)?;
    let out = gpu::haversine_km(device, rows, &args).map_err(kernel_error)?;
    Ok(Arc::new(out))
}
