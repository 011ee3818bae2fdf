//! The UDF layer: what a UDF is and how DataFusion calls it.
//!
//! Owns the definitions of Rust UDFs ([`ScalarUdf`], [`SetUdf`]) with their accelerator
//! annotations and kernels, the DataFusion adapters that run them (scalar functions, aggregate
//! functions for SET RETURNS, placeholders for EMITS calls), one placed call's instance pool and
//! counters (`call.rs`), the engine's UDF registry, the built-in UDFs, `iproc()`/`nproc()` and
//! GEOMETRY's text (`wkt.rs`), and
//! scripts as UDFs (`script/`: their definitions, options, names, what travels to a cluster's
//! nodes, and the kernels that run them in worker processes).
//!
//! May use: `core`.

mod aggregate;
pub(crate) mod builtins;
pub(crate) mod call;
mod definition;
mod emits;
pub(crate) mod kernel;
pub(crate) mod node_functions;
pub(crate) mod registry;
mod scalar;
pub(crate) mod script;
mod set;
pub(crate) mod sized;
pub(crate) mod wkt;

pub use self::aggregate::aggregate_runs_only_in_this_process;
pub(crate) use self::aggregate::{AccelAggregateUdf, as_accel_aggregate};
pub(crate) use self::call::{PlacedCall, on_instance, same_placement};
pub use self::definition::{ArgumentRule, Inputs, ScalarKernel, ScalarUdf, ScalarUdfBuilder};
pub(crate) use self::emits::{EmitsAggregate, EmitsScalar, emits_of, emits_of_aggregate};
pub use self::scalar::runs_only_in_this_process;
pub(crate) use self::scalar::{AccelScalarUdf, as_accel as as_accel_udf};
pub use self::set::{
    InputType, Output, RunChunk, RunInput, SetKernel, SetUdf, SetUdfBuilder, TopKMerge,
};
