//! Lease queue latency: uncontended acquire+release, and hand-off to the next of 64 waiters.
//!
//! Run: `cargo bench -p accelsql-benchmarks --bench lease`. Prints median and p99 per case
//! beside the goals of the gpu-scheduler issue (< 5 µs uncontended, < 50 µs hand-off).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use accelsql_benchmarks::{Summary, print_table};
use accelsql_gpu_scheduler::{DeviceLockDir, Inventory, LeaseQueue, LeaseRequest};

const UNCONTENDED_ITERATIONS: usize = 200_000;
const WAITERS: usize = 64;
const ROUNDS_PER_WAITER: usize = 300;

fn main() -> std::io::Result<()> {
    let devices = Inventory::simulated(2).devices().unwrap_or_default();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;

    let queue = LeaseQueue::new(devices.clone());
    let idle = rt.block_on(uncontended(&queue, UNCONTENDED_ITERATIONS));
    let handoff = rt.block_on(handoff(&queue));

    let lock_dir =
        std::env::temp_dir().join(format!("accelsql-bench-locks-{}", std::process::id()));
    let locked = DeviceLockDir::open(&lock_dir)
        .map(|dir| LeaseQueue::with_options(devices, Some(dir), None));
    let with_locks = match &locked {
        Ok(queue) => Some(rt.block_on(uncontended(queue, UNCONTENDED_ITERATIONS / 10))),
        Err(e) => {
            eprintln!("skipping the lock-file case: {e}");
            None
        }
    };
    let _ = std::fs::remove_dir_all(&lock_dir);

    println!("lease queue, 2 simulated GPUs, tokio multi-thread runtime with 2 workers");
    let mut rows = vec![
        (
            "uncontended acquire+release".to_string(),
            idle,
            Some(Duration::from_micros(5)),
        ),
        (
            format!("hand-off to next waiter ({WAITERS} waiting)"),
            handoff,
            Some(Duration::from_micros(50)),
        ),
    ];
    if let Some(s) = with_locks {
        rows.push((
            "uncontended, + 2 device lock files (flock)".to_string(),
            s,
            None,
        ));
    }
    print_table(&rows);
    Ok(())
}

/// Acquire and release with nobody else around.
async fn uncontended(queue: &LeaseQueue, iterations: usize) -> Summary {
    let mut samples = Vec::with_capacity(iterations);
    for _ in 0..iterations {
        let start = Instant::now();
        let lease = queue.acquire(LeaseRequest::new("bench")).await;
        drop(lease);
        samples.push(start.elapsed());
    }
    Summary::of(samples)
}

/// 64 tasks cycle through the lease; each measures from its predecessor's release to its grant.
async fn handoff(queue: &LeaseQueue) -> Summary {
    let base = Instant::now();
    let released_at = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for i in 0..WAITERS {
        let (queue, released_at) = (queue.clone(), Arc::clone(&released_at));
        tasks.push(tokio::spawn(async move {
            let mut samples = Vec::with_capacity(ROUNDS_PER_WAITER);
            for _ in 0..ROUNDS_PER_WAITER {
                let Ok(lease) = queue
                    .acquire(LeaseRequest::new(format!("waiter {i}")))
                    .await
                else {
                    break;
                };
                let granted = base.elapsed().as_nanos() as u64;
                let released = released_at.load(Ordering::SeqCst);
                // Only count grants that followed a release while others were queued.
                if released != 0 && queue.snapshot().waiting.len() + 1 >= WAITERS / 2 {
                    samples.push(Duration::from_nanos(granted.saturating_sub(released)));
                }
                released_at.store(base.elapsed().as_nanos() as u64, Ordering::SeqCst);
                drop(lease);
                tokio::task::yield_now().await;
            }
            samples
        }));
    }
    let mut samples = Vec::new();
    for task in tasks {
        samples.extend(task.await.unwrap_or_default());
    }
    Summary::of(samples)
}
