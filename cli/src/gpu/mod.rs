//! `accelsql gpu …`: the inventory as a table or JSON, and running a command on selected GPUs.

mod run;
mod status;

use std::path::PathBuf;
use std::process::ExitCode;

use accelsql_gpu_scheduler::units::{parse_bytes, parse_duration};
use accelsql_gpu_scheduler::{DeviceFilter, DeviceId, SchedulerConfig, invalid_value_err};
use clap::{Args, Subcommand};

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

/// Device selection options shared by the subcommands that choose GPUs.
#[derive(Debug, Clone, Args)]
pub(crate) struct FilterArgs {
    /// Only GPUs whose name contains this text (case-insensitive), e.g. H100.
    #[arg(long, value_name = "TEXT")]
    name: Option<String>,
    /// Only these GPUs: comma-separated indices or UUID prefixes.
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    ids: Vec<String>,
    /// Only GPUs with at least this much free memory, e.g. 4GiB.
    #[arg(long, value_name = "SIZE")]
    min_free_mem: Option<String>,
    /// Only GPUs at or under this utilization, percent.
    #[arg(long, value_name = "PERCENT", value_parser = clap::value_parser!(u32).range(0..=100))]
    max_util: Option<u32>,
    /// Only GPUs at or under this memory-controller utilization, percent.
    #[arg(long, value_name = "PERCENT", value_parser = clap::value_parser!(u32).range(0..=100))]
    max_mem_util: Option<u32>,
    /// Only GPUs running at most this many compute processes.
    #[arg(long, value_name = "N")]
    max_procs: Option<u32>,
}

impl FilterArgs {
    fn to_filter(&self) -> Result<DeviceFilter, CliError> {
        let mut filter = DeviceFilter::new();
        if let Some(name) = &self.name {
            filter = filter.name_contains(name);
        }
        if !self.ids.is_empty() {
            let ids = self
                .ids
                .iter()
                .map(|text| {
                    DeviceId::parse(text).ok_or_else(|| {
                        invalid_value_err!(
                            "--ids",
                            "{text:?} is neither a GPU index nor a UUID prefix"
                        )
                    })
                })
                .collect::<Result<Vec<_>, _>>()?;
            filter = filter.ids(ids);
        }
        if let Some(size) = &self.min_free_mem {
            filter = filter.min_free_memory(parse_bytes(size)?);
        }
        if let Some(p) = self.max_util {
            filter = filter.max_utilization(p);
        }
        if let Some(p) = self.max_mem_util {
            filter = filter.max_memory_utilization(p);
        }
        if let Some(n) = self.max_procs {
            filter = filter.max_processes(n);
        }
        Ok(filter)
    }
}

/// Lock directory option shared by the subcommands.
#[derive(Debug, Clone, Args)]
pub(crate) struct LockDirArg {
    /// Directory of the cross-process GPU lock files [default: $ACCELSQL_DEVICE_LOCK_DIR, else
    /// <tmp>/accelsql-device-locks]. Every process that shares GPUs must use the same one.
    #[arg(long, value_name = "DIR")]
    lock_dir: Option<PathBuf>,
}

impl LockDirArg {
    fn resolve(&self, config: &SchedulerConfig) -> PathBuf {
        self.lock_dir
            .clone()
            .or_else(|| config.device_lock_dir.clone())
            .unwrap_or_else(accelsql_gpu_scheduler::default_lock_dir)
    }
}

fn parse_timeout(text: &str) -> Result<std::time::Duration, String> {
    parse_duration(text).map_err(|e| e.to_string())
}
