//! Restricted sessions: every escape an untrusted user could try is refused with 42501 and has no
//! effect, what stays allowed still works, and an unrestricted session of the same engine can do
//! each refused thing (so each refusal is the restriction's doing).
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic: that is a failed test

use std::path::Path;

use accelsql_engine::datafusion::arrow::array::{Array, RecordBatch, StringArray};
use accelsql_engine::datafusion::arrow::compute::cast;
use accelsql_engine::datafusion::arrow::datatypes::DataType;
use accelsql_engine::{Engine, EngineOptions, SchedulerConfig, Session};

fn engine(data_dir: &Path, restricted: bool) -> Engine {
    Engine::with_options(EngineOptions {
        scheduler: SchedulerConfig::default().with_simulated_gpus(0),
        data_dir: Some(data_dir.to_path_buf()),
        url_tables: true,
        restricted,
        ..EngineOptions::default()
    })
    .unwrap()
}

fn flat(batches: &[RecordBatch]) -> Vec<String> {
    let mut out = Vec::new();
    for b in batches {
        for c in b.columns() {
            let c = cast(c, &DataType::Utf8).unwrap();
            let c = c.as_any().downcast_ref::<StringArray>().unwrap();
            out.extend((0..c.len()).map(|i| c.value(i).to_string()));
        }
    }
    out
}

/// `sql` fails with 42501 in `s`; returns the message.
async fn refused(s: &Session, sql: &str) -> String {
    match s.sql(sql).await {
        Err(e) => {
            assert_eq!(e.code(), "42501", "{sql}: {e}");
            e.to_string()
        }
        Ok(_) => panic!("a restricted session ran: {sql}"),
    }
}

const SCRIPT: &str = "CREATE PYTHON3 SCALAR SCRIPT twice(x INT) RETURNS INT AS
def run(ctx):
    return ctx.x * 2
/";

