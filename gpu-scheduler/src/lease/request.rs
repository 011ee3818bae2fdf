//! [`LeaseRequest`]: what a statement asks of the lease queue (timeout, precedence, group,
//! waiter cap, device memory), built step by step.

use std::time::Duration;

use crate::sharing::DeviceDemand;

/// The precedence of a [`LeaseRequest`] that sets none (and of [`LeaseQueue::try_acquire`]).
///
/// Exasol's precedences run from 1 to 1000; 300 is its `MEDIUM` group's.
///
/// [`LeaseQueue::try_acquire`]: crate::LeaseQueue::try_acquire
pub const DEFAULT_PRECEDENCE: u32 = 300;

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
    pub(super) statement: String,
    pub(super) timeout: Option<Duration>,
    pub(super) precedence: u32,
    pub(super) group: Option<String>,
    pub(super) max_group_waiters: Option<usize>,
    pub(super) demand: DeviceDemand,
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
    ///
    /// [`GpuSharing::Memory`]: crate::GpuSharing::Memory
    /// [`GpuSharing::Exclusive`]: crate::GpuSharing::Exclusive
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
    ///
    /// [`LeaseQueue`]: crate::LeaseQueue
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
    ///
    /// [`SchedulerError::TooManyWaiters`]: crate::SchedulerError::TooManyWaiters
    pub fn max_group_waiters(mut self, n: Option<usize>) -> Self {
        self.max_group_waiters = n;
        self
    }
}
