//! The `accelsql` binary: the command of [`accelsql_cli`].

fn main() -> std::process::ExitCode {
    accelsql_cli::main()
}
