//! accelsql-engine's integration tests (SQL sessions on a real engine) in one test binary: one
//! link of DataFusion instead of one per file keeps the build's disk use and link time down. The
//! GPU tests (`gpu_sql.rs`, `gpu_faults.rs`) stay binaries of their own, run again on the fake
//! CUDA driver with settings that must not reach these. Run one module with
//! `cargo test -p accelsql-engine --test integration -- visibility::`.

mod catalog_processes;
mod deep_statements;
mod exasol;
mod files;
mod gpu_sharing;
mod helpers;
mod kill_session;
mod memory;
mod placement;
mod privileges;
mod restricted;
mod scripts;
mod set_udfs;
mod statement_timeout;
mod tables;
mod visibility;
