//! The trait every device source implements: what the inventory asks of NVML or a simulation.

use crate::{DeviceInfo, Result};

/// Device memory of the processes running on one GPU, as the backend can tell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProcessMemory {
    /// Each compute process's pid and the device memory it uses, in bytes.
    Supported(Vec<(u32, u64)>),
    /// The backend cannot tell (NVML in some containers, simulated devices): why.
    Unsupported(String),
}

/// A source of devices: NVML on a real server, or a simulated set for tests and CI.
///
/// `probe` takes fresh readings each call (free memory and utilization change), so callers that
/// select devices should probe right before selecting.
pub trait DeviceBackend: Send + Sync + std::fmt::Debug {
    /// Short backend name: `nvml`, `simulated`.
    fn name(&self) -> &'static str;

    /// All devices of the server, in NVML index order, with current readings.
    fn probe(&self) -> Result<Vec<DeviceInfo>>;

    /// Why the backend reports no devices (e.g. the NVML library is missing), if it knows.
    fn note(&self) -> Option<String> {
        None
    }

    /// Driver version, where the backend knows it.
    fn driver_version(&self) -> Option<String> {
        None
    }

    /// The device memory each process uses on device `uuid` now (NVML's running compute
    /// processes), where the backend can tell.
    fn process_memory(&self, uuid: &str) -> ProcessMemory {
        let _ = uuid;
        ProcessMemory::Unsupported(format!("the {} backend does not report it", self.name()))
    }
}
