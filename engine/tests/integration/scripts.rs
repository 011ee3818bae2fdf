//! Python script UDFs through SQL: DDL, the catalog and its persistence, running scripts in
//! worker processes, pinning, and faults.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic: that is a failed test

use crate::helpers::run;
use accelsql_engine::datafusion::arrow::array::RecordBatch;
use accelsql_engine::{Engine, EngineOptions, SchedulerConfig};

fn engine(gpus: usize) -> Engine {
    Engine::with_config(SchedulerConfig::default().with_simulated_gpus(gpus)).unwrap()
}

const CITIES: &str = "CREATE TABLE cities(name VARCHAR, country VARCHAR, population BIGINT) AS VALUES \
    ('Berlin', 'DE', 3645000), ('Hamburg', 'DE', 1841000), ('Paris', 'FR', 2161000), \
    ('Lyon', 'FR', 513000), ('Madrid', 'ES', 3223000)";

#[tokio::test]
async fn scalar_and_set_scripts_run_in_python() {
    let s = engine(0).session();
    run(&s, CITIES).await;
    run(
        &s,
        "CREATE PYTHON3 SCALAR SCRIPT shout(name VARCHAR(100)) RETURNS VARCHAR(200) AS\n\
         def run(ctx):\n    return ctx.name.upper() + '!'\n/",
    )
    .await;
    assert_eq!(
        run(&s, "SELECT shout(name) FROM cities ORDER BY name LIMIT 2").await,
        ["BERLIN!", "HAMBURG!"]
    );
    run(
        &s,
        "CREATE PYTHON3 SET SCRIPT pop_sum(country VARCHAR(10), population BIGINT)\n\
         EMITS (country VARCHAR(10), total BIGINT) AS\n\
         def run(ctx):\n    total = 0\n    c = ctx.country\n    while True:\n        total += ctx.population\n        if not ctx.next():\n            break\n    ctx.emit(c, total)\n/",
    )
    .await;
    assert_eq!(
        run(
            &s,
            "SELECT pop_sum(country, population) FROM cities GROUP BY country ORDER BY country"
        )
        .await,
        ["DE|5486000", "ES|3223000", "FR|2674000"]
    );
    let scripts = run(
        &s,
        "SELECT name, kind, language FROM accelsql.scripts ORDER BY name",
    )
    .await;
    assert_eq!(
        scripts,
        ["pop_sum|SET EMITS|PYTHON3", "shout|SCALAR RETURNS|PYTHON3"]
    );
}

#[tokio::test]
async fn scripts_persist_in_the_data_directory_and_damage_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let options = || EngineOptions {
        scheduler: SchedulerConfig::default().with_simulated_gpus(0),
        data_dir: Some(dir.path().to_path_buf()),
        ..EngineOptions::default()
    };
    {
        let s = Engine::with_options(options()).unwrap().session();
        run(
            &s,
            "CREATE PYTHON3 SCALAR SCRIPT twice(x BIGINT) RETURNS BIGINT AS\ndef run(ctx):\n    return 2 * ctx.x\n/",
        )
        .await;
    }
    // A new engine (a restart) finds it.
    let s = Engine::with_options(options()).unwrap().session();
    assert_eq!(run(&s, "SELECT twice(21)").await, ["42"]);
    run(&s, "DROP SCRIPT twice").await;
    let e = s.sql("SELECT twice(21)").await.unwrap_err();
    assert_eq!(e.code(), "42000", "{e}");
    std::fs::write(dir.path().join("scripts.json"), "{ not json").unwrap();
    let e = Engine::with_options(options()).unwrap_err();
    assert_eq!(e.code(), "58E01", "{e}");
    assert!(e.to_string().contains("damaged"), "{e}");
}

