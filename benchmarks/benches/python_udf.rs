//! Python script UDFs vs DuckDB's Python UDFs: the harness's `python-udf` suite (per-row
//! `run(ctx)`, vectorized `run_batch(ctx)`, a SET script over 1000 groups, worker start), beside
//! DuckDB's `create_function` in native and arrow mode, same function, rows and interpreter.
//!
//! Run: `cargo bench -p accelsql-benchmarks --bench python_udf` (`ACCELSQL_BENCH_SCALE` scales
//! the sizes). The same as `cargo run --release -p accelsql-benchmarks -- python-udf`, which also
//! writes the report. The virtualenv `target/bench-python-env` (duckdb, pyarrow, numpy) is made or
//! reused; without it DuckDB's figures say "unavailable" and accelsql's are still measured.

use std::process::ExitCode;

use accelsql_benchmarks::suites::{Suite, run_standalone};

fn main() -> ExitCode {
    match run_standalone(Suite::PythonUdf) {
        Ok(_) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
