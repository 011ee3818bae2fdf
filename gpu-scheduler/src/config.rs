//! Scheduler configuration: one typed struct, read from the environment or built in code.

use std::path::PathBuf;
use std::time::Duration;

use crate::sharing::{DEFAULT_HEADROOM_PERCENT, GpuSharing};
use crate::{Result, invalid_value_err, units::parse_duration};

/// Environment variable: use N simulated devices instead of NVML.
pub const ENV_SIMULATED_GPUS: &str = "ACCELSQL_SIMULATED_GPUS";
/// Environment variable: directory of cross-process device lock files (opt-in).
pub const ENV_DEVICE_LOCK_DIR: &str = "ACCELSQL_DEVICE_LOCK_DIR";
/// Environment variable: path of the NVML library, when it is not where the driver puts it.
pub const ENV_NVML_LIBRARY: &str = "ACCELSQL_NVML_LIBRARY";
/// Environment variable: default bound on waiting for the node lease (e.g. `30s`).
pub const ENV_GPU_WAIT_TIMEOUT: &str = "ACCELSQL_GPU_WAIT_TIMEOUT";
/// Environment variable: how the node's lease queue shares its GPUs (`exclusive` or `memory`).
pub const ENV_GPU_SHARING: &str = "ACCELSQL_GPU_SHARING";
/// Environment variable: the share of each device's memory memory-shared leases leave free
/// (`10%` or `10`).
pub const ENV_GPU_MEMORY_HEADROOM: &str = "ACCELSQL_GPU_MEMORY_HEADROOM";
/// Environment variable that limits and orders the visible devices, as for CUDA.
pub const ENV_CUDA_VISIBLE_DEVICES: &str = "CUDA_VISIBLE_DEVICES";

/// How the scheduler finds devices and guards them.
///
/// ```
/// use accelsql_gpu_scheduler::SchedulerConfig;
///
/// let config = SchedulerConfig::default().with_simulated_gpus(2);
/// assert_eq!(config.simulated_gpus, Some(2));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SchedulerConfig {
    /// Simulate this many devices instead of asking NVML (`ACCELSQL_SIMULATED_GPUS`).
    pub simulated_gpus: Option<usize>,
    /// Hold one lock file per device here while a lease is held (`ACCELSQL_DEVICE_LOCK_DIR`).
    pub device_lock_dir: Option<PathBuf>,
    /// Path of the NVML library (`ACCELSQL_NVML_LIBRARY`).
    pub nvml_library: Option<PathBuf>,
    /// `CUDA_VISIBLE_DEVICES` as given to this process.
    pub visible_devices: Option<String>,
    /// Default bound on waiting for the node lease; `None` waits for ever (`ACCELSQL_GPU_WAIT_TIMEOUT`).
    pub lease_wait_timeout: Option<Duration>,
    /// How the lease queue shares the GPUs (`ACCELSQL_GPU_SHARING`): `exclusive` (the default,
    /// one statement owns every device) or `memory` (see [`crate::sharing`]).
    pub gpu_sharing: GpuSharing,
    /// Under `memory` sharing, the percentage of each device's memory left unreserved
    /// (`ACCELSQL_GPU_MEMORY_HEADROOM`); `None`: [`DEFAULT_HEADROOM_PERCENT`].
    pub memory_headroom_percent: Option<u32>,
}

/// Parses a headroom: `10%` or `10`, from 0 to 100 percent.
pub fn parse_headroom(text: &str) -> Result<u32> {
    let t = text.trim();
    t.strip_suffix('%')
        .unwrap_or(t)
        .trim()
        .parse::<u32>()
        .ok()
        .filter(|p| *p <= 100)
        .ok_or_else(|| {
            invalid_value_err!(
                "GPU memory headroom",
                "{text:?} is not a percentage from 0 to 100; write e.g. 10%"
            )
        })
}

impl SchedulerConfig {
    /// Reads the `ACCELSQL_*` variables and `CUDA_VISIBLE_DEVICES`. A malformed value is an error
    /// that names the variable; unset or empty variables keep the defaults (an empty
    /// `CUDA_VISIBLE_DEVICES` is kept: it hides every device, as for CUDA).
    pub fn from_env() -> Result<Self> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// Like [`SchedulerConfig::from_env`], reading variables through `lookup` (for tests).
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self> {
        let non_empty = |name: &str| lookup(name).filter(|v| !v.trim().is_empty());
        let simulated_gpus = non_empty(ENV_SIMULATED_GPUS)
            .map(|v| {
                v.trim().parse::<usize>().map_err(|_| {
                    invalid_value_err!(
                        ENV_SIMULATED_GPUS,
                        "{v:?} is not a device count; write e.g. {ENV_SIMULATED_GPUS}=2"
                    )
                })
            })
            .transpose()?;
        let lease_wait_timeout = non_empty(ENV_GPU_WAIT_TIMEOUT)
            .map(|v| {
                parse_duration(&v).map_err(|e| invalid_value_err!(ENV_GPU_WAIT_TIMEOUT, "{e}"))
            })
            .transpose()?;
        let gpu_sharing = non_empty(ENV_GPU_SHARING)
            .map(|v| GpuSharing::parse(&v).map_err(|e| invalid_value_err!(ENV_GPU_SHARING, "{e}")))
            .transpose()?
            .unwrap_or_default();
        let memory_headroom_percent = non_empty(ENV_GPU_MEMORY_HEADROOM)
            .map(|v| {
                parse_headroom(&v).map_err(|e| invalid_value_err!(ENV_GPU_MEMORY_HEADROOM, "{e}"))
            })
            .transpose()?;
        Ok(Self {
            gpu_sharing,
            memory_headroom_percent,
            simulated_gpus,
            device_lock_dir: non_empty(ENV_DEVICE_LOCK_DIR).map(PathBuf::from),
            nvml_library: non_empty(ENV_NVML_LIBRARY).map(PathBuf::from),
            visible_devices: lookup(ENV_CUDA_VISIBLE_DEVICES),
            lease_wait_timeout,
        })
    }

