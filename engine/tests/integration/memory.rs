//! Memory budgets (`EngineOptions::memory_limit`, `accelsql.memory_limit`): a value or a result
//! too large for the session's budget fails with 53200 before it is built, sorts spill under the
//! data directory instead of failing, the engine's pool bounds all sessions together, and a
//! restricted session may only lower its budget. The session goes on after each failure.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic: that is a failed test

use std::time::{Duration, Instant};

use crate::helpers::run;
use accelsql_engine::{Engine, EngineError, EngineOptions, SchedulerConfig, Session};

fn engine(memory_limit: Option<usize>, data_dir: Option<&std::path::Path>) -> Engine {
    Engine::with_options(EngineOptions {
        scheduler: SchedulerConfig::default().with_simulated_gpus(0),
        memory_limit,
        data_dir: data_dir.map(|d| d.to_path_buf()),
        ..EngineOptions::default()
    })
    .unwrap()
}

/// Runs `sql`, which must fail with 53200 within a few seconds; returns the message.
async fn out_of_memory(s: &Session, sql: &str) -> String {
    let started = Instant::now();
    let e = s.sql(sql).await.expect_err(sql);
    assert_eq!(e.code(), EngineError::OUT_OF_MEMORY, "{sql}: {e}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{sql} took {:?} to fail: it built its output first",
        started.elapsed()
    );
    e.to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_huge_value_fails_before_it_is_built_and_the_session_goes_on() {
    let s = engine(None, None).session();
    run(&s, "SET accelsql.memory_limit = '64MiB'").await;
    // 800 MB from a 1-character string: refused at once, naming the budget. (Past 2 GiB,
    // DataFusion's own check refuses a string before it is built: 22000.)
    let message = out_of_memory(&s, "SELECT length(repeat('x', 800000000))").await;
    assert!(message.contains("repeat()"), "{message}");
    assert!(message.contains("accelsql.memory_limit"), "{message}");
    out_of_memory(&s, "SELECT length(lpad('x', 800000000, 'ab'))").await;
    out_of_memory(
        &s,
        "SELECT length(rpad(v, 200000000)) FROM (VALUES ('a'), ('b')) t(v)",
    )
    .await;
    // Per row: a column of counts that together pass the budget.
    out_of_memory(
        &s,
        "SELECT sum(length(repeat('xyz', 100000 + value))) FROM generate_series(1, 1000)",
    )
    .await;
    // Values that fit are built, and nothing stays reserved.
    assert_eq!(
        run(&s, "SELECT length(repeat('ab', 1000000))").await,
        ["2000000"]
    );
    assert_eq!(s.memory().used(), 0);
    assert_eq!(s.memory().budget(), Some(64 << 20));
    // Without a budget of its own the session is bounded by the engine's pool.
    run(&s, "RESET accelsql.memory_limit").await;
    assert_eq!(run(&s, "SELECT length(repeat('ab', 10))").await, ["20"]);
    assert_eq!(s.memory().budget(), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn functions_that_grow_their_input_are_bounded_by_the_budget_too() {
    let s = engine(None, None).session();
    run(&s, "SET accelsql.memory_limit = '64MiB'").await;
    // Each builds hundreds of MB from an input that fits (a value may take a quarter of the
    // budget, 16 MiB here): refused before it is built.
    let cases = [
        (
            "replace()",
            "SELECT length(replace(repeat('x', 10000000), 'x', 'yyyyyyyyyyyyyyyy'))",
        ),
        (
            "regexp_replace()",
            "SELECT length(regexp_replace(repeat('x', 10000000), 'x', 'yyyyyyyyyyyyyyyy', 'g'))",
        ),
        (
            "concat()",
            "SELECT length(concat(s, s, s, s, s, s, s, s, s, s)) \
             FROM (SELECT repeat('x', 10000000) AS s)",
        ),
        (
            "array_repeat()",
            "SELECT cardinality(array_repeat(1, 200000000))",
        ),
        ("range()", "SELECT cardinality(range(0, 1000000000))"),
    ];
    for (function, sql) in cases {
        let message = out_of_memory(&s, sql).await;
        assert!(message.contains(function), "{function}: {message}");
    }
    // The same functions on ordinary values run as before.
    assert_eq!(
        run(
            &s,
            "SELECT replace('abcabc', 'b', 'XY'), concat('a', 1, 'b'), cardinality(range(0, 10))"
        )
        .await,
        ["aXYcaXYc|a1b|10"]
    );
    assert_eq!(s.memory().used(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_engine_pool_bounds_every_session() {
    let engine = engine(Some(32 << 20), None);
    let (a, b) = (engine.session(), engine.session());
    let message = out_of_memory(&a, "SELECT length(repeat('x', 100000000))").await;
    assert!(message.contains("repeat()"), "{message}");
    assert_eq!(
        run(&b, "SELECT length(repeat('x', 1000000))").await,
        ["1000000"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_batch_past_the_budget_fails_with_53200() {
    let s = engine(None, None).session();
    run(&s, "SET accelsql.memory_limit = '1MiB'").await;
    // Each 8192-row batch of ~500-byte strings is ~4 MB: past the budget. (`||`, not a
    // function that reserves its output up front: the batch itself is what is refused.)
    let sql = format!(
        "SELECT '{}' || v FROM generate_series(1, 20000) t(v)",
        "x".repeat(500)
    );
    let message = out_of_memory(&s, &sql).await;
    assert!(message.contains("result batch"), "{message}");
    // Small results are fine, batch after batch.
    assert_eq!(
        run(&s, "SELECT count(*) FROM generate_series(1, 100000)").await,
        ["100000"]
    );
    assert_eq!(s.memory().used(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sort_larger_than_the_pool_spills_under_the_data_directory() {
    let dir = tempfile::tempdir().unwrap();
    let engine = engine(Some(24 << 20), Some(dir.path()));
    let s = engine.session();
    run(&s, "SET datafusion.execution.target_partitions = 1").await;
    // Sorting 4M rows of two 8-byte columns (64 MB) within a 24 MiB pool: it spills.
    let sql = "SELECT sum(r * v) FROM (SELECT v, row_number() OVER (ORDER BY v DESC) AS r \
               FROM (SELECT value % 1000003 AS v FROM generate_series(1, 4000000)))";
    let explained = run(&s, &format!("EXPLAIN ANALYZE {sql}")).await.join("\n");
    let spilled = explained
        .split("spill_count=")
        .skip(1)
        .filter_map(|rest| {
            rest.split(|c: char| !c.is_ascii_digit())
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum::<u64>();
    assert!(spilled > 0, "no spill in:\n{explained}");
    assert!(dir.path().join("tmp").is_dir());
    // The answer is the one an unbounded engine gives.
    let bounded = run(&s, sql).await;
    let unbounded = run(&engine_unbounded_session(), sql).await;
    assert_eq!(bounded, unbounded);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sort_that_spills_past_its_quota_fails_with_53400_and_leaves_no_files() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::with_options(EngineOptions {
        scheduler: SchedulerConfig::default().with_simulated_gpus(0),
        memory_limit: Some(24 << 20),
        data_dir: Some(dir.path().to_path_buf()),
        spill_limit: Some(64 << 20),
        session_spill_limit: Some(2 << 20),
        ..EngineOptions::default()
    })
    .unwrap();
    let s = engine.session();
    run(&s, "SET datafusion.execution.target_partitions = 1").await;
    // The sort above spills tens of MB: past a 2 MiB session quota.
    let sql = "SELECT sum(r * v) FROM (SELECT v, row_number() OVER (ORDER BY v DESC) AS r \
               FROM (SELECT value % 1000003 AS v FROM generate_series(1, 4000000)))";
    let e = s.sql(sql).await.unwrap_err();
    assert_eq!(e.code(), EngineError::SPILL_QUOTA, "{e}");
    assert!(e.to_string().contains("spill"), "{e}");
    // The statement's spill files are gone, and the session goes on.
    assert_eq!(engine.spilled_bytes(), 0);
    let left: u64 = walk_bytes(&dir.path().join("tmp"));
    assert_eq!(left, 0, "spill files left behind");
    assert_eq!(run(&s, "SELECT 1").await, ["1"]);
}

/// The bytes of the files under `dir`, recursively.
fn walk_bytes(dir: &std::path::Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .map(|e| {
                    let path = e.path();
                    if path.is_dir() {
                        walk_bytes(&path)
                    } else {
                        e.metadata().map_or(0, |m| m.len())
                    }
                })
                .sum()
        })
        .unwrap_or(0)
}

fn engine_unbounded_session() -> Session {
    engine(None, None).session()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restricted_session_may_only_lower_its_budget() {
    let engine = Engine::with_options(EngineOptions {
        scheduler: SchedulerConfig::default().with_simulated_gpus(0),
        session_memory_limit: Some(256 << 20),
        ..EngineOptions::default()
    })
    .unwrap();
    let s = engine.session();
    let shown = "SELECT value FROM information_schema.df_settings \
                 WHERE name = 'accelsql.memory_limit'";
    assert_eq!(run(&s, shown).await, [(256u64 << 20).to_string()]);
    s.restrict();
    run(&s, "SET accelsql.memory_limit = '128MiB'").await;
    for raise in [
        "SET accelsql.memory_limit = '1GiB'",
        "SET accelsql.memory_limit = ''",
        "RESET accelsql.memory_limit",
        "SET datafusion.runtime.memory_limit = '100G'",
    ] {
        let e = s.sql(raise).await.unwrap_err();
        assert_eq!(e.code(), "42501", "{raise}: {e}");
    }
    assert_eq!(run(&s, shown).await, ["128MiB"]);
    // Nonsense is refused whoever asks.
    let open = engine.session();
    for bad in ["'lots'", "'0'", "'-1GB'"] {
        let e = open
            .sql(&format!("SET accelsql.memory_limit = {bad}"))
            .await
            .unwrap_err();
        assert_eq!(e.code(), "22E03", "{bad}: {e}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_worker_past_the_session_budget_is_killed_and_the_session_goes_on() {
    let s = engine(None, None).session();
    run(
        &s,
        "CREATE PYTHON3 SCALAR SCRIPT hog(mb INTEGER) RETURNS INTEGER AS\n\
         import time\n\
         def run(ctx):\n    block = bytearray(ctx.mb * 1024 * 1024)\n    for i in range(0, len(block), 4096):\n        block[i] = 1\n    time.sleep(0.3)\n    return len(block) // (1024 * 1024)\n/",
    )
    .await;
    // Within the budget it runs; `exa.meta.memory_limit` tells the script its limit.
    run(&s, "SET accelsql.memory_limit = '256MiB'").await;
    assert_eq!(run(&s, "SELECT hog(16)").await, ["16"]);
    // 600 MiB in a worker whose limit is 256 MiB: killed, with its own code and the numbers.
    let started = Instant::now();
    let e = s.sql("SELECT hog(600)").await.expect_err("hog(600)");
    assert_eq!(e.code(), "53U25", "{e}");
    let message = e.to_string();
    assert!(message.contains("256.0 MiB"), "{message}");
    assert!(message.contains("accelsql.memory_limit"), "{message}");
    assert!(started.elapsed() < Duration::from_secs(20));
    // The session goes on, and a larger budget lets the same call through.
    run(&s, "SET accelsql.memory_limit = '2GiB'").await;
    assert_eq!(run(&s, "SELECT hog(300)").await, ["300"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workers_children_count_against_its_limit_and_end_with_it() {
    let s = engine(None, None).session();
    // The child holds 600 MiB: the worker's own memory stays small.
    run(
        &s,
        "CREATE PYTHON3 SCALAR SCRIPT child_hog(mb INTEGER) RETURNS INTEGER AS\n\
         import subprocess, sys, time\n\
         def run(ctx):\n    code = 'b = bytearray(%d * 1048576)\\nfor i in range(0, len(b), 4096): b[i] = 1\\nimport time; time.sleep(30)' % ctx.mb\n    p = subprocess.Popen([sys.executable, '-c', code])\n    time.sleep(3)\n    p.kill()\n    return ctx.mb\n/",
    )
    .await;
    run(&s, "SET accelsql.memory_limit = '256MiB'").await;
    let e = s
        .sql("SELECT child_hog(600)")
        .await
        .expect_err("child_hog(600)");
    assert_eq!(e.code(), "53U25", "{e}");
    // A double-forked grandchild in a session of its own ends with the statement's worker; the
    // script returns its pid (through a pipe).
    run(
        &s,
        "CREATE PYTHON3 SCALAR SCRIPT escape() RETURNS INTEGER AS\n\
         import os, time\n\
         def run(ctx):\n    r, w = os.pipe()\n    if os.fork() == 0:\n        os.setsid()\n        if os.fork() == 0:\n            os.write(w, str(os.getpid()).encode())\n            os.close(w)\n            time.sleep(60)\n        os._exit(0)\n    os.close(w)\n    pid = int(os.read(r, 32))\n    os.close(r)\n    return pid\n/",
    )
    .await;
    run(&s, "RESET accelsql.memory_limit").await;
    let pid: i32 = run(&s, "SELECT escape()").await[0].parse().unwrap();
    drop(s);
    let started = Instant::now();
    // SAFETY: kill with signal 0 only asks whether the process exists.
    while unsafe { libc::kill(pid, 0) } == 0 && !is_zombie(pid) {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the grandchild {pid} outlived its statement and session"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Whether `pid` has exited but is not reaped yet.
fn is_zombie(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            stat.rsplit(')')
                .next()
                .map(|rest| rest.trim_start().starts_with('Z'))
        })
        .unwrap_or(false)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_value_past_the_cell_cap_fails_whatever_budget_is_left() {
    let s = Engine::with_options(EngineOptions {
        scheduler: SchedulerConfig::default().with_simulated_gpus(0),
        max_value_bytes: 8 << 20,
        ..EngineOptions::default()
    })
    .unwrap()
    .session();
    // No budget of its own: only the cap stands in the way of a 20 MB value.
    let message = out_of_memory(&s, "SELECT length(repeat('x', 20000000))").await;
    assert!(
        message.contains("largest value one cell may hold"),
        "{message}"
    );
    out_of_memory(
        &s,
        "SELECT cardinality(array_repeat(repeat('x', 1000), 20000))",
    )
    .await;
    // Many values that are each small pass, however large together.
    assert_eq!(
        run(
            &s,
            "SELECT sum(length(repeat('x', 1000000))) FROM generate_series(1, 20)"
        )
        .await,
        ["20000000"]
    );
    assert_eq!(
        run(&s, "SELECT length(repeat('x', 8000000))").await,
        ["8000000"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concat_of_constants_is_bounded_while_it_is_planned() {
    let s = engine(None, None).session();
    run(&s, "SET accelsql.memory_limit = '64MiB'").await;
    // Each part fits (a value may take 16 MiB of this budget); the whole, joined when the
    // statement is planned, does not.
    let parts = ["repeat('x', 15000000)"; 4].join(", ");
    let message = out_of_memory(&s, &format!("SELECT length(concat({parts}))")).await;
    assert!(message.contains("concat()"), "{message}");
    assert_eq!(run(&s, "SELECT concat('a', 'b', 'c')").await, ["abc"]);
}
