//! UDF overhead: the harness's `udf-overhead` suite (the same Rust UDF over 10M rows through
//! plain DataFusion and through accelsql, `GpuNvidia|None` placed on the CPU; goal: within 5%).
//!
//! Run: `cargo bench -p accelsql-benchmarks --bench udf_overhead` (`ACCELSQL_BENCH_SCALE`
//! scales the rows). The same as `cargo run --release -p accelsql-benchmarks -- udf-overhead`,
//! which also writes the report.

use std::process::ExitCode;

use accelsql_benchmarks::suites::{Suite, run_standalone};

fn main() -> ExitCode {
    match run_standalone(Suite::UdfOverhead) {
        Ok(_) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
