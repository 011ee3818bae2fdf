//! The NVML backend: real devices through `nvml-wrapper`, loaded at run time.

use std::ffi::OsStr;
use std::path::Path;

use nvml_wrapper::Nvml;
use nvml_wrapper::enum_wrappers::device::TemperatureSensor;

use crate::inventory::{DeviceBackend, ProcessMemory};
use crate::{DeviceInfo, Result, SchedulerError};

/// Library names tried in order when no path is configured: the driver ships the `.so.1`; the
/// unversioned name exists only where development packages are installed.
const LIBRARY_NAMES: [&str; 2] = ["libnvidia-ml.so.1", "libnvidia-ml.so"];

/// Devices reported by NVML.
///
/// Opening never fails: with no driver or no library the inventory has zero devices and
/// [`DeviceBackend::note`] says why (this is how accelsql runs on machines without GPUs).
#[derive(Debug)]
pub struct NvmlInventory {
    nvml: Option<Nvml>,
    note: Option<String>,
}

impl NvmlInventory {
    /// Loads NVML from `library`, or from the driver's usual library names.
    pub fn open(library: Option<&Path>) -> Self {
        let candidates: Vec<&OsStr> = match library {
            Some(path) => vec![path.as_os_str()],
            None => LIBRARY_NAMES.iter().map(OsStr::new).collect(),
        };
        let mut reasons = Vec::new();
        for candidate in candidates {
            match Nvml::builder().lib_path(candidate).init() {
                Ok(nvml) => {
                    return Self {
                        nvml: Some(nvml),
                        note: None,
                    };
                }
                Err(e) => reasons.push(format!("{}: {e}", candidate.to_string_lossy())),
            }
        }
        let note = format!(
            "no NVIDIA driver found, so no GPUs (NVML could not be loaded: {})",
            reasons.join("; ")
        );
        log::info!("{note}");
        Self {
            nvml: None,
            note: Some(note),
        }
    }

    fn read_device(nvml: &Nvml, index: u32) -> std::result::Result<DeviceInfo, String> {
        let device = nvml.device_by_index(index).map_err(|e| e.to_string())?;
        let uuid = device.uuid().map_err(|e| format!("uuid: {e}"))?;
        let name = device.name().map_err(|e| format!("name: {e}"))?;
        let memory = device.memory_info().map_err(|e| format!("memory: {e}"))?;
        let utilization = device.utilization_rates().ok();
        Ok(DeviceInfo {
            index,
            uuid,
            name,
            pci_bus_id: device.pci_info().ok().map(|p| p.bus_id),
            memory_total: memory.total,
            memory_free: memory.free,
            utilization: utilization.as_ref().map(|u| u.gpu),
            memory_utilization: utilization.as_ref().map(|u| u.memory),
            processes: device.running_compute_processes_count().ok().or_else(|| {
                device
                    .running_compute_processes()
                    .ok()
                    .map(|p| p.len() as u32)
            }),
            temperature_c: device.temperature(TemperatureSensor::Gpu).ok(),
            power_w: device.power_usage().ok().map(|mw| f64::from(mw) / 1000.0),
            simulated: false,
        })
    }
}

impl DeviceBackend for NvmlInventory {
    fn name(&self) -> &'static str {
        "nvml"
    }

    fn probe(&self) -> Result<Vec<DeviceInfo>> {
        let Some(nvml) = &self.nvml else {
            return Ok(Vec::new());
        };
        let count = nvml.device_count().map_err(|e| SchedulerError::Inventory {
            message: format!("NVML could not count devices: {e}"),
        })?;
        let mut devices = Vec::with_capacity(count as usize);
        for index in 0..count {
            match Self::read_device(nvml, index) {
                Ok(d) => devices.push(d),
                // A device NVML cannot describe (lost, or no permission) is left out, not fatal.
                Err(e) => log::warn!("GPU {index} left out of the inventory: {e}"),
            }
        }
        Ok(devices)
    }

    fn note(&self) -> Option<String> {
        self.note.clone()
    }

    fn process_memory(&self, uuid: &str) -> ProcessMemory {
        use nvml_wrapper::enums::device::UsedGpuMemory;
        let Some(nvml) = &self.nvml else {
            return ProcessMemory::Unsupported("no NVML".into());
        };
        let processes = nvml
            .device_by_uuid(uuid)
            .and_then(|d| d.running_compute_processes());
        match processes {
            Ok(list) => {
                let mut out = Vec::with_capacity(list.len());
                for p in list {
                    match p.used_gpu_memory {
                        UsedGpuMemory::Used(bytes) => out.push((p.pid, bytes)),
                        // Containers without the host's PID namespace see no figures.
                        UsedGpuMemory::Unavailable => {
                            return ProcessMemory::Unsupported(
                                "NVML reports no per-process memory here (a container \
                                 without the host's PID namespace?)"
                                    .into(),
                            );
                        }
                    }
                }
                ProcessMemory::Supported(out)
            }
            Err(e) => ProcessMemory::Unsupported(format!("NVML: {e}")),
        }
    }

    fn driver_version(&self) -> Option<String> {
        let nvml = self.nvml.as_ref()?;
        let driver = nvml.sys_driver_version().ok()?;
        match nvml.sys_cuda_driver_version() {
            Ok(v) => Some(format!("{driver} (CUDA {}.{})", v / 1000, (v % 1000) / 10)),
            Err(_) => Some(driver),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_library_means_zero_devices_and_a_note() {
        let inv = NvmlInventory::open(Some(Path::new("/nonexistent/libnvidia-ml.so.1")));
        assert_eq!(inv.probe().unwrap(), Vec::new());
        let note = inv.note().unwrap();
        assert!(note.contains("no NVIDIA driver"), "{note}");
        assert!(note.contains("/nonexistent/libnvidia-ml.so.1"), "{note}");
        assert_eq!(inv.driver_version(), None);
    }

    #[test]
    fn opening_the_default_library_never_panics() {
        // On a machine without a driver this is zero devices; with one, real devices.
        let inv = NvmlInventory::open(None);
        let devices = inv.probe().unwrap();
        if devices.is_empty() {
            assert!(inv.note().is_some());
        }
    }
}
