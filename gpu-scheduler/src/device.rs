//! What the scheduler knows about one GPU: identity, memory and live readings.

use serde::Serialize;

use crate::units::format_bytes;

/// The name the test suite's fake CUDA driver (`scripts/fake-cuda`) gives its devices: they
/// open and run kernels, on the host, so they are GPUs to the engine but never to a benchmark.
pub const FAKE_CUDA_DEVICE_NAME: &str = "accelsql fake CUDA device";

/// One GPU as the inventory reports it.
///
/// Readings NVML could not provide (or a simulated device does not model) are `None`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DeviceInfo {
    /// NVML index: the device's position in PCI bus order on this server.
    pub index: u32,
    /// Stable identity, e.g. `GPU-6f3c…`; lock files and pinning use it.
    pub uuid: String,
    /// Product name, e.g. `NVIDIA H100 80GB HBM3`.
    pub name: String,
    /// PCI bus id, e.g. `00000000:19:00.0`.
    pub pci_bus_id: Option<String>,
    /// Installed device memory in bytes.
    pub memory_total: u64,
    /// Unallocated device memory in bytes.
    pub memory_free: u64,
    /// GPU (SM) utilization over the last sample period, percent.
    pub utilization: Option<u32>,
    /// Memory-controller utilization over the last sample period, percent.
    pub memory_utilization: Option<u32>,
    /// Number of compute processes running on the device.
    pub processes: Option<u32>,
    /// Die temperature, degrees Celsius.
    pub temperature_c: Option<u32>,
    /// Power draw in watts.
    pub power_w: Option<f64>,
    /// `true` for devices of the simulated inventory (`ACCELSQL_SIMULATED_GPUS`).
    pub simulated: bool,
}

// `DeviceInfo::simulated` lives with the simulated inventory (`inventory/simulated.rs`), which
// owns the simulated identities and readings.
impl DeviceInfo {
    /// Whether this is GPU hardware: neither simulated nor a device of the fake CUDA driver
    /// ([`FAKE_CUDA_DEVICE_NAME`]). Only hardware yields GPU figures in benchmarks.
    pub fn is_hardware(&self) -> bool {
        !self.simulated && self.name != FAKE_CUDA_DEVICE_NAME
    }

    /// Used device memory in bytes.
    pub fn memory_used(&self) -> u64 {
        self.memory_total.saturating_sub(self.memory_free)
    }

    /// Short human label, e.g. `GPU 1 (NVIDIA H100, GPU-6f3c…)`.
    pub fn label(&self) -> String {
        format!("GPU {} ({}, {})", self.index, self.name, self.uuid)
    }

    /// One-line summary of memory, e.g. `3.0 GiB free of 80.0 GiB`.
    pub fn memory_summary(&self) -> String {
        format!(
            "{} free of {}",
            format_bytes(self.memory_free),
            format_bytes(self.memory_total)
        )
    }
}

/// A way to name a device: by NVML index or by UUID (a unique prefix such as `GPU-6f3c` is enough).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeviceId {
    /// NVML index.
    Index(u32),
    /// Full UUID or unique UUID prefix, with or without the `GPU-` prefix.
    Uuid(String),
}

impl DeviceId {
    /// Parses `3`, `GPU-6f3c…` or `6f3c…`.
    pub fn parse(text: &str) -> Option<Self> {
        let text = text.trim();
        if text.is_empty() {
            return None;
        }
        if let Ok(i) = text.parse::<u32>() {
            return Some(Self::Index(i));
        }
        let hex = text.strip_prefix("GPU-").unwrap_or(text);
        let starts_hex = hex.chars().next().is_some_and(|c| c.is_ascii_hexdigit());
        if starts_hex && hex.chars().all(|c| c.is_ascii_hexdigit() || c == '-') {
            return Some(Self::Uuid(text.to_string()));
        }
        None
    }

    /// Whether this id names `device`.
    pub fn matches(&self, device: &DeviceInfo) -> bool {
        match self {
            Self::Index(i) => device.index == *i,
            Self::Uuid(u) => {
                let want = u.strip_prefix("GPU-").unwrap_or(u).to_ascii_lowercase();
                let have = device.uuid.strip_prefix("GPU-").unwrap_or(&device.uuid);
                have.to_ascii_lowercase().starts_with(&want)
            }
        }
    }
}

impl std::fmt::Display for DeviceId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Index(i) => write!(f, "{i}"),
            Self::Uuid(u) => write!(f, "{u}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inventory::simulated_device;

    #[test]
    fn ids_parse_and_match_by_index_and_uuid_prefix() {
        let d = simulated_device(1);
        assert_eq!(DeviceId::parse(" 1 "), Some(DeviceId::Index(1)));
        assert!(DeviceId::parse("1").unwrap().matches(&d));
        assert!(!DeviceId::parse("0").unwrap().matches(&d));
        let prefix = &d.uuid[..12];
        assert!(DeviceId::parse(prefix).unwrap().matches(&d));
        let bare = &d.uuid[4..14].to_ascii_uppercase();
        assert!(DeviceId::parse(bare).unwrap().matches(&d));
        assert_eq!(DeviceId::parse("gpu zero"), None);
        assert_eq!(DeviceId::parse(""), None);
        assert_eq!(DeviceId::parse("-2"), None);
    }

    #[test]
    fn only_real_devices_are_hardware() {
        let real = DeviceInfo {
            simulated: false,
            name: "NVIDIA H100 80GB HBM3".into(),
            ..simulated_device(0)
        };
        assert!(real.is_hardware());
        assert!(!simulated_device(0).is_hardware());
        let fake = DeviceInfo {
            name: FAKE_CUDA_DEVICE_NAME.into(),
            ..real
        };
        assert!(!fake.is_hardware());
    }

    #[test]
    fn memory_helpers() {
        let mut d = simulated_device(0);
        d.memory_free = d.memory_total / 4;
        assert_eq!(d.memory_used(), d.memory_total / 4 * 3);
        assert!(d.memory_summary().contains("free of"));
    }
}
