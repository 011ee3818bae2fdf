//! `scheduler`: the node lease queue's own latency — an uncontended acquire + release, and the
//! hand-off from a release to the next of W waiters (W = 1…256) — beside tokio's FIFO-fair
//! `Mutex` doing the same, in the same run. The goals of the gpu-scheduler issue: < 5 µs
//! uncontended, < 50 µs hand-off.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use accelsql_engine::gpu_scheduler::{DeviceLockDir, Inventory, LeaseQueue, LeaseRequest};

use crate::error::Result;
use crate::measure::{Stats, format_secs};
use crate::progress::Progress;
use crate::results::{Distribution, Figure, Outcome, SuiteResult, Table};

use super::Context;

/// Uncontended acquire + release pairs at `--scale 1`.
pub const BASE_ACQUIRES: u64 = 200_000;
/// Hand-offs per waiter count at `--scale 1`.
pub const BASE_HANDOFFS: u64 = 20_000;
/// The waiter counts.
pub const WAITERS: [usize; 5] = [1, 4, 16, 64, 256];
/// Rounds each task makes at least (so the queue fills up even with 256 waiters).
pub const MIN_ROUNDS: u64 = 20;
/// The waiter count whose hand-off latencies are plotted as a distribution.
pub const PLOTTED_WAITERS: usize = 64;

const LEASE: &str = "accelsql LeaseQueue";
const LEASE_LOCKS: &str = "accelsql LeaseQueue + 2 lock files";
const MUTEX: &str = "tokio::sync::Mutex";

/// Something the hand-off can be measured on: the lease queue or tokio's mutex.
trait Exclusive: Clone + Send + Sync + 'static {
    type Guard: Send;
    fn take(&self) -> impl Future<Output = Option<Self::Guard>> + Send;
}

impl Exclusive for LeaseQueue {
    type Guard = accelsql_engine::gpu_scheduler::Lease;
    async fn take(&self) -> Option<Self::Guard> {
        self.acquire(LeaseRequest::new("bench")).await.ok()
    }
}

impl Exclusive for Arc<tokio::sync::Mutex<()>> {
    type Guard = tokio::sync::OwnedMutexGuard<()>;
    async fn take(&self) -> Option<Self::Guard> {
        Some(Arc::clone(self).lock_owned().await)
    }
}

/// `n` acquire + release pairs with nobody else around; one sample per pair.
async fn uncontended<E: Exclusive>(e: &E, n: u64, progress: &Progress) -> Vec<Duration> {
    let mut samples = Vec::with_capacity(n as usize);
    let step = (n / 100).max(1);
    for i in 0..n {
        let start = Instant::now();
        let guard = e.take().await;
        drop(guard);
        samples.push(start.elapsed());
        if (i + 1) % step == 0 {
            progress.inc(step);
        }
    }
    samples
}

/// `waiters + 1` tasks cycle through `e`, `rounds` times each. A holder yields once while
/// holding (so the others queue up), notes the time and releases; each grant that follows a
/// release while at least half the waiters are queued records the time from that release to
/// the grant: the hand-off latency.
async fn handoff<E: Exclusive>(e: &E, waiters: usize, rounds: u64) -> Vec<Duration> {
    let tasks_n = waiters + 1;
    let base = Instant::now();
    let released_at = Arc::new(AtomicU64::new(0));
    let queued = Arc::new(AtomicUsize::new(0));
    // All start together, so the first task does not finish its rounds before the others queue.
    let start = Arc::new(tokio::sync::Barrier::new(tasks_n));
    let mut tasks = Vec::with_capacity(tasks_n);
    for _ in 0..tasks_n {
        let (e, released_at, queued) = (e.clone(), Arc::clone(&released_at), Arc::clone(&queued));
        let start = Arc::clone(&start);
        tasks.push(tokio::spawn(async move {
            let mut samples = Vec::with_capacity(rounds as usize);
            start.wait().await;
            for _ in 0..rounds {
                queued.fetch_add(1, Ordering::SeqCst);
                let Some(guard) = e.take().await else {
                    break;
                };
                let granted = base.elapsed().as_nanos() as u64;
                let others_queued = queued.fetch_sub(1, Ordering::SeqCst) - 1;
                let released = released_at.swap(0, Ordering::SeqCst);
                if released != 0 && 2 * (others_queued + 1) >= waiters {
                    samples.push(Duration::from_nanos(granted.saturating_sub(released)));
                }
                // Hold across a yield point, so the others get to run and queue.
                tokio::task::yield_now().await;
                released_at.store(base.elapsed().as_nanos() as u64, Ordering::SeqCst);
                drop(guard);
            }
            samples
        }));
    }
    let mut samples = Vec::new();
    for task in tasks {
        samples.extend(task.await.unwrap_or_default());
    }
    samples
}

fn figure(case: &str, engine: &str, rows: u64, samples: &[Duration]) -> Figure {
    match Stats::of(samples) {
        Some(stats) => Figure::new(case, engine, rows, Outcome::Measured { stats })
            .with_metric("p99_us", stats.p99_s * 1e6),
        None => Figure::new(case, engine, rows, Outcome::unavailable("no samples")),
    }
}