#[tokio::test]
async fn python_errors_name_the_script_line_and_exception() {
    let s = engine(0).session();
    run(
        &s,
        "CREATE PYTHON3 SCALAR SCRIPT typo(x BIGINT) RETURNS BIGINT AS\n\
         %perNodeAndCallInstanceLimit 1;\n\
         def run(ctx):\n    y = ctx.x\n    return yy\n/",
    )
    .await;
    let e = s.sql("SELECT typo(1)").await.unwrap_err();
    let message = e.to_string();
    assert_eq!(e.code(), "22U10", "{message}");
    assert!(message.contains("typo"), "{message}");
    assert!(message.contains("NameError"), "{message}");
    // Line 4 of the body as the user wrote it (the option line still counts).
    assert!(message.contains("line 4"), "{message}");
    // The session is still usable, and the lease is free.
    assert_eq!(run(&s, "SELECT 1").await, ["1"]);
}

#[tokio::test]
async fn a_crashing_worker_fails_only_its_statement_and_releases_the_devices() {
    let s = engine(1).session();
    run(
        &s,
        "CREATE PYTHON3 SCALAR SCRIPT die(x BIGINT) RETURNS BIGINT AS\n\
         %perInstanceRequiredAcceleratorDevices GpuNvidia;\n\
         import os\ndef run(ctx):\n    os._exit(3)\n/",
    )
    .await;
    let e = s.sql("SELECT die(1)").await.unwrap_err();
    assert_eq!(e.code(), "58U11", "{e}");
    assert!(e.to_string().contains("exited with code 3"), "{e}");
    assert_eq!(
        run(
            &s,
            "SELECT count(*) FROM accelsql.gpu_leases WHERE state <> 'released'"
        )
        .await,
        ["0"]
    );
    // Another session runs a GPU script right after.
    let other = s.engine().session();
    run(
        &other,
        "CREATE PYTHON3 SCALAR SCRIPT fine() RETURNS BIGINT AS\n\
         %perInstanceRequiredAcceleratorDevices GpuNvidia;\ndef run(ctx):\n    return 7\n/",
    )
    .await;
    assert_eq!(run(&other, "SELECT fine()").await, ["7"]);
}

#[tokio::test]
async fn udf_timeout_kills_a_run_that_takes_too_long() {
    let s = engine(0).session();
    run(
        &s,
        "CREATE PYTHON3 SCALAR SCRIPT nap(x DOUBLE) RETURNS DOUBLE AS\n\
         import time\ndef run(ctx):\n    time.sleep(ctx.x)\n    return ctx.x\n/",
    )
    .await;
    run(&s, "SET accelsql.udf_timeout = '300ms'").await;
    let started = std::time::Instant::now();
    let e = s.sql("SELECT nap(20.0)").await.unwrap_err();
    assert_eq!(e.code(), "57U12", "{e}");
    assert!(started.elapsed() < std::time::Duration::from_secs(10));
    run(&s, "RESET accelsql.udf_timeout").await;
    assert_eq!(run(&s, "SELECT nap(0.01)").await, ["0.01"]);
}

