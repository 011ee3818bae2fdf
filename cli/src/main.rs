//! The `accelsql` command: GPU status and `gpu run` today; the SQL shell joins it later.

mod error;
mod gpu;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// accelsql: an embedded SQL engine whose user-defined functions run on NVIDIA GPUs.
#[derive(Debug, Parser)]
#[command(name = "accelsql", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Inspect and hand out this server's GPUs.
    #[command(subcommand)]
    Gpu(gpu::GpuCommand),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let outcome = match cli.command {
        Command::Gpu(command) => gpu::run(command),
    };
    match outcome {
        Ok(code) => code,
        Err(e) => {
            eprintln!("accelsql: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    #[test]
    fn the_command_line_definition_is_consistent() {
        Cli::command().debug_assert();
    }
}
