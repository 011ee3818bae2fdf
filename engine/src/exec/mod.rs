//! The exec layer: running a placed plan.
//!
//! Owns the statement's result stream, which takes the node lease before the plan runs when a
//! call was placed on the GPUs and releases it when the stream ends, fails or is dropped
//! ([`stream`]); the EMITS call's physical operator and the physical planner that makes it
//! ([`emits`], [`planner`]), with an EMITS run's text of more than 2 GiB in one column
//! cut into batches ([`text_batches`]); larger input batches for GPU calls and SCALAR RETURNS scripts ([`gpu_batches`]); and a cluster node's side of placed calls: what travels with a
//! placed call, how a node rebuilds it, and the node lease a task takes ([`remote`]).
//!
//! May use: `core`, `udf`, `plan`.

pub(crate) mod emits;
pub(crate) mod gpu_batches;
pub(crate) mod planner;
pub(crate) mod remote;
pub(crate) mod stream;
pub(crate) mod text_batches;
