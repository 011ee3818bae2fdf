//! accelsql's device layer: which GPUs exist, which may be used, and who uses them now.
//!
//! - [`Inventory`]: devices from NVML (loaded at run time; no driver means zero devices, not a
//!   failure) or simulated ones (`ACCELSQL_SIMULATED_GPUS=N`), limited and ordered by
//!   `CUDA_VISIBLE_DEVICES`.
//! - [`DeviceFilter`]: gpuselect's selection filters plus free memory and a custom predicate,
//!   with a report naming the filter that rejected each device.
//! - [`LeaseQueue`]: the node's "global semaphore". Statements wait for exclusive use of all GPUs
//!   by precedence with aging (first come, first served within a precedence; nothing starves),
//!   optionally capped per consumer group; the RAII [`Lease`] cannot leak. Under
//!   [`GpuSharing::Memory`] statements that declare their device memory share devices while
//!   their reservations fit ([`sharing`] states the admission and backfill rule).
//! - [`DeviceLockDir`]: one `flock` file per device, so separate processes never share a GPU.
//!
//! This crate knows nothing of SQL or Arrow.

mod config;
mod device;
mod error;
mod inventory;
mod lease;
mod lock;
mod select;
pub mod sharing;
pub mod units;
mod visible;

pub use config::{
    ENV_CUDA_VISIBLE_DEVICES, ENV_DEVICE_LOCK_DIR, ENV_GPU_MEMORY_HEADROOM, ENV_GPU_SHARING,
    ENV_GPU_WAIT_TIMEOUT, ENV_NVML_LIBRARY, ENV_SIMULATED_GPUS, SchedulerConfig, parse_headroom,
};
pub use device::{DeviceId, DeviceInfo, FAKE_CUDA_DEVICE_NAME};
pub use error::{Result, SchedulerError};
pub use inventory::{
    DeviceBackend, Inventory, InventoryReport, NvmlInventory, ProcessMemory, SIMULATED_MEMORY,
    SimulatedInventory,
};
pub use lease::{
    DEFAULT_AGING, DEFAULT_PRECEDENCE, DeviceMemorySnapshot, DeviceReservation, HolderSnapshot,
    Lease, LeaseQueue, LeaseQueueSnapshot, LeaseRecord, LeaseRequest, LeaseTotals, RECENT_LEASES,
    WaiterSnapshot,
};
pub use lock::{DeviceLock, DeviceLockDir, default_lock_dir};
pub use select::DeviceFilter;
pub use sharing::{DEFAULT_HEADROOM_PERCENT, DeviceDemand, GpuSharing};
pub use visible::VisibleDevices;
