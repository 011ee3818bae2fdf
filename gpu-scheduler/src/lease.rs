//! The node lease queue ("global semaphore"): statements wait, by precedence with aging, for
//! exclusive use of all of the node's GPUs and get an RAII [`Lease`] that can never leak.

use std::cmp::Reverse;
use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::lock::{DeviceLock, DeviceLockDir};
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
        }
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
    /// Who has the in-process turn: a chosen waiter (its ticket; it may still wait for device
    /// locks), or a lease (the ticket it was granted under). `None`: free, and nobody waits
    /// (unless the queue is closed).
    turn: Option<u64>,
    closed: bool,
    holder: Option<Holder>,
    waiting: BTreeMap<u64, Waiter>,
    recent: VecDeque<LeaseRecord>,
    totals: LeaseTotals,
}

#[derive(Debug, Clone)]
struct Holder {
    lease_id: u64,
    statement: String,
    group: Option<String>,
    precedence: u32,
    waited: Duration,
    granted_at: Instant,
}

#[derive(Debug, Clone)]
struct Waiter {
    statement: String,
    group: Option<String>,
    precedence: u32,
    since: Instant,
    /// Set while the in-process turn is ours but another process holds this device's lock.
    blocked_on: Option<String>,
    /// Woken when the waiter gets the turn or the queue closes.
    wake: Arc<Notify>,
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
}

/// A statement waiting for the lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WaiterSnapshot {
    /// The waiting statement.
    pub statement: String,
    /// How long it has waited so far.
    pub waiting_for: Duration,
    /// A device locked by another process that this waiter, next in line, is blocked on.
    pub blocked_on: Option<String>,
    /// Its consumer group, if its request named one.
    pub group: Option<String>,
    /// The precedence it asked for.
    pub precedence: u32,
    /// Its precedence now, aging included: `precedence + floor(waiting_for / per_point)`.
    pub effective_precedence: u64,
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
}