#[tokio::test]
async fn every_escape_is_refused_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let files = tempfile::tempdir().unwrap();
    let csv = files.path().join("secret.csv");
    std::fs::write(&csv, "a\n42\n").unwrap();
    let out = files.path().join("out.csv");
    let engine = engine(dir.path(), false);
    let admin = engine.session();
    admin.sql(SCRIPT).await.unwrap();
    admin
        .sql("CREATE CONNECTION c TO 'https://example.com' USER 'u' IDENTIFIED BY 'p'")
        .await
        .unwrap();
    admin
        .sql("CREATE SCHEMA tools; CREATE PYTHON3 SCALAR SCRIPT tools.one() RETURNS INT AS\ndef run(ctx):\n    return 1\n/")
        .await
        .unwrap();
    admin.sql("SET accelsql.udf_timeout = '10s'").await.unwrap();
    let s = engine.session();
    s.sql("SET accelsql.udf_timeout = '10s'").await.unwrap();
    s.restrict();
    assert!(s.is_restricted() && !admin.is_restricted());

    let csv = csv.display();
    let out_path = out.display();
    let escapes = [
        // Code: scripts and the executables they run in.
        SCRIPT.to_string(),
        "CREATE OR REPLACE PYTHON3 SCALAR SCRIPT twice(x INT) RETURNS INT AS\ndef run(ctx):\n    return 0\n/".into(),
        "DROP SCRIPT twice".into(),
        "ALTER SESSION SET SCRIPT_LANGUAGES = 'PYTHON3=/bin/sh'".into(),
        "alter session set script_languages='PYTHON3=builtin_python3'".into(),
        "CREATE FUNCTION f(INT) RETURNS INT RETURN $1 + 1".into(),
        // The engine's shared catalog.
        "CREATE CONNECTION evil TO 'x'".into(),
        "DROP CONNECTION c".into(),
        "DROP SCHEMA tools CASCADE".into(),
        // Files on the server.
        format!("SELECT * FROM '{csv}'"),
        format!("SELECT * FROM '{}/*.csv'", files.path().display()),
        format!("CREATE EXTERNAL TABLE leak STORED AS CSV LOCATION '{csv}'"),
        format!("COPY (SELECT 1 AS a) TO '{out_path}' STORED AS CSV"),
        format!("EXPLAIN ANALYZE COPY (SELECT 1 AS a) TO '{out_path}' STORED AS CSV"),
        format!("SELECT 1; COPY (SELECT 2 AS a) TO '{out_path}' STORED AS CSV"),
        // Settings that reach files or lift limits.
        "SET datafusion.catalog.location = '/etc'".into(),
        "SET datafusion.runtime.temp_directory = '/tmp/elsewhere'".into(),
        "SET datafusion.runtime.memory_limit = '1000G'".into(),
        "SET datafusion.execution.target_partitions = 1024".into(),
        "SET datafusion.execution.batch_size = 100000000".into(),
        "SET accelsql.udf_timeout = '1h'".into(),
        "SET accelsql.udf_timeout = ''".into(),
        "RESET accelsql.udf_timeout".into(),
        "RESET datafusion.execution.target_partitions".into(),
    ];
    for sql in &escapes {
        refused(&s, sql).await;
    }
    // Nothing changed: the script still doubles, the connection and tools' script are there,
    // no file was written, and the session's bound is still 10 s.
    assert_eq!(flat(&s.sql("SELECT twice(21)").await.unwrap()), ["42"]);
    assert_eq!(flat(&s.sql("SELECT tools.one()").await.unwrap()), ["1"]);
    assert_eq!(
        flat(
            &s.sql("SELECT connection_name FROM exa_all_connections")
                .await
                .unwrap()
        ),
        ["C"]
    );
    assert!(!out.exists());
    assert_eq!(
        flat(&s.sql("SELECT value FROM information_schema.df_settings WHERE name = 'accelsql.udf_timeout'").await.unwrap()),
        ["10s"]
    );

    // Secrets in script options stay hidden from it; the host's session sees them.
    admin
        .sql("CLOSE SCHEMA; CREATE PYTHON3 SCALAR SCRIPT keyed() RETURNS INT AS\n%env TOKEN=s3cret;\ndef run(ctx):\n    return 1\n/")
        .await
        .unwrap();
    for view in [
        "SELECT script_text FROM exa_all_scripts",
        "SELECT options || text FROM accelsql.scripts",
    ] {
        let seen = flat(&s.sql(view).await.unwrap()).join("\n");
        assert!(
            seen.contains("TOKEN=***") && !seen.contains("s3cret"),
            "{seen}"
        );
        let seen = flat(&admin.sql(view).await.unwrap()).join("\n");
        assert!(seen.contains("s3cret"), "{seen}");
    }
    assert_eq!(flat(&s.sql("SELECT keyed()").await.unwrap()), ["1"]);

    // What stays allowed.
    s.sql("CREATE TABLE t AS SELECT 1 AS a").await.unwrap();
    s.sql("SET datafusion.execution.time_zone = '+02:00'")
        .await
        .unwrap();
    s.sql("SET accelsql.identifier_case = 'lower'")
        .await
        .unwrap();
    s.sql("SET accelsql.udf_timeout = '5s'").await.unwrap();
    s.sql("SELECT count(*) FROM accelsql.scripts")
        .await
        .unwrap();
    assert_eq!(flat(&s.sql("SELECT twice(a) FROM t").await.unwrap()), ["2"]);
    assert!(s.is_restricted(), "no statement lifts the restriction");

    // The unrestricted session can do each kind of thing refused above.
    assert_eq!(
        flat(&admin.sql(&format!("SELECT * FROM '{csv}'")).await.unwrap()),
        ["42"]
    );
    admin
        .sql(&format!(
            "COPY (SELECT 1 AS a) TO '{out_path}' STORED AS CSV"
        ))
        .await
        .unwrap();
    assert!(out.exists());
    admin
        .sql("SET datafusion.execution.target_partitions = 3")
        .await
        .unwrap();
    admin.sql("CLOSE SCHEMA; DROP SCRIPT twice").await.unwrap();
}

#[tokio::test]
async fn an_engine_option_restricts_every_session_from_birth() {
    let dir = tempfile::tempdir().unwrap();
    let engine = engine(dir.path(), true);
    let s = engine.session();
    assert!(s.is_restricted());
    let message = refused(&s, SCRIPT).await;
    assert!(
        message.contains("CREATE SCRIPT") && message.contains("RESTRICTED role"),
        "{message}"
    );
    let message = refused(&s, "SELECT * FROM '/etc/hostname'").await;
    assert!(message.contains("/etc/hostname"), "{message}");
    assert_eq!(flat(&s.sql("SELECT 1 + 1").await.unwrap()), ["2"]);
}
