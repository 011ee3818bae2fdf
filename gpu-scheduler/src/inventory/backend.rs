//! The trait every device source implements: what the inventory asks of NVML or a simulation.

use crate::{DeviceInfo, Result};

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
}
