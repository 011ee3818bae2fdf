//! `haversine_km(lat1, lon1, lat2, lon2)`: great-circle distance in km between points in degrees.

use accelsql_udf_runtime::gpu;
use accelsql_udf_runtime::kernels::geo;
use datafusion::arrow::datatypes::DataType;

use super::adapt::with_kernels;
use crate::{AcceleratorRequest, Result, ScalarUdf};

/// The `haversine_km` definition, with CPU and GPU implementations: coordinates that are
/// constants in the query stay scalars.
pub(super) fn haversine_km() -> Result<ScalarUdf> {
    const FUNCTION: &str = "haversine_km";
    let builder = ScalarUdf::builder(FUNCTION)
        .inputs(vec![DataType::Float64; 4])
        .returns(DataType::Float64)
        .accelerator_request(AcceleratorRequest::Preferred)
        .device_memory(accelsql_udf_runtime::gpu::builtin_device_memory(
            super::estimates::ROW_BYTES_HAVERSINE,
        ));
    with_kernels::<4, _>(
        builder,
        FUNCTION,
        geo::haversine_km_operands,
        gpu::haversine_km,
    )
    .build()
}
