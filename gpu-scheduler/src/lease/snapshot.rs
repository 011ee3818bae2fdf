//! What the lease queue shows of itself: [`LeaseQueueSnapshot`] and its parts (holders,
//! waiters, device memory, recent leases, counters), and [`DeviceReservation`].

use std::time::Duration;

use crate::sharing::GpuSharing;

/// How many finished leases [`LeaseQueue::snapshot`] keeps for introspection.
///
/// [`LeaseQueue::snapshot`]: crate::LeaseQueue::snapshot
pub const RECENT_LEASES: usize = 256;

/// Device memory a lease reserves on one device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceReservation {
    /// The device's NVML index.
    pub index: u32,
    /// The device's UUID.
    pub uuid: String,
    /// Bytes reserved there; 0 where the lease owns the whole device.
    pub bytes: u64,
}

/// The current holder, as [`LeaseQueue::snapshot`] shows it.
///
/// [`LeaseQueue::snapshot`]: crate::LeaseQueue::snapshot
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HolderSnapshot {
    /// Lease id (unique within the queue).
    pub lease_id: u64,
    /// The statement holding the lease.
    pub statement: String,
    /// How long it waited before it got the lease.
    pub waited: Duration,
    /// How long it has held it so far.
    pub held_for: Duration,
    /// Its consumer group, if its request named one.
    pub group: Option<String>,
    /// The precedence it waited with.
    pub precedence: u32,
    /// Whether it owns every device (a whole-device lease) rather than reserved memory.
    pub whole: bool,
    /// The devices it uses and what it reserved on each.
    pub reserved: Vec<DeviceReservation>,
    /// Whether it started before a waiting head, by the backfill rule.
    pub backfilled: bool,
}

/// A statement waiting for the lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WaiterSnapshot {
    /// The waiting statement.
    pub statement: String,
    /// How long it has waited so far.
    pub waiting_for: Duration,
    /// A device locked by another process that this waiter, admitted, is blocked on.
    pub blocked_on: Option<String>,
    /// Its consumer group, if its request named one.
    pub group: Option<String>,
    /// The precedence it asked for.
    pub precedence: u32,
    /// Its precedence now, aging included: `precedence + floor(waiting_for / per_point)`.
    pub effective_precedence: u64,
    /// Device memory it asks for, in bytes (0: every device to itself).
    pub demand_bytes: u64,
    /// Why it waits, in words: which device and how many bytes short, the holders of a whole
    /// device it needs, or the statement ahead of it.
    pub reason: String,
}

/// One device's memory as the queue counts it (for `accelsql.gpu_devices`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceMemorySnapshot {
    /// The device's NVML index.
    pub index: u32,
    /// Installed memory.
    pub total: u64,
    /// What leases may reserve: total, less the headroom, less other processes' use.
    pub usable: u64,
    /// What the leases of this queue reserve now.
    pub reserved: u64,
    /// Memory other processes use (see [`LeaseQueue::set_other_processes_memory`]).
    ///
    /// [`LeaseQueue::set_other_processes_memory`]: crate::LeaseQueue::set_other_processes_memory
    pub other_processes: u64,
    /// Whether a whole-device lease holds it.
    pub whole: bool,
    /// Whether other processes' memory is read from NVML's per-process figures there:
    /// `supported`, `unsupported: <why>` (then only declarations and this queue's own
    /// reservations count), or `not sampled` (exclusive sharing, simulated devices).
    pub per_process_memory: String,
}

/// A finished lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseRecord {
    /// Lease id.
    pub lease_id: u64,
    /// The statement that held it.
    pub statement: String,
    /// Time from request to grant.
    pub waited: Duration,
    /// Time from grant to release.
    pub held: Duration,
    /// Whether the lease was released by a panic unwinding through its holder.
    pub released_by_panic: bool,
    /// Bytes of device memory it had reserved (0: whole devices).
    pub reserved_bytes: u64,
}

/// Counters since the queue was created.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LeaseTotals {
    /// Leases granted.
    pub granted: u64,
    /// Leases granted before a waiting head by the backfill rule.
    pub backfilled: u64,
    /// Waits that ended in a timeout.
    pub timed_out: u64,
    /// Waits abandoned by their caller (future dropped, query cancelled).
    pub cancelled: u64,
    /// `try_acquire` calls that found the lease taken.
    pub busy: u64,
    /// Requests refused because their group already had its most waiters
    /// ([`LeaseRequest::max_group_waiters`]).
    ///
    /// [`LeaseRequest::max_group_waiters`]: crate::LeaseRequest::max_group_waiters
    pub refused: u64,
    /// Summed wait of granted leases.
    pub total_wait: Duration,
    /// Summed hold of released leases.
    pub total_hold: Duration,
}

/// The queue at one moment, for `accelsql.gpu_leases` and diagnostics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseQueueSnapshot {
    /// Number of devices of the node.
    pub devices: usize,
    /// How the queue shares them.
    pub sharing: GpuSharing,
    /// The oldest holder (under [`GpuSharing::Exclusive`], the only one).
    pub holder: Option<HolderSnapshot>,
    /// Every holder, oldest first.
    pub holders: Vec<HolderSnapshot>,
    /// Who waits, in the order they would be granted now: those admitted but waiting for a
    /// device lock first, then by effective precedence, highest first, then by arrival.
    pub waiting: Vec<WaiterSnapshot>,
    /// Each device's memory as the queue counts it.
    pub memory: Vec<DeviceMemorySnapshot>,
    /// The last [`RECENT_LEASES`] finished leases, oldest first.
    pub recent: Vec<LeaseRecord>,
    /// Counters.
    pub totals: LeaseTotals,
}