#[tokio::test]
async fn instances_see_only_their_pinned_device() {
    let engine = engine(2);
    accelsql_engine::testing::register_fixtures(&engine).unwrap();
    let s = engine.session();
    run(&s, CITIES).await;
    run(
        &s,
        "CREATE PYTHON3 SET SCRIPT where_am_i(country VARCHAR(10)) EMITS (country VARCHAR(10), cuda VARCHAR(100), nvidia VARCHAR(100)) AS\n\
         %perInstanceRequiredAcceleratorDevices GpuNvidia|None;\n\
         %perNodeAndCallInstanceLimit 2;\n\
         import os\n\
         def run(ctx):\n    ctx.emit(ctx.country, os.environ.get('CUDA_VISIBLE_DEVICES'), os.environ.get('NVIDIA_VISIBLE_DEVICES', '<unset>'))\n/",
    )
    .await;
    let rows = run(
        &s,
        "SELECT where_am_i(country) FROM cities GROUP BY iproc(), country ORDER BY country",
    )
    .await;
    let devices: std::collections::BTreeSet<String> = rows
        .iter()
        .map(|r| r.split('|').nth(1).unwrap().to_string())
        .collect();
    assert_eq!(devices.len(), 2, "{rows:?}");
    for row in &rows {
        let cols: Vec<_> = row.split('|').collect();
        assert_eq!(cols[1], cols[2], "{row}");
    }
    // On the CPU (the optional call loses the GPUs to a required one), no GPU is visible.
    run(
        &s,
        "CREATE PYTHON3 SCALAR SCRIPT cpu_env() RETURNS VARCHAR(100) AS\n\
         %perInstanceRequiredAcceleratorDevices GpuNvidia|None;\nimport os\n\
         def run(ctx):\n    return repr(os.environ.get('CUDA_VISIBLE_DEVICES')) + ' ' + os.environ.get('NVIDIA_VISIBLE_DEVICES', '<unset>')\n/",
    )
    .await;
    let rows = run(
        &s,
        "SELECT cpu_env() AS a, gpu_probe_required() AS b FROM (VALUES (1))",
    )
    .await;
    assert_eq!(rows.len(), 1);
    assert!(rows[0].starts_with("'' <unset>|"), "{rows:?}");
}

