//! The catalog layer: what an engine knows and shows as tables.
//!
//! Owns the script catalog (every `CREATE … SCRIPT` and `CREATE CONNECTION`, persisted in the
//! data directory: [`scripts`]), the system tables read fresh at each scan (Exasol's in `sys`
//! and accelsql's in `accelsql`: [`system`]), the per-node ones that answer for every node of a
//! cluster ([`node_tables`], scanned by [`node_rows`]), files named as tables ([`files`]), and a
//! session's view of the engine's tables with its temporary ones in front ([`session_tables`]),
//! and the stored tables' own views (versions, files, rows: [`stored_views`]).
//!
//! May use: `core`, `udf`, `plan`, `exec`.

pub(crate) mod columns;
pub(crate) mod files;
pub(crate) mod node_rows;
pub(crate) mod node_tables;
pub(crate) mod scripts;
pub(crate) mod security;
pub(crate) mod security_views;
pub(crate) mod session_tables;
pub(crate) mod stored_views;
pub(crate) mod system;
pub(crate) mod system_table;
pub(crate) mod table_views;
