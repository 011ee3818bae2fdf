//! The node lease queue ("global semaphore"): statements wait FIFO for exclusive use of all of the
//! node's GPUs and get an RAII [`Lease`] that can never leak.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::{OwnedSemaphorePermit, Semaphore, TryAcquireError};

use crate::lock::{DeviceLock, DeviceLockDir};
use crate::{DeviceInfo, Result, SchedulerError};

/// How many finished leases [`LeaseQueue::snapshot`] keeps for introspection.
pub const RECENT_LEASES: usize = 256;

/// Longest pause between two tries for a device lock held by another process.
const MAX_LOCK_BACKOFF: Duration = Duration::from_millis(100);

/// A request for the node lease.
#[derive(Debug, Clone)]
pub struct LeaseRequest {
    statement: String,
    timeout: Option<Duration>,
}

impl LeaseRequest {
    /// A request on behalf of `statement` (an id or label shown to other waiters and in system tables).
    pub fn new(statement: impl Into<String>) -> Self {
        Self {
            statement: statement.into(),
            timeout: None,
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
}

/// The node's GPUs, handed to one statement at a time in arrival order.
///
/// Exasol semantics: one GPU call at a time per node, owning every device. Waiting is FIFO (no
/// starvation), async, cancellation-safe and optionally bounded; a [`Lease`] is released when it
/// is dropped, during panic unwinding too. With a [`DeviceLockDir`], a lease also holds one
/// `flock` per device, so two accelsql processes on one server never use the same GPU at once.
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
    permits: Arc<Semaphore>,
    locks: Option<DeviceLockDir>,
    default_timeout: Option<Duration>,
    next_id: AtomicU64,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    holder: Option<Holder>,
    waiting: BTreeMap<u64, Waiter>,
    recent: VecDeque<LeaseRecord>,
    totals: LeaseTotals,
}

#[derive(Debug, Clone)]
struct Holder {
    lease_id: u64,
    statement: String,
    waited: Duration,
    granted_at: Instant,
}

#[derive(Debug, Clone)]
struct Waiter {
    statement: String,
    since: Instant,
    /// Set while the in-process turn is ours but another process holds this device's lock.
    blocked_on: Option<String>,
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
    /// Who waits, in arrival order.
    pub waiting: Vec<WaiterSnapshot>,
    /// The last [`RECENT_LEASES`] finished leases, oldest first.
    pub recent: Vec<LeaseRecord>,
    /// Counters.
    pub totals: LeaseTotals,
}

impl LeaseQueue {
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
                permits: Arc::new(Semaphore::new(1)),
                locks,
                default_timeout,
                next_id: AtomicU64::new(1),
                state: Mutex::new(State::default()),
            }),
        }
    }

    /// The devices every lease owns.
    pub fn devices(&self) -> &[DeviceInfo] {
        &self.inner.devices
    }

    /// Waits for the lease, in arrival order.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: dropping the returned future before it completes (a cancelled query, a
    /// `select!` branch not taken) removes the caller from the queue and releases anything it had
    /// taken; the statements behind it move up. The drop is counted in
    /// [`LeaseTotals::cancelled`].
    ///
    /// # Errors
    ///
    /// [`SchedulerError::LeaseTimeout`] (code 57G01) when the request's or the queue's timeout
    /// passes, naming the holder; [`SchedulerError::QueueClosed`] after [`LeaseQueue::close`];
    /// [`SchedulerError::DeviceLock`] if a lock file cannot be used.
    pub async fn acquire(&self, request: LeaseRequest) -> Result<Lease> {
        let started = Instant::now();
        let ticket = self.inner.next_id.fetch_add(1, Ordering::Relaxed);
        let mut guard = WaitGuard::enter(&self.inner, ticket, &request.statement, started);
        let wait = self.wait_for_turn(ticket, &request.statement);
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
        let (permit, locks) = match outcome {
            Ok(taken) => taken,
            Err(e) => {
                guard.outcome = WaitOutcome::Failed;
                return Err(e);
            }
        };
        guard.outcome = WaitOutcome::Granted;
        drop(guard);
        Ok(self.grant(request.statement, started.elapsed(), permit, locks))
    }

    /// Takes the lease only if it is free now and nobody waits for it: `Ok(None)` means busy,
    /// for callers that prefer the CPU to waiting.
    pub fn try_acquire(&self, statement: impl Into<String>) -> Result<Option<Lease>> {
        let statement = statement.into();
        let permit = match Arc::clone(&self.inner.permits).try_acquire_owned() {
            Ok(permit) => permit,
            Err(TryAcquireError::Closed) => return Err(SchedulerError::QueueClosed),
            Err(TryAcquireError::NoPermits) => {
                self.inner.state().totals.busy += 1;
                return Ok(None);
            }
        };
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
        Ok(Some(self.grant(statement, Duration::ZERO, permit, locks)))
    }

    /// Closes the queue: current and future waiters fail with [`SchedulerError::QueueClosed`];
    /// held leases stay valid until dropped.
    pub fn close(&self) {
        self.inner.permits.close();
    }

    /// Holder, waiters, recent leases and counters at this moment.
    pub fn snapshot(&self) -> LeaseQueueSnapshot {
        let now = Instant::now();
        let state = self.inner.state();
        LeaseQueueSnapshot {
            devices: self.inner.devices.len(),
            holder: state.holder.as_ref().map(|h| HolderSnapshot {
                lease_id: h.lease_id,
                statement: h.statement.clone(),
                waited: h.waited,
                held_for: now.duration_since(h.granted_at),
            }),
            waiting: state
                .waiting
                .values()
                .map(|w| WaiterSnapshot {
                    statement: w.statement.clone(),
                    waiting_for: now.duration_since(w.since),
                    blocked_on: w.blocked_on.clone(),
                })
                .collect(),
            recent: state.recent.iter().cloned().collect(),
            totals: state.totals.clone(),
        }
    }

    fn uuids(&self) -> impl Iterator<Item = &str> {
        self.inner.devices.iter().map(|d| d.uuid.as_str())
    }

    /// Our turn in this process (the semaphore is FIFO), then every device's cross-process lock.
    async fn wait_for_turn(
        &self,
        ticket: u64,
        statement: &str,
    ) -> Result<(OwnedSemaphorePermit, Vec<DeviceLock>)> {
        let permit = Arc::clone(&self.inner.permits)
            .acquire_owned()
            .await
            .map_err(|_| SchedulerError::QueueClosed)?;
        let Some(dir) = &self.inner.locks else {
            return Ok((permit, Vec::new()));
        };
        let tag = holder_tag(statement);
        let mut backoff = Duration::from_millis(1);
        loop {
            match dir.try_lock_all(self.uuids(), &tag)? {
                Ok(locks) => return Ok((permit, locks)),
                Err(busy) => {
                    if let Some(w) = self.inner.state().waiting.get_mut(&ticket) {
                        w.blocked_on = Some(busy);
                    }
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(MAX_LOCK_BACKOFF);
                }
            }
        }
    }

    fn grant(
        &self,
        statement: String,
        waited: Duration,
        permit: OwnedSemaphorePermit,
        locks: Vec<DeviceLock>,
    ) -> Lease {
        let lease_id = self.inner.next_id.fetch_add(1, Ordering::Relaxed);
        let granted_at = Instant::now();
        let mut state = self.inner.state();
        state.holder = Some(Holder {
            lease_id,
            statement: statement.clone(),
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
            permit: Some(permit),
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
        let ahead = state.waiting.range(..ticket).count();
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
}

fn holder_tag(statement: &str) -> String {
    format!("statement {statement}")
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WaitOutcome {
    Pending,
    Granted,
    TimedOut,
    Failed,
}

/// Registers a waiter for introspection and unregisters it however the wait ends.
struct WaitGuard<'a> {
    inner: &'a Inner,
    ticket: u64,
    outcome: WaitOutcome,
}

impl<'a> WaitGuard<'a> {
    fn enter(inner: &'a Inner, ticket: u64, statement: &str, since: Instant) -> Self {
        let waiter = Waiter {
            statement: statement.to_string(),
            since,
            blocked_on: None,
        };
        inner.state().waiting.insert(ticket, waiter);
        Self {
            inner,
            ticket,
            outcome: WaitOutcome::Pending,
        }
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
    permit: Option<OwnedSemaphorePermit>,
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
        drop(self.permit.take());
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex as StdMutex;

    use super::*;
    use crate::Inventory;

    fn queue(n: usize) -> LeaseQueue {
        LeaseQueue::new(Inventory::simulated(n).devices().unwrap())
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
        // The permit went to the waiter, not to the opportunist.
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
}
