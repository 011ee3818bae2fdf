//! `black_scholes_call(spot, strike, years, rate, volatility)` and `black_scholes_put(…)`:
//! European option prices (Black–Scholes, no dividends). Semantics and edge cases are those of
//! `accelsql_udf_runtime::kernels::options`.

use accelsql_udf_runtime::gpu;
use accelsql_udf_runtime::kernels::options::{self, OptionKind};
use datafusion::arrow::datatypes::DataType;

use super::adapt::with_kernels;
use crate::{AcceleratorRequest, Result, ScalarUdf};

/// The definition of `black_scholes_call` or `black_scholes_put`, with CPU and GPU
/// implementations. Arguments are DOUBLE; other numbers are cast to it.
pub(super) fn black_scholes(kind: OptionKind) -> Result<ScalarUdf> {
    let builder = ScalarUdf::builder(kind.name())
        .inputs(vec![DataType::Float64; 5])
        .returns(DataType::Float64)
        .accelerator_request(AcceleratorRequest::Preferred)
        .device_memory(accelsql_udf_runtime::gpu::builtin_device_memory(
            super::estimates::ROW_BYTES_BLACK_SCHOLES,
        ));
    with_kernels::<5, _>(
        builder,
        kind.name(),
        move |rows, args| options::black_scholes(kind, rows, args),
        move |device, rows, args| gpu::black_scholes(device, kind, rows, args),
    )
    .build()
}
