//! Built-in accelsql UDFs, registered in every engine. Each is `GpuNvidia|None`: it runs on the
//! GPU when its call is placed there and has a GPU implementation, else on the CPU, so every
//! built-in works with zero GPUs.

mod geo;

use crate::{Result, ScalarUdf};

/// The built-in UDFs, in registration order.
pub(crate) fn builtin_udfs() -> Result<Vec<ScalarUdf>> {
    Ok(vec![geo::haversine_km()?])
}
