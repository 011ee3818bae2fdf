//! The node lease queue ("global semaphore"): statements wait, by precedence with aging, for
//! exclusive use of all of the node's GPUs and get an RAII [`Lease`] that can never leak.
//!
//! - [`LeaseRequest`] (`request.rs`): what a statement asks for.
//! - `admission.rs`: the queue's state and who is admitted next, with what reserved.
//! - `wait.rs`: waiting for a turn and for other processes' device locks.
//! - [`Lease`] (`handle.rs`): the RAII handle that gives everything back when dropped.
//! - [`LeaseQueueSnapshot`] and its parts (`snapshot.rs`): what the queue shows of itself.

mod admission;
mod handle;
mod request;
mod snapshot;
#[cfg(test)]
mod tests;
mod wait;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use crate::lock::{DeviceLock, DeviceLockDir};
use crate::sharing::{DEFAULT_HEADROOM_PERCENT, GpuSharing, Reservation, decide};
use crate::{DeviceInfo, Result, SchedulerError};
use admission::{Admitted, Holder, Inner, State, duration_nanos, reserved_totals};
use wait::{Turn, WaitGuard, WaitOutcome};

pub use handle::Lease;
pub use request::{DEFAULT_PRECEDENCE, LeaseRequest};
pub use snapshot::{
    DeviceMemorySnapshot, DeviceReservation, HolderSnapshot, LeaseQueueSnapshot, LeaseRecord,
    LeaseTotals, RECENT_LEASES, WaiterSnapshot,
};

/// How long a waiter waits per point of precedence it gains, unless
/// [`LeaseQueue::with_precedence_aging`] says otherwise: 10 ms, so precedence 100 outranks a
/// fresh 1000 after 9 s.
pub const DEFAULT_AGING: Duration = Duration::from_millis(10);

/// The node's GPUs, handed to one statement at a time, by precedence with aging.
///
/// Exasol semantics: one GPU call at a time per node, owning every device. Waiting is async,
/// cancellation-safe and optionally bounded; a [`Lease`] is released when it is dropped, during
/// panic unwinding too. With a [`DeviceLockDir`], a lease also holds one `flock` per device, so
/// two accelsql processes on one server never use the same GPU at once.
///
/// # Who goes next
///
/// Each request carries a precedence ([`LeaseRequest::precedence`], by its consumer group). When
/// the lease is free, it goes to the waiter with the highest *effective precedence*
///
/// ```text
/// effective = precedence + floor(waited / per_point)
/// ```
///
/// where `per_point` is [`LeaseQueue::with_precedence_aging`] ([`DEFAULT_AGING`] unless set;
/// zero: no aging); ties go to the earlier arrival. So:
///
/// - Waiters of equal precedence (one group) are served first come, first served.
/// - A later arrival of higher precedence goes before earlier ones of lower precedence…
/// - …but nothing starves: a waiter of precedence `p` has, after waiting `(P − p)·per_point`,
///   an effective precedence of at least any newcomer's of precedence `≤ P`, and from then on
///   no later arrival of precedence `≤ P` overtakes it (both age at the same rate and ties go to
///   the earlier).
///
/// **Bound.** With `P_max` the highest precedence of any request, a waiter of precedence `p` is
/// granted the lease at most `(P_max − p)·per_point` after it arrived plus the holds of the
/// statements that can still go before it at that moment: the holder, the waiters ranked ahead
/// of it then, and the waiters that arrived before it (which, rounding aside, stay behind it).
/// With Exasol's precedences (at most 1000) and the default aging that is at most 10 s plus
/// those holds.
///
/// The choice is made when the lease (or the in-process turn of a waiter still waiting for a
/// device lock held by another process) is released, a waiter leaves, or one arrives at a free
/// queue. [`LeaseRequest::max_group_waiters`] bounds how many statements of one group may wait.
///
/// ```
/// use accelsql_gpu_scheduler::{Inventory, LeaseQueue, LeaseRequest};
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let queue = LeaseQueue::new(Inventory::simulated(2).devices().unwrap());
/// let lease = queue.acquire(LeaseRequest::new("statement 1")).await.unwrap();
/// assert_eq!(lease.devices().len(), 2);
/// assert!(queue.try_acquire("statement 2").unwrap().is_none()); // held
/// drop(lease);
/// assert!(queue.try_acquire("statement 2").unwrap().is_some());
/// # });
/// ```
#[derive(Debug, Clone)]
pub struct LeaseQueue {
    inner: Arc<Inner>,
}

