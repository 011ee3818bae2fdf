//! The node lease queue ("global semaphore"): statements wait, by precedence with aging, for
//! exclusive use of all of the node's GPUs and get an RAII [`Lease`] that can never leak.

use std::cmp::Reverse;
use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::lock::{DeviceLock, DeviceLockDir};
use crate::sharing::{
    DEFAULT_HEADROOM_PERCENT, DeviceDemand, GpuSharing, Reservation, decide, why_short,
};
use crate::units::format_bytes;
use crate::{DeviceInfo, Result, SchedulerError};

/// How many finished leases [`LeaseQueue::snapshot`] keeps for introspection.
pub const RECENT_LEASES: usize = 256;

/// The precedence of a [`LeaseRequest`] that sets none (and of [`LeaseQueue::try_acquire`]).
///
/// Exasol's precedences run from 1 to 1000; 300 is its `MEDIUM` group's.
pub const DEFAULT_PRECEDENCE: u32 = 300;

/// How long a waiter waits per point of precedence it gains, unless
/// [`LeaseQueue::with_precedence_aging`] says otherwise: 10 ms, so precedence 100 outranks a
/// fresh 1000 after 9 s.
pub const DEFAULT_AGING: Duration = Duration::from_millis(10);

/// Longest pause between two tries for a device lock held by another process.
const MAX_LOCK_BACKOFF: Duration = Duration::from_millis(100);

/// A request for the node lease.
///
/// ```
/// use std::time::Duration;
/// use accelsql_gpu_scheduler::LeaseRequest;
///
/// let request = LeaseRequest::new("statement 7")
///     .timeout(Duration::from_secs(30))
///     .group("ETL")
///     .precedence(200)
///     .max_group_waiters(Some(4));
/// # let _ = request;
/// ```
#[derive(Debug, Clone)]
pub struct LeaseRequest {
    statement: String,
    timeout: Option<Duration>,
    precedence: u32,
    group: Option<String>,
    max_group_waiters: Option<usize>,
    demand: DeviceDemand,
}

impl LeaseRequest {
    /// A request on behalf of `statement` (an id or label shown to other waiters and in system tables).
    pub fn new(statement: impl Into<String>) -> Self {
        Self {
            statement: statement.into(),
            timeout: None,
            precedence: DEFAULT_PRECEDENCE,
            group: None,
            max_group_waiters: None,
            demand: DeviceDemand::Whole,
        }
    }

    /// Declares the device memory of each GPU instance the statement runs (each instance on
    /// one device). Under [`GpuSharing::Memory`] the lease then reserves that much and shares
    /// devices with other such leases; without it, or under [`GpuSharing::Exclusive`], the
    /// lease owns every device.
    pub fn memory(mut self, per_instance: impl IntoIterator<Item = u64>) -> Self {
        self.demand = DeviceDemand::Memory(per_instance.into_iter().collect());
        self
    }

    /// The request's demand, set whole or by [`LeaseRequest::memory`].
    pub fn demand(mut self, demand: DeviceDemand) -> Self {
        self.demand = demand;
        self
    }

    /// Give up after waiting this long (overrides the queue's default).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Like [`LeaseRequest::timeout`], for an optional value.
    pub fn timeout_opt(mut self, timeout: Option<Duration>) -> Self {
        self.timeout = timeout;
        self
    }

    /// Wait with this precedence: higher goes first (see [`LeaseQueue`] for the rule). Default
    /// [`DEFAULT_PRECEDENCE`]; Exasol's range is 1 to 1000, but any value is accepted.
    pub fn precedence(mut self, precedence: u32) -> Self {
        self.precedence = precedence;
        self
    }

    /// The consumer group the statement waits for, shown in snapshots and counted by
    /// [`LeaseRequest::max_group_waiters`]. Default: none.
    pub fn group(mut self, name: impl Into<String>) -> Self {
        self.group = Some(name.into());
        self
    }

    /// Let at most `n` statements of this request's group wait at once: a request that would
    /// have to wait while `n` of its group already wait fails at once with
    /// [`SchedulerError::TooManyWaiters`] (code 57G04) instead of queueing. A free lease that
    /// nobody waits for is taken without waiting, so `Some(0)` means "only if free now".
    /// Without a group the cap counts the waiters without a group. `None` (the default): no cap.
    pub fn max_group_waiters(mut self, n: Option<usize>) -> Self {
        self.max_group_waiters = n;
        self
    }
}

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

#[derive(Debug)]
struct Inner {
    devices: Arc<[DeviceInfo]>,
    locks: Option<DeviceLockDir>,
    default_timeout: Option<Duration>,
    /// Nanoseconds of waiting per point of precedence gained; 0: no aging.
    aging_nanos: AtomicU64,
    next_id: AtomicU64,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    sharing: GpuSharing,
    /// Share of each device's memory left free under [`GpuSharing::Memory`], percent.
    headroom_percent: u32,
    /// Device memory used by other processes (see [`LeaseQueue::set_other_processes_memory`]).
    external: Vec<u64>,
    /// Per device: `None` until sampled; then whether per-process memory can be read there
    /// (`Err`: why not).
    per_process: Vec<Option<std::result::Result<(), String>>>,
    /// Who has been admitted: chosen waiters (which may still wait for device locks) and
    /// leases, by ticket, with what they reserve and the head they overtook, if any.
    admitted: BTreeMap<u64, Admitted>,
    /// The waiting head's shadow (see [`crate::sharing`]).
    shadow: Option<(u64, Reservation)>,
    /// The device locks this process holds while any of its leases is admitted.
    shared_locks: Weak<Vec<DeviceLock>>,
    closed: bool,
    holders: BTreeMap<u64, Holder>,
    waiting: BTreeMap<u64, Waiter>,
    recent: VecDeque<LeaseRecord>,
    totals: LeaseTotals,
}

#[derive(Debug, Clone)]
struct Admitted {
    reservation: Reservation,
    past: Option<u64>,
}

#[derive(Debug, Clone)]
struct Holder {
    lease_id: u64,
    statement: String,
    group: Option<String>,
    precedence: u32,
    waited: Duration,
    granted_at: Instant,
    reservation: Reservation,
    backfilled: bool,
}

