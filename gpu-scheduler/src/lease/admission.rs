//! The lease queue's state and its admission rule: who waits, who is admitted (with what
//! reserved on each device) and who is admitted next, by effective precedence.

use std::cmp::Reverse;
use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use super::request::LeaseRequest;
use super::snapshot::{LeaseRecord, LeaseTotals};
use crate::lock::{DeviceLock, DeviceLockDir};
use crate::sharing::{DeviceDemand, GpuSharing, Reservation, decide, why_short};
use crate::units::format_bytes;
use crate::{DeviceInfo, Result, SchedulerError};

#[derive(Debug)]
pub(super) struct Inner {
    pub(super) devices: Arc<[DeviceInfo]>,
    pub(super) locks: Option<DeviceLockDir>,
    pub(super) default_timeout: Option<Duration>,
    /// Nanoseconds of waiting per point of precedence gained; 0: no aging.
    pub(super) aging_nanos: AtomicU64,
    pub(super) next_id: AtomicU64,
    pub(super) state: Mutex<State>,
}

#[derive(Debug, Default)]
pub(super) struct State {
    pub(super) sharing: GpuSharing,
    /// Share of each device's memory left free under [`GpuSharing::Memory`], percent.
    pub(super) headroom_percent: u32,
    /// Device memory used by other processes (see [`LeaseQueue::set_other_processes_memory`]).
    ///
    /// [`LeaseQueue::set_other_processes_memory`]: crate::LeaseQueue::set_other_processes_memory
    pub(super) external: Vec<u64>,
    /// Per device: `None` until sampled; then whether per-process memory can be read there
    /// (`Err`: why not).
    pub(super) per_process: Vec<Option<std::result::Result<(), String>>>,
    /// Who has been admitted: chosen waiters (which may still wait for device locks) and
    /// leases, by ticket, with what they reserve and the head they overtook, if any.
    pub(super) admitted: BTreeMap<u64, Admitted>,
    /// The waiting head's shadow (see [`crate::sharing`]).
    pub(super) shadow: Option<(u64, Reservation)>,
    /// The device locks this process holds while any of its leases is admitted.
    pub(super) shared_locks: Weak<Vec<DeviceLock>>,
    pub(super) closed: bool,
    pub(super) holders: BTreeMap<u64, Holder>,
    pub(super) waiting: BTreeMap<u64, Waiter>,
    pub(super) recent: VecDeque<LeaseRecord>,
    pub(super) totals: LeaseTotals,
}

#[derive(Debug, Clone)]
pub(super) struct Admitted {
    pub(super) reservation: Reservation,
    pub(super) past: Option<u64>,
}

#[derive(Debug, Clone)]
pub(super) struct Holder {
    pub(super) lease_id: u64,
    pub(super) statement: String,
    pub(super) group: Option<String>,
    pub(super) precedence: u32,
    pub(super) waited: Duration,
    pub(super) granted_at: Instant,
    pub(super) reservation: Reservation,
    pub(super) backfilled: bool,
}

#[derive(Debug, Clone)]
pub(super) struct Waiter {
    pub(super) statement: String,
    pub(super) group: Option<String>,
    pub(super) precedence: u32,
    pub(super) since: Instant,
    pub(super) demand: DeviceDemand,
    /// Set while it is admitted but another process holds a device's lock.
    pub(super) blocked_on: Option<String>,
    /// Woken when the waiter is admitted or the queue closes.
    pub(super) wake: Arc<Notify>,
}

/// What leases may reserve of `total` bytes, `headroom_percent` left free.
pub(super) fn reservable(total: u64, headroom_percent: u32) -> u64 {
    let headroom = u128::from(total) * u128::from(headroom_percent.min(100)) / 100;
    total - u64::try_from(headroom).unwrap_or(total)
}

/// Bytes reserved on each device by the admitted, and whether one of them owns every device.
pub(super) fn reserved_totals(state: &State, devices: usize) -> (Vec<u64>, bool) {
    let mut sum = vec![0u64; devices];
    let mut whole = false;
    for a in state.admitted.values() {
        whole |= a.reservation.whole;
        for (s, b) in sum.iter_mut().zip(&a.reservation.per_device) {
            *s = s.saturating_add(*b);
        }
    }
    (sum, whole)
}

impl Inner {
    /// The state, also after a panic elsewhere poisoned the mutex (the state stays consistent:
    /// every critical section is a few field writes).
    pub(super) fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waiting per point of precedence gained; zero: no aging.
    pub(super) fn aging(&self) -> Duration {
        Duration::from_nanos(self.aging_nanos.load(Ordering::Relaxed))
    }

    /// What memory-shared leases may reserve on each device: its memory, less the headroom,
    /// less what other processes use.
    pub(super) fn usable(&self, state: &State) -> Vec<u64> {
        self.devices
            .iter()
            .enumerate()
            .map(|(d, info)| {
                reservable(info.memory_total, state.headroom_percent)
                    .saturating_sub(state.external.get(d).copied().unwrap_or(0))
            })
            .collect()
    }

    pub(super) fn room(&self, state: &State, reserved: &[u64], whole: bool) -> Vec<u64> {
        if whole {
            return vec![0; reserved.len()];
        }
        self.usable(state)
            .iter()
            .zip(reserved)
            .map(|(u, r)| u.saturating_sub(*r))
            .collect()
    }