fn goal_note(what: &str, stats: Option<&Stats>, goal: Duration) -> Option<String> {
    let s = stats?;
    let verdict = if s.median_s <= goal.as_secs_f64() {
        "met"
    } else {
        "MISSED"
    };
    Some(format!(
        "{what}: median {} (goal < {}: {verdict})",
        format_secs(s.median_s),
        format_secs(goal.as_secs_f64())
    ))
}

/// Runs the suite.
pub(crate) async fn run(ctx: &Context, result: &mut SuiteResult) -> Result<()> {
    result.title = "scheduler: lease latency and hand-off".into();
    result.what = "The node lease queue (2 simulated devices: the queue is the same code as on \
                   real GPUs) beside tokio's FIFO-fair Mutex: one sample per acquire + release, \
                   or per hand-off from a release to the next waiter's grant."
        .into();
    let acquires = ctx.scaled(BASE_ACQUIRES, 1000);
    let handoffs = ctx.scaled(BASE_HANDOFFS, 1000);
    result.notes.push(format!(
        "{acquires} uncontended acquires; about {handoffs} hand-offs per waiter count \
         {WAITERS:?} (base {BASE_ACQUIRES} / {BASE_HANDOFFS} × scale {}); tokio multi-thread \
         runtime, {} workers.",
        ctx.scale, ctx.partitions
    ));
    let devices = Inventory::simulated(2).devices()?;
    let queue = LeaseQueue::new(devices.clone());
    let mutex = Arc::new(tokio::sync::Mutex::new(()));
    let lock_dir =
        std::env::temp_dir().join(format!("accelsql-bench-locks-{}", std::process::id()));
    let locked = DeviceLockDir::open(&lock_dir)
        .map(|dir| LeaseQueue::with_options(devices, Some(dir), None));

    let total = acquires * 3 + handoffs * WAITERS.len() as u64 * 2;
    let progress = Progress::new("scheduler", total, "operations");
    let mut table = Table::new(
        "scheduler: acquire + release, uncontended",
        "acquires",
        Some(MUTEX),
    )
    .without_rate();
    table.push(figure(
        "uncontended",
        MUTEX,
        acquires,
        &uncontended(&mutex, acquires, &progress).await,
    ));
    let lease_idle = uncontended(&queue, acquires, &progress).await;
    table.push(figure("uncontended", LEASE, acquires, &lease_idle));
    match &locked {
        Ok(q) => table.push(
            figure(
                "uncontended",
                LEASE_LOCKS,
                acquires,
                &uncontended(q, acquires, &progress).await,
            )
            .with_note("flock on 2 files per acquire"),
        ),
        Err(e) => table.push(Figure::new(
            "uncontended",
            LEASE_LOCKS,
            acquires,
            Outcome::unavailable(e.to_string()),
        )),
    }
    let _ = std::fs::remove_dir_all(&lock_dir);
    result.notes.extend(goal_note(
        "uncontended acquire + release",
        Stats::of(&lease_idle).as_ref(),
        Duration::from_micros(5),
    ));

    let mut handoff_table = Table::new(
        "scheduler: hand-off to the next waiter",
        "waiters",
        Some(MUTEX),
    )
    .without_rate();
    for waiters in WAITERS {
        let rounds = (handoffs / waiters as u64).max(MIN_ROUNDS);
        let case = format!("{waiters} waiting");
        let m = handoff(&mutex, waiters, rounds).await;
        progress.inc(handoffs);
        handoff_table.push(figure(&case, MUTEX, waiters as u64, &m));
        let l = handoff(&queue, waiters, rounds).await;
        progress.inc(handoffs);
        if waiters == PLOTTED_WAITERS {
            result.notes.extend(goal_note(
                &format!("hand-off with {waiters} waiting"),
                Stats::of(&l).as_ref(),
                Duration::from_micros(50),
            ));
            let us = |v: &[Duration]| v.iter().map(|d| d.as_secs_f64() * 1e6).collect::<Vec<_>>();
            result.distributions.push(Distribution::new(
                &format!("Lease hand-off latency, {waiters} waiting"),
                "scheduler-handoff",
                us(&l),
            ));
            result.distributions.push(Distribution::new(
                &format!("tokio Mutex hand-off latency, {waiters} waiting"),
                "scheduler-handoff-mutex",
                us(&m),
            ));
        }
        handoff_table.push(figure(&case, LEASE, waiters as u64, &l));
    }
    progress.finish();
    result.tables.push(table);
    result.tables.push(handoff_table);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handoffs_are_sampled_for_both_primitives() {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let queue = LeaseQueue::new(Inventory::simulated(1).devices().unwrap());
        let mutex = Arc::new(tokio::sync::Mutex::new(()));
        rt.block_on(async {
            let q = handoff(&queue, 4, 50).await;
            let m = handoff(&mutex, 4, 50).await;
            assert!(!q.is_empty());
            assert!(!m.is_empty());
            assert_eq!(uncontended(&queue, 10, &Progress::hidden()).await.len(), 10);
        });
    }
}
