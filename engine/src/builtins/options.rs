//! `black_scholes_call(spot, strike, years, rate, volatility)` and `black_scholes_put(…)`:
//! European option prices (Black–Scholes, no dividends). Semantics and edge cases are those of
//! `accelsql_udf_runtime::kernels::options`.

use std::sync::Arc;

use accelsql_udf_runtime::gpu;
use accelsql_udf_runtime::kernels::options::{self, OptionKind};
use datafusion::arrow::array::ArrayRef;
use datafusion::arrow::datatypes::DataType;
use datafusion::logical_expr::ColumnarValue;

use super::{kernel_error, operands_of, pinned_device};
use crate::{AcceleratorRequest, InstanceContext, Result, ScalarUdf};

/// The definition of `black_scholes_call` or `black_scholes_put` (CPU implementation; a GPU one
/// is one `.gpu(…)` away). Arguments are DOUBLE; other numbers are cast to it.
pub(super) fn black_scholes(kind: OptionKind) -> Result<ScalarUdf> {
    ScalarUdf::builder(kind.name())
        .inputs(vec![DataType::Float64; 5])
        .returns(DataType::Float64)
        .accelerator_request(AcceleratorRequest::Preferred)
        .cpu(
            move |_: &InstanceContext,
                  rows: usize,
                  args: &[ColumnarValue]|
                  -> datafusion::error::Result<ArrayRef> {
                let args = operands_of::<5>(kind.name(), args)?;
                let out = options::black_scholes(kind, rows, &args).map_err(kernel_error)?;
                Ok(Arc::new(out))
            },
        )
        .gpu(
            move |instance: &InstanceContext,
                  rows: usize,
                  args: &[ColumnarValue]|
                  -> datafusion::error::Result<ArrayRef> {
                let args = operands_of::<5>(kind.name(), args)?;
                let device = pinned_device(instance)?;
                let out = gpu::black_scholes(device, kind, rows, &args).map_err(kernel_error)?;
                Ok(Arc::new(out))
            },
        )
        .build()
}
