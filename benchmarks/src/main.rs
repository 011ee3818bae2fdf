//! `accelsql-benchmarks`: runs benchmark suites beside their peers and writes the report.

fn main() -> std::process::ExitCode {
    accelsql_benchmarks::cli::main()
}
