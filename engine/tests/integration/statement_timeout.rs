//! Statement timeouts (`SET accelsql.statement_timeout`, Exasol's `ALTER SESSION SET
//! QUERY_TIMEOUT`, `EngineOptions::statement_timeout`): a runaway query, a runaway Python
//! script, a wait for a busy GPU lease and a consumer that stops reading are all stopped with
//! 57T01, their leases and workers freed, and the session stays usable.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic: that is a failed test

use std::time::{Duration, Instant};

use crate::helpers::run;
use accelsql_engine::{Engine, EngineError, EngineOptions, SchedulerConfig, Session, testing};
use futures::StreamExt;

fn engine(gpus: usize, statement_timeout: Option<Duration>) -> Engine {
    let engine = Engine::with_options(EngineOptions {
        scheduler: SchedulerConfig::default().with_simulated_gpus(gpus),
        statement_timeout,
        ..EngineOptions::default()
    })
    .unwrap();
    testing::register_fixtures(&engine).unwrap();
    engine
}

/// Runs `sql`, which must fail with the statement-timeout error; returns how long it took.
async fn timed_out(s: &Session, sql: &str) -> Duration {
    let start = Instant::now();
    let e = s.sql(sql).await.expect_err(sql);
    assert_eq!(e.code(), EngineError::STATEMENT_TIMEOUT, "{sql}: {e}");
    assert!(e.to_string().contains("statement_timeout"), "{e}");
    start.elapsed()
}

/// A query that runs for minutes in a debug build.
const RUNAWAY: &str = "SELECT count(*) FROM range(100000000000) a WHERE a.value % 7 = 3";

async fn leases_not_released(s: &Session) -> Vec<String> {
    run(
        s,
        "SELECT count(*) FROM accelsql.gpu_leases WHERE state <> 'released'",
    )
    .await
}

/// The session's `accelsql.statement_timeout` as `information_schema.df_settings` shows it.
async fn statement_timeout(s: &Session) -> Vec<String> {
    run(
        s,
        "SELECT value FROM information_schema.df_settings \
         WHERE name = 'accelsql.statement_timeout'",
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runaway_query_is_stopped_and_the_session_goes_on() {
    let s = engine(0, None).session();
    run(&s, "SET accelsql.statement_timeout = '300ms'").await;
    let took = timed_out(&s, RUNAWAY).await;
    assert!(took < Duration::from_secs(20), "{took:?}");
    assert_eq!(run(&s, "SELECT 1 + 1").await, ["2"]);
    // Exasol's form; 0 lifts the bound.
    run(&s, "ALTER SESSION SET QUERY_TIMEOUT = 0").await;
    assert_eq!(statement_timeout(&s).await, [""]);
    run(&s, "ALTER SESSION SET QUERY_TIMEOUT = 1").await;
    assert_eq!(statement_timeout(&s).await, ["1s"]);
    // A bound of 0 is not a bound: it is refused, naming the way to lift one.
    let e = s
        .sql("SET accelsql.statement_timeout = '0s'")
        .await
        .unwrap_err();
    assert_eq!(e.code(), "22E03", "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runaway_script_is_stopped_with_its_worker_and_lease() {
    let s = engine(1, None).session();
    run(
        &s,
        "CREATE PYTHON3 SCALAR SCRIPT hang(x DOUBLE) RETURNS DOUBLE AS\n\
         %perInstanceRequiredAcceleratorDevices GpuNvidia;\n\
         import time\n\
         def run(ctx):\n    time.sleep(120)\n    return ctx.x\n/",
    )
    .await;
    run(&s, "ALTER SESSION SET QUERY_TIMEOUT = 1").await;
    let took = timed_out(&s, "SELECT hang(1.0)").await;
    assert!(took < Duration::from_secs(30), "{took:?}");
    assert_eq!(leases_not_released(&s).await, ["0"]);
    // The GPU is free for the next statement, and the session still runs scripts.
    run(&s, "ALTER SESSION SET QUERY_TIMEOUT = 0").await;
    run(
        &s,
        "CREATE PYTHON3 SCALAR SCRIPT twice(x DOUBLE) RETURNS DOUBLE AS\n\
         %perInstanceRequiredAcceleratorDevices GpuNvidia;\n\
         def run(ctx):\n    return 2 * ctx.x\n/",
    )
    .await;
    assert_eq!(run(&s, "SELECT twice(21.0)").await, ["42.0"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_for_a_busy_lease_ends_at_the_deadline() {
    let engine = engine(1, None);
    let holder = engine.session();
    let waiter = engine.session();
    // The holder takes the lease and keeps it while its result is unread.
    let mut held = holder.sql_stream("SELECT slow_gpu(3000)").await.unwrap();
    let first = tokio::spawn(async move {
        let batch = held.next().await;
        (held, batch)
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    run(&waiter, "SET accelsql.statement_timeout = '500ms'").await;
    let took = timed_out(&waiter, "SELECT slow_gpu(1)").await;
    assert!(took < Duration::from_secs(2), "{took:?}");
    // The waiter left the queue: only the holder is there.
    let waiting = run(
        &waiter,
        "SELECT count(*) FROM accelsql.gpu_leases WHERE state = 'waiting'",
    )
    .await;
    assert_eq!(waiting, ["0"]);
    let (_held, batch) = first.await.unwrap();
    assert!(batch.unwrap().is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_that_stops_reading_does_not_keep_the_lease() {
    let engine = engine(1, None);
    let s = engine.session();
    // Many batches: the stream cannot end before the consumer reads them.
    run(
        &s,
        "CREATE TABLE many AS SELECT value AS v FROM generate_series(1, 200000)",
    )
    .await;
    run(&s, "SET datafusion.execution.batch_size = 1024").await;
    run(&s, "SET accelsql.statement_timeout = '800ms'").await;
    let mut stream = s
        .sql_stream("SELECT slow_gpu(1), v FROM many")
        .await
        .unwrap();
    assert!(stream.next().await.unwrap().is_ok());
    tokio::time::sleep(Duration::from_millis(2500)).await;
    // The statement was stopped in its task: the lease is back while the stream is unread.
    let other = engine.session();
    assert_eq!(leases_not_released(&other).await, ["0"]);
    let mut error = None;
    while let Some(next) = stream.next().await {
        if let Err(e) = next {
            error = Some(EngineError::from(e));
            break;
        }
    }
    let e = error.expect("the stream ends with the timeout");
    assert_eq!(e.code(), EngineError::STATEMENT_TIMEOUT, "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_engine_default_holds_and_a_restricted_session_may_only_lower_it() {
    let engine = engine(0, Some(Duration::from_millis(400)));
    let s = engine.session();
    timed_out(&s, RUNAWAY).await;
    // RESET goes back to the engine's default, not to none.
    run(&s, "SET accelsql.statement_timeout = '10min'").await;
    run(&s, "RESET accelsql.statement_timeout").await;
    timed_out(&s, RUNAWAY).await;

    let restricted = engine.session();
    restricted.restrict();
    run(&restricted, "SET accelsql.statement_timeout = '200ms'").await;
    for lift in [
        "SET accelsql.statement_timeout = '1h'",
        "SET accelsql.statement_timeout = ''",
        "ALTER SESSION SET QUERY_TIMEOUT = 0",
        "ALTER SESSION SET QUERY_TIMEOUT = 3600",
        "RESET accelsql.statement_timeout",
    ] {
        let e = restricted.sql(lift).await.unwrap_err();
        assert_eq!(e.code(), "42501", "{lift}: {e}");
    }
    timed_out(&restricted, RUNAWAY).await;
}
