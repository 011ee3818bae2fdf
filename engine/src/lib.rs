//! accelsql's SQL engine: a DataFusion session with accelerator-annotated UDFs and GPU placement.
//!
//! This crate is the facade a Rust application embeds: it re-exports the layers below it.

pub use accelsql_gpu_scheduler as gpu_scheduler;
pub use accelsql_udf_runtime as udf_runtime;
pub use datafusion;