impl LeaseQueue {
    /// [`DEFAULT_AGING`], for callers that name it through the queue.
    pub const DEFAULT_AGING: Duration = DEFAULT_AGING;

    /// A queue whose leases own `devices`; no cross-process locks, no default timeout.
    pub fn new(devices: Vec<DeviceInfo>) -> Self {
        Self::build(devices, None, None)
    }

    /// A queue that also takes cross-process device locks in `locks` and bounds waits by
    /// `default_timeout` unless a request says otherwise.
    pub fn with_options(
        devices: Vec<DeviceInfo>,
        locks: Option<DeviceLockDir>,
        default_timeout: Option<Duration>,
    ) -> Self {
        Self::build(devices, locks, default_timeout)
    }

    fn build(
        devices: Vec<DeviceInfo>,
        locks: Option<DeviceLockDir>,
        default_timeout: Option<Duration>,
    ) -> Self {
        let state = State {
            headroom_percent: DEFAULT_HEADROOM_PERCENT,
            external: vec![0; devices.len()],
            ..State::default()
        };
        Self {
            inner: Arc::new(Inner {
                devices: devices.into(),
                locks,
                default_timeout,
                aging_nanos: AtomicU64::new(duration_nanos(DEFAULT_AGING)),
                next_id: AtomicU64::new(1),
                state: Mutex::new(state),
            }),
        }
    }

    /// Sets how long a waiter waits per point of precedence it gains (see [`LeaseQueue`] for
    /// the rule); zero turns aging off. Meant to be called right after construction; it applies
    /// to every clone of the queue and to the next choice.
    pub fn with_precedence_aging(self, per_point: Duration) -> Self {
        self.inner
            .aging_nanos
            .store(duration_nanos(per_point), Ordering::Relaxed);
        self
    }

    /// Sets how the queue shares its devices, and under [`GpuSharing::Memory`] the share of
    /// each device's memory (percent, at most 100) that reservations leave free. Meant to be
    /// called right after construction; it applies to every clone of the queue.
    pub fn with_sharing(self, sharing: GpuSharing, headroom_percent: u32) -> Self {
        {
            let mut state = self.inner.state();
            state.sharing = sharing;
            state.headroom_percent = headroom_percent.min(100);
        }
        self
    }

    /// How the queue shares its devices.
    pub fn sharing(&self) -> GpuSharing {
        self.inner.state().sharing
    }

    /// Records how much device memory processes other than this one use on each device (by
    /// position; NVML's per-process figures, this process's own workers left out), which
    /// memory-shared leases may not reserve; then admits whoever fits now.
    pub fn set_other_processes_memory(&self, bytes: Vec<u64>) {
        let mut state = self.inner.state();
        let n = self.inner.devices.len();
        state.external = bytes
            .into_iter()
            .chain(std::iter::repeat(0))
            .take(n)
            .collect();
        self.inner.admit(&mut state);
    }

    /// Under [`GpuSharing::Memory`], starts a thread that reads every `every` how much memory
    /// other processes use on each device (NVML's per-process figures, this process and its
    /// descendants — our script workers, counted by their reservations — left out) and passes
    /// it to [`LeaseQueue::set_other_processes_memory`]. Where a device cannot report
    /// per-process memory, it counts none there and says so in [`DeviceMemorySnapshot`]. The
    /// thread ends when the last clone of the queue is dropped. Does nothing under
    /// [`GpuSharing::Exclusive`] or without hardware devices.
    pub fn watch_other_processes(&self, inventory: crate::Inventory, every: Duration) {
        if self.sharing() != GpuSharing::Memory
            || !self.inner.devices.iter().any(DeviceInfo::is_hardware)
        {
            return;
        }
        let weak = Arc::downgrade(&self.inner);
        let spawned = std::thread::Builder::new()
            .name("accelsql-gpu-memory".into())
            .spawn(move || {
                while let Some(inner) = weak.upgrade() {
                    let queue = LeaseQueue { inner };
                    queue.sample_other_processes(&inventory);
                    drop(queue);
                    std::thread::sleep(every);
                }
            });
        if let Err(e) = spawned {
            log::warn!("cannot start the GPU memory sampler: {e}");
        }
    }

