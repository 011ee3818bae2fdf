//! `accelsql-slt`: runs sqllogictest files against accelsql and reports each file and a summary.

fn main() -> std::process::ExitCode {
    accelsql_sql_tests::slt_cli::main()
}
