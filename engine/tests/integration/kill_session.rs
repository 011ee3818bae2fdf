//! `KILL SESSION id` (Exasol's statement): the embedding program's sessions (or a server's
//! admin) end another session — its running and waiting statements stop with 57P01, their
//! leases and workers freed, and it takes no more statements. Others may only end themselves.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic: that is a failed test

use std::time::{Duration, Instant};

use crate::helpers::{error_of, run};
use accelsql_engine::{Engine, EngineError, testing};

fn engine() -> Engine {
    testing::fixture_engine(1).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_a_session_stops_its_running_and_waiting_statements() {
    let engine = engine();
    let program = engine.session();
    let holder = engine.session();
    holder.set_user("alice", false);
    run(&holder, "SET datafusion.execution.batch_size = 1").await;
    // A GPU statement of about 20 s (one 50 ms sleep per row), and a second session waiting.
    let running = holder
        .sql_stream("SELECT slow_gpu(50) FROM generate_series(1, 400)")
        .await
        .unwrap();
    let running = tokio::spawn(error_of(running));
    let start = Instant::now();
    while engine.lease_queue().snapshot().holder.is_none() {
        assert!(start.elapsed() < Duration::from_secs(5));
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let waiter = engine.session();
    waiter.set_user("bob", false);
    let waiting = waiter.sql_stream("SELECT slow_gpu(1)").await.unwrap();
    let waiting = tokio::spawn(error_of(waiting));
    tokio::time::sleep(Duration::from_millis(200)).await;

    // Bob may not end alice's session.
    let e = waiter
        .sql(&format!("KILL SESSION {}", holder.id()))
        .await
        .unwrap_err();
    assert_eq!(e.code(), "42501", "{e}");
    // The program ends both; their statements stop at once.
    let started = Instant::now();
    run(&program, &format!("KILL SESSION {}", holder.id())).await;
    run(&program, &format!("kill session {}", waiter.id())).await;
    let e = running.await.unwrap().expect("the running statement stops");
    assert_eq!(e.code(), EngineError::SESSION_KILLED, "{e}");
    let e = waiting.await.unwrap().expect("the waiting statement stops");
    assert_eq!(e.code(), EngineError::SESSION_KILLED, "{e}");
    assert!(started.elapsed() < Duration::from_secs(5));
    // Nothing holds or waits for the GPUs, and the ended sessions take no more statements.
    let snapshot = engine.lease_queue().snapshot();
    assert!(
        snapshot.holder.is_none() && snapshot.waiting.is_empty(),
        "{snapshot:?}"
    );
    assert!(holder.is_killed());
    let e = holder.sql("SELECT 1").await.unwrap_err();
    assert_eq!(e.code(), "57P01", "{e}");
    assert!(e.to_string().contains("KILL SESSION"), "{e}");
    // The program's session goes on; an unknown session is an error of its own.
    let e = program.sql("KILL SESSION 999999").await.unwrap_err();
    assert_eq!(e.code(), "42704", "{e}");
    assert_eq!(run(&program, "SELECT 1 + 1").await, ["2"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_may_end_itself_and_a_runaway_script_goes_with_it() {
    let engine = engine();
    let s = engine.session();
    s.set_user("carol", false);
    run(
        &s,
        "CREATE PYTHON3 SCALAR SCRIPT hang(x DOUBLE) RETURNS DOUBLE AS\n\
         import time\n\
         def run(ctx):\n    time.sleep(120)\n    return ctx.x\n/",
    )
    .await;
    let stream = s.sql_stream("SELECT hang(1.0)").await.unwrap();
    let stopped = tokio::spawn(error_of(stream));
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let other = engine.session();
    other.set_user("dave", false);
    assert_eq!(
        other
            .sql(&format!("KILL SESSION {}", s.id()))
            .await
            .unwrap_err()
            .code(),
        "42501"
    );
    // A number no session has gets the same answer: the reply tells no one which exist.
    let e = other.sql("KILL SESSION 999999").await.unwrap_err();
    assert_eq!(e.code(), "42501", "{e}");
    // The program ends it through a session of its own.
    let started = Instant::now();
    let admin = engine.session();
    run(&admin, &format!("KILL SESSION {}", s.id())).await;
    let e = tokio::time::timeout(Duration::from_secs(30), stopped)
        .await
        .expect("the script's run is stopped")
        .unwrap()
        .expect("with an error");
    assert_eq!(e.code(), "57P01", "{e}");
    assert!(started.elapsed() < Duration::from_secs(30));
    // A session ending itself.
    let me = engine.session();
    me.set_user("erin", false);
    run(&me, &format!("KILL SESSION {}", me.id())).await;
    assert!(me.is_killed());
}
