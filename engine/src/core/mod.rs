//! The bottom layer: what every other layer of the engine stands on.
//!
//! Owns the engine's shared state ([`EngineState`]: devices, the node lease queue, node
//! identity, counters, the recent-call log, the node leases of cluster tasks and the tables'
//! catalog), the options an engine is built with and the settings a session has, the hook for
//! running plans elsewhere, the vocabulary of call placement and call records, and the error
//! type with its codes.
//!
//! May use: nothing of this crate (only DataFusion, the scheduler, the UDF runtime and the
//! storage crate).

pub(crate) mod calls;
pub(crate) mod device_memory;
pub(crate) mod distribute;
pub(crate) mod engine_options;
pub(crate) mod error;
pub(crate) mod exasol_words;
pub(crate) mod groups;
pub(crate) mod lease_grant;
pub(crate) mod memory;
pub(crate) mod names;
pub(crate) mod node_leases;
pub(crate) mod options;
pub(crate) mod owners;
pub(crate) mod passwords;
pub(crate) mod privileges;
pub(crate) mod spill;
pub(crate) mod state;
pub(crate) mod tables;

pub(crate) use state::EngineState;
