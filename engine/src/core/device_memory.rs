//! Reading script workers' device memory (NVML's per-process figures) to hold them to their
//! `%perInstanceRequiredAcceleratorMemory`, shared by every engine of the process.

use std::sync::{Arc, OnceLock};

use accelsql_gpu_scheduler::{DeviceBackend, NvmlInventory, ProcessMemory, SchedulerConfig};
use accelsql_udf_runtime::DeviceMemoryProbe;

/// NVML, opened once for the process, as a [`DeviceMemoryProbe`].
#[derive(Debug)]
struct NvmlProbe(NvmlInventory);

impl DeviceMemoryProbe for NvmlProbe {
    fn used(&self, uuid: &str, pid: u32) -> Option<u64> {
        match self.0.process_memory(uuid) {
            ProcessMemory::Supported(list) => Some(
                list.iter()
                    .filter(|(p, _)| *p == pid)
                    .map(|(_, bytes)| *bytes)
                    .sum(),
            ),
            ProcessMemory::Unsupported(_) => None,
        }
    }
}

/// The process's probe: NVML when a driver is there (`ACCELSQL_NVML_LIBRARY` or the driver's
/// library), else `None`, and then declarations are trusted as they are.
pub(crate) fn probe() -> Option<Arc<dyn DeviceMemoryProbe>> {
    static PROBE: OnceLock<Option<Arc<dyn DeviceMemoryProbe>>> = OnceLock::new();
    PROBE
        .get_or_init(|| {
            let library = SchedulerConfig::from_env()
                .ok()
                .and_then(|c| c.nvml_library);
            let nvml = NvmlInventory::open(library.as_deref());
            (nvml.note().is_none()).then(|| Arc::new(NvmlProbe(nvml)) as Arc<dyn DeviceMemoryProbe>)
        })
        .clone()
}
