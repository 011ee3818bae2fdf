//! What one session sees of another's in `accelsql.gpu_leases` and `accelsql.udf_calls`: who
//! holds or waits (session, user, state, times), never their SQL text or calls — unless it may
//! see everything (the embedding program's own sessions; a server's admin), and never when
//! restricted.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic: that is a failed test

use crate::helpers::run;
use accelsql_engine::{Engine, testing};

fn engine() -> Engine {
    testing::fixture_engine(1).unwrap()
}

const SECRET: &str = "SELECT gpu_probe_required(x) FROM (VALUES (4242)) t(x)";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_see_their_own_sql_and_calls_and_of_others_only_who() {
    let engine = engine();
    let alice = engine.session();
    alice.set_user("alice", false);
    let bob = engine.session();
    bob.set_user("bob", false);
    assert_ne!(alice.id(), bob.id());
    assert_eq!(alice.user().as_deref(), Some("alice"));
    run(&alice, SECRET).await;

    // Alice sees her statement's text and her calls, with her session and user.
    let own = run(
        &alice,
        "SELECT statement LIKE '%4242%', session, \"user\" FROM accelsql.gpu_leases",
    )
    .await;
    assert_eq!(own, [format!("true|{}|alice", alice.id())]);
    let calls = run(
        &alice,
        "SELECT udf, session, \"user\" FROM accelsql.udf_calls",
    )
    .await;
    assert_eq!(calls, [format!("gpu_probe_required|{}|alice", alice.id())]);

    // Bob sees that alice's session held the lease, and when, but not what it ran.
    let seen = run(
        &bob,
        "SELECT state, statement LIKE '%4242%', statement LIKE '%gpu_probe%', session, \"user\" \
         FROM accelsql.gpu_leases",
    )
    .await;
    assert_eq!(seen, [format!("released|false|false|{}|alice", alice.id())]);
    assert_eq!(
        run(&bob, "SELECT count(*) FROM accelsql.udf_calls").await,
        ["0"]
    );

    // The embedding program's own sessions see everything, a restricted one never does.
    let program = engine.session();
    assert_eq!(
        run(
            &program,
            "SELECT count(*) FROM accelsql.gpu_leases WHERE statement LIKE '%4242%'"
        )
        .await,
        ["1"]
    );
    assert_eq!(
        run(&program, "SELECT count(*) FROM accelsql.udf_calls").await,
        ["1"]
    );
    let admin = engine.session();
    admin.set_user("root", true);
    admin.restrict();
    assert_eq!(
        run(
            &admin,
            "SELECT count(*) FROM accelsql.gpu_leases WHERE statement LIKE '%4242%'"
        )
        .await,
        ["0"]
    );
    assert_eq!(
        run(&admin, "SELECT count(*) FROM accelsql.udf_calls").await,
        ["0"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_wait_error_names_the_holder_without_its_sql() {
    use futures::StreamExt;
    let engine = engine();
    let holder = engine.session();
    holder.set_user("alice", false);
    let waiter = engine.session();
    waiter.set_user("bob", false);
    let mut held = holder
        .sql_stream("SELECT slow_gpu(2000) AS secret_4242")
        .await
        .unwrap();
    let first = tokio::spawn(async move {
        let batch = held.next().await;
        (held, batch)
    });
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    run(&waiter, "SET accelsql.gpu_wait_timeout = '200ms'").await;
    let e = waiter.sql("SELECT slow_gpu(1)").await.unwrap_err();
    assert_eq!(e.code(), "57G01", "{e}");
    let message = e.to_string();
    assert!(
        message.contains(&format!("session {}", holder.id())),
        "{message}"
    );
    assert!(!message.contains("secret_4242"), "{message}");
    let (_held, batch) = first.await.unwrap();
    assert!(batch.unwrap().is_ok());
}
