//! Simulated devices (`ACCELSQL_SIMULATED_GPUS=N`): fixed identities and readings for tests and CI.

use std::sync::Mutex;

use crate::inventory::DeviceBackend;
use crate::{DeviceInfo, Result};

/// Memory each simulated device reports: 80 GiB total, all of it free.
pub const SIMULATED_MEMORY: u64 = 80 << 30;

/// `n` simulated GPUs with deterministic UUIDs (`GPU-5131a7ed-0000-4000-8000-00000000000i`), so two
/// processes that simulate the same count agree on identities and therefore on lock files.
///
/// Readings are fixed (0% utilization, no processes) unless a test changes them with
/// [`SimulatedInventory::update`]; everything above the inventory treats these devices exactly
/// like real ones.
#[derive(Debug)]
pub struct SimulatedInventory {
    devices: Mutex<Vec<DeviceInfo>>,
}

impl SimulatedInventory {
    /// `n` identical simulated devices.
    pub fn new(n: usize) -> Self {
        Self::from_devices((0..n as u32).map(simulated_device).collect())
    }

    /// A simulated inventory with the given devices (for tests that need varied readings).
    pub fn from_devices(devices: Vec<DeviceInfo>) -> Self {
        Self {
            devices: Mutex::new(devices),
        }
    }

    /// Changes the readings of device `index` (e.g. to make it busy in a filter test).
    pub fn update(&self, index: u32, change: impl FnOnce(&mut DeviceInfo)) {
        let mut devices = self.devices.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(d) = devices.iter_mut().find(|d| d.index == index) {
            change(d);
        }
    }
}

impl DeviceBackend for SimulatedInventory {
    fn name(&self) -> &'static str {
        "simulated"
    }

    fn probe(&self) -> Result<Vec<DeviceInfo>> {
        Ok(self
            .devices
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone())
    }

    fn note(&self) -> Option<String> {
        Some("ACCELSQL_SIMULATED_GPUS=0: no simulated devices".into())
    }

    fn driver_version(&self) -> Option<String> {
        Some("simulated".into())
    }
}

impl DeviceInfo {
    /// Simulated device number `index`, as `ACCELSQL_SIMULATED_GPUS` makes them: a base for
    /// test fixtures (`DeviceInfo { simulated: false, ..DeviceInfo::simulated(0) }`).
    pub fn simulated(index: u32) -> Self {
        simulated_device(index)
    }
}

/// Simulated device number `index`.
pub(crate) fn simulated_device(index: u32) -> DeviceInfo {
    DeviceInfo {
        index,
        uuid: format!("GPU-5131a7ed-0000-4000-8000-{index:012x}"),
        name: "accelsql simulated GPU".into(),
        pci_bus_id: Some(format!("00000000:{:02X}:00.0", 0x10 + index)),
        memory_total: SIMULATED_MEMORY,
        memory_free: SIMULATED_MEMORY,
        utilization: Some(0),
        memory_utilization: Some(0),
        processes: Some(0),
        temperature_c: Some(40),
        power_w: Some(70.0),
        simulated: true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identities_are_deterministic_and_distinct() {
        let a = SimulatedInventory::new(3).probe().unwrap();
        let b = SimulatedInventory::new(3).probe().unwrap();
        assert_eq!(a, b);
        assert_eq!(a.len(), 3);
        assert_ne!(a[0].uuid, a[1].uuid);
        assert!(
            a.iter()
                .all(|d| d.simulated && d.memory_free == SIMULATED_MEMORY)
        );
    }

    #[test]
    fn update_changes_readings() {
        let inv = SimulatedInventory::new(2);
        inv.update(1, |d| d.utilization = Some(90));
        assert_eq!(inv.probe().unwrap()[1].utilization, Some(90));
        assert_eq!(inv.probe().unwrap()[0].utilization, Some(0));
    }
}
