//! The GPU verification kit's multi-call binary (`scripts/gpu-verify/pack.sh`): one DataFusion
//! binary travels to the device instead of three. Run through a link named
//! `accelsql-benchmarks` it is the benchmark harness, through `accelsql-slt` the .slt runner,
//! under any other name (`accelsql`) the accelsql command. It sits on top of all three, so
//! that the command itself depends on neither the harness nor the test runner.

use std::process::ExitCode;

fn main() -> ExitCode {
    let name = std::env::args_os()
        .next()
        .and_then(|argv0| {
            std::path::Path::new(&argv0)
                .file_name()
                .and_then(|n| n.to_str())
                .map(str::to_string)
        })
        .unwrap_or_default();
    // The harness's cold-start child runs as the harness's own executable, which is this one.
    let cold_child =
        std::env::var_os(accelsql_benchmarks::suites::python_udf::COLD_CHILD_ENV).is_some();
    match name.as_str() {
        _ if cold_child => accelsql_benchmarks::cli::main(),
        "accelsql-benchmarks" => accelsql_benchmarks::cli::main(),
        "accelsql-slt" => accelsql_sql_tests::slt_cli::main(),
        _ => accelsql_cli::main(),
    }
}
