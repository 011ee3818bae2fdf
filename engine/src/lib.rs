//! accelsql's SQL engine: a DataFusion session with accelerator-annotated UDFs and GPU placement.
//!
//! An [`Engine`] owns the node's GPUs (inventory and lease queue), the UDF registry and the
//! script catalog; a [`Session`] runs SQL. Every accelsql UDF is Volatile; the placement rule
//! gives at most one call per query block the GPUs (required calls first, then left to right),
//! fails other required calls with error 22069 and runs other optional ones on the CPU. A
//! statement with a GPU call holds the node lease from the start of its execution to the end
//! of its stream.
//!
//! This crate is the facade a Rust application embeds: it re-exports the layers below it.
//!
//! # Layers
//!
//! The crate is six layers, each a folder whose `mod.rs` says what it owns; a layer imports
//! only from the layers below it (`tools/layers/layers.txt` declares them, and a test of the
//! workspace checks every `use`):
//!
//! ```text
//! front/    Engine handle, Session: splitting, script DDL, Exasol statements, the ordered
//!           rewrite passes, parameters, restricted sessions          (uses everything below)
//! catalog/  script catalog, system tables, per-node rows, files as tables
//! exec/     the statement stream (takes and releases the lease), EMITS operator and planner,
//!           a cluster node's side of placed calls
//! plan/     statement scope, the placement rule, the EMITS node and analyzer rule
//! udf/      UDF definitions and DataFusion adapters, placed calls, registry, built-ins,
//!           scripts as UDFs
//! core/     engine state (devices, lease queue, call log), options, errors   (uses nothing)
//! ```
//!
//! Where a lower layer needs something of a higher one, it is handed a value or a trait: the
//! statement stream gets the engine's state, not the engine; system tables get the state and
//! the script catalog; IMPORT/EXPORT run SQL through a `SqlRunner` the session implements.
//!
//! # One statement's path
//!
//! ```text
//! Session::sql(text)                                   front/session.rs
//!   split into statements                              front/splitter.rs
//!   each classified (one token view)                   front/statements.rs, front/tokens.rs
//!   script DDL / Exasol statements run here            front/own_statements.rs
//!   text passes, parse, statement passes               front/execute.rs, front/passes/
//!   plan step: analyzer rules (EMITS, placement)       front/execute.rs, plan/rules.rs
//!   run step, one per kind of plan                     front/execute.rs
//!   physical plan (EMITS operator)                     exec/planner.rs, exec/emits.rs
//!   StatementStream: lease, run, release, record       exec/stream.rs → core/state.rs
//!   UDF adapters run kernels on pinned instances       udf/scalar.rs, udf/call.rs
//!     → accelsql_udf_runtime (CPU/GPU kernels, script workers)
//! ```

mod catalog;
mod core;
mod exec;
mod front;
mod plan;
pub mod testing;
pub mod udf;

pub use accelsql_gpu_scheduler as gpu_scheduler;
pub use accelsql_gpu_scheduler::SchedulerConfig;
pub use accelsql_udf_runtime as udf_runtime;
pub use accelsql_udf_runtime::{AcceleratorRequest, InstanceContext};
/// The table of Exasol's words in accelsql's errors (see `docs/src/exasol-errors.md`).
pub use core::exasol_words::{EXASOL_WORDS, ExasolWords};
pub use datafusion;

pub use crate::catalog::node_rows::{NodeRowsParts, node_rows_parts};
pub use crate::core::calls::{Placement, PlacementDecision, RECENT_CALLS, UdfCallRecord};
pub use crate::core::distribute::PlanDistributor;
pub use crate::core::engine_options::{
    DEFAULT_MAX_STATEMENT_DEPTH, DEFAULT_MAX_VALUE_BYTES, EngineOptions, NodeIdentity,
    STATEMENT_STACK_BYTES,
};
pub use crate::core::error::{EngineError, Result};
pub use crate::core::groups::{ConsumerGroup, DEFAULT_GROUP, GpuClass};
pub use crate::core::memory::{
    DEFAULT_MEMORY_SHARE, SessionPool, default_memory_limit, machine_memory,
};
pub use crate::core::names::{ExasolType, SQL_TYPE_METADATA_KEY, exasol_field_type};
pub use crate::core::options::{
    AccelsqlOptions, IdentifierCase, OptionalGpuWhenBusy, SetGrouping, SqlDialect,
};
pub use crate::core::passwords::{DEFAULT_ROUNDS, check_hash, hash_password, verify_password};
pub use crate::core::privileges::{
    DBA_ROLE, Denial, Grants, Holding, ObjectGrant, ObjectKind, ObjectPrivilege, PUBLIC_ROLE,
    RESTRICTED_ROLE, SYS_USER, SystemPrivilege, canonical_account,
};
pub use crate::exec::remote::{
    NodeLease, UdfCallParts, encode_aggregate_placement, encode_placement, udf_call_parts,
};
pub use crate::front::engine::Engine;
pub use crate::front::exasol::dialect::exasol_text;
pub use crate::front::results::ResultShape;
pub use crate::front::session::{LeasePlace, Session};
pub use crate::front::splitter;
pub use crate::udf::{
    InputType, Inputs, Output, RunChunk, RunInput, ScalarKernel, ScalarUdf, ScalarUdfBuilder,
    SetKernel, SetUdf, SetUdfBuilder, TopKMerge,
};
