//! `accelsql gpu …`: the inventory as a table or JSON, and running a command on selected GPUs.

mod args;
mod run;
pub(crate) mod sharing;
mod status;

use std::process::ExitCode;

use accelsql_gpu_scheduler::SchedulerConfig;
use clap::Subcommand;

use crate::error::CliError;

/// `accelsql gpu` subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum GpuCommand {
    /// Print the GPUs this process sees (NVML, or ACCELSQL_SIMULATED_GPUS), as a table or JSON.
    Status(status::StatusArgs),
    /// Select free GPUs, lock them for the command's whole life, and run it with
    /// CUDA_VISIBLE_DEVICES naming them. Exit code: the command's (128+N if killed by signal N);
    /// 125 when no GPU could be had, 126/127 when the command cannot be run / is not found.
    Run(run::RunArgs),
}

/// Runs one `accelsql gpu` subcommand.
pub(crate) fn run(command: GpuCommand) -> Result<ExitCode, CliError> {
    let config = SchedulerConfig::from_env()?;
    match command {
        GpuCommand::Status(args) => status::status(&config, &args).map(|()| ExitCode::SUCCESS),
        GpuCommand::Run(args) => run::run(&config, args),
    }
}
