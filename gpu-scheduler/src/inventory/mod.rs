//! The device inventory: one trait, an NVML and a simulated backend, and the visible-device view.

mod backend;
mod nvml;
mod simulated;

use std::sync::Arc;

use serde::Serialize;

pub use self::backend::{DeviceBackend, ProcessMemory};
pub use self::nvml::NvmlInventory;
#[cfg(test)]
pub(crate) use self::simulated::simulated_device;
pub use self::simulated::{SIMULATED_MEMORY, SimulatedInventory};

use crate::{DeviceInfo, Result, SchedulerConfig, VisibleDevices};

/// What an inventory shows at one moment: backend, driver, devices, and a note when there are none.
#[derive(Debug, Clone, Serialize)]
pub struct InventoryReport {
    /// Backend name (`nvml`, `simulated`).
    pub backend: &'static str,
    /// Driver version, where known.
    pub driver_version: Option<String>,
    /// `CUDA_VISIBLE_DEVICES` as applied, if it was set.
    pub visible_devices: Option<String>,
    /// Why there are no devices, where known.
    pub note: Option<String>,
    /// The visible devices, in visible order.
    pub devices: Vec<DeviceInfo>,
}

/// The devices this process may use: a backend, limited and ordered by `CUDA_VISIBLE_DEVICES`.
///
/// ```
/// use accelsql_gpu_scheduler::Inventory;
///
/// let inventory = Inventory::simulated(2);
/// let devices = inventory.devices().unwrap();
/// assert_eq!(devices.len(), 2);
/// assert!(devices[0].simulated);
/// ```
#[derive(Debug, Clone)]
pub struct Inventory {
    backend: Arc<dyn DeviceBackend>,
    visible: Option<VisibleDevices>,
}

impl Inventory {
    /// An inventory over any backend, seeing every device it reports.
    pub fn new(backend: Arc<dyn DeviceBackend>) -> Self {
        Self {
            backend,
            visible: None,
        }
    }

    /// `n` simulated devices (see [`SimulatedInventory`]).
    pub fn simulated(n: usize) -> Self {
        Self::new(Arc::new(SimulatedInventory::new(n)))
    }

    /// The inventory `config` describes: simulated devices when `simulated_gpus` is set, else NVML
    /// (zero devices, with a note, when the driver or library is absent), limited by
    /// `visible_devices`.
    pub fn from_config(config: &SchedulerConfig) -> Result<Self> {
        let backend: Arc<dyn DeviceBackend> = match config.simulated_gpus {
            Some(n) => Arc::new(SimulatedInventory::new(n)),
            None => Arc::new(NvmlInventory::open(config.nvml_library.as_deref())),
        };
        let visible = config
            .visible_devices
            .as_deref()
            .map(VisibleDevices::parse)
            .transpose()?;
        Ok(Self { backend, visible })
    }

    /// The inventory the environment describes (see [`SchedulerConfig::from_env`]).
    pub fn from_env() -> Result<Self> {
        Self::from_config(&SchedulerConfig::from_env()?)
    }

    /// Limits and orders the devices as `CUDA_VISIBLE_DEVICES` would.
    pub fn with_visible_devices(mut self, visible: VisibleDevices) -> Self {
        self.visible = Some(visible);
        self
    }

    /// The backend's name.
    pub fn backend_name(&self) -> &'static str {
        self.backend.name()
    }

    /// The visible devices with fresh readings.
    pub fn devices(&self) -> Result<Vec<DeviceInfo>> {
        self.visible_of(self.backend.probe()?)
    }

    fn visible_of(&self, all: Vec<DeviceInfo>) -> Result<Vec<DeviceInfo>> {
        match &self.visible {
            // With no devices at all there is nothing to limit: a CUDA_VISIBLE_DEVICES exported
            // on a machine without a driver must not stop accelsql from starting on the CPU.
            Some(v) if !all.is_empty() => v.apply(all),
            _ => Ok(all),
        }
    }

    /// The device memory each process uses on device `uuid` now, where the backend can tell
    /// (see [`DeviceBackend::process_memory`]).
    pub fn process_memory(&self, uuid: &str) -> ProcessMemory {
        self.backend.process_memory(uuid)
    }

    /// Devices plus backend, driver and note, for `accelsql gpu status` and system tables.
    pub fn report(&self) -> Result<InventoryReport> {
        let all = self.backend.probe()?;
        let present = all.len();
        let devices = self.visible_of(all)?;
        let note = match (&self.visible, present, devices.len()) {
            (_, 0, _) => self.backend.note(),
            (Some(v), _, 0) => Some(format!(
                "CUDA_VISIBLE_DEVICES=\"{v}\" hides every device ({present} present)"
            )),
            _ => None,
        };
        Ok(InventoryReport {
            backend: self.backend.name(),
            driver_version: self.backend.driver_version(),
            visible_devices: self.visible.as_ref().map(ToString::to_string),
            note,
            devices,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn from_config_picks_simulated_and_applies_visible_devices() {
        let config = SchedulerConfig {
            simulated_gpus: Some(3),
            visible_devices: Some("2,0".into()),
            ..SchedulerConfig::default()
        };
        let inv = Inventory::from_config(&config).unwrap();
        assert_eq!(inv.backend_name(), "simulated");
        let idx: Vec<u32> = inv.devices().unwrap().iter().map(|d| d.index).collect();
        assert_eq!(idx, vec![2, 0]);
        let report = inv.report().unwrap();
        assert_eq!(report.visible_devices.as_deref(), Some("2,0"));
        assert!(report.note.is_none());
    }

    #[test]
    fn bad_visible_devices_fail_at_start_with_a_code() {
        let config = SchedulerConfig {
            simulated_gpus: Some(1),
            visible_devices: Some("zero".into()),
            ..SchedulerConfig::default()
        };
        let e = Inventory::from_config(&config).unwrap_err();
        assert_eq!(e.code(), "22G01");
        assert!(e.to_string().contains("CUDA_VISIBLE_DEVICES"), "{e}");
    }

    #[test]
    fn visible_devices_are_ignored_when_there_are_no_devices() {
        let inv =
            Inventory::simulated(0).with_visible_devices(VisibleDevices::parse("0,1").unwrap());
        assert!(inv.devices().unwrap().is_empty());
        // With devices present, the same value is checked.
        let inv =
            Inventory::simulated(1).with_visible_devices(VisibleDevices::parse("0,1").unwrap());
        assert_eq!(inv.devices().unwrap_err().code(), "22G01");
    }

    #[test]
    fn empty_visible_devices_hide_everything_and_say_so() {
        let inv = Inventory::simulated(2).with_visible_devices(VisibleDevices::parse("").unwrap());
        let report = inv.report().unwrap();
        assert!(report.devices.is_empty());
        assert!(report.note.unwrap().contains("hides every device"));
    }
}
