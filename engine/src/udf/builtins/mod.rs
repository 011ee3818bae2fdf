//! Built-in accelsql UDFs, registered in every engine. Each is `GpuNvidia|None`: it runs on the
//! GPU when its call is placed there and has a GPU implementation, else on the CPU, so every
//! built-in works with zero GPUs.
//!
//! | SQL | kind | file |
//! | --- | --- | --- |
//! | `haversine_km(lat1, lon1, lat2, lon2)` | scalar | `geo.rs` |
//! | `cosine_similarity(a, b)`, `dot_product(a, b)`, `l2_distance(a, b)` | scalar | `vectors.rs` |
//! | `black_scholes_call(…)`, `black_scholes_put(…)` | scalar | `options.rs` |
//! | `vector_topk(row_id, emb, query, k) EMITS (row_id, score)` | SET | `topk.rs` |
//!
//! The kernels themselves live in `accelsql_udf_runtime::kernels`; this module only adapts them:
//! arguments become `Operand`s (see `adapt.rs`) (scalars stay scalars) and kernel errors keep their codes.

mod adapt;
mod estimates;
mod geo;
mod options;
mod topk;
mod vectors;

use accelsql_udf_runtime::kernels::options::OptionKind;
use accelsql_udf_runtime::kernels::vectors::VectorOp;

use super::definition::ScalarUdf;
use super::set::SetUdf;
use crate::core::error::Result;

/// The built-in scalar UDFs, in registration order.
pub(crate) fn builtin_udfs() -> Result<Vec<ScalarUdf>> {
    let mut udfs = vec![geo::haversine_km()?];
    for op in VectorOp::ALL {
        udfs.push(vectors::vector_function(op)?);
    }
    for kind in [OptionKind::Call, OptionKind::Put] {
        udfs.push(options::black_scholes(kind)?);
    }
    Ok(udfs)
}

/// The built-in SET (EMITS) UDFs, in registration order.
pub(crate) fn builtin_set_udfs() -> Result<Vec<SetUdf>> {
    Ok(vec![topk::vector_topk()?])
}
