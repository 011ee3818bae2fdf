//! `haversine_km(lat1, lon1, lat2, lon2)`: great-circle distance in km between points in degrees.

use std::sync::Arc;

use accelsql_udf_runtime::kernels::geo;
use datafusion::arrow::array::{ArrayRef, AsArray};
use datafusion::arrow::datatypes::{DataType, Float64Type};
use datafusion::common::exec_datafusion_err;
use datafusion::logical_expr::ColumnarValue;

use crate::{AcceleratorRequest, InstanceContext, Result, ScalarUdf};

/// The `haversine_km` definition (CPU implementation only, for now).
pub(super) fn haversine_km() -> Result<ScalarUdf> {
    ScalarUdf::builder("haversine_km")
        .inputs(vec![DataType::Float64; 4])
        .returns(DataType::Float64)
        .accelerator_request(AcceleratorRequest::Preferred)
        .cpu(
            |_: &InstanceContext,
             rows: usize,
             args: &[ColumnarValue]|
             -> datafusion::error::Result<ArrayRef> {
                let arrays = args
                    .iter()
                    .map(|a| a.to_array(rows))
                    .collect::<datafusion::error::Result<Vec<_>>>()?;
                let column = |i: usize| {
                    arrays[i].as_primitive_opt::<Float64Type>().ok_or_else(|| {
                        exec_datafusion_err!("haversine_km: argument {} is not DOUBLE", i + 1)
                    })
                };
                Ok(Arc::new(geo::haversine_km(
                    column(0)?,
                    column(1)?,
                    column(2)?,
                    column(3)?,
                )))
            },
        )
        .build()
}