    /// One reading of other processes' memory (see [`LeaseQueue::watch_other_processes`]).
    pub fn sample_other_processes(&self, inventory: &crate::Inventory) {
        let mut external = Vec::with_capacity(self.inner.devices.len());
        let mut support = Vec::with_capacity(self.inner.devices.len());
        for device in self.inner.devices.iter() {
            match inventory.process_memory(&device.uuid) {
                crate::ProcessMemory::Supported(list) => {
                    external.push(
                        list.iter()
                            .filter(|(pid, _)| !crate::sharing::is_own_process(*pid))
                            .map(|(_, bytes)| *bytes)
                            .fold(0u64, u64::saturating_add),
                    );
                    support.push(Some(Ok(())));
                }
                crate::ProcessMemory::Unsupported(why) => {
                    external.push(0);
                    support.push(Some(Err(why)));
                }
            }
        }
        self.inner.state().per_process = support;
        self.set_other_processes_memory(external);
    }

    /// How long a waiter waits per point of precedence it gains (zero: no aging).
    pub fn precedence_aging(&self) -> Duration {
        self.inner.aging()
    }

    /// The node's devices (a whole-device lease owns them all).
    pub fn devices(&self) -> &[DeviceInfo] {
        &self.inner.devices
    }

    /// Waits for the lease, by precedence with aging (see [`LeaseQueue`]); under
    /// [`GpuSharing::Memory`], for the memory the request declares (see [`crate::sharing`]).
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: dropping the returned future before it completes (a cancelled query, a
    /// `select!` branch not taken) removes the caller from the queue and releases anything it had
    /// taken, its admission included; the statements behind it move up. The drop is
    /// counted in [`LeaseTotals::cancelled`].
    ///
    /// # Errors
    ///
    /// [`SchedulerError::LeaseTimeout`] (code 57G01) when the request's or the queue's timeout
    /// passes, naming the holder; [`SchedulerError::QueueClosed`] after [`LeaseQueue::close`];
    /// [`SchedulerError::TooManyWaiters`] (code 57G04) when the request's group already has
    /// [`LeaseRequest::max_group_waiters`] waiting; [`SchedulerError::DemandTooLarge`] (code
    /// 53G03) for memory no device could ever hold; [`SchedulerError::DeviceLock`] if a lock
    /// file cannot be used.
    pub async fn acquire(&self, request: LeaseRequest) -> Result<Lease> {
        let mut guard = WaitGuard::enter(&self.inner, &request)?;
        let (ticket, started) = (guard.ticket, guard.since);
        let wake = Arc::clone(&guard.wake);
        let wait = self.inner.wait_for_turn(ticket, &wake, &request.statement);
        let outcome = match request.timeout.or(self.inner.default_timeout) {
            None => wait.await,
            Some(limit) => match tokio::time::timeout(limit, wait).await {
                Ok(outcome) => outcome,
                Err(_) => {
                    guard.outcome = WaitOutcome::TimedOut;
                    return Err(self.timeout_error(
                        ticket,
                        &request.statement,
                        started.elapsed(),
                        limit,
                    ));
                }
            },
        };
        let (turn, locks) = match outcome {
            Ok(taken) => taken,
            Err(e) => {
                guard.outcome = WaitOutcome::Failed;
                return Err(e);
            }
        };
        guard.outcome = WaitOutcome::Granted;
        drop(guard);
        let waited = started.elapsed();
        Ok(self.grant(
            request.statement,
            request.group,
            request.precedence,
            waited,
            turn,
            locks,
        ))
    }

    /// Takes the lease only if it is free now and nobody waits for it: `Ok(None)` means busy,
    /// for callers that prefer the CPU to waiting. The lease owns every device, shows
    /// [`DEFAULT_PRECEDENCE`] and no group.
    ///
    /// # Errors
    ///
    /// [`SchedulerError::QueueClosed`] after [`LeaseQueue::close`];
    /// [`SchedulerError::DeviceLock`] if a lock file cannot be used.
    pub fn try_acquire(&self, statement: impl Into<String>) -> Result<Option<Lease>> {
        self.try_acquire_request(LeaseRequest::new(statement))
    }

    /// [`LeaseQueue::try_acquire`] for a request, which may declare memory: taken only if
    /// nobody waits and it fits now. Its timeout and waiter cap do not apply.
    ///
    /// # Errors
    ///
    /// As [`LeaseQueue::try_acquire`], and [`SchedulerError::DemandTooLarge`].
    pub fn try_acquire_request(&self, request: LeaseRequest) -> Result<Option<Lease>> {
        let turn = {
            let mut state = self.inner.state();
            if state.closed {
                return Err(SchedulerError::QueueClosed);
            }
            let demand = self.inner.checked_demand(&state, &request)?;
            let usable = self.inner.usable(&state);
            let admitted: Vec<_> = state
                .admitted
                .values()
                .map(|a| (&a.reservation, a.past))
                .collect();
            let mut no_shadow = None;
            let fits = state.waiting.is_empty()
                && !decide(&usable, &admitted, &[(0, &demand)], &mut no_shadow).is_empty();
            if !fits {
                state.totals.busy += 1;
                return Ok(None);
            }
            let ticket = self.inner.next_id.fetch_add(1, Ordering::Relaxed);
            let admission = decide(&usable, &admitted, &[(ticket, &demand)], &mut no_shadow);
            for a in admission {
                state.admitted.insert(
                    a.ticket,
                    Admitted {
                        reservation: a.reservation,
                        past: a.past,
                    },
                );
            }
            Turn {
                inner: Arc::clone(&self.inner),
                ticket,
            }
        };
        // On an error or a busy device, dropping `turn` frees it for whoever arrived meanwhile.
        let locks = match self.inner.take_locks(&request.statement, turn.ticket)? {
            Some(locks) => locks,
            None => {
                self.inner.state().totals.busy += 1;
                return Ok(None);
            }
        };
        Ok(Some(self.grant(
            request.statement,
            None,
            DEFAULT_PRECEDENCE,
            Duration::ZERO,
            turn,
            locks,
        )))
    }

    /// Closes the queue: current and future waiters fail with [`SchedulerError::QueueClosed`]
    /// (one waiting for another process's device lock too); held leases stay valid until
    /// dropped.
    pub fn close(&self) {
        let mut state = self.inner.state();
        state.closed = true;
        // Every waiter wakes, sees `closed` and fails; one that was admitted gives its
        // admission back as it leaves, and nobody is admitted again.
        for waiter in state.waiting.values() {
            waiter.wake.notify_one();
        }
    }

    /// Holders, waiters (in the order they would be granted now, each with why it waits),
    /// device memory, recent leases and counters at this moment.
    pub fn snapshot(&self) -> LeaseQueueSnapshot {
        let now = Instant::now();
        let per_point = self.inner.aging();
        let state = self.inner.state();
        let devices = &self.inner.devices;
        let usable = self.inner.usable(&state);
        let (reserved, whole) = reserved_totals(&state, devices.len());
        let holders: Vec<HolderSnapshot> = state
            .holders
            .values()
            .map(|h| HolderSnapshot {
                lease_id: h.lease_id,
                statement: h.statement.clone(),
                waited: h.waited,
                held_for: now.saturating_duration_since(h.granted_at),
                group: h.group.clone(),
                precedence: h.precedence,
                whole: h.reservation.whole,
                reserved: h
                    .reservation
                    .devices_used()
                    .into_iter()
                    .map(|d| DeviceReservation {
                        index: devices[d].index,
                        uuid: devices[d].uuid.clone(),
                        bytes: h.reservation.per_device[d],
                    })
                    .collect(),
                backfilled: h.backfilled,
            })
            .collect();
        let room: Vec<u64> = if whole {
            vec![0; devices.len()]
        } else {
            usable
                .iter()
                .zip(&reserved)
                .map(|(u, r)| u.saturating_sub(*r))
                .collect()
        };
        let ranked = state.ranked(now, per_point);
        let head = ranked
            .iter()
            .find(|(t, _, _)| !state.admitted.contains_key(t))
            .map(|(_, w, _)| w.statement.clone());
        let waiting = ranked
            .iter()
            .map(|(ticket, w, effective)| WaiterSnapshot {
                statement: w.statement.clone(),
                waiting_for: now.saturating_duration_since(w.since),
                blocked_on: w.blocked_on.clone(),
                group: w.group.clone(),
                precedence: w.precedence,
                effective_precedence: *effective,
                demand_bytes: w.demand.bytes(),
                reason: self.inner.wait_reason(
                    &state,
                    *ticket,
                    w,
                    &room,
                    head.as_deref().filter(|h| *h != w.statement),
                ),
            })
            .collect();
        let memory = devices
            .iter()
            .enumerate()
            .map(|(d, info)| DeviceMemorySnapshot {
                index: info.index,
                total: info.memory_total,
                usable: usable[d],
                reserved: reserved[d],
                other_processes: state.external.get(d).copied().unwrap_or(0),
                whole,
                per_process_memory: match state.per_process.get(d) {
                    Some(Some(Ok(()))) => "supported".into(),
                    Some(Some(Err(why))) => format!("unsupported: {why}"),
                    _ => "not sampled".into(),
                },
            })
            .collect();
        LeaseQueueSnapshot {
            devices: devices.len(),
            sharing: state.sharing,
            holder: holders.first().cloned(),
            holders,
            waiting,
            memory,
            recent: state.recent.iter().cloned().collect(),
            totals: state.totals.clone(),
        }
    }

    fn grant(
        &self,
        statement: String,
        group: Option<String>,
        precedence: u32,
        waited: Duration,
        turn: Turn,
        locks: Option<Arc<Vec<DeviceLock>>>,
    ) -> Lease {
        let lease_id = self.inner.next_id.fetch_add(1, Ordering::Relaxed);
        let granted_at = Instant::now();
        let mut state = self.inner.state();
        let (reservation, backfilled) = state.admitted.get(&turn.ticket).map_or_else(
            || (Reservation::whole(self.inner.devices.len()), false),
            |a| (a.reservation.clone(), a.past.is_some()),
        );
        state.holders.insert(
            lease_id,
            Holder {
                lease_id,
                statement: statement.clone(),
                group,
                precedence,
                waited,
                granted_at,
                reservation: reservation.clone(),
                backfilled,
            },
        );
        state.totals.granted += 1;
        state.totals.backfilled += u64::from(backfilled);
        state.totals.total_wait += waited;
        drop(state);
        Lease {
            queue: Arc::clone(&self.inner),
            lease_id,
            statement,
            waited,
            granted_at,
            reservation,
            locks,
            turn: Some(turn),
        }
    }

    fn timeout_error(
        &self,
        ticket: u64,
        statement: &str,
        waited: Duration,
        timeout: Duration,
    ) -> SchedulerError {
        let state = self.inner.state();
        let blocked_on = state
            .waiting
            .get(&ticket)
            .and_then(|w| w.blocked_on.clone());
        let ranked = state.ranked(Instant::now(), self.inner.aging());
        let ahead = ranked
            .iter()
            .position(|(t, _, _)| *t == ticket)
            .unwrap_or(ranked.len());
        let first = state.holders.values().next();
        let holder = match (first, blocked_on) {
            (_, Some(uuid)) => {
                let who = self.inner.locks.as_ref().and_then(|d| d.holder_of(&uuid));
                format!(
                    "device {uuid} is locked by another process ({})",
                    who.unwrap_or_else(|| "holder unknown".into())
                )
            }
            (Some(h), None) => {
                let others = match state.holders.len() {
                    1 => String::new(),
                    n => format!(" with {} other lease(s)", n - 1),
                };
                let short = state
                    .waiting
                    .get(&ticket)
                    .map(|w| {
                        let (reserved, whole) = reserved_totals(&state, self.inner.devices.len());
                        let room = self.inner.room(&state, &reserved, whole);
                        self.inner.wait_reason(&state, ticket, w, &room, None)
                    })
                    .filter(|r| r.contains("short"))
                    .map(|r| format!(" ({r})"))
                    .unwrap_or_default();
                format!(
                    "the lease is held by statement '{}' (lease {}, for {:.1?}){others} and {ahead} statement(s) wait ahead of this one{short}",
                    h.statement,
                    h.lease_id,
                    h.granted_at.elapsed()
                )
            }
            (None, None) => format!("{ahead} statement(s) wait ahead of this one"),
        };
        SchedulerError::LeaseTimeout {
            statement: statement.to_string(),
            waited,
            timeout,
            holder,
        }
    }
}
