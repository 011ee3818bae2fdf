//! [`Lease`]: the RAII handle on the node's GPUs; dropping it (panic unwinding included)
//! records the lease, releases the device locks and admits the next waiters.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::admission::Inner;
use super::snapshot::{DeviceReservation, LeaseRecord, RECENT_LEASES};
use super::wait::Turn;
use crate::DeviceInfo;
use crate::lock::DeviceLock;
use crate::sharing::Reservation;

/// Use of the node's GPUs until dropped: every device (a whole-device lease), or memory
/// reserved on some of them (under [`GpuSharing::Memory`]).
///
/// Dropping the lease (normally, on error, on cancellation or while a panic unwinds) releases
/// the device locks (when no other lease of this process needs them) and admits the next
/// waiters.
///
/// [`GpuSharing::Memory`]: crate::GpuSharing::Memory
#[derive(Debug)]
pub struct Lease {
    pub(super) queue: Arc<Inner>,
    pub(super) lease_id: u64,
    pub(super) statement: String,
    pub(super) waited: Duration,
    pub(super) granted_at: Instant,
    pub(super) reservation: Reservation,
    pub(super) locks: Option<Arc<Vec<DeviceLock>>>,
    pub(super) turn: Option<Turn>,
}

impl Lease {
    /// Lease id, unique within its queue.
    pub fn id(&self) -> u64 {
        self.lease_id
    }

    /// The statement holding the lease.
    pub fn statement(&self) -> &str {
        &self.statement
    }

    /// The devices this lease uses, in visible order: all of the node's for a whole-device
    /// lease, those its instances were placed on for a memory one.
    pub fn devices(&self) -> Vec<DeviceInfo> {
        self.reservation
            .devices_used()
            .into_iter()
            .map(|d| self.queue.devices[d].clone())
            .collect()
    }

    /// Whether the lease owns every device (rather than reserved memory on some).
    pub fn is_whole(&self) -> bool {
        self.reservation.whole
    }

    /// The device of each instance of a memory lease, in the order of its request's
    /// [`LeaseRequest::memory`]; empty for a whole-device lease.
    ///
    /// [`LeaseRequest::memory`]: crate::LeaseRequest::memory
    pub fn instance_devices(&self) -> Vec<DeviceInfo> {
        self.reservation
            .instance_devices
            .iter()
            .map(|d| self.queue.devices[*d].clone())
            .collect()
    }

    /// The memory reserved on each device it uses (bytes 0 for a whole-device lease).
    pub fn reserved(&self) -> Vec<DeviceReservation> {
        self.reservation
            .devices_used()
            .into_iter()
            .map(|d| DeviceReservation {
                index: self.queue.devices[d].index,
                uuid: self.queue.devices[d].uuid.clone(),
                bytes: self.reservation.per_device[d],
            })
            .collect()
    }

    /// How long the statement waited for the lease.
    pub fn waited(&self) -> Duration {
        self.waited
    }

    /// How long the lease has been held so far.
    pub fn held_for(&self) -> Duration {
        self.granted_at.elapsed()
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        let held = self.granted_at.elapsed();
        {
            let mut state = self.queue.state();
            state.holders.remove(&self.lease_id);
            state.totals.total_hold += held;
            if state.recent.len() == RECENT_LEASES {
                state.recent.pop_front();
            }
            state.recent.push_back(LeaseRecord {
                lease_id: self.lease_id,
                statement: std::mem::take(&mut self.statement),
                waited: self.waited,
                held,
                released_by_panic: std::thread::panicking(),
                reserved_bytes: self.reservation.per_device.iter().sum(),
            });
        }
        // Device locks first, then the admission: the next waiter must find the lock files
        // free (unless another lease of this process still holds them).
        self.locks = None;
        drop(self.turn.take());
    }
}