#[tokio::test]
async fn malformed_script_ddl_is_a_clear_error() {
    let s = engine(0).session();
    let ok = "CREATE PYTHON3 SCALAR SCRIPT f(x BIGINT) RETURNS BIGINT AS\ndef run(ctx):\n    return 1\n/";
    run(&s, ok).await;
    for (sql, want) in [
        (ok, "already exists; use CREATE OR REPLACE"),
        (
            "CREATE PYTHON3 SCALAR SCRIPT g(x BIGINT) RETRUNS BIGINT AS\npass\n/",
            "line 1, column 42: expected RETURNS or EMITS",
        ),
        (
            "CREATE R SCALAR SCRIPT g(x BIGINT) RETURNS BIGINT AS\npass\n/",
            "unknown language alias R",
        ),
        (
            "CREATE PYTHON3 SCALAR SCRIPT g(x BLOB) RETURNS BIGINT AS\npass\n/",
            "BLOB",
        ),
        (
            "CREATE PYTHON3 SCALAR SCRIPT g(x BIGINT) RETURNS BIGINT AS\n%perInstanceLimit 2;\npass\n/",
            "unknown script option %perInstanceLimit",
        ),
        ("DROP SCRIPT nope", "does not exist"),
        (
            "ALTER SESSION SET SCRIPT_LANGUAGES = 'PYTHON3=python3'",
            "ALIAS=builtin_python3",
        ),
    ] {
        let e = s.sql(sql).await.unwrap_err();
        assert!(e.to_string().contains(want), "{sql}\n{e}");
        assert!(["42E03", "42U15"].contains(&e.code()), "{sql}\n{e}");
    }
    run(&s, "DROP SCRIPT IF EXISTS nope").await;
    // A path alias runs scripts with that interpreter.
    let python = accelsql_engine::udf_runtime::script::find_python3().unwrap();
    run(
        &s,
        &format!(
            "ALTER SESSION SET SCRIPT_LANGUAGES = 'PYTHON3=builtin_python3 MYPY={}'",
            python.display()
        ),
    )
    .await;
    run(
        &s,
        "CREATE MYPY SCALAR SCRIPT lang() RETURNS VARCHAR(20) AS\ndef run(ctx):\n    return exa.meta.script_language\n/",
    )
    .await;
    // exa.meta.script_language is Exasol's "Python X.Y.Z" of the alias's interpreter.
    let got = run(&s, "SELECT lang()").await;
    assert!(got[0].starts_with("Python 3."), "{got:?}");
    // Script DDL can be turned off for untrusted SQL.
    let locked = Engine::with_options(EngineOptions {
        scheduler: SchedulerConfig::default().with_simulated_gpus(0),
        script_ddl: false,
        ..EngineOptions::default()
    })
    .unwrap()
    .session();
    let e = locked.sql(ok).await.unwrap_err();
    assert!(e.to_string().contains("script DDL is disabled"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_a_statement_kills_its_workers_and_frees_the_gpus() {
    use futures::StreamExt;
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("pid");
    let s = engine(1).session();
    run(
        &s,
        &format!(
            "CREATE PYTHON3 SCALAR SCRIPT stuck(x DOUBLE) RETURNS DOUBLE AS\n\
             %perInstanceRequiredAcceleratorDevices GpuNvidia;\n\
             %env PID_FILE={};\n\
             import os, time\n\
             def run(ctx):\n    open(os.environ['PID_FILE'], 'w').write(str(os.getpid()))\n    time.sleep(ctx.x)\n    return ctx.x\n/",
            pid_file.display()
        ),
    )
    .await;
    let mut stream = s.sql_stream("SELECT stuck(60.0)").await.unwrap();
    let waited = tokio::time::timeout(std::time::Duration::from_secs(2), stream.next()).await;
    assert!(waited.is_err(), "the statement should still be running");
    let pid: u32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let proc_dir = std::path::PathBuf::from(format!("/proc/{pid}"));
    assert!(proc_dir.exists());
    drop(stream); // cancel
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    // Gone, not a zombie: reaped by the worker's owner.
    while proc_dir.exists() && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(
        !proc_dir.exists(),
        "worker {pid} outlived its cancelled statement"
    );
    // The lease is free again: another GPU statement runs at once.
    run(
        &s,
        "CREATE PYTHON3 SCALAR SCRIPT quick() RETURNS BIGINT AS\n\
         %perInstanceRequiredAcceleratorDevices GpuNvidia;\ndef run(ctx):\n    return 1\n/",
    )
    .await;
    run(&s, "SET accelsql.gpu_wait_timeout = '5s'").await;
    assert_eq!(run(&s, "SELECT quick()").await, ["1"]);
}

#[tokio::test]
async fn emits_dot_dot_dot_takes_its_columns_from_the_call_site() {
    let s = engine(0).session();
    run(
        &s,
        "CREATE PYTHON3 SCALAR SCRIPT split_words(...) EMITS (...) AS\n\
         def run(ctx):\n    for i, w in enumerate(ctx[0].split()):\n        ctx.emit(w, i)\n/",
    )
    .await;
    assert_eq!(
        run(
            &s,
            "SELECT word, pos FROM (SELECT split_words('a bb ccc') EMITS (word VARCHAR(10), pos INTEGER)) ORDER BY pos DESC"
        )
        .await,
        ["ccc|2", "bb|1", "a|0"]
    );
    // The same script, other columns at another call site.
    assert_eq!(
        run(
            &s,
            "SELECT split_words('x y') EMITS (w VARCHAR(5), n DOUBLE)"
        )
        .await,
        ["x|0.0", "y|1.0"]
    );
    let e = s.sql("SELECT split_words('x y')").await.unwrap_err();
    // Without an EMITS list and without default_output_columns(): Exasol's message.
    assert!(
        e.to_string()
            .contains("Either specify the return arguments in the query via EMITS"),
        "{e}"
    );
    // Named with its schema, unquoted in any case or quoted.
    assert_eq!(
        run(
            &s,
            "SELECT Public.Split_Words('p q') EMITS (w VARCHAR(5), n INTEGER) ORDER BY n DESC"
        )
        .await,
        ["q|1", "p|0"]
    );
    assert_eq!(
        run(
            &s,
            "SELECT \"public\".\"split_words\"('r') EMITS (w VARCHAR(5), n INTEGER)"
        )
        .await,
        ["r|0"]
    );
    assert_eq!(
        run(
            &s,
            "SELECT output FROM accelsql.scripts WHERE name = 'split_words'"
        )
        .await,
        ["EMITS (...)"]
    );
}

#[tokio::test]
async fn script_parameters_take_arguments_that_cast_to_their_types() {
    let s = engine(0).session();
    run(
        &s,
        "CREATE PYTHON3 SCALAR SCRIPT describe(d DECIMAL(18,2), t TIMESTAMP, day DATE) RETURNS VARCHAR(100) AS\n\
         def run(ctx):\n    return '%s %s %s' % (ctx.d, ctx.t.isoformat(), ctx.day.isoformat())\n/",
    )
    .await;
    assert_eq!(
        run(
            &s,
            "SELECT describe(1, TIMESTAMP '2024-01-01 12:30:00', '2024-02-29')"
        )
        .await,
        ["1.00 2024-01-01T12:30:00 2024-02-29"]
    );
    let e = s.sql("SELECT describe(1, 2)").await.unwrap_err();
    assert!(e.to_string().contains("takes 3 argument(s), got 2"), "{e}");
}

#[tokio::test]
async fn scripts_share_names_with_built_ins_and_say_why_they_cannot_run() {
    let with_fixtures = engine(0);
    accelsql_engine::testing::register_fixtures(&with_fixtures).unwrap();
    let s = with_fixtures.session();
    // As in Exasol: a script may be named like a built-in function; the plain name still calls
    // the built-in, the schema-qualified one the script.
    run(
        &s,
        "CREATE PYTHON3 SCALAR SCRIPT abs(x BIGINT) RETURNS BIGINT AS\ndef run(ctx):\n    return 42\n/",
    )
    .await;
    assert_eq!(run(&s, "SELECT abs(-1)").await, ["1"]);
    assert_eq!(run(&s, "SELECT public.abs(-1)").await, ["42"]);
    // A Rust UDF of the engine is not a built-in: its name stays its own.
    let e = s
        .sql("CREATE PYTHON3 SCALAR SCRIPT slow_gpu(x BIGINT) RETURNS BIGINT AS\ndef run(ctx):\n    return 1\n/")
        .await
        .unwrap_err();
    assert!(e.to_string().contains("Rust UDF named slow_gpu"), "{e}");
    // A script whose language alias the session no longer has says so when called.
    let python = accelsql_engine::udf_runtime::script::find_python3().unwrap();
    run(
        &s,
        &format!(
            "ALTER SESSION SET SCRIPT_LANGUAGES = 'PYTHON3=builtin_python3 MYPY={}'",
            python.display()
        ),
    )
    .await;
    run(
        &s,
        "CREATE MYPY SCALAR SCRIPT mine() RETURNS BIGINT AS\ndef run(ctx):\n    return 1\n/",
    )
    .await;
    run(
        &s,
        "ALTER SESSION SET SCRIPT_LANGUAGES = 'PYTHON3=builtin_python3'",
    )
    .await;
    let e = s.sql("SELECT mine()").await.unwrap_err();
    assert_eq!(e.code(), "42E03", "{e}");
    assert!(
        e.to_string().contains("language alias MYPY is not defined"),
        "{e}"
    );
}

#[tokio::test]
async fn errors_keep_their_code_through_an_outer_query() {
    let s = engine(0).session();
    run(
        &s,
        "CREATE PYTHON3 SCALAR SCRIPT boom(k BIGINT) EMITS (s VARCHAR(10)) AS\ndef run(ctx):\n    raise ValueError(42)\n/",
    )
    .await;
    for _ in 0..5 {
        let e = s
            .sql("SELECT upper(s) FROM (SELECT boom(value) FROM range(100))")
            .await
            .unwrap_err();
        assert_eq!(e.code(), "22U10", "{e}");
        assert!(e.to_string().starts_with("[22U10]"), "{e}");
    }
}

#[tokio::test]
async fn an_exception_in_cleanup_fails_the_statement() {
    let s = engine(0).session();
    run(
        &s,
        "CREATE PYTHON3 SCALAR SCRIPT messy(x BIGINT) RETURNS BIGINT AS\n\
         def run(ctx):\n    return ctx.x\ndef cleanup():\n    1 / 0\n/",
    )
    .await;
    let e = s.sql("SELECT messy(1)").await.unwrap_err();
    assert_eq!(e.code(), "22U10", "{e}");
    assert!(e.to_string().contains("ZeroDivisionError"), "{e}");
    assert!(e.to_string().contains("cleanup"), "{e}");
    assert_eq!(run(&s, "SELECT 1").await, ["1"]);
}

#[tokio::test]
async fn a_misspelt_script_kind_is_a_script_ddl_error() {
    let s = engine(0).session();
    let e = s
        .sql("CREATE PYTHON3 SCALER SCRIPT f() RETURNS BIGINT AS\ndef run(ctx):\n    return 1\n/")
        .await
        .unwrap_err();
    assert_eq!(e.code(), "42E03", "{e}");
    assert!(
        e.to_string()
            .contains("expected SCALAR or SET, found \"SCALER\""),
        "{e}"
    );
}

#[tokio::test]
async fn a_nodes_identity_reaches_iproc_nproc_exa_metadata_and_scripts() {
    use accelsql_engine::NodeIdentity;
    let engine = Engine::with_options(EngineOptions {
        scheduler: SchedulerConfig::default().with_simulated_gpus(1),
        node: NodeIdentity { id: 2, count: 3 },
        ..EngineOptions::default()
    })
    .unwrap();
    let s = engine.session();
    assert_eq!(run(&s, "SELECT iproc(), nproc()").await, ["2|3"]);
    assert_eq!(
        run(
            &s,
            "SELECT param_value FROM exa_metadata WHERE param_name IN ('nodeCount', 'nodeId') \
             ORDER BY param_name"
        )
        .await,
        ["3", "2"]
    );
    // Evaluated where the row is processed: the plan keeps the call, not a folded constant.
    let plan = run(&s, "EXPLAIN SELECT iproc() + 1 AS k").await.join("\n");
    assert!(plan.contains("iproc()"), "{plan}");
    s.sql(
        "CREATE PYTHON3 SCALAR SCRIPT where_am_i() RETURNS VARCHAR(20) AS\n\
         def run(ctx):\n    return '%d/%d' % (exa.meta.node_id, exa.meta.node_count)\n/",
    )
    .await
    .unwrap();
    assert_eq!(run(&s, "SELECT where_am_i()").await, ["2/3"]);
    // A node number outside the count is refused.
    let e = Engine::with_options(EngineOptions {
        node: NodeIdentity { id: 3, count: 3 },
        ..EngineOptions::default()
    })
    .err()
    .unwrap();
    assert_eq!(e.code(), "22E03");
}

/// A SCALAR RETURNS script pays a worker round trip per input batch: tiny batches are coalesced
/// up to the session's batch size first, in order, and a per-row error names the row of the run
/// the script saw.
#[tokio::test]
async fn a_scalar_script_gets_tiny_input_batches_coalesced() {
    use accelsql_engine::datafusion::arrow::array::Int64Array;
    use accelsql_engine::datafusion::arrow::datatypes::{DataType, Field, Schema};
    use accelsql_engine::datafusion::datasource::MemTable;
    use std::sync::Arc;

    let s = engine(0).session();
    // One partition, so that the rows reach the script in the table's order.
    run(&s, "SET datafusion.execution.target_partitions = 1").await;
    let schema = Arc::new(Schema::new(vec![Field::new("x", DataType::Int64, false)]));
    let batches: Vec<RecordBatch> = (1..=300)
        .map(|i| {
            RecordBatch::try_new(
                Arc::clone(&schema),
                vec![Arc::new(Int64Array::from(vec![i]))],
            )
            .unwrap()
        })
        .collect();
    let table = MemTable::try_new(Arc::clone(&schema), vec![batches]).unwrap();
    s.context().register_table("tiny", Arc::new(table)).unwrap();
    // Each row learns the size of the batch it came in, and its own position in it.
    run(
        &s,
        "CREATE PYTHON3 SCALAR SCRIPT batch_rows(x BIGINT) RETURNS BIGINT AS\n\
         def run_batch(ctx):\n    n = len(ctx.x)\n    return [n] * n\n/",
    )
    .await;
    run(
        &s,
        "CREATE PYTHON3 SCALAR SCRIPT same(x BIGINT) RETURNS BIGINT AS\n\
         def run(ctx):\n    return ctx.x\n/",
    )
    .await;
    let sizes = "SELECT min(batch_rows(x)), max(batch_rows(x)), count(*) FROM tiny";
    assert_eq!(run(&s, sizes).await, ["300|300|300"]);
    // Every value comes back beside its own row.
    assert_eq!(
        run(&s, "SELECT count(*), sum(x) FROM tiny WHERE same(x) = x").await,
        ["300|45150"]
    );
    // Never beyond the session's batch size.
    run(&s, "SET datafusion.execution.batch_size = 128").await;
    assert_eq!(run(&s, sizes).await, ["44|128|300"]);
    run(&s, "SET datafusion.execution.batch_size = 8192").await;
    // The 250th row fails: it is row 250 of the one run the script saw.
    run(
        &s,
        "CREATE PYTHON3 SCALAR SCRIPT bad_at(x BIGINT) RETURNS BIGINT AS\n\
         def run(ctx):\n    return 'oops' if ctx.x == 250 else ctx.x\n/",
    )
    .await;
    let e = s.sql("SELECT sum(bad_at(x)) FROM tiny").await.unwrap_err();
    assert_eq!(e.code(), "22U13", "{e}");
    assert!(e.to_string().contains("row 250 of this run"), "{e}");
}

/// Script statements start their instances from a spare worker each fork server keeps forked
/// ahead: `accelsql.script_spares` lists the servers and their spares, a spare runs no script
/// code (each statement's instance runs the module-level code itself), and the spare becomes
/// the next statement's worker.
#[tokio::test]
async fn script_statements_take_the_spare_worker_their_fork_server_keeps() {
    let s = engine(0).session();
    // Its own environment (`%env`), so that its fork server is not shared with other tests.
    run(
        &s,
        "CREATE PYTHON3 SCALAR SCRIPT whoami() RETURNS VARCHAR(40) AS\n\
         %env ACCELSQL_SPARE_TEST=1;\n\
         import os\n\
         loaded = os.getpid()\n\
         def run(ctx):\n    return '%d %d' % (loaded, os.getpid())\n/",
    )
    .await;
    let spares = "SELECT spare_pid FROM accelsql.script_spares \
                  WHERE state = 'ready' AND spare_pid IS NOT NULL";
    let mut before = Vec::new();
    let mut seen = Vec::new();
    let end = std::time::Instant::now() + std::time::Duration::from_secs(30);
    // The first statements start the server (their workers are spawned meanwhile); from when
    // it is ready, each statement's worker is the spare that was waiting before it.
    loop {
        let waiting = run(&s, spares).await;
        let got = run(&s, "SELECT whoami()").await;
        let (loaded, pid) = got[0].split_once(' ').unwrap();
        assert_eq!(
            loaded, pid,
            "module-level code ran outside the worker: {got:?}"
        );
        if waiting.iter().any(|p| p == pid) {
            seen.push(pid.to_string());
            before = waiting;
            if seen.len() == 2 {
                break;
            }
        }
        assert!(
            std::time::Instant::now() < end,
            "no statement got a spare: {before:?}"
        );
    }
    assert_ne!(seen[0], seen[1], "each statement gets a fresh process");
    // The worker that was the spare ended with its statement.
    assert!(!std::path::Path::new(&format!("/proc/{}", seen[0])).exists());
}

/// A script runs user code as the engine's OS user: the data directory (catalog, password
/// hashes, a server's token, the tables' files) is out of its reach, the rest of the file
/// system is not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scripts_cannot_read_or_write_the_data_directory() {
    if accelsql_engine::udf_runtime::script::sandbox::landlock_abi().is_none() {
        eprintln!("SKIPPED (this kernel has no Landlock: scripts run unsandboxed)");
        return;
    }
    // Outside the system's temporary folder, whose data directories are not sandboxed.
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let data = dir.path().join("data");
    let outside = dir.path().join("outside.txt");
    std::fs::write(&outside, "public").unwrap();
    // Made before the engine denies its data directory: entries made later directly beside a
    // denied path are out of reach too (see `sandbox.rs`).
    let elsewhere = dir.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    let engine = Engine::with_options(EngineOptions {
        data_dir: Some(data.clone()),
        ..EngineOptions::default()
    })
    .unwrap();
    let s = engine.session();
    run(&s, "CREATE TABLE t AS SELECT 1 AS a").await;
    std::fs::write(data.join("server-token"), "s3cret-token-value").unwrap();
    run(
        &s,
        "CREATE PYTHON3 SCALAR SCRIPT peek(path VARCHAR(2000)) RETURNS VARCHAR(2000) AS\n\
         def run(ctx):\n    try:\n        with open(ctx.path) as f:\n            return 'read:' + f.read(20)\n    except OSError as e:\n        return 'refused:' + type(e).__name__\n/",
    )
    .await;
    run(
        &s,
        "CREATE PYTHON3 SCALAR SCRIPT plant(path VARCHAR(2000)) RETURNS VARCHAR(2000) AS\n\
         def run(ctx):\n    try:\n        open(ctx.path, 'w').write('x')\n        return 'wrote'\n    except OSError as e:\n        return 'refused:' + type(e).__name__\n/",
    )
    .await;
    let peek = |p: &std::path::Path| format!("SELECT peek('{}')", p.display());
    for secret in [
        data.join("server-token"),
        data.join("scripts.json"),
        // Through `..` and through the process's root link: still the same inode.
        dir.path().join("data/../data/server-token"),
        std::path::PathBuf::from(format!(
            "/proc/self/root{}",
            data.join("server-token").display()
        )),
    ] {
        assert_eq!(
            run(&s, &peek(&secret)).await,
            ["refused:PermissionError"],
            "{}",
            secret.display()
        );
    }
    assert_eq!(run(&s, &peek(&outside)).await, ["read:public"]);
    assert_eq!(
        run(
            &s,
            &format!("SELECT plant('{}')", data.join("planted").display())
        )
        .await,
        ["refused:PermissionError"]
    );
    assert!(!data.join("planted").exists());
    assert_eq!(
        run(
            &s,
            &format!("SELECT plant('{}')", elsewhere.join("f").display())
        )
        .await,
        ["wrote"]
    );
}

/// Under a LIMIT, a GPU call's coalesced input batches hold an ordinary batch's rows, not the
/// million a GPU batch aims at: `LIMIT 10` over a large input (through a filter the limit cannot
/// pass) reads a few batches, not a million rows first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn coalesced_gpu_call_inputs_respect_a_limit() {
    let s = engine(1).session();
    let inner = "SELECT haversine_km(value * 1e-6, 0, 1, 1) AS km FROM generate_series(1, 3000000)";
    let plan = run(
        &s,
        &format!("EXPLAIN ANALYZE SELECT km FROM ({inner}) WHERE km > 0 LIMIT 10"),
    )
    .await
    .join("\n");
    assert!(plan.contains("target_batch_size=8192"), "{plan}");
    assert!(!plan.contains("target_batch_size=1048576"), "{plan}");
    // Without a limit the call's batches are coalesced to the GPU's size.
    let plan = run(
        &s,
        &format!("EXPLAIN ANALYZE SELECT count(km) FROM ({inner})"),
    )
    .await
    .join("\n");
    assert!(plan.contains("target_batch_size=1048576"), "{plan}");
}