/// Counters since the queue was created.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LeaseTotals {
    /// Leases granted.
    pub granted: u64,
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
    /// Number of devices a lease owns.
    pub devices: usize,
    /// Who holds the lease now.
    pub holder: Option<HolderSnapshot>,
    /// Who waits, in the order they would be granted now: the one whose turn it is (waiting
    /// for a device lock) first, then by effective precedence, highest first, then by arrival.
    pub waiting: Vec<WaiterSnapshot>,
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
        Self {
            inner: Arc::new(Inner {
                devices: devices.into(),
                locks,
                default_timeout,
                aging_nanos: AtomicU64::new(duration_nanos(DEFAULT_AGING)),
                next_id: AtomicU64::new(1),
                state: Mutex::new(State::default()),
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

    /// How long a waiter waits per point of precedence it gains (zero: no aging).
    pub fn precedence_aging(&self) -> Duration {
        self.inner.aging()
    }

    /// The devices every lease owns.
    pub fn devices(&self) -> &[DeviceInfo] {
        &self.inner.devices
    }

    /// Waits for the lease, by precedence with aging (see [`LeaseQueue`]).
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: dropping the returned future before it completes (a cancelled query, a
    /// `select!` branch not taken) removes the caller from the queue and releases anything it had
    /// taken, the in-process turn included; the statements behind it move up. The drop is
    /// counted in [`LeaseTotals::cancelled`].
    ///
    /// # Errors
    ///
    /// [`SchedulerError::LeaseTimeout`] (code 57G01) when the request's or the queue's timeout
    /// passes, naming the holder; [`SchedulerError::QueueClosed`] after [`LeaseQueue::close`];
    /// [`SchedulerError::TooManyWaiters`] (code 57G04) when the request's group already has
    /// [`LeaseRequest::max_group_waiters`] waiting; [`SchedulerError::DeviceLock`] if a lock
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
    /// for callers that prefer the CPU to waiting. The lease shows [`DEFAULT_PRECEDENCE`] and
    /// no group.
    ///
    /// # Errors
    ///
    /// [`SchedulerError::QueueClosed`] after [`LeaseQueue::close`];
    /// [`SchedulerError::DeviceLock`] if a lock file cannot be used.
    pub fn try_acquire(&self, statement: impl Into<String>) -> Result<Option<Lease>> {
        let statement = statement.into();
        let turn = {
            let mut state = self.inner.state();
            if state.closed {
                return Err(SchedulerError::QueueClosed);
            }
            if state.turn.is_some() || !state.waiting.is_empty() {
                state.totals.busy += 1;
                return Ok(None);
            }
            let ticket = self.inner.next_id.fetch_add(1, Ordering::Relaxed);
            state.turn = Some(ticket);
            Turn {
                inner: Arc::clone(&self.inner),
                ticket,
            }
        };
        // On an error or a busy device, dropping `turn` frees it for whoever arrived meanwhile.
        let locks = match &self.inner.locks {
            None => Vec::new(),
            Some(dir) => match dir.try_lock_all(self.uuids(), &holder_tag(&statement))? {
                Ok(locks) => locks,
                Err(_busy) => {
                    self.inner.state().totals.busy += 1;
                    return Ok(None);
                }
            },
        };
        Ok(Some(self.grant(
            statement,
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
        // Every waiter wakes, sees `closed` and fails; one that was handed the turn gives it
        // back as it leaves, and nobody gets it again.
        for waiter in state.waiting.values() {
            waiter.wake.notify_one();
        }
    }

    /// Holder, waiters (in the order they would be granted now), recent leases and counters at
    /// this moment.
    pub fn snapshot(&self) -> LeaseQueueSnapshot {
        let now = Instant::now();
        let per_point = self.inner.aging();
        let state = self.inner.state();
        LeaseQueueSnapshot {
            devices: self.inner.devices.len(),
            holder: state.holder.as_ref().map(|h| HolderSnapshot {
                lease_id: h.lease_id,
                statement: h.statement.clone(),
                waited: h.waited,
                held_for: now.saturating_duration_since(h.granted_at),
                group: h.group.clone(),
                precedence: h.precedence,
            }),
            waiting: state
                .ranked(now, per_point)
                .into_iter()
                .map(|(_, w, effective)| WaiterSnapshot {
                    statement: w.statement.clone(),
                    waiting_for: now.saturating_duration_since(w.since),
                    blocked_on: w.blocked_on.clone(),
                    group: w.group.clone(),
                    precedence: w.precedence,
                    effective_precedence: effective,
                })
                .collect(),
            recent: state.recent.iter().cloned().collect(),
            totals: state.totals.clone(),
        }
    }

    fn uuids(&self) -> impl Iterator<Item = &str> {
        self.inner.devices.iter().map(|d| d.uuid.as_str())
    }

    /// Our turn in this process (handed to us when we are the waiter chosen), then every
    /// device's cross-process lock.
    async fn wait_for_turn(
        &self,
        ticket: u64,
        wake: &Notify,
        statement: &str,
    ) -> Result<(Turn, Vec<DeviceLock>)> {
        let turn = loop {
            {
                let state = self.inner.state();
                if state.closed {
                    return Err(SchedulerError::QueueClosed);
                }
                if state.turn == Some(ticket) {
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
        let Some(dir) = &self.inner.locks else {
            return Ok((turn, Vec::new()));
        };
        let tag = holder_tag(statement);
        let mut backoff = Duration::from_millis(1);
        loop {
            // An error returns and drops `turn`, which hands it to the next waiter.
            match dir.try_lock_all(self.uuids(), &tag)? {
                Ok(locks) => return Ok((turn, locks)),
                Err(busy) => {
                    let closed = {
                        let mut state = self.inner.state();
                        if let Some(w) = state.waiting.get_mut(&ticket) {
                            w.blocked_on = Some(busy);
                        }
                        state.closed
                    };
                    if closed {
                        return Err(SchedulerError::QueueClosed);
                    }
                    // Sleep, but wake early when the queue closes.
                    let _ = tokio::time::timeout(backoff, wake.notified()).await;
                    backoff = (backoff * 2).min(MAX_LOCK_BACKOFF);
                }
            }
        }
    }

    fn grant(
        &self,
        statement: String,
        group: Option<String>,
        precedence: u32,
        waited: Duration,
        turn: Turn,
        locks: Vec<DeviceLock>,
    ) -> Lease {
        let lease_id = self.inner.next_id.fetch_add(1, Ordering::Relaxed);
        let granted_at = Instant::now();
        let mut state = self.inner.state();
        state.holder = Some(Holder {
            lease_id,
            statement: statement.clone(),
            group,
            precedence,
            waited,
            granted_at,
        });
        state.totals.granted += 1;
        state.totals.total_wait += waited;
        drop(state);
        Lease {
            queue: Arc::clone(&self.inner),
            lease_id,
            statement,
            waited,
            granted_at,
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
        let holder = match (&state.holder, blocked_on) {
            (Some(h), _) => format!(
                "the lease is held by statement '{}' (lease {}, for {:.1?}) and {ahead} statement(s) wait ahead of this one",
                h.statement,
                h.lease_id,
                h.granted_at.elapsed()
            ),
            (None, Some(uuid)) => {
                let who = self.inner.locks.as_ref().and_then(|d| d.holder_of(&uuid));
                format!(
                    "device {uuid} is locked by another process ({})",
                    who.unwrap_or_else(|| "holder unknown".into())
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
}

impl State {
    /// The waiters in the order they would be granted at `now`, with their effective
    /// precedence: the one holding the turn first, then highest effective precedence, then
    /// earliest arrival (lowest ticket).
    fn ranked(&self, now: Instant, per_point: Duration) -> Vec<(u64, &Waiter, u64)> {
        let mut ranked: Vec<_> = self
            .waiting
            .iter()
            .map(|(ticket, w)| (*ticket, w, w.effective_precedence(now, per_point)))
            .collect();
        ranked.sort_by_key(|(ticket, _, effective)| {
            (self.turn != Some(*ticket), Reverse(*effective), *ticket)
        });
        ranked
    }

    /// Gives the free turn to the waiter the rule picks (never `exclude`, which is leaving) and
    /// wakes it. Nobody gets it once the queue is closed.
    fn hand_off(&mut self, per_point: Duration, exclude: Option<u64>) {
        if self.turn.is_some() || self.closed {
            return;
        }
        let now = Instant::now();
        let chosen = self
            .waiting
            .iter()
            .filter(|(ticket, _)| Some(**ticket) != exclude)
            .max_by_key(|(ticket, w)| (w.effective_precedence(now, per_point), Reverse(**ticket)));
        if let Some((ticket, waiter)) = chosen {
            self.turn = Some(*ticket);
            waiter.wake.notify_one();
        }
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

/// The in-process turn: whoever holds it is the next (or current) lease holder. Dropping it —
/// a lease released, or an acquire abandoned while it waits for another process's device lock —
/// hands the turn to the next waiter the rule picks.
#[derive(Debug)]
struct Turn {
    inner: Arc<Inner>,
    ticket: u64,
}

impl Drop for Turn {
    fn drop(&mut self) {
        let mut state = self.inner.state();
        if state.turn == Some(self.ticket) {
            state.turn = None;
            // The waiter may still be listed (its WaitGuard drops after this): skip it.
            state.hand_off(self.inner.aging(), Some(self.ticket));
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

/// Registers a waiter and unregisters it however the wait ends, giving back a turn it was
/// handed but did not take.
struct WaitGuard<'a> {
    inner: &'a Inner,
    ticket: u64,
    since: Instant,
    wake: Arc<Notify>,
    outcome: WaitOutcome,
}

impl<'a> WaitGuard<'a> {
    /// Joins the queue, or refuses at once: closed, or the group has its most waiters.
    fn enter(inner: &'a Inner, request: &LeaseRequest) -> Result<Self> {
        let mut state = inner.state();
        if state.closed {
            return Err(SchedulerError::QueueClosed);
        }
        if let Some(max) = request.max_group_waiters {
            let free = state.turn.is_none() && state.waiting.is_empty();
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
                blocked_on: None,
                wake: Arc::clone(&wake),
            },
        );
        state.hand_off(inner.aging(), None);
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
        // Chosen, but gone before it took the turn (cancelled, timed out, closed): pass it on.
        if self.outcome != WaitOutcome::Granted && state.turn == Some(self.ticket) {
            state.turn = None;
            state.hand_off(self.inner.aging(), None);
        }
    }
}

/// Exclusive use of all of the node's GPUs, until dropped.
///
/// Dropping the lease (normally, on error, on cancellation or while a panic unwinds) releases
/// the device locks and hands the lease to the next waiter.
#[derive(Debug)]
pub struct Lease {
    queue: Arc<Inner>,
    lease_id: u64,
    statement: String,
    waited: Duration,
    granted_at: Instant,
    locks: Vec<DeviceLock>,
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

    /// The devices this lease owns, in visible order.
    pub fn devices(&self) -> &[DeviceInfo] {
        &self.queue.devices
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
            if state
                .holder
                .as_ref()
                .is_some_and(|h| h.lease_id == self.lease_id)
            {
                state.holder = None;
            }
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
            });
        }
        // Device locks first, then the turn: the next waiter must find the lock files free.
        self.locks.clear();
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
}
