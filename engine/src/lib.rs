//! accelsql's SQL engine: a DataFusion session with accelerator-annotated UDFs and GPU placement.
//!
//! An [`Engine`] owns the node's GPUs (inventory and lease queue) and the UDF registry; a
//! [`Session`] runs SQL. Every accelsql UDF is Volatile; the placement rule gives at most one
//! call per query block the GPUs (required calls first, then left to right), fails other
//! required calls with error 22069 and runs other optional ones on the CPU. A statement with a
//! GPU call holds the node lease from the start of its execution to the end of its stream.
//!
//! This crate is the facade a Rust application embeds: it re-exports the layers below it.

mod builtins;
mod distribute;
mod emits;
mod engine;
mod error;
mod exasol;
mod files;
mod functions;
mod import;
mod node_rows;
mod options;
mod params;
mod placement;
mod remote;
mod repeated;
mod restricted;
mod script;
mod session;
pub mod splitter;
mod statement;
mod stream;
mod system;
pub mod testing;
pub mod udf;

pub use accelsql_gpu_scheduler as gpu_scheduler;
pub use accelsql_gpu_scheduler::SchedulerConfig;
pub use accelsql_udf_runtime as udf_runtime;
pub use accelsql_udf_runtime::{AcceleratorRequest, InstanceContext};
pub use datafusion;
pub use distribute::PlanDistributor;
pub use engine::{Engine, EngineOptions, NodeIdentity, RECENT_CALLS, UdfCallRecord};
pub use error::{EngineError, Result};
pub use node_rows::{NodeRowsParts, node_rows_parts};
pub use options::{AccelsqlOptions, IdentifierCase, OptionalGpuWhenBusy};
pub use placement::{Placement, PlacementDecision};
pub use remote::{
    NodeLease, UdfCallParts, encode_aggregate_placement, encode_placement, udf_call_parts,
};
pub use session::Session;
pub use udf::{
    InputType, Inputs, Output, RunChunk, RunInput, ScalarKernel, ScalarUdf, ScalarUdfBuilder,
    SetKernel, SetUdf, SetUdfBuilder,
};
