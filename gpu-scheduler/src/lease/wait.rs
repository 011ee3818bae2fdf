//! Waiting for a turn: a waiter's registration ([`WaitGuard`]), its admission ([`Turn`]) and,
//! once admitted, the device locks it may have to wait for while another process holds them.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use super::admission::{Inner, Waiter};
use super::request::LeaseRequest;
use crate::lock::DeviceLock;
use crate::{Result, SchedulerError};

/// Longest pause between two tries for a device lock held by another process.
const MAX_LOCK_BACKOFF: Duration = Duration::from_millis(100);

/// An admission: whoever holds it is a lease holder, or about to be. Dropping it — a lease
/// released, or an acquire abandoned while it waits for another process's device lock —
/// gives its reservation back and admits whoever fits now.
#[derive(Debug)]
pub(super) struct Turn {
    pub(super) inner: Arc<Inner>,
    pub(super) ticket: u64,
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
pub(super) enum WaitOutcome {
    Pending,
    Granted,
    TimedOut,
    Failed,
}

/// Registers a waiter and unregisters it however the wait ends, giving back an admission it
/// was handed but did not take.
pub(super) struct WaitGuard<'a> {
    inner: &'a Inner,
    pub(super) ticket: u64,
    pub(super) since: Instant,
    pub(super) wake: Arc<Notify>,
    pub(super) outcome: WaitOutcome,
}

impl<'a> WaitGuard<'a> {
    /// Joins the queue, or refuses at once: closed, the group has its most waiters, or the
    /// demand could never fit.
    pub(super) fn enter(inner: &'a Inner, request: &LeaseRequest) -> Result<Self> {
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

impl Inner {
    /// Our admission in this process (when the rule admits us), then the device locks.
    pub(super) async fn wait_for_turn(
        self: &Arc<Self>,
        ticket: u64,
        wake: &Notify,
        statement: &str,
    ) -> Result<(Turn, Option<Arc<Vec<DeviceLock>>>)> {
        let turn = loop {
            {
                let state = self.state();
                if state.closed {
                    return Err(SchedulerError::QueueClosed);
                }
                if state.admitted.contains_key(&ticket) {
                    break Turn {
                        inner: Arc::clone(self),
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
            if let Some(locks) = self.take_locks(statement, ticket)? {
                return Ok((turn, locks));
            }
            if self.state().closed {
                return Err(SchedulerError::QueueClosed);
            }
            // Sleep, but wake early when the queue closes.
            let _ = tokio::time::timeout(backoff, wake.notified()).await;
            backoff = (backoff * 2).min(MAX_LOCK_BACKOFF);
        }
    }

    /// The device locks for admitted `ticket`: this process's, shared with its other leases,
    /// or taken now. `Ok(None)`: another process holds one (noted on the waiter).
    pub(super) fn take_locks(
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
}

fn holder_tag(statement: &str) -> String {
    format!("statement {statement}")
}
