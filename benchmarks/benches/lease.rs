//! Lease queue latency: the harness's `scheduler` suite (uncontended acquire + release, and the
//! hand-off to the next of 1…256 waiters, beside tokio's FIFO Mutex).
//!
//! Run: `cargo bench -p accelsql-benchmarks --bench lease` (`ACCELSQL_BENCH_SCALE` scales the
//! sample counts). The same as `cargo run --release -p accelsql-benchmarks -- scheduler`, which
//! also writes the report.

use std::process::ExitCode;

use accelsql_benchmarks::suites::{Suite, run_standalone};

fn main() -> ExitCode {
    match run_standalone(Suite::Scheduler) {
        Ok(_) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