#[derive(Debug, Clone)]
struct Waiter {
    statement: String,
    group: Option<String>,
    precedence: u32,
    since: Instant,
    demand: DeviceDemand,
    /// Set while it is admitted but another process holds a device's lock.
    blocked_on: Option<String>,
    /// Woken when the waiter is admitted or the queue closes.
    wake: Arc<Notify>,
}

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
        let wait = self.wait_for_turn(ticket, &wake, &request.statement);
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

    /// Our admission in this process (when the rule admits us), then the device locks.
    async fn wait_for_turn(
        &self,
        ticket: u64,
        wake: &Notify,
        statement: &str,
    ) -> Result<(Turn, Option<Arc<Vec<DeviceLock>>>)> {
        let turn = loop {
            {
                let state = self.inner.state();
                if state.closed {
                    return Err(SchedulerError::QueueClosed);
                }
                if state.admitted.contains_key(&ticket) {
                    break Turn {
                        inner: Arc::clone(&self.inner),
                        ticket,
                    };
                }
            }
            // `notify_one` leaves a permit when nobody waits yet, so a hand-off between the
            // check above and this await is not lost.
            wake.notified().await;
        };
        let mut backoff = Duration::from_millis(1);
        loop {
            // An error returns and drops `turn`, which gives the admission back.
            if let Some(locks) = self.inner.take_locks(statement, ticket)? {
                return Ok((turn, locks));
            }
            if self.inner.state().closed {
                return Err(SchedulerError::QueueClosed);
            }
            // Sleep, but wake early when the queue closes.
            let _ = tokio::time::timeout(backoff, wake.notified()).await;
            backoff = (backoff * 2).min(MAX_LOCK_BACKOFF);
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

/// What leases may reserve of `total` bytes, `headroom_percent` left free.
fn reservable(total: u64, headroom_percent: u32) -> u64 {
    let headroom = u128::from(total) * u128::from(headroom_percent.min(100)) / 100;
    total - u64::try_from(headroom).unwrap_or(total)
}

/// Bytes reserved on each device by the admitted, and whether one of them owns every device.
fn reserved_totals(state: &State, devices: usize) -> (Vec<u64>, bool) {
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
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waiting per point of precedence gained; zero: no aging.
    fn aging(&self) -> Duration {
        Duration::from_nanos(self.aging_nanos.load(Ordering::Relaxed))
    }

    /// What memory-shared leases may reserve on each device: its memory, less the headroom,
    /// less what other processes use.
    fn usable(&self, state: &State) -> Vec<u64> {
        self.devices
            .iter()
            .enumerate()
            .map(|(d, info)| {
                reservable(info.memory_total, state.headroom_percent)
                    .saturating_sub(state.external.get(d).copied().unwrap_or(0))
            })
            .collect()
    }

    fn room(&self, state: &State, reserved: &[u64], whole: bool) -> Vec<u64> {
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
    fn checked_demand(&self, state: &State, request: &LeaseRequest) -> Result<DeviceDemand> {
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
    fn admit(&self, state: &mut State) {
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

    /// The device locks for admitted `ticket`: this process's, shared with its other leases,
    /// or taken now. `Ok(None)`: another process holds one (noted on the waiter).
    fn take_locks(
        &self,
        statement: &str,
        ticket: u64,
    ) -> Result<Option<Option<Arc<Vec<DeviceLock>>>>> {
        let Some(dir) = &self.locks else {
            return Ok(Some(None));
        };
        let mut state = self.state();
        if let Some(held) = state.shared_locks.upgrade() {
            return Ok(Some(Some(held)));
        }
        // Taken under the state's lock, so two admitted statements of this process never
        // race for the same file (each `try_lock` is one non-blocking `flock`).
        let uuids = self.devices.iter().map(|d| d.uuid.as_str());
        match dir.try_lock_all(uuids, &holder_tag(statement))? {
            Ok(locks) => {
                let locks = Arc::new(locks);
                state.shared_locks = Arc::downgrade(&locks);
                if let Some(w) = state.waiting.get_mut(&ticket) {
                    w.blocked_on = None;
                }
                Ok(Some(Some(locks)))
            }
            Err(busy) => {
                if let Some(w) = state.waiting.get_mut(&ticket) {
                    w.blocked_on = Some(busy);
                }
                Ok(None)
            }
        }
    }

    /// Why waiter `ticket` waits, in words.
    fn wait_reason(
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
    fn ranked(&self, now: Instant, per_point: Duration) -> Vec<(u64, &Waiter, u64)> {
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

fn duration_nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

fn holder_tag(statement: &str) -> String {
    format!("statement {statement}")
}

/// An admission: whoever holds it is a lease holder, or about to be. Dropping it — a lease
/// released, or an acquire abandoned while it waits for another process's device lock —
/// gives its reservation back and admits whoever fits now.
#[derive(Debug)]
struct Turn {
    inner: Arc<Inner>,
    ticket: u64,
}

impl Drop for Turn {
    fn drop(&mut self) {
        let mut state = self.inner.state();
        if state.admitted.remove(&self.ticket).is_some() {
            // A waiter that gives its admission back before it took the lease (its lock
            // wait failed or was dropped) is still listed and may be admitted again here; its
            // WaitGuard, dropped next, takes that back too.
            self.inner.admit(&mut state);
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WaitOutcome {
    Pending,
    Granted,
    TimedOut,
    Failed,
}

/// Registers a waiter and unregisters it however the wait ends, giving back an admission it
/// was handed but did not take.
struct WaitGuard<'a> {
    inner: &'a Inner,
    ticket: u64,
    since: Instant,
    wake: Arc<Notify>,
    outcome: WaitOutcome,
}

impl<'a> WaitGuard<'a> {
    /// Joins the queue, or refuses at once: closed, the group has its most waiters, or the
    /// demand could never fit.
    fn enter(inner: &'a Inner, request: &LeaseRequest) -> Result<Self> {
        let mut state = inner.state();
        if state.closed {
            return Err(SchedulerError::QueueClosed);
        }
        let demand = inner.checked_demand(&state, request)?;
        if let Some(max) = request.max_group_waiters {
            let free = state.admitted.is_empty() && state.waiting.is_empty();
            let of_group = state
                .waiting
                .values()
                .filter(|w| w.group == request.group)
                .count();
            if !free && of_group >= max {
                state.totals.refused += 1;
                return Err(SchedulerError::TooManyWaiters {
                    group: request.group.clone().unwrap_or_default(),
                    max,
                    statement: request.statement.clone(),
                });
            }
        }
        // Ticket and arrival time under the lock: ticket order is arrival order.
        let ticket = inner.next_id.fetch_add(1, Ordering::Relaxed);
        let since = Instant::now();
        let wake = Arc::new(Notify::new());
        state.waiting.insert(
            ticket,
            Waiter {
                statement: request.statement.clone(),
                group: request.group.clone(),
                precedence: request.precedence,
                since,
                demand,
                blocked_on: None,
                wake: Arc::clone(&wake),
            },
        );
        inner.admit(&mut state);
        Ok(Self {
            inner,
            ticket,
            since,
            wake,
            outcome: WaitOutcome::Pending,
        })
    }
}

impl Drop for WaitGuard<'_> {
    fn drop(&mut self) {
        let mut state = self.inner.state();
        state.waiting.remove(&self.ticket);
        match self.outcome {
            WaitOutcome::Pending => state.totals.cancelled += 1,
            WaitOutcome::TimedOut => state.totals.timed_out += 1,
            WaitOutcome::Granted | WaitOutcome::Failed => {}
        }
        // Admitted, but gone before it took the lease (cancelled, timed out, closed): give the
        // admission back. A waiter that leaves may also have been the head others waited behind.
        if self.outcome != WaitOutcome::Granted {
            state.admitted.remove(&self.ticket);
        }
        self.inner.admit(&mut state);
    }
}

/// Use of the node's GPUs until dropped: every device (a whole-device lease), or memory
/// reserved on some of them (under [`GpuSharing::Memory`]).
///
/// Dropping the lease (normally, on error, on cancellation or while a panic unwinds) releases
/// the device locks (when no other lease of this process needs them) and admits the next
/// waiters.
#[derive(Debug)]
pub struct Lease {
    queue: Arc<Inner>,
    lease_id: u64,
    statement: String,
    waited: Duration,
    granted_at: Instant,
    reservation: Reservation,
    locks: Option<Arc<Vec<DeviceLock>>>,
    turn: Option<Turn>,
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

#[cfg(test)]
mod tests {
    use std::sync::Mutex as StdMutex;

    use tokio::task::JoinHandle;

    use super::*;
    use crate::Inventory;

    fn queue(n: usize) -> LeaseQueue {
        LeaseQueue::new(Inventory::simulated(n).devices().unwrap())
    }

    /// Lets spawned tasks run until `cond` holds, without moving a paused clock.
    async fn settle_until(mut cond: impl FnMut() -> bool) {
        for _ in 0..10_000 {
            if cond() {
                return;
            }
            tokio::task::yield_now().await;
        }
        panic!("condition not reached");
    }

    fn waiting_names(q: &LeaseQueue) -> Vec<String> {
        q.snapshot()
            .waiting
            .into_iter()
            .map(|w| w.statement)
            .collect()
    }

    /// Starts `request` in a task and returns once it waits; the task ends with its lease.
    async fn spawn_acquire(q: &LeaseQueue, request: LeaseRequest) -> JoinHandle<Result<Lease>> {
        let name = request.statement.clone();
        let q2 = q.clone();
        let task = tokio::spawn(async move { q2.acquire(request).await });
        let q3 = q.clone();
        settle_until(move || q3.snapshot().waiting.iter().any(|w| w.statement == name)).await;
        task
    }

    type GrantLog = Arc<StdMutex<Vec<String>>>;

    /// Like [`spawn_acquire`], but the task logs its statement when granted and releases at once.
    async fn spawn_logged(q: &LeaseQueue, request: LeaseRequest, log: &GrantLog) -> JoinHandle<()> {
        let name = request.statement.clone();
        let (q2, log) = (q.clone(), Arc::clone(log));
        let task = tokio::spawn(async move {
            let lease = q2.acquire(request).await.unwrap();
            log.lock().unwrap().push(lease.statement().to_string());
        });
        let q3 = q.clone();
        settle_until(move || q3.snapshot().waiting.iter().any(|w| w.statement == name)).await;
        task
    }

    async fn wait_until(mut cond: impl FnMut() -> bool) {
        for _ in 0..5000 {
            if cond() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        panic!("condition not reached in time");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn two_hundred_statements_never_overlap_and_are_served_in_arrival_order() {
        const N: usize = 200;
        let q = queue(2);
        let log: Arc<StdMutex<Vec<(usize, Instant, Instant)>>> = Arc::default();
        // Hold the lease while everyone queues up, so arrival order is known exactly.
        let gate = q.acquire(LeaseRequest::new("gate")).await.unwrap();
        let mut tasks = Vec::new();
        for i in 0..N {
            let (q2, log) = (q.clone(), Arc::clone(&log));
            tasks.push(tokio::spawn(async move {
                let lease = q2
                    .acquire(LeaseRequest::new(format!("s{i}")))
                    .await
                    .unwrap();
                let start = Instant::now();
                assert_eq!(lease.devices().len(), 2);
                tokio::time::sleep(Duration::from_millis(2)).await;
                let end = Instant::now();
                log.lock().unwrap().push((i, start, end));
            }));
            let q3 = q.clone();
            wait_until(move || q3.snapshot().waiting.len() == i + 1).await;
        }
        let snap = q.snapshot();
        assert_eq!(snap.holder.unwrap().statement, "gate");
        assert_eq!(snap.waiting[0].statement, "s0");
        assert_eq!(snap.waiting[N - 1].statement, format!("s{}", N - 1));
        drop(gate);
        for t in tasks {
            t.await.unwrap();
        }
        let log = log.lock().unwrap();
        assert_eq!(log.len(), N, "every statement finished");
        let order: Vec<usize> = log.iter().map(|e| e.0).collect();
        assert_eq!(order, (0..N).collect::<Vec<_>>(), "FIFO");
        for pair in log.windows(2) {
            assert!(
                pair[0].2 <= pair[1].1,
                "holds {} and {} overlap",
                pair[0].0,
                pair[1].0
            );
        }
        let snap = q.snapshot();
        assert!(snap.holder.is_none() && snap.waiting.is_empty());
        assert_eq!(snap.totals.granted, N as u64 + 1);
        assert_eq!(snap.recent.len(), N + 1);
        assert!(snap.recent.iter().all(|r| !r.released_by_panic));
        assert!(snap.recent.last().unwrap().held >= Duration::from_millis(2));
    }

    #[tokio::test]
    async fn dropping_a_waiting_future_leaves_the_queue_consistent() {
        let q = queue(1);
        let held = q.acquire(LeaseRequest::new("holder")).await.unwrap();
        let (qa, qb) = (q.clone(), q.clone());
        let a =
            tokio::spawn(async move { qa.acquire(LeaseRequest::new("a")).await.map(|l| l.id()) });
        let q1 = q.clone();
        wait_until(move || q1.snapshot().waiting.len() == 1).await;
        let b = tokio::spawn(async move {
            qb.acquire(LeaseRequest::new("b"))
                .await
                .map(|l| l.statement().to_string())
        });
        let q2 = q.clone();
        wait_until(move || q2.snapshot().waiting.len() == 2).await;

        a.abort();
        assert!(a.await.unwrap_err().is_cancelled());
        let q3 = q.clone();
        wait_until(move || q3.snapshot().waiting.len() == 1).await;
        assert_eq!(q.snapshot().waiting[0].statement, "b");
        assert_eq!(q.snapshot().totals.cancelled, 1);

        drop(held);
        assert_eq!(b.await.unwrap().unwrap(), "b");
        // A future dropped by select! is cancelled the same way.
        let _held = q.acquire(LeaseRequest::new("again")).await.unwrap();
        tokio::select! {
            _ = q.acquire(LeaseRequest::new("impatient")) => panic!("lease is held"),
            _ = tokio::time::sleep(Duration::from_millis(5)) => {}
        }
        let snap = q.snapshot();
        assert!(snap.waiting.is_empty());
        assert_eq!(snap.totals.cancelled, 2);
    }

    #[tokio::test]
    async fn a_timeout_says_how_long_it_waited_and_who_holds_the_lease() {
        let q = queue(1);
        let _held = q.acquire(LeaseRequest::new("stmt-42")).await.unwrap();
        let started = Instant::now();
        let e = q
            .acquire(LeaseRequest::new("stmt-43").timeout(Duration::from_millis(50)))
            .await
            .unwrap_err();
        assert!(started.elapsed() >= Duration::from_millis(50));
        assert_eq!(e.code(), "57G01");
        let text = e.to_string();
        assert!(text.contains("statement 'stmt-43' waited"), "{text}");
        assert!(text.contains("held by statement 'stmt-42'"), "{text}");
        let snap = q.snapshot();
        assert_eq!(snap.totals.timed_out, 1);
        assert!(snap.waiting.is_empty());
    }

    #[tokio::test]
    async fn the_queue_default_timeout_applies() {
        let devices = Inventory::simulated(1).devices().unwrap();
        let q = LeaseQueue::with_options(devices, None, Some(Duration::from_millis(20)));
        let _held = q.acquire(LeaseRequest::new("a")).await.unwrap();
        let e = q.acquire(LeaseRequest::new("b")).await.unwrap_err();
        assert_eq!(e.code(), "57G01");
    }

    #[tokio::test]
    async fn a_panic_while_holding_releases_the_lease() {
        let q = queue(1);
        let q2 = q.clone();
        let crashed = tokio::spawn(async move {
            let _lease = q2.acquire(LeaseRequest::new("doomed")).await.unwrap();
            panic!("UDF crashed while holding the GPUs");
        });
        assert!(crashed.await.unwrap_err().is_panic());
        let lease = q
            .try_acquire("survivor")
            .unwrap()
            .expect("lease was released");
        assert_eq!(lease.statement(), "survivor");
        let snap = q.snapshot();
        assert!(snap.recent.last().unwrap().released_by_panic);
        assert_eq!(snap.recent.last().unwrap().statement, "doomed");
    }

    #[tokio::test]
    async fn try_acquire_never_jumps_the_queue() {
        let q = queue(1);
        let held = q.acquire(LeaseRequest::new("holder")).await.unwrap();
        assert!(q.try_acquire("x").unwrap().is_none());
        let q2 = q.clone();
        let waiter =
            tokio::spawn(
                async move { q2.acquire(LeaseRequest::new("waiter")).await.unwrap().id() },
            );
        let q3 = q.clone();
        wait_until(move || q3.snapshot().waiting.len() == 1).await;
        drop(held);
        // The turn went to the waiter, not to the opportunist.
        waiter.await.unwrap();
        assert_eq!(q.snapshot().totals.busy, 1);
        assert!(q.try_acquire("late").unwrap().is_some());
    }

    #[tokio::test]
    async fn close_fails_waiters_but_not_holders() {
        let q = queue(1);
        let held = q.acquire(LeaseRequest::new("holder")).await.unwrap();
        let q2 = q.clone();
        let waiter =
            tokio::spawn(async move { q2.acquire(LeaseRequest::new("w")).await.map(|_| ()) });
        let q3 = q.clone();
        wait_until(move || q3.snapshot().waiting.len() == 1).await;
        q.close();
        assert_eq!(waiter.await.unwrap().unwrap_err().code(), "57G02");
        assert_eq!(held.devices().len(), 1);
        assert_eq!(q.try_acquire("x").unwrap_err().code(), "57G02");
    }

    #[tokio::test]
    async fn device_locks_exclude_another_queue_as_they_would_another_process() {
        let dir = tempfile::tempdir().unwrap();
        let devices = Inventory::simulated(2).devices().unwrap();
        let locks = DeviceLockDir::open(dir.path()).unwrap();
        let a = LeaseQueue::with_options(devices.clone(), Some(locks.clone()), None);
        let b = LeaseQueue::with_options(devices.clone(), Some(locks.clone()), None);
        let held = a.acquire(LeaseRequest::new("in-a")).await.unwrap();
        assert!(
            locks
                .holder_of(&devices[1].uuid)
                .unwrap()
                .contains("statement in-a")
        );
        assert!(b.try_acquire("in-b").unwrap().is_none());
        let e = b
            .acquire(LeaseRequest::new("in-b").timeout(Duration::from_millis(30)))
            .await
            .unwrap_err();
        let text = e.to_string();
        assert!(text.contains("is locked by another process"), "{text}");
        assert!(text.contains("statement in-a"), "{text}");
        let b2 = b.clone();
        let waiter =
            tokio::spawn(
                async move { b2.acquire(LeaseRequest::new("in-b")).await.map(|l| l.id()) },
            );
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert!(b.snapshot().waiting[0].blocked_on.is_some());
        drop(held);
        waiter.await.unwrap().unwrap();
        assert!(a.try_acquire("in-a again").unwrap().is_some());
    }

    #[tokio::test(start_paused = true)]
    async fn one_group_is_served_in_arrival_order_however_long_it_waits() {
        let q = queue(1).with_precedence_aging(Duration::from_millis(1));
        let log = GrantLog::default();
        let gate = q.acquire(LeaseRequest::new("gate")).await.unwrap();
        let mut tasks = Vec::new();
        for (i, gap) in [0, 3, 0, 7, 1, 0].into_iter().enumerate() {
            tokio::time::advance(Duration::from_millis(gap)).await;
            let request = LeaseRequest::new(format!("etl{i}"))
                .group("ETL")
                .precedence(500);
            tasks.push(spawn_logged(&q, request, &log).await);
        }
        let expected: Vec<String> = (0..6).map(|i| format!("etl{i}")).collect();
        assert_eq!(waiting_names(&q), expected);
        drop(gate);
        for t in tasks {
            t.await.unwrap();
        }
        assert_eq!(*log.lock().unwrap(), expected);
    }

    #[tokio::test(start_paused = true)]
    async fn a_later_high_precedence_waiter_goes_before_an_earlier_low_one() {
        let q = queue(1);
        let log = GrantLog::default();
        let gate = q.acquire(LeaseRequest::new("gate")).await.unwrap();
        let low = spawn_logged(&q, LeaseRequest::new("low").precedence(100), &log).await;
        let medium = spawn_logged(&q, LeaseRequest::new("medium"), &log).await;
        let high = spawn_logged(&q, LeaseRequest::new("high").precedence(1000), &log).await;
        assert_eq!(waiting_names(&q), ["high", "medium", "low"]);
        drop(gate);
        for t in [low, medium, high] {
            t.await.unwrap();
        }
        assert_eq!(*log.lock().unwrap(), ["high", "medium", "low"]);
    }

    #[tokio::test(start_paused = true)]
    async fn aging_lets_a_long_waiting_low_precedence_statement_go_before_a_fresh_high_one() {
        let q = queue(1).with_precedence_aging(Duration::from_millis(1));
        let log = GrantLog::default();
        let gate = q.acquire(LeaseRequest::new("gate")).await.unwrap();
        let high = |name: &str| LeaseRequest::new(name).precedence(1000);
        let low = spawn_logged(&q, LeaseRequest::new("low").precedence(100), &log).await;
        // (1000 − 100)·1 ms minus one: a newcomer of 1000 still goes first.
        tokio::time::advance(Duration::from_millis(899)).await;
        let c = spawn_logged(&q, high("c"), &log).await;
        let snap = q.snapshot();
        assert_eq!(waiting_names(&q), ["c", "low"]);
        assert_eq!(snap.waiting[0].effective_precedence, 1000);
        assert_eq!(snap.waiting[1].effective_precedence, 999);
        // Now "low" has waited (1000 − 100)·1 ms: equal to a newcomer of 1000, and earlier.
        tokio::time::advance(Duration::from_millis(1)).await;
        let d = spawn_logged(&q, high("d"), &log).await;
        assert_eq!(waiting_names(&q), ["c", "low", "d"]);
        let effective: Vec<u64> = q
            .snapshot()
            .waiting
            .iter()
            .map(|w| w.effective_precedence)
            .collect();
        assert_eq!(effective, [1001, 1000, 1000]);
        // And no later arrival of precedence ≤ 1000 overtakes it.
        tokio::time::advance(Duration::from_millis(500)).await;
        let e = spawn_logged(&q, high("e"), &log).await;
        assert_eq!(waiting_names(&q), ["c", "low", "d", "e"]);
        drop(gate);
        for t in [low, c, d, e] {
            t.await.unwrap();
        }
        assert_eq!(*log.lock().unwrap(), ["c", "low", "d", "e"]);
    }

    #[tokio::test(start_paused = true)]
    async fn aging_bounds_the_wait_of_a_low_statement_under_a_stream_of_high_ones() {
        const PER_POINT: Duration = Duration::from_millis(1);
        const HOLD: Duration = Duration::from_millis(10);
        let q = queue(1).with_precedence_aging(PER_POINT);
        let t0 = Instant::now();
        // (statement, arrived, granted), relative to t0.
        type Log = Arc<StdMutex<Vec<(String, Duration, Duration)>>>;
        let log = Log::default();
        let run = move |q: LeaseQueue, request: LeaseRequest, log: Log| async move {
            let arrived = t0.elapsed();
            let lease = q.acquire(request).await.unwrap();
            let entry = (lease.statement().to_string(), arrived, t0.elapsed());
            log.lock().unwrap().push(entry);
            tokio::time::sleep(HOLD).await;
            lease.waited()
        };
        // Precedence-1000 statements arrive every 5 ms, twice as fast as they are served:
        // without aging, a low-precedence statement would never run.
        let stream = tokio::spawn({
            let (q, log) = (q.clone(), Arc::clone(&log));
            async move {
                for i in 0.. {
                    let request = LeaseRequest::new(format!("high{i}")).precedence(1000);
                    tokio::spawn(run(q.clone(), request, Arc::clone(&log)));
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            }
        });
        tokio::time::sleep(Duration::from_millis(2)).await;
        let p = 100;
        let low_arrived = t0.elapsed();
        let low = tokio::spawn(run(
            q.clone(),
            LeaseRequest::new("low").precedence(p),
            Arc::clone(&log),
        ));
        // After (P_max − p)·per_point, nobody who arrives later goes before "low".
        let aged = PER_POINT * (1000 - p);
        tokio::time::sleep_until(t0 + low_arrived + aged).await;
        let snap = q.snapshot();
        let ahead = snap
            .waiting
            .iter()
            .position(|w| w.statement == "low")
            .unwrap();
        assert_eq!(snap.waiting[ahead].effective_precedence, 1000);
        assert!(ahead > 10, "the stream is ahead of it: {ahead}");
        let holder_left = HOLD.saturating_sub(snap.holder.unwrap().held_for);
        let bound = aged + holder_left + HOLD * ahead as u32;

        let waited = low.await.unwrap();
        stream.abort();
        assert!(
            waited > aged,
            "it had to wait for its precedence to age: {waited:?}"
        );
        assert!(waited <= bound, "waited {waited:?}, bound {bound:?}");
        let log = log.lock().unwrap();
        let at = log.iter().position(|e| e.0 == "low").unwrap();
        assert!(
            log[..at].iter().all(|e| e.1 < low_arrived + aged),
            "only statements that arrived before it had aged went first"
        );
        assert!(log.len() > at + 1 && log[at + 1].1 >= low_arrived + aged);
    }

    #[tokio::test(start_paused = true)]
    async fn a_per_point_of_zero_turns_aging_off() {
        let q = queue(1).with_precedence_aging(Duration::ZERO);
        assert_eq!(q.precedence_aging(), Duration::ZERO);
        assert_eq!(queue(1).precedence_aging(), DEFAULT_AGING);
        let _gate = q.acquire(LeaseRequest::new("gate")).await.unwrap();
        let _low = spawn_acquire(&q, LeaseRequest::new("low").precedence(100)).await;
        tokio::time::advance(Duration::from_secs(3600)).await;
        let _high = spawn_acquire(&q, LeaseRequest::new("high").precedence(101)).await;
        let snap = q.snapshot();
        assert_eq!(waiting_names(&q), ["high", "low"]);
        assert_eq!(snap.waiting[1].effective_precedence, 100);
        assert!(snap.waiting[1].waiting_for >= Duration::from_secs(3600));
    }

    #[tokio::test]
    async fn max_group_waiters_refuses_one_more_waiter_of_the_group_but_not_of_another() {
        let q = queue(1);
        let etl = |name: &str| {
            LeaseRequest::new(name)
                .group("ETL")
                .max_group_waiters(Some(2))
        };
        let gate = q.acquire(etl("gate")).await.unwrap();
        let etl1 = spawn_acquire(&q, etl("etl1")).await;
        let etl2 = spawn_acquire(&q, etl("etl2")).await;
        let e = q.acquire(etl("etl3")).await.unwrap_err();
        assert_eq!(e.code(), "57G04");
        match &e {
            SchedulerError::TooManyWaiters {
                group,
                max,
                statement,
            } => assert_eq!(
                (group.as_str(), *max, statement.as_str()),
                ("ETL", 2, "etl3")
            ),
            other => panic!("unexpected error {other}"),
        }
        assert!(e.to_string().starts_with("[57G04] statement 'etl3'"), "{e}");
        // Another group and statements without a group still queue.
        let bi = LeaseRequest::new("bi1")
            .group("BI")
            .max_group_waiters(Some(2));
        let bi1 = spawn_acquire(&q, bi).await;
        let loose = spawn_acquire(&q, LeaseRequest::new("loose")).await;
        // A cap of 0 admits no waiter while the lease is busy.
        let adhoc = |name: &str| {
            LeaseRequest::new(name)
                .group("ADHOC")
                .max_group_waiters(Some(0))
        };
        assert_eq!(q.acquire(adhoc("now")).await.unwrap_err().code(), "57G04");
        assert_eq!(q.snapshot().totals.refused, 2);
        assert_eq!(waiting_names(&q), ["etl1", "etl2", "bi1", "loose"]);

        // Once etl1 holds the lease, it no longer waits: the group has room again.
        drop(gate);
        let lease1 = etl1.await.unwrap().unwrap();
        let etl3 = spawn_acquire(&q, etl("etl3")).await;
        assert_eq!(waiting_names(&q), ["etl2", "bi1", "loose", "etl3"]);
        drop(lease1);
        for task in [etl2, bi1, loose, etl3] {
            drop(task.await.unwrap().unwrap());
        }
        // A free lease nobody waits for is taken even with a cap of 0.
        let lease = q.acquire(adhoc("now")).await.unwrap();
        assert_eq!(q.snapshot().holder.unwrap().group.as_deref(), Some("ADHOC"));
        drop(lease);
        assert_eq!(q.snapshot().totals.refused, 2);
    }

    #[tokio::test]
    async fn a_waiter_cancelled_right_after_it_was_chosen_passes_the_turn_on() {
        let q = queue(1);
        let gate = q.acquire(LeaseRequest::new("gate")).await.unwrap();
        let first = spawn_acquire(&q, LeaseRequest::new("first")).await;
        let second = spawn_acquire(&q, LeaseRequest::new("second")).await;
        // The turn goes to "first", which is cancelled before it runs again.
        drop(gate);
        first.abort();
        assert!(first.await.unwrap_err().is_cancelled());
        let lease = second.await.unwrap().unwrap();
        assert_eq!(lease.statement(), "second");
        drop(lease);
        let snap = q.snapshot();
        assert_eq!(snap.totals.cancelled, 1);
        assert!(snap.waiting.is_empty() && snap.holder.is_none());
        assert!(q.try_acquire("after").unwrap().is_some());
    }

    #[tokio::test]
    async fn dropping_a_waiter_blocked_on_a_device_lock_hands_the_turn_to_the_next() {
        let dir = tempfile::tempdir().unwrap();
        let devices = Inventory::simulated(2).devices().unwrap();
        let locks = DeviceLockDir::open(dir.path()).unwrap();
        let a = LeaseQueue::with_options(devices.clone(), Some(locks.clone()), None);
        let b = LeaseQueue::with_options(devices, Some(locks), None);
        let held = a.acquire(LeaseRequest::new("in-a")).await.unwrap();
        // "first" gets b's turn and then waits for the device locks "in-a" holds.
        let first = spawn_acquire(&b, LeaseRequest::new("first")).await;
        let b1 = b.clone();
        wait_until(move || b1.snapshot().waiting[0].blocked_on.is_some()).await;
        let second = spawn_acquire(&b, LeaseRequest::new("second")).await;
        let snap = b.snapshot();
        assert_eq!(waiting_names(&b), ["first", "second"]);
        assert!(snap.waiting[1].blocked_on.is_none());
        assert!(b.try_acquire("opportunist").unwrap().is_none());

        first.abort();
        assert!(first.await.unwrap_err().is_cancelled());
        // The turn moved on: "second" now waits for the device locks itself.
        let b2 = b.clone();
        wait_until(move || {
            let snap = b2.snapshot();
            snap.waiting.len() == 1
                && snap.waiting[0].statement == "second"
                && snap.waiting[0].blocked_on.is_some()
        })
        .await;
        assert_eq!(b.snapshot().totals.cancelled, 1);
        drop(held);
        let lease = second.await.unwrap().unwrap();
        assert_eq!(lease.statement(), "second");
        drop(lease);
        assert!(b.try_acquire("again").unwrap().is_some());
    }

    #[tokio::test]
    async fn close_fails_a_waiter_blocked_on_a_device_lock() {
        let dir = tempfile::tempdir().unwrap();
        let devices = Inventory::simulated(1).devices().unwrap();
        let locks = DeviceLockDir::open(dir.path()).unwrap();
        let a = LeaseQueue::with_options(devices.clone(), Some(locks.clone()), None);
        let b = LeaseQueue::with_options(devices, Some(locks), None);
        let _held = a.acquire(LeaseRequest::new("in-a")).await.unwrap();
        let blocked = spawn_acquire(&b, LeaseRequest::new("blocked")).await;
        let b1 = b.clone();
        wait_until(move || b1.snapshot().waiting[0].blocked_on.is_some()).await;
        b.close();
        let e = blocked.await.unwrap().unwrap_err();
        assert_eq!(e.code(), "57G02");
        assert!(b.snapshot().waiting.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn the_snapshot_shows_groups_precedences_and_the_grant_order() {
        let q = queue(1).with_precedence_aging(Duration::from_millis(1));
        let gate = q
            .acquire(LeaseRequest::new("gate").group("ADMIN").precedence(900))
            .await
            .unwrap();
        let holder = q.snapshot().holder.unwrap();
        assert_eq!(
            (holder.group.as_deref(), holder.precedence),
            (Some("ADMIN"), 900)
        );
        let a = spawn_acquire(&q, LeaseRequest::new("a").group("ETL").precedence(200)).await;
        tokio::time::advance(Duration::from_millis(50)).await;
        let b = spawn_acquire(&q, LeaseRequest::new("b").group("BI").precedence(700)).await;
        let c = spawn_acquire(&q, LeaseRequest::new("c")).await;
        let shown: Vec<_> = q
            .snapshot()
            .waiting
            .into_iter()
            .map(|w| {
                (
                    w.statement,
                    w.group,
                    w.precedence,
                    w.effective_precedence,
                    w.waiting_for,
                )
            })
            .collect();
        let ms = Duration::from_millis;
        assert_eq!(
            shown,
            [
                ("b".to_string(), Some("BI".to_string()), 700, 700, ms(0)),
                ("c".to_string(), None, DEFAULT_PRECEDENCE, 300, ms(0)),
                ("a".to_string(), Some("ETL".to_string()), 200, 250, ms(50)),
            ]
        );

        drop(gate);
        let lease = b.await.unwrap().unwrap();
        let snap = q.snapshot();
        let holder = snap.holder.unwrap();
        assert_eq!(holder.statement, "b");
        assert_eq!(
            (holder.group.as_deref(), holder.precedence),
            (Some("BI"), 700)
        );
        assert_eq!(waiting_names(&q), ["c", "a"]);
        drop(lease);
        assert_eq!(c.await.unwrap().unwrap().statement(), "c");
        let lease = a.await.unwrap().unwrap();
        assert_eq!(lease.waited(), ms(50));
        assert_eq!(q.snapshot().holder.unwrap().group.as_deref(), Some("ETL"));
    }

    #[tokio::test]
    async fn a_timeout_counts_only_the_waiters_chosen_before_it_as_ahead() {
        let q = queue(1).with_precedence_aging(Duration::ZERO);
        let _held = q.acquire(LeaseRequest::new("holder")).await.unwrap();
        let _high = spawn_acquire(&q, LeaseRequest::new("high").precedence(900)).await;
        let _low = spawn_acquire(&q, LeaseRequest::new("low").precedence(100)).await;
        let e = q
            .acquire(LeaseRequest::new("mid").timeout(Duration::from_millis(20)))
            .await
            .unwrap_err();
        assert!(
            e.to_string()
                .contains("and 1 statement(s) wait ahead of this one"),
            "{e}"
        );
    }

    const GIB: u64 = 1 << 30;

    /// `n` simulated devices of 80 GiB shared by memory, 10% headroom: 72 GiB each to reserve.
    fn shared(n: usize) -> LeaseQueue {
        queue(n).with_sharing(GpuSharing::Memory, 10)
    }

    fn reserved_now(q: &LeaseQueue) -> Vec<u64> {
        q.snapshot().memory.iter().map(|m| m.reserved).collect()
    }

    #[tokio::test]
    async fn memory_leases_share_a_device_while_they_fit_and_the_next_says_why_it_waits() {
        let q = shared(1);
        let a = q
            .acquire(LeaseRequest::new("a").memory([30 * GIB]))
            .await
            .unwrap();
        let b = q
            .acquire(LeaseRequest::new("b").memory([30 * GIB]))
            .await
            .unwrap();
        assert!(!a.is_whole());
        assert_eq!(a.reserved()[0].bytes, 30 * GIB);
        assert_eq!(reserved_now(&q), vec![60 * GIB]);
        let c = spawn_acquire(&q, LeaseRequest::new("c").memory([30 * GIB])).await;
        let snap = q.snapshot();
        assert_eq!(snap.holders.len(), 2);
        assert_eq!(snap.memory[0].usable, 72 * GIB);
        let reason = &snap.waiting[0].reason;
        assert!(reason.contains("GPU 0 is 18.0 GiB short"), "{reason}");
        assert_eq!(snap.waiting[0].demand_bytes, 30 * GIB);
        drop(a);
        let c = c.await.unwrap().unwrap();
        assert_eq!(c.devices().len(), 1);
        assert_eq!(reserved_now(&q), vec![60 * GIB]);
        drop((b, c));
        assert_eq!(reserved_now(&q), vec![0]);
        assert!(q.snapshot().holders.is_empty());
    }

    #[tokio::test]
    async fn instances_go_one_per_device_while_devices_have_room() {
        let q = shared(3);
        let lease = q
            .acquire(LeaseRequest::new("spread").memory([10 * GIB; 4]))
            .await
            .unwrap();
        let at: Vec<u32> = lease.instance_devices().iter().map(|d| d.index).collect();
        assert_eq!(at, vec![0, 1, 2, 0]);
        assert_eq!(lease.devices().len(), 3);
        assert_eq!(reserved_now(&q), vec![20 * GIB, 10 * GIB, 10 * GIB]);
    }

    #[tokio::test]
    async fn exclusive_sharing_gives_every_request_every_device() {
        let q = queue(2);
        let a = q
            .acquire(LeaseRequest::new("a").memory([GIB]))
            .await
            .unwrap();
        assert!(a.is_whole());
        assert_eq!(a.devices().len(), 2);
        assert!(
            q.try_acquire_request(LeaseRequest::new("b").memory([GIB]))
                .unwrap()
                .is_none()
        );
    }

    #[tokio::test]
    async fn a_whole_device_waiter_blocks_backfill_and_starts_when_every_reservation_ends() {
        let q = shared(1);
        let small = q
            .acquire(LeaseRequest::new("small").memory([GIB]))
            .await
            .unwrap();
        let log: GrantLog = Arc::default();
        let whole = spawn_logged(&q, LeaseRequest::new("whole"), &log).await;
        let after = spawn_logged(&q, LeaseRequest::new("after").memory([GIB]), &log).await;
        let snap = q.snapshot();
        assert!(
            snap.waiting[0].reason.contains("needs every GPU"),
            "{:?}",
            snap.waiting
        );
        assert!(
            snap.waiting[1]
                .reason
                .contains("waits behind statement 'whole'"),
            "{:?}",
            snap.waiting
        );
        drop(small);
        whole.await.unwrap();
        after.await.unwrap();
        assert_eq!(*log.lock().unwrap(), vec!["whole", "after"]);
    }

    #[tokio::test]
    async fn a_small_statement_backfills_beside_a_waiting_head_but_not_into_its_room() {
        let q = shared(1);
        let first = q
            .acquire(LeaseRequest::new("first").memory([40 * GIB]))
            .await
            .unwrap();
        // The head needs 50: 32 are free now, its shadow is 50 of the 72.
        let head = spawn_acquire(&q, LeaseRequest::new("head").memory([50 * GIB])).await;
        // 20 fit now and outside the shadow: it starts at once, past the head.
        let small = q
            .acquire(LeaseRequest::new("small").memory([20 * GIB]))
            .await
            .unwrap();
        assert!(
            q.snapshot()
                .holders
                .iter()
                .any(|h| h.statement == "small" && h.backfilled)
        );
        // 5 more would fit now (72-60=12) but not outside the shadow (72-50-20=2): it waits.
        let late = spawn_acquire(&q, LeaseRequest::new("late").memory([5 * GIB])).await;
        let snap = q.snapshot();
        assert_eq!(snap.waiting[1].statement, "late");
        assert!(
            snap.waiting[1].reason.contains("backfill rule"),
            "{:?}",
            snap.waiting[1]
        );
        drop(first);
        let head = head.await.unwrap().unwrap();
        assert_eq!(reserved_now(&q), vec![70 * GIB]);
        drop(small);
        late.await.unwrap().unwrap();
        drop(head);
        assert_eq!(q.snapshot().totals.backfilled, 1);
    }

    #[tokio::test]
    async fn a_demand_no_device_can_hold_is_refused_at_once() {
        let q = shared(2);
        let e = q
            .acquire(LeaseRequest::new("huge").memory([73 * GIB]))
            .await
            .unwrap_err();
        assert_eq!(e.code(), "53G03");
        assert!(
            e.to_string().contains("can reserve at most 72.0 GiB"),
            "{e}"
        );
        assert!(q.snapshot().waiting.is_empty());
        // Spread over two devices, the same bytes fit.
        drop(
            q.acquire(LeaseRequest::new("split").memory([36 * GIB; 2]))
                .await
                .unwrap(),
        );
    }

    #[tokio::test]
    async fn other_processes_memory_shrinks_what_leases_may_reserve() {
        let q = shared(1);
        q.set_other_processes_memory(vec![60 * GIB]);
        let waiter = spawn_acquire(&q, LeaseRequest::new("w").memory([20 * GIB])).await;
        assert!(q.snapshot().waiting[0].reason.contains("8.0 GiB short"));
        assert_eq!(q.snapshot().memory[0].other_processes, 60 * GIB);
        q.set_other_processes_memory(vec![10 * GIB]);
        waiter.await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn every_reservation_is_released_on_error_cancel_timeout_and_panic() {
        let q = shared(1);
        let big = q
            .acquire(LeaseRequest::new("big").memory([60 * GIB]))
            .await
            .unwrap();
        // A timeout, naming why.
        let e = q
            .acquire(
                LeaseRequest::new("t")
                    .memory([20 * GIB])
                    .timeout(Duration::from_millis(20)),
            )
            .await
            .unwrap_err();
        assert!(e.to_string().contains("short"), "{e}");
        // A cancelled wait.
        let cancelled = spawn_acquire(&q, LeaseRequest::new("c").memory([20 * GIB])).await;
        cancelled.abort();
        let _ = cancelled.await;
        // A holder that panics, and one that ends in an error (its lease dropped with it).
        let q2 = q.clone();
        let crashed = tokio::spawn(async move {
            let _l = q2
                .acquire(LeaseRequest::new("p").memory([5 * GIB]))
                .await
                .unwrap();
            panic!("UDF crashed");
        });
        assert!(crashed.await.unwrap_err().is_panic());
        let failed: Result<()> = async {
            let _l = q.acquire(LeaseRequest::new("e").memory([5 * GIB])).await?;
            Err(SchedulerError::QueueClosed)
        }
        .await;
        assert!(failed.is_err());
        drop(big);
        let snap = q.snapshot();
        assert!(
            snap.holders.is_empty() && snap.waiting.is_empty(),
            "{snap:?}"
        );
        assert_eq!(reserved_now(&q), vec![0]);
        assert_eq!((snap.totals.timed_out, snap.totals.cancelled), (1, 1));
        assert!(q.inner.state().admitted.is_empty());
    }

    /// Random arrivals, sizes and hold times on simulated devices of different sizes, some
    /// waits cancelled or timed out and some holders panicking: what the granted leases hold
    /// never exceeds a device's usable memory, and everything is released at the end.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn random_statements_never_oversubscribe_and_release_everything() {
        let mut devices = Inventory::simulated(3).devices().unwrap();
        for (d, gib) in devices.iter_mut().zip([16u64, 24, 40]) {
            d.memory_total = gib * GIB;
        }
        let usable: Vec<u64> = devices
            .iter()
            .map(|d| reservable(d.memory_total, 10))
            .collect();
        let q = LeaseQueue::new(devices).with_sharing(GpuSharing::Memory, 10);
        let in_use: Arc<StdMutex<Vec<u64>>> = Arc::new(StdMutex::new(vec![0; 3]));
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = |below: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % below
        };
        let mut tasks = Vec::new();
        for i in 0..120 {
            let demand: Vec<u64> = (0..1 + next(3)).map(|_| (1 + next(14)) * GIB).collect();
            let hold = Duration::from_millis(1 + next(5));
            let fate = next(10);
            let (q, in_use, usable) = (q.clone(), Arc::clone(&in_use), usable.clone());
            tasks.push(tokio::spawn(async move {
                let request = LeaseRequest::new(format!("s{i}")).memory(demand);
                let request = match fate {
                    0 => request.timeout(Duration::from_millis(2)),
                    _ => request,
                };
                let wait = q.acquire(request);
                let lease = if fate == 1 {
                    match tokio::time::timeout(Duration::from_millis(3), wait).await {
                        Ok(lease) => lease,
                        Err(_) => return,
                    }
                } else {
                    wait.await
                };
                let Ok(lease) = lease else { return };
                {
                    let mut now = in_use.lock().unwrap();
                    for r in lease.reserved() {
                        let d = r.index as usize;
                        now[d] += r.bytes;
                        assert!(
                            now[d] <= usable[d],
                            "device {d}: {} of {}",
                            now[d],
                            usable[d]
                        );
                    }
                }
                tokio::time::sleep(hold).await;
                {
                    let mut now = in_use.lock().unwrap();
                    for r in lease.reserved() {
                        now[r.index as usize] -= r.bytes;
                    }
                }
                if fate == 2 {
                    panic!("a UDF crashed while holding its reservation");
                }
            }));
            if next(3) == 0 {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
        for t in tasks {
            let _ = t.await;
        }
        let snap = q.snapshot();
        assert!(snap.holders.is_empty() && snap.waiting.is_empty());
        assert!(snap.memory.iter().all(|m| m.reserved == 0));
        assert!(q.inner.state().admitted.is_empty());
        assert!(snap.totals.granted > 60, "{:?}", snap.totals);
        assert!(snap.recent.iter().any(|r| r.released_by_panic));
    }
}