    /// The request's demand as this queue counts it: whole under `exclusive`; a memory demand
    /// that no device could ever hold is refused.
    pub(super) fn checked_demand(
        &self,
        state: &State,
        request: &LeaseRequest,
    ) -> Result<DeviceDemand> {
        let demand = match (&request.demand, state.sharing) {
            (DeviceDemand::Memory(v), GpuSharing::Memory) if !v.is_empty() => {
                DeviceDemand::Memory(v.clone())
            }
            _ => DeviceDemand::Whole,
        };
        if let DeviceDemand::Memory(v) = &demand {
            let limits: Vec<u64> = self
                .devices
                .iter()
                .map(|d| reservable(d.memory_total, state.headroom_percent))
                .collect();
            if let Err(short) = crate::sharing::place(v, &limits) {
                return Err(SchedulerError::DemandTooLarge {
                    statement: request.statement.clone(),
                    detail: format!(
                        "{} instance(s), the largest needing {}; GPU {} can reserve at most {} \
                         ({}% of its memory is headroom)",
                        v.len(),
                        format_bytes(short.instance),
                        self.devices.get(short.device).map_or(0, |d| d.index),
                        format_bytes(short.room),
                        state.headroom_percent
                    ),
                });
            }
        }
        Ok(demand)
    }

    /// Admits whoever the rule lets in now and wakes them. Nobody is admitted once the queue
    /// is closed.
    pub(super) fn admit(&self, state: &mut State) {
        if state.closed {
            return;
        }
        let now = Instant::now();
        if state.sharing == GpuSharing::Exclusive {
            // Every demand is whole: the one waiter the rule picks, once nothing is admitted.
            if !state.admitted.is_empty() {
                return;
            }
            let per_point = self.aging();
            let chosen = state
                .waiting
                .iter()
                .max_by_key(|(ticket, w)| {
                    (w.effective_precedence(now, per_point), Reverse(**ticket))
                })
                .map(|(ticket, w)| (*ticket, Arc::clone(&w.wake)));
            if let Some((ticket, wake)) = chosen {
                state.shadow = None;
                state.admitted.insert(
                    ticket,
                    Admitted {
                        reservation: Reservation::whole(self.devices.len()),
                        past: None,
                    },
                );
                wake.notify_one();
            }
            return;
        }
        let usable = self.usable(state);
        let ranked: Vec<(u64, DeviceDemand)> = state
            .ranked(now, self.aging())
            .into_iter()
            .filter(|(t, _, _)| !state.admitted.contains_key(t))
            .map(|(t, w, _)| (t, w.demand.clone()))
            .collect();
        if ranked.is_empty() {
            state.shadow = None;
            return;
        }
        let admissions = {
            let admitted: Vec<_> = state
                .admitted
                .values()
                .map(|a| (&a.reservation, a.past))
                .collect();
            let ranked: Vec<(u64, &DeviceDemand)> = ranked.iter().map(|(t, d)| (*t, d)).collect();
            let mut shadow = state.shadow.take();
            let out = decide(&usable, &admitted, &ranked, &mut shadow);
            state.shadow = shadow;
            out
        };
        for a in admissions {
            state.admitted.insert(
                a.ticket,
                Admitted {
                    reservation: a.reservation,
                    past: a.past,
                },
            );
            if let Some(w) = state.waiting.get(&a.ticket) {
                w.wake.notify_one();
            }
        }
    }

    /// Why waiter `ticket` waits, in words.
    pub(super) fn wait_reason(
        &self,
        state: &State,
        ticket: u64,
        w: &Waiter,
        room: &[u64],
        head: Option<&str>,
    ) -> String {
        if let Some(uuid) = &w.blocked_on {
            return format!("admitted; device {uuid} is locked by another process");
        }
        if state.admitted.contains_key(&ticket) {
            return "admitted; taking the device locks".into();
        }
        let index_of = |d: usize| self.devices.get(d).map_or(0, |i| i.index);
        let holders = state.admitted.len();
        match &w.demand {
            DeviceDemand::Whole => match head {
                Some(h) => format!("waits behind statement '{h}'"),
                None => format!("needs every GPU to itself; {holders} lease(s) hold GPUs"),
            },
            demand => match (why_short(demand, room, index_of), head) {
                (Some(short), _) => short,
                (None, Some(h)) => format!(
                    "fits, but waits behind statement '{h}': the memory it would take is what \
                     '{h}' needs next (backfill rule)"
                ),
                (None, None) => "fits; being admitted".into(),
            },
        }
    }
}

impl State {
    /// The waiters in the order they would be granted at `now`, with their effective
    /// precedence: the admitted first, then highest effective precedence, then earliest
    /// arrival (lowest ticket).
    pub(super) fn ranked(&self, now: Instant, per_point: Duration) -> Vec<(u64, &Waiter, u64)> {
        let mut ranked: Vec<_> = self
            .waiting
            .iter()
            .map(|(ticket, w)| (*ticket, w, w.effective_precedence(now, per_point)))
            .collect();
        ranked.sort_by_key(|(ticket, _, effective)| {
            (
                !self.admitted.contains_key(ticket),
                Reverse(*effective),
                *ticket,
            )
        });
        ranked
    }
}

impl Waiter {
    fn effective_precedence(&self, now: Instant, per_point: Duration) -> u64 {
        effective_precedence(
            self.precedence,
            now.saturating_duration_since(self.since),
            per_point,
        )
    }
}

/// `precedence + floor(waited / per_point)`, saturating; just `precedence` when `per_point` is 0.
fn effective_precedence(precedence: u32, waited: Duration, per_point: Duration) -> u64 {
    let points = match per_point.as_nanos() {
        0 => 0,
        nanos => u64::try_from(waited.as_nanos() / nanos).unwrap_or(u64::MAX),
    };
    u64::from(precedence).saturating_add(points)
}

pub(super) fn duration_nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}
