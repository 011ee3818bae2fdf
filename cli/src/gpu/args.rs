//! The options the `accelsql gpu` subcommands share: device filters, the lock directory, timeouts.

use std::path::PathBuf;

use accelsql_gpu_scheduler::units::{parse_bytes, parse_duration};
use accelsql_gpu_scheduler::{DeviceFilter, DeviceId, SchedulerConfig, invalid_value_err};
use clap::Args;

use crate::error::CliError;

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
    pub(super) fn to_filter(&self) -> Result<DeviceFilter, CliError> {
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
    pub(super) fn resolve(&self, config: &SchedulerConfig) -> PathBuf {
        self.lock_dir
            .clone()
            .or_else(|| config.device_lock_dir.clone())
            .unwrap_or_else(accelsql_gpu_scheduler::default_lock_dir)
    }
}

/// Parses `--timeout`'s duration (e.g. 30s, 10min) for clap.
pub(super) fn parse_timeout(text: &str) -> Result<std::time::Duration, String> {
    parse_duration(text).map_err(|e| e.to_string())
}
