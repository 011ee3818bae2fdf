//! Tests of the lease queue: ordering, aging, cancellation, timeouts, device locks and
//! memory sharing.

use std::sync::Mutex as StdMutex;

use tokio::task::JoinHandle;

use super::admission::reservable;
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
    let a = tokio::spawn(async move { qa.acquire(LeaseRequest::new("a")).await.map(|l| l.id()) });
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
        tokio::spawn(async move { q2.acquire(LeaseRequest::new("waiter")).await.unwrap().id() });
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
    let waiter = tokio::spawn(async move { q2.acquire(LeaseRequest::new("w")).await.map(|_| ()) });
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
        tokio::spawn(async move { b2.acquire(LeaseRequest::new("in-b")).await.map(|l| l.id()) });
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
