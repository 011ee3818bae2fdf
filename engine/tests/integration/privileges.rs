//! Users, privileges and consumer groups on a real engine: what survives a restart of the
//! catalog, `Engine::session_as`, `DROP USER` ending a waiting statement, and the GPU queue's
//! consumer-group precedence — a high group's statements overtake a low one's, and the low one
//! still gets the GPU within the stated bound.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic: that is a failed test

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::helpers::{error_of, run, until};
use accelsql_engine::{Engine, EngineOptions, SchedulerConfig, Session, testing};

fn engine_with(data_dir: Option<&Path>, aging: Duration) -> Engine {
    let engine = Engine::with_options(EngineOptions {
        scheduler: SchedulerConfig::default().with_simulated_gpus(1),
        data_dir: data_dir.map(Path::to_path_buf),
        password_rounds: 1000,
        gpu_precedence_aging: aging,
        ..EngineOptions::default()
    })
    .unwrap();
    testing::register_fixtures(&engine).unwrap();
    engine
}

#[tokio::test]
async fn users_and_grants_survive_a_restart_and_passwords_are_only_hashed() {
    let dir = tempfile::tempdir().unwrap();
    {
        let engine = engine_with(Some(dir.path()), Duration::from_millis(10));
        let sys = engine.session();
        run(&sys, "CREATE USER ann IDENTIFIED BY \"very-secret-pw\"").await;
        run(&sys, "CREATE ROLE gpu_users").await;
        run(&sys, "GRANT CREATE SESSION, USE GPU TO gpu_users").await;
        run(&sys, "GRANT gpu_users TO ann").await;
        run(&sys, "CREATE CONSUMER GROUP etl WITH PRECEDENCE = '700'").await;
        run(&sys, "ALTER USER ann SET CONSUMER_GROUP = etl").await;
        assert!(engine.verify_password("ann", "very-secret-pw"));
        assert!(!engine.verify_password("ann", "wrong"));
        assert!(!engine.verify_password("nobody", "very-secret-pw"));
    }
    let catalog = dir.path().join("scripts.json");
    let text = std::fs::read_to_string(&catalog).unwrap();
    assert!(!text.contains("very-secret-pw"), "a password in the clear");
    assert!(text.contains("pbkdf2-sha256:1000:"), "{text}");
    let mode = std::fs::metadata(&catalog).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);

    let engine = engine_with(Some(dir.path()), Duration::from_millis(10));
    assert!(engine.verify_password("ANN", "very-secret-pw"));
    let ann = engine.session_as("ann").unwrap();
    assert_eq!(ann.account(), "ANN");
    assert_eq!(run(&ann, "SELECT CURRENT_USER").await, ["ANN"]);
    assert_eq!(run(&ann, "SELECT gpu_probe_required()").await, ["0"]);
    let e = ann
        .sql("CREATE USER bob IDENTIFIED BY \"x\"")
        .await
        .unwrap_err();
    assert_eq!(e.code(), "42501", "{e}");
    // A revoke applies from the next statement of a session that is open.
    engine
        .session()
        .sql("REVOKE USE GPU FROM gpu_users")
        .await
        .unwrap();
    let e = ann.sql("SELECT gpu_probe_required()").await.unwrap_err();
    assert_eq!(e.code(), "42501", "{e}");
    assert!(e.to_string().contains("USE GPU"), "{e}");

    let e = engine.session_as("nobody").unwrap_err();
    assert_eq!(e.code(), "42704", "{e}");
    // The users file's hashes come over unchanged.
    let hash = accelsql_engine::hash_password("imported", 1000).unwrap();
    assert!(engine.import_user("CAROL", &hash).unwrap());
    assert!(engine.verify_password("carol", "imported"));
    assert!(engine.import_user("CAROL", "md5:nope").is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_a_user_ends_its_sessions_and_frees_their_place_in_the_queue() {
    let engine = engine_with(None, Duration::from_millis(10));
    let sys = engine.session();
    run(&sys, "CREATE USER ann IDENTIFIED BY \"pw\"").await;
    run(&sys, "GRANT CREATE SESSION, USE GPU TO ann").await;
    run(&sys, "SET datafusion.execution.batch_size = 1").await;
    let holder = sys
        .sql_stream("SELECT slow_gpu(20) FROM generate_series(1, 50)")
        .await
        .unwrap();
    let holder = tokio::spawn(error_of(holder));
    until("the lease is held", || {
        engine.lease_queue().snapshot().holder.is_some()
    })
    .await;
    let ann = engine.session_as("ann").unwrap();
    let waiting = ann.sql_stream("SELECT slow_gpu(1)").await.unwrap();
    let waiting = tokio::spawn(error_of(waiting));
    until("ann waits", || {
        engine.lease_queue().snapshot().waiting.len() == 1
    })
    .await;
    let other = engine.session();
    run(&other, "DROP USER ann").await;
    let e = waiting.await.unwrap().expect("ann's statement should stop");
    assert_eq!(e.code(), "57P01", "{e}");
    assert!(engine.lease_queue().snapshot().waiting.is_empty());
    let e = ann.sql("SELECT 1").await.unwrap_err();
    assert_eq!(e.code(), "57P01", "{e}");
    assert!(holder.await.unwrap().is_none());
}

/// Two users in groups LOW (precedence 100) and HIGH (900), both with USE GPU.
async fn two_groups(engine: &Engine) -> (Session, Session) {
    let sys = engine.session();
    for (user, group) in [("low_u", "LOW"), ("high_u", "HIGH")] {
        run(&sys, &format!("CREATE USER {user} IDENTIFIED BY \"pw\"")).await;
        run(&sys, &format!("GRANT CREATE SESSION, USE GPU TO {user}")).await;
        run(
            &sys,
            &format!("ALTER USER {user} SET CONSUMER_GROUP = {group}"),
        )
        .await;
    }
    (
        engine.session_as("low_u").unwrap(),
        engine.session_as("high_u").unwrap(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_high_precedence_group_overtakes_a_low_one_in_the_gpu_queue() {
    // No aging: precedence alone decides.
    let engine = engine_with(None, Duration::ZERO);
    let (low, high) = two_groups(&engine).await;
    let sys = engine.session();
    let holder = sys.sql_stream("SELECT slow_gpu(300)").await.unwrap();
    let holder = tokio::spawn(error_of(holder));
    until("the lease is held", || {
        engine.lease_queue().snapshot().holder.is_some()
    })
    .await;
    let low_stream = low.sql_stream("SELECT slow_gpu(50)").await.unwrap();
    let low_task = tokio::spawn(async move {
        let e = error_of(low_stream).await;
        (e, Instant::now())
    });
    until("low waits", || {
        engine.lease_queue().snapshot().waiting.len() == 1
    })
    .await;
    let high_stream = high.sql_stream("SELECT slow_gpu(50)").await.unwrap();
    let high_task = tokio::spawn(async move {
        let e = error_of(high_stream).await;
        (e, Instant::now())
    });
    until("both wait", || {
        engine.lease_queue().snapshot().waiting.len() == 2
    })
    .await;
    // accelsql.gpu_leases shows each waiter's group and precedence, in grant order.
    let rows = run(
        &sys,
        "SELECT consumer_group || ' ' || CAST(precedence AS VARCHAR) FROM accelsql.gpu_leases \
         WHERE state = 'waiting'",
    )
    .await;
    assert_eq!(rows, ["HIGH 900", "LOW 100"]);
    assert!(holder.await.unwrap().is_none());
    let (e_low, low_done) = low_task.await.unwrap();
    let (e_high, high_done) = high_task.await.unwrap();
    assert!(e_low.is_none() && e_high.is_none(), "{e_low:?} {e_high:?}");
    assert!(
        high_done < low_done,
        "the later HIGH statement should have had the GPU first"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_low_group_still_gets_the_gpu_within_the_aging_bound() {
    // One point of precedence per millisecond of waiting: LOW (100) outranks any newly arrived
    // HIGH (900) statement after 800 ms.
    let aging = Duration::from_millis(1);
    let engine = engine_with(None, aging);
    let (low, high) = two_groups(&engine).await;
    let high = std::sync::Arc::new(high);
    // A stream of HIGH statements, each holding the GPU ~30 ms, from four feeders: while one
    // holds the lease, others wait, for 4 s.
    let stop_at = Instant::now() + Duration::from_secs(4);
    let mut feeders = Vec::new();
    for _ in 0..4 {
        let high = std::sync::Arc::clone(&high);
        feeders.push(tokio::spawn(async move {
            while Instant::now() < stop_at {
                high.sql("SELECT slow_gpu(30)").await.unwrap();
            }
        }));
    }
    until("HIGH statements wait", || {
        engine.lease_queue().snapshot().waiting.len() >= 2
    })
    .await;
    let granted_before = engine.lease_queue().snapshot().totals.granted;
    let started = Instant::now();
    low.sql("SELECT slow_gpu(1)").await.unwrap();
    let waited = started.elapsed();
    // Leases granted between LOW's arrival and its own grant (its own excluded).
    let overtaken_by = engine.lease_queue().snapshot().totals.granted - granted_before - 1;
    for f in feeders {
        f.await.unwrap();
    }
    // The bound: (900 − 100) points × 1 ms, plus the holds of the statements ahead of it then
    // (the holder and the waiters, ~30 ms each) — with slack for a loaded machine.
    let bound = aging * 800 + Duration::from_millis(150);
    assert!(
        waited < bound + Duration::from_millis(1500),
        "LOW waited {waited:?}; the bound is {bound:?}"
    );
    // In arrival order at most the holder and the four feeders' statements would have gone
    // first; HIGH's precedence let more go first while LOW aged.
    assert!(
        overtaken_by > 6,
        "only {overtaken_by} statements went before LOW (in {waited:?}): HIGH's precedence was \
         not applied"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_gpu_waiters_refuses_one_more_waiter_of_the_group() {
    let engine = engine_with(None, Duration::from_millis(10));
    let sys = engine.session();
    run(&sys, "CREATE USER ann IDENTIFIED BY \"pw\"").await;
    run(&sys, "GRANT CREATE SESSION, USE GPU TO ann").await;
    run(
        &sys,
        "CREATE CONSUMER GROUP capped WITH MAX_GPU_WAITERS = 1",
    )
    .await;
    run(&sys, "ALTER USER ann SET CONSUMER_GROUP = capped").await;
    let holder = sys.sql_stream("SELECT slow_gpu(300)").await.unwrap();
    let holder = tokio::spawn(error_of(holder));
    until("the lease is held", || {
        engine.lease_queue().snapshot().holder.is_some()
    })
    .await;
    let first = engine.session_as("ann").unwrap();
    let waiting = first.sql_stream("SELECT slow_gpu(1)").await.unwrap();
    let waiting = tokio::spawn(error_of(waiting));
    until("ann waits", || {
        engine.lease_queue().snapshot().waiting.len() == 1
    })
    .await;
    let second = engine.session_as("ann").unwrap();
    let e = second.sql("SELECT slow_gpu(1)").await.unwrap_err();
    assert_eq!(e.code(), "57G04", "{e}");
    assert!(e.to_string().contains("CAPPED"), "{e}");
    assert!(waiting.await.unwrap().is_none());
    assert!(holder.await.unwrap().is_none());
}

#[tokio::test]
async fn files_need_their_privileges_reading_and_writing_apart() {
    let dir = tempfile::tempdir().unwrap();
    let table_dir = dir.path().join("t");
    std::fs::create_dir(&table_dir).unwrap();
    std::fs::write(table_dir.join("part-0.csv"), "a\n1\n2\n").unwrap();
    let engine = engine_with(None, Duration::from_millis(10));
    let sys = engine.session();
    run(&sys, "CREATE USER ann IDENTIFIED BY \"pw\"").await;
    run(&sys, "GRANT CREATE SESSION, CREATE TABLE TO ann").await;
    let ann = engine.session_as("ann").unwrap();
    let create = format!(
        "CREATE EXTERNAL TABLE t (a BIGINT) STORED AS CSV LOCATION '{}/' OPTIONS ('format.has_header' 'true')",
        table_dir.display()
    );
    let e = ann.sql(&create).await.unwrap_err();
    assert_eq!(e.code(), "42501", "{e}");
    assert!(e.to_string().contains("READ SERVER FILES"), "{e}");
    run(&sys, "GRANT READ SERVER FILES TO ann").await;
    run(&ann, &create).await;
    assert_eq!(run(&ann, "SELECT sum(a) FROM t").await, ["3"]);
    // Reading is not writing: an INSERT into the file-backed table writes the server's files.
    let e = ann.sql("INSERT INTO t VALUES (3)").await.unwrap_err();
    assert_eq!(e.code(), "42501", "{e}");
    assert!(e.to_string().contains("WRITE SERVER FILES"), "{e}");
    let out = dir.path().join("out.csv");
    let copy = format!("COPY (SELECT 1 AS x) TO '{}' STORED AS CSV", out.display());
    let e = ann.sql(&copy).await.unwrap_err();
    assert!(e.to_string().contains("WRITE SERVER FILES"), "{e}");
    assert!(!out.exists());
    run(&sys, "GRANT WRITE SERVER FILES TO ann").await;
    run(&ann, "INSERT INTO t VALUES (3)").await;
    assert_eq!(run(&ann, "SELECT sum(a) FROM t").await, ["6"]);
    run(&ann, &copy).await;
    assert!(out.exists());
    // A table of the session's own (in memory) needs no file privilege.
    run(&ann, "CREATE TABLE m (x INT)").await;
    run(&ann, "INSERT INTO m VALUES (1)").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_groups_query_timeout_bounds_its_users_statements() {
    let engine = engine_with(None, Duration::from_millis(10));
    let sys = engine.session();
    run(&sys, "CREATE USER ann IDENTIFIED BY \"pw\"").await;
    run(&sys, "GRANT CREATE SESSION, USE GPU TO ann").await;
    run(&sys, "CREATE CONSUMER GROUP quick WITH QUERY_TIMEOUT = 1").await;
    run(&sys, "ALTER USER ann SET CONSUMER_GROUP = quick").await;
    let ann = engine.session_as("ann").unwrap();
    // One-row batches make the statement below long; that setting needs ALTER SESSION.
    let e = ann
        .sql("SET datafusion.execution.batch_size = 1")
        .await
        .unwrap_err();
    assert_eq!(e.code(), "42501", "{e}");
    run(&sys, "GRANT ALTER SESSION TO ann").await;
    run(&ann, "SET datafusion.execution.batch_size = 1").await;
    // About 10 s of GPU work; the group's 1 s ends it (the session set no bound of its own).
    let started = Instant::now();
    let e = ann
        .sql("SELECT slow_gpu(50) FROM generate_series(1, 200)")
        .await
        .unwrap_err();
    assert_eq!(e.code(), "57T01", "{e}");
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "{:?}",
        started.elapsed()
    );
    // A session's own smaller bound still applies; SYS's statements are not the group's.
    run(&sys, "SET datafusion.execution.batch_size = 1").await;
    assert_eq!(
        run(
            &sys,
            "SELECT count(slow_gpu(1)) FROM generate_series(1, 1500)"
        )
        .await,
        ["1500"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_groups_memory_limits_bound_its_users_sessions_together() {
    let engine = engine_with(None, Duration::from_millis(10));
    let sys = engine.session();
    run(&sys, "CREATE USER ann IDENTIFIED BY \"pw\"").await;
    run(&sys, "GRANT CREATE SESSION TO ann").await;
    run(
        &sys,
        "CREATE CONSUMER GROUP small WITH USER_TEMP_DB_RAM_LIMIT = '1M', GROUP_TEMP_DB_RAM_LIMIT = '64M'",
    )
    .await;
    run(&sys, "ALTER USER ann SET CONSUMER_GROUP = small").await;
    // Each 8192-row batch of ~500-byte strings is ~4 MB: past the user's 1 MiB.
    let big = "SELECT concat(repeat('x', 500), v) FROM generate_series(1, 20000) t(v)";
    let ann = engine.session_as("ann").unwrap();
    let e = ann.sql(big).await.unwrap_err();
    assert_eq!(e.code(), "53200", "{e}");
    assert!(e.to_string().contains("user ANN"), "{e}");
    // Everything the failed statement held is given back (its stream ends off this thread).
    until("ann's memory is given back", || ann.memory().used() == 0).await;
    // Small statements go on; SYS is not in the group.
    assert_eq!(
        run(&ann, "SELECT count(*) FROM generate_series(1, 1000)").await,
        ["1000"]
    );
    assert_eq!(
        run(&sys, &format!("SELECT count(*) FROM ({big})")).await,
        ["20000"]
    );
    // Lifted, the same statement runs.
    run(
        &sys,
        "ALTER CONSUMER GROUP small SET USER_TEMP_DB_RAM_LIMIT = '0'",
    )
    .await;
    assert_eq!(
        ann.sql(big)
            .await
            .unwrap()
            .iter()
            .map(|b| b.num_rows())
            .sum::<usize>(),
        20000
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_groups_gpu_lease_hold_limit_stops_a_statement_that_holds_the_gpu_too_long() {
    let engine = engine_with(None, Duration::from_millis(10));
    let sys = engine.session();
    run(&sys, "CREATE USER ann IDENTIFIED BY \"pw\"").await;
    run(&sys, "GRANT CREATE SESSION, USE GPU, ALTER SESSION TO ann").await;
    run(
        &sys,
        "CREATE CONSUMER GROUP brief WITH GPU_LEASE_HOLD_LIMIT = 1",
    )
    .await;
    run(&sys, "ALTER USER ann SET CONSUMER_GROUP = brief").await;
    let ann = engine.session_as("ann").unwrap();
    run(&ann, "SET datafusion.execution.batch_size = 1").await;
    // About 10 s holding the GPU; the group allows 1 s.
    let started = Instant::now();
    let e = ann
        .sql("SELECT slow_gpu(50) FROM generate_series(1, 200)")
        .await
        .unwrap_err();
    assert_eq!(e.code(), "57G03", "{e}");
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "{:?}",
        started.elapsed()
    );
    // The lease is free again for the next statement.
    assert_eq!(run(&ann, "SELECT gpu_probe_required()").await, ["0"]);
    assert!(engine.lease_queue().snapshot().holder.is_none());
}

#[tokio::test]
async fn a_restricted_session_cannot_lift_its_ceiling_by_granting_to_restricted_or_public() {
    let engine = engine_with(None, Duration::from_millis(10));
    let sys = engine.session();
    run(&sys, "CREATE USER ann IDENTIFIED BY \"pw-of-ann-1\"").await;
    run(&sys, "CREATE ROLE power").await;
    run(&sys, "GRANT CREATE SESSION TO ann").await;
    run(&sys, "GRANT CREATE SCRIPT TO power").await;
    run(&sys, "GRANT power TO ann WITH ADMIN OPTION").await;
    run(&sys, "CREATE ROLE helper").await;
    run(&sys, "GRANT helper TO restricted").await;
    let ann = engine.session_as("ann").unwrap();
    ann.restrict();
    for grantee in ["RESTRICTED", "PUBLIC", "restricted", "\"public\"", "helper"] {
        let e = ann
            .sql(&format!("GRANT power TO {grantee}"))
            .await
            .unwrap_err();
        assert_eq!(e.code(), "42501", "{grantee}: {e}");
        let e = ann
            .sql(&format!("REVOKE power FROM {grantee}"))
            .await
            .unwrap_err();
        assert_eq!(e.code(), "42501", "{grantee}: {e}");
    }
    // The ceiling holds: still no CREATE SCRIPT in the restricted session.
    let e = ann
        .sql("CREATE PYTHON3 SCALAR SCRIPT s() RETURNS INT AS\ndef run(ctx):\n    return 1\n/")
        .await
        .unwrap_err();
    assert_eq!(e.code(), "42501", "{e}");
    let shown = run(
        &sys,
        "SELECT count(*) FROM exa_dba_role_privs WHERE granted_role = 'POWER'",
    )
    .await;
    assert_eq!(shown, ["1"], "only ann holds POWER");
    // Unrestricted, ann may grant her role as its admin.
    let free = engine.session_as("ann").unwrap();
    run(&free, "GRANT power TO public").await;
}

#[tokio::test]
async fn user_names_have_one_form_so_none_aliases_another() {
    let engine = engine_with(None, Duration::from_millis(10));
    let sys = engine.session();
    run(&sys, "CREATE USER dev IDENTIFIED BY \"pw-of-dev-1\"").await;
    run(&sys, "CREATE USER mallory IDENTIFIED BY \"pw-of-mal-1\"").await;
    run(&sys, "GRANT CREATE SESSION, CREATE USER TO mallory").await;
    let mallory = engine.session_as("mallory").unwrap();
    for name in ["\"sys\"", "\"Sys\"", "\"dev\"", "DEV", "\"Mallory\""] {
        let e = mallory
            .sql(&format!("CREATE USER {name} IDENTIFIED BY \"pw-12345678\""))
            .await
            .unwrap_err();
        assert_eq!(e.code(), "42710", "{name}: {e}");
    }
    // The real DEV still logs in, under any spelling of the name.
    assert!(engine.verify_password("dev", "pw-of-dev-1"));
    assert!(engine.verify_password("Dev", "pw-of-dev-1"));
    assert_eq!(engine.user_name("dev").as_deref(), Some("DEV"));
    // A quoted lower-case name is the same user as the unquoted one.
    run(&sys, "CREATE USER \"zoe\" IDENTIFIED BY \"pw-of-zoe-1\"").await;
    let e = sys
        .sql("CREATE USER zoe IDENTIFIED BY \"pw-of-zoe-2\"")
        .await
        .unwrap_err();
    assert_eq!(e.code(), "42710", "{e}");
    assert_eq!(engine.user_name("zoe").as_deref(), Some("ZOE"));
}

#[tokio::test]
async fn file_privileges_never_reach_the_data_directory() {
    let root = tempfile::tempdir().unwrap();
    let data = root.path().join("data");
    let engine = engine_with(Some(&data), Duration::from_millis(10));
    let sys = engine.session();
    run(&sys, "CREATE TABLE t AS SELECT 1 AS a").await;
    std::fs::write(data.join("server-token"), "name\ns3cret-token\n").unwrap();
    let outside = root.path().join("outside.csv");
    std::fs::write(&outside, "name\nvisible\n").unwrap();
    run(&sys, "CREATE USER fil IDENTIFIED BY \"pw-of-fil-1\"").await;
    run(
        &sys,
        "GRANT CREATE SESSION, CREATE TABLE, READ SERVER FILES, WRITE SERVER FILES TO fil",
    )
    .await;
    run(&sys, "GRANT INSERT ON t TO fil").await;
    let fil = engine.session_as("fil").unwrap();
    let token = data.join("server-token").display().to_string();
    for sql in [
        format!("CREATE EXTERNAL TABLE stolen STORED AS CSV LOCATION '{token}'"),
        format!(
            "CREATE EXTERNAL TABLE stolen STORED AS CSV LOCATION '{}/'",
            root.path().display()
        ),
        format!(
            "COPY (SELECT 1 AS a) TO '{}' STORED AS CSV",
            data.join("planted.csv").display()
        ),
        format!("COPY t FROM '{token}'"),
    ] {
        let e = fil.sql(&sql).await.unwrap_err();
        assert_eq!(e.code(), "42501", "{sql}: {e}");
        assert!(e.to_string().contains("data directory"), "{e}");
    }
    assert!(!data.join("planted.csv").exists());
    // Files elsewhere are still theirs to read.
    run(
        &fil,
        &format!("CREATE EXTERNAL TABLE seen STORED AS CSV LOCATION '{}' OPTIONS ('format.has_header' 'true')", outside.display()),
    )
    .await;
    assert_eq!(run(&fil, "SELECT name FROM seen").await, ["visible"]);
}
