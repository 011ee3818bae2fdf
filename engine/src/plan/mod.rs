//! The plan layer: what happens to a statement's logical plan before it runs.
//!
//! Owns the statement's scope shared by its calls ([`statement`]: id, placements, the devices of
//! its lease once granted, why placement failed), the GPU placement rule ([`placement`]: at
//! most one call per query block gets the GPUs), and the EMITS call's logical node with the
//! analyzer rule that builds it ([`emits_node`], [`emits_rule`]), and the Exasol dialect's rule
//! that makes empty strings NULL ([`empty_strings`]) and the expression planner
//! that makes strings in arithmetic numbers ([`string_arithmetic`]).
//!
//! May use: `core`, `udf`.

pub(crate) mod emits_node;
pub(crate) mod emits_rule;
pub(crate) mod empty_strings;
pub(crate) mod exasol_booleans;
pub(crate) mod placement;
pub(crate) mod statement;
pub(crate) mod string_arithmetic;