    /// Simulate `n` devices.
    pub fn with_simulated_gpus(mut self, n: usize) -> Self {
        self.simulated_gpus = Some(n);
        self
    }

    /// Hold cross-process device locks in `dir`.
    pub fn with_device_lock_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.device_lock_dir = Some(dir.into());
        self
    }

    /// Limit and order devices as `CUDA_VISIBLE_DEVICES=value` would.
    pub fn with_visible_devices(mut self, value: impl Into<String>) -> Self {
        self.visible_devices = Some(value.into());
        self
    }

    /// Share the GPUs as `sharing` says, leaving `headroom_percent` of each device's memory
    /// unreserved under [`GpuSharing::Memory`] (`None`: [`DEFAULT_HEADROOM_PERCENT`]).
    pub fn with_gpu_sharing(mut self, sharing: GpuSharing, headroom_percent: Option<u32>) -> Self {
        self.gpu_sharing = sharing;
        self.memory_headroom_percent = headroom_percent;
        self
    }

    /// The headroom in effect: the configured one, else [`DEFAULT_HEADROOM_PERCENT`].
    pub fn headroom_percent(&self) -> u32 {
        self.memory_headroom_percent
            .unwrap_or(DEFAULT_HEADROOM_PERCENT)
    }

    /// Bound waiting for the node lease.
    pub fn with_lease_wait_timeout(mut self, timeout: Duration) -> Self {
        self.lease_wait_timeout = Some(timeout);
        self
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn lookup(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |name| map.get(name).cloned()
    }

    #[test]
    fn reads_every_variable() {
        let c = SchedulerConfig::from_lookup(lookup(&[
            (ENV_SIMULATED_GPUS, "4"),
            (ENV_DEVICE_LOCK_DIR, "/tmp/locks"),
            (ENV_GPU_WAIT_TIMEOUT, "30s"),
            (ENV_CUDA_VISIBLE_DEVICES, "1,0"),
            (ENV_GPU_SHARING, "memory"),
            (ENV_GPU_MEMORY_HEADROOM, "15%"),
        ]))
        .unwrap();
        assert_eq!(c.gpu_sharing, GpuSharing::Memory);
        assert_eq!(c.headroom_percent(), 15);
        assert_eq!(SchedulerConfig::default().headroom_percent(), 10);
        assert_eq!(c.simulated_gpus, Some(4));
        assert_eq!(c.device_lock_dir, Some(PathBuf::from("/tmp/locks")));
        assert_eq!(c.lease_wait_timeout, Some(Duration::from_secs(30)));
        assert_eq!(c.visible_devices.as_deref(), Some("1,0"));
    }

    #[test]
    fn empty_variables_keep_defaults_but_empty_visible_devices_is_kept() {
        let c = SchedulerConfig::from_lookup(lookup(&[
            (ENV_SIMULATED_GPUS, ""),
            (ENV_CUDA_VISIBLE_DEVICES, ""),
        ]))
        .unwrap();
        assert_eq!(c.simulated_gpus, None);
        assert_eq!(c.visible_devices.as_deref(), Some(""));
    }

    #[test]
    fn malformed_values_name_the_variable() {
        let e = SchedulerConfig::from_lookup(lookup(&[(ENV_SIMULATED_GPUS, "two")])).unwrap_err();
        assert!(e.to_string().contains(ENV_SIMULATED_GPUS), "{e}");
        let e =
            SchedulerConfig::from_lookup(lookup(&[(ENV_GPU_WAIT_TIMEOUT, "later")])).unwrap_err();
        assert!(e.to_string().contains(ENV_GPU_WAIT_TIMEOUT), "{e}");
        for (name, bad) in [
            (ENV_GPU_SHARING, "shared"),
            (ENV_GPU_MEMORY_HEADROOM, "120%"),
        ] {
            let e = SchedulerConfig::from_lookup(lookup(&[(name, bad)])).unwrap_err();
            assert!(e.to_string().contains(name), "{e}");
        }
    }
}
