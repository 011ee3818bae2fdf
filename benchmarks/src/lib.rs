//! accelsql's benchmark harness: suites that measure accelsql beside its peers (plain
//! DataFusion, DuckDB, accelsql on CPU and on GPU) on the same generated data in the same run,
//! and a report (`results.json`, `REPORT.md`, PNG plots) of what they found.
//!
//! The binary `accelsql-benchmarks` (`src/main.rs`) is the front end:
//! `cargo run --release -p accelsql-benchmarks -- <suite|all> [--scale S] [--out DIR]`.

pub mod cli;
pub mod data;
pub mod error;
mod latency;
pub mod machine;
pub mod measure;
pub mod peers;
pub mod progress;
pub mod report;
pub mod results;
pub mod suites;

pub use latency::{Summary, micros, print_table};
