//! Tables in a data directory: shared by every session, durable across engines (restarts),
//! each statement atomic, transactions isolated until COMMIT, conflicts coded (40001),
//! versions readable, columns changeable, privileges enforced, damage reported with the
//! table's and file's names.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic: that is a failed test

use std::path::{Path, PathBuf};

use accelsql_engine::datafusion::arrow::array::{
    Array, Int64Array, RecordBatch, StringArray, UInt64Array,
};
use accelsql_engine::datafusion::arrow::compute::cast;
use accelsql_engine::datafusion::arrow::datatypes::DataType;
use accelsql_engine::{Engine, EngineOptions, SchedulerConfig, Session};

fn engine(dir: &Path) -> Engine {
    Engine::with_options(EngineOptions {
        scheduler: SchedulerConfig::default().with_simulated_gpus(0),
        data_dir: Some(dir.to_path_buf()),
        password_rounds: 1000,
        ..EngineOptions::default()
    })
    .unwrap()
}

/// The first column of `sql`'s result, as text.
async fn column(session: &Session, sql: &str) -> Vec<String> {
    let batches: Vec<RecordBatch> = session
        .sql(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
    let mut out = Vec::new();
    for b in batches {
        let c = cast(b.column(0), &DataType::Utf8).unwrap();
        let c = c.as_any().downcast_ref::<StringArray>().unwrap();
        out.extend((0..c.len()).map(|i| {
            if c.is_null(i) {
                "NULL".to_string()
            } else {
                c.value(i).to_string()
            }
        }));
    }
    out
}

/// The one number `sql` answers.
async fn number(session: &Session, sql: &str) -> i64 {
    let values = column(session, sql).await;
    assert_eq!(values.len(), 1, "{sql}: {values:?}");
    values[0]
        .parse()
        .unwrap_or_else(|_| panic!("{sql}: {values:?}"))
}

/// The code of `sql`'s error.
async fn code(session: &Session, sql: &str) -> String {
    match session.sql(sql).await {
        Ok(b) => panic!("{sql} succeeded: {b:?}"),
        Err(e) => e.code().to_string(),
    }
}

#[tokio::test]
async fn tables_are_shared_by_sessions_and_kept_across_restarts() {
    let dir = tempfile::tempdir().unwrap();
    {
        let engine = engine(dir.path());
        let a = engine.session();
        let b = engine.session();
        a.sql("CREATE TABLE cities (name VARCHAR(100), lat DOUBLE, lon DOUBLE)")
            .await
            .unwrap();
        a.sql("INSERT INTO cities VALUES ('Berlin', 52.52, 13.40), ('Paris', 48.85, 2.35)")
            .await
            .unwrap();
        assert_eq!(number(&b, "SELECT count(*) FROM cities").await, 2);
        b.sql("CREATE SCHEMA geo").await.unwrap();
        b.sql("CREATE TABLE geo.far AS SELECT name FROM public.cities WHERE lat < 50")
            .await
            .unwrap();
        a.sql("SET accelsql.sql_dialect = 'exasol'").await.unwrap();
        a.sql("CREATE TABLE typed (code CHAR(3), amount DECIMAL(18,2), note VARCHAR(20))")
            .await
            .unwrap();
    }
    // A new engine on the same directory: a restart.
    let engine = engine(dir.path());
    let s = engine.session();
    assert_eq!(
        column(&s, "SELECT name FROM cities ORDER BY name").await,
        ["Berlin", "Paris"]
    );
    assert_eq!(column(&s, "SELECT name FROM geo.far").await, ["Paris"]);
    // Declared types are kept.
    s.sql("SET accelsql.sql_dialect = 'exasol'").await.unwrap();
    assert_eq!(
        column(
            &s,
            "SELECT column_type FROM exa_all_columns WHERE column_table = 'TYPED' ORDER BY column_ordinal_position"
        )
        .await,
        ["CHAR(3) UTF8", "DECIMAL(18,2)", "VARCHAR(20) UTF8"]
    );
    assert_eq!(
        column(&s, "SELECT table_name FROM exa_all_tables ORDER BY 1").await,
        ["CITIES", "FAR", "TYPED"]
    );
}

#[tokio::test]
async fn writes_change_the_table_and_a_failed_statement_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let engine = engine(dir.path());
    let s = engine.session();
    s.sql("CREATE TABLE t (id BIGINT NOT NULL, name VARCHAR)")
        .await
        .unwrap();
    s.sql("INSERT INTO t SELECT value, 'n' || value FROM generate_series(1, 1000)")
        .await
        .unwrap();
    assert_eq!(
        number(&s, "UPDATE t SET name = 'even' WHERE id % 2 = 0").await,
        500
    );
    assert_eq!(number(&s, "DELETE FROM t WHERE id > 900").await, 100);
    assert_eq!(
        number(&s, "SELECT count(*) FROM t WHERE name = 'even'").await,
        450
    );
    // Failing half-way (batches of 10 rows: the error comes after rows were written).
    s.sql("SET datafusion.execution.batch_size = 10")
        .await
        .unwrap();
    assert_eq!(
        code(
            &s,
            "INSERT INTO t SELECT 1000 / (500 - value), 'x' FROM generate_series(1, 1000)"
        )
        .await,
        "22000"
    );
    assert_eq!(code(&s, "UPDATE t SET id = id / (id - 450)").await, "22000");
    assert_eq!(number(&s, "SELECT count(*) FROM t").await, 900);
    assert_eq!(number(&s, "SELECT sum(id) FROM t").await, 405_450);
    s.sql("RESET datafusion.execution.batch_size")
        .await
        .unwrap();
    // A NULL for a NOT NULL column fails the statement.
    assert_eq!(
        code(&s, "INSERT INTO t SELECT CASE WHEN value = 5 THEN NULL ELSE value END, 'x' FROM generate_series(1, 9)").await.len(),
        5
    );
    assert_eq!(number(&s, "SELECT count(*) FROM t").await, 900);
    assert_eq!(number(&s, "TRUNCATE TABLE t").await, 900);
    assert_eq!(number(&s, "SELECT count(*) FROM t").await, 0);
    // CREATE OR REPLACE, LIKE, RENAME, ALTER.
    s.sql("INSERT INTO t VALUES (1, 'a'), (2, 'b')")
        .await
        .unwrap();
    s.sql("CREATE TABLE u LIKE t").await.unwrap();
    assert_eq!(number(&s, "SELECT count(*) FROM u").await, 0);
    assert_eq!(code(&s, "INSERT INTO u VALUES (NULL, 'x')").await.len(), 5);
    s.sql("CREATE OR REPLACE TABLE u AS SELECT id * 10 AS id FROM t")
        .await
        .unwrap();
    assert_eq!(
        column(&s, "SELECT id FROM u ORDER BY id").await,
        ["10", "20"]
    );
    assert_eq!(code(&s, "CREATE TABLE u (x INT)").await, "42710");
    s.sql("RENAME TABLE u TO v").await.unwrap();
    assert_eq!(number(&s, "SELECT sum(id) FROM v").await, 30);
    s.sql("ALTER TABLE v ADD COLUMN note VARCHAR(10)")
        .await
        .unwrap();
    s.sql("INSERT INTO v VALUES (30, 'new')").await.unwrap();
    assert_eq!(
        column(&s, "SELECT coalesce(note, '-') FROM v ORDER BY id").await,
        ["-", "-", "new"]
    );
    s.sql("ALTER TABLE v RENAME COLUMN note TO remark")
        .await
        .unwrap();
    assert_eq!(
        column(&s, "SELECT remark FROM v WHERE id = 30").await,
        ["new"]
    );
    s.sql("ALTER TABLE v DROP COLUMN remark").await.unwrap();
    assert_eq!(
        column(
            &s,
            "SELECT count(*) FROM information_schema.columns WHERE table_name = 'v'"
        )
        .await,
        ["1"]
    );
    s.sql("DROP TABLE v").await.unwrap();
    assert_eq!(code(&s, "SELECT * FROM v").await, "42000");
}

#[tokio::test]
async fn a_transaction_is_its_sessions_until_commit_and_gone_at_rollback() {
    let dir = tempfile::tempdir().unwrap();
    let engine = engine(dir.path());
    let a = engine.session();
    let b = engine.session();
    a.sql("CREATE TABLE t (id BIGINT, v VARCHAR)")
        .await
        .unwrap();
    a.sql("SET AUTOCOMMIT OFF").await.unwrap();
    a.sql("INSERT INTO t VALUES (1, 'one'), (2, 'two')")
        .await
        .unwrap();
    a.sql("UPDATE t SET v = 'TWO' WHERE id = 2").await.unwrap();
    assert_eq!(
        column(&a, "SELECT v FROM t ORDER BY id").await,
        ["one", "TWO"]
    );
    assert_eq!(number(&b, "SELECT count(*) FROM t").await, 0);
    a.sql("COMMIT").await.unwrap();
    assert_eq!(
        column(&b, "SELECT v FROM t ORDER BY id").await,
        ["one", "TWO"]
    );
    a.sql("DELETE FROM t").await.unwrap();
    assert_eq!(number(&a, "SELECT count(*) FROM t").await, 0);
    a.sql("ROLLBACK").await.unwrap();
    assert_eq!(number(&a, "SELECT count(*) FROM t").await, 2);
    // A session that ends with writes pending leaves nothing.
    let c = engine.session();
    c.sql("BEGIN").await.unwrap();
    c.sql("INSERT INTO t VALUES (3, 'three')").await.unwrap();
    drop(c);
    assert_eq!(number(&b, "SELECT count(*) FROM t").await, 2);
    // Two transactions rewriting the same rows: the second to commit gets 40001.
    b.sql("SET AUTOCOMMIT OFF").await.unwrap();
    a.sql("UPDATE t SET v = 'a' WHERE id = 1").await.unwrap();
    b.sql("UPDATE t SET v = 'b' WHERE id = 1").await.unwrap();
    a.sql("COMMIT").await.unwrap();
    assert_eq!(code(&b, "COMMIT").await, "40001");
    assert_eq!(column(&b, "SELECT v FROM t WHERE id = 1").await, ["a"]);
    // Appends of both commit.
    a.sql("INSERT INTO t VALUES (10, 'x')").await.unwrap();
    b.sql("INSERT INTO t VALUES (20, 'y')").await.unwrap();
    b.sql("COMMIT").await.unwrap();
    a.sql("COMMIT").await.unwrap();
    assert_eq!(number(&a, "SELECT sum(id) FROM t").await, 33);
    // DDL commits what waits.
    a.sql("INSERT INTO t VALUES (100, 'z')").await.unwrap();
    a.sql("CREATE TABLE other (x INT)").await.unwrap();
    a.sql("ROLLBACK").await.unwrap();
    assert_eq!(number(&b, "SELECT count(*) FROM t WHERE id = 100").await, 1);
}

#[tokio::test]
async fn versions_are_readable_and_kept_small() {
    let dir = tempfile::tempdir().unwrap();
    let engine = engine(dir.path());
    let s = engine.session();
    s.sql("CREATE TABLE t (id BIGINT)").await.unwrap();
    for i in 0..80 {
        s.sql(&format!("INSERT INTO t VALUES ({i})")).await.unwrap();
    }
    s.sql("DELETE FROM t WHERE id < 40").await.unwrap();
    assert_eq!(
        number(&s, "SELECT count(*) FROM t VERSION AS OF 10").await,
        10
    );
    assert_eq!(
        number(&s, "SELECT count(*) FROM t VERSION AS OF 0").await,
        0
    );
    assert_eq!(number(&s, "SELECT count(*) FROM t").await, 40);
    let far = "SELECT count(*) FROM t TIMESTAMP AS OF '2000-01-01 00:00:00'";
    assert_eq!(code(&s, far).await, "42704");
    assert_eq!(
        code(&s, "SELECT * FROM t VERSION AS OF 100000").await,
        "42704"
    );
    assert_eq!(
        code(&s, "INSERT INTO t VERSION AS OF 3 VALUES (1)")
            .await
            .len(),
        5
    );
    // Many small inserts were compacted (in the background) or are, by OPTIMIZE.
    s.sql("OPTIMIZE t").await.unwrap();
    assert_eq!(
        number(
            &s,
            "SELECT files FROM accelsql.tables WHERE \"table\" = 't'"
        )
        .await,
        1
    );
    assert_eq!(
        number(&s, "SELECT rows FROM accelsql.tables WHERE \"table\" = 't'").await,
        40
    );
    let ops = column(
        &s,
        "SELECT DISTINCT operation FROM accelsql.table_versions WHERE \"table\" = 't' ORDER BY 1",
    )
    .await;
    assert!(ops.contains(&"DELETE".to_string()), "{ops:?}");
    assert!(ops.contains(&"OPTIMIZE".to_string()), "{ops:?}");
    assert_eq!(
        number(&s, "SELECT sum(id) FROM t").await,
        (40..80).sum::<i64>()
    );
    // VACUUM with no retention deletes what no version newer than now reads.
    let deleted = number(&s, "VACUUM t RETAIN 0 HOURS").await;
    assert!(deleted >= 80, "{deleted}");
    assert_eq!(
        number(&s, "SELECT sum(id) FROM t").await,
        (40..80).sum::<i64>()
    );
}

#[tokio::test]
async fn table_privileges_are_enforced() {
    let dir = tempfile::tempdir().unwrap();
    let engine = engine(dir.path());
    let sys = engine.session();
    for user in ["ann", "bob"] {
        sys.sql(&format!("CREATE USER {user} IDENTIFIED BY \"pw\""))
            .await
            .unwrap();
        sys.sql(&format!("GRANT CREATE SESSION, CREATE TABLE TO {user}"))
            .await
            .unwrap();
    }
    let ann = engine.session_as("ann").unwrap();
    let bob = engine.session_as("bob").unwrap();
    ann.sql("CREATE TABLE notes (id INT)").await.unwrap();
    ann.sql("INSERT INTO notes VALUES (1)").await.unwrap();
    assert_eq!(code(&bob, "SELECT * FROM notes").await, "42501");
    assert_eq!(code(&bob, "INSERT INTO notes VALUES (2)").await, "42501");
    ann.sql("GRANT SELECT ON notes TO bob").await.unwrap();
    assert_eq!(number(&bob, "SELECT count(*) FROM notes").await, 1);
    assert_eq!(code(&bob, "DELETE FROM notes").await, "42501");
    assert_eq!(code(&bob, "DROP TABLE notes").await, "42501");
    assert_eq!(
        code(&bob, "ALTER TABLE notes ADD COLUMN x INT").await,
        "42501"
    );
    sys.sql("GRANT DELETE ANY TABLE TO bob").await.unwrap();
    assert_eq!(number(&bob, "DELETE FROM notes").await, 1);
    // The owner shows in the views; bob sees ann's table as granted.
    assert_eq!(
        column(
            &bob,
            "SELECT table_owner FROM exa_all_tables WHERE table_name = 'NOTES'"
        )
        .await,
        ["ANN"]
    );
    assert_eq!(
        column(&bob, "SELECT table_name FROM exa_user_tables")
            .await
            .len(),
        0
    );
    ann.sql("DROP TABLE notes").await.unwrap();
}

#[tokio::test]
async fn temporary_tables_are_the_sessions_own() {
    let dir = tempfile::tempdir().unwrap();
    let engine = engine(dir.path());
    let a = engine.session();
    let b = engine.session();
    a.sql("CREATE TEMPORARY TABLE scratch AS SELECT 1 AS x")
        .await
        .unwrap();
    assert_eq!(number(&a, "SELECT x FROM scratch").await, 1);
    assert_eq!(code(&b, "SELECT x FROM scratch").await, "42000");
    assert!(
        !dir.path()
            .join("tables")
            .join("public")
            .join("scratch")
            .exists()
    );
}

#[tokio::test]
async fn a_damaged_log_names_the_table_and_leaves_others_alone() {
    let dir = tempfile::tempdir().unwrap();
    let engine = engine(dir.path());
    let s = engine.session();
    s.sql("CREATE TABLE good AS SELECT 1 AS x").await.unwrap();
    s.sql("CREATE TABLE bad AS SELECT 1 AS x").await.unwrap();
    s.sql("INSERT INTO bad VALUES (2)").await.unwrap();
    let log = dir
        .path()
        .join("tables/public/bad/_delta_log/00000000000000000001.json");
    std::fs::write(&log, b"{\"add\": {\"path\": ").unwrap();
    let fresh = self::engine(dir.path()).session();
    let e = fresh.sql("SELECT * FROM bad").await.unwrap_err();
    assert_eq!(e.code(), "XX001", "{e}");
    assert!(e.to_string().contains("public.bad"), "{e}");
    assert!(e.to_string().contains("00000000000000000001.json"), "{e}");
    assert_eq!(number(&fresh, "SELECT x FROM good").await, 1);
    // A truncated data file: the scan fails with its name, the table's other rows unharmed.
    let data = std::fs::read_dir(dir.path().join("tables/public/good"))
        .unwrap()
        .filter_map(|e| e.ok())
        .find(|e| e.file_name().to_string_lossy().ends_with(".parquet"))
        .unwrap()
        .path();
    let bytes = std::fs::read(&data).unwrap();
    std::fs::write(&data, &bytes[..bytes.len() / 2]).unwrap();
    // A new engine: the first one keeps the file's footer in its metadata cache.
    let fresh = self::engine(dir.path()).session();
    let e = fresh.sql("SELECT * FROM good").await.unwrap_err();
    assert!(e.to_string().contains("public.good"), "{e}");
    assert_eq!(e.code(), "XX001", "{e}");
}

const ROWS_PER_CHILD: i64 = 30;

/// In a child process: inserts its rows one statement at a time.
#[tokio::test]
async fn child_inserts_rows() {
    let (Ok(child), Ok(dir)) = (
        std::env::var("ACCELSQL_TABLES_CHILD"),
        std::env::var("ACCELSQL_TABLES_DIR"),
    ) else {
        return;
    };
    let base: i64 = child.parse().unwrap();
    let s = engine(&PathBuf::from(dir)).session();
    for i in 0..ROWS_PER_CHILD {
        s.sql(&format!("INSERT INTO shared VALUES ({})", base * 1000 + i))
            .await
            .unwrap();
    }
}

#[tokio::test]
async fn two_processes_inserting_into_one_table_lose_nothing() {
    if std::env::var_os("ACCELSQL_TABLES_CHILD").is_some() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    engine(dir.path())
        .session()
        .sql("CREATE TABLE shared (id BIGINT)")
        .await
        .unwrap();
    let me = std::env::current_exe().unwrap();
    let child_test = match module_path!().split_once("::") {
        Some((_, module)) => format!("{module}::child_inserts_rows"),
        None => "child_inserts_rows".to_string(),
    };
    let children: Vec<_> = ["1", "2"]
        .iter()
        .map(|n| {
            std::process::Command::new(&me)
                .args(["--exact", &child_test, "--test-threads", "1"])
                .env("ACCELSQL_TABLES_CHILD", n)
                .env("ACCELSQL_TABLES_DIR", dir.path())
                .stdout(std::process::Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    for mut child in children {
        assert!(child.wait().unwrap().success());
    }
    let s = engine(dir.path()).session();
    assert_eq!(
        number(&s, "SELECT count(*) FROM shared").await,
        2 * ROWS_PER_CHILD
    );
    assert_eq!(
        number(&s, "SELECT count(DISTINCT id) FROM shared").await,
        2 * ROWS_PER_CHILD
    );
    let _ = (Int64Array::from(vec![0]), UInt64Array::from(vec![0u64]));
}

#[tokio::test]
async fn merge_updates_deletes_and_inserts_in_one_statement() {
    let dir = tempfile::tempdir().unwrap();
    let engine = engine(dir.path());
    let s = engine.session();
    s.sql("CREATE TABLE stock (item VARCHAR, qty BIGINT)")
        .await
        .unwrap();
    s.sql("INSERT INTO stock VALUES ('a', 1), ('b', 2), ('c', 3)")
        .await
        .unwrap();
    s.sql("CREATE TABLE delivery (item VARCHAR, qty BIGINT)")
        .await
        .unwrap();
    s.sql("INSERT INTO delivery VALUES ('a', 10), ('c', -3), ('d', 4)")
        .await
        .unwrap();
    let changed = number(
        &s,
        "MERGE INTO stock USING delivery ON stock.item = delivery.item \
         WHEN MATCHED AND stock.qty + delivery.qty <= 0 THEN DELETE \
         WHEN MATCHED THEN UPDATE SET qty = stock.qty + delivery.qty \
         WHEN NOT MATCHED THEN INSERT (item, qty) VALUES (delivery.item, delivery.qty)",
    )
    .await;
    assert_eq!(changed, 3);
    assert_eq!(
        column(&s, "SELECT item || ':' || qty FROM stock ORDER BY item").await,
        ["a:11", "b:2", "d:4"]
    );
    // COPY FROM a Parquet file the engine wrote.
    let file = dir.path().join("stock.parquet");
    s.sql(&format!("COPY stock TO '{}'", file.display()))
        .await
        .unwrap();
    assert_eq!(
        number(&s, &format!("COPY stock FROM '{}'", file.display())).await,
        3
    );
    assert_eq!(number(&s, "SELECT count(*) FROM stock").await, 6);
}

#[tokio::test]
async fn delete_and_update_with_subqueries_touch_only_the_rows_they_name() {
    let dir = tempfile::tempdir().unwrap();
    let engine = engine(dir.path());
    let s = engine.session();
    s.sql("CREATE TABLE t AS SELECT value AS id FROM generate_series(1, 10)")
        .await
        .unwrap();
    s.sql("CREATE TABLE gone AS SELECT value AS id FROM generate_series(1, 3)")
        .await
        .unwrap();
    assert_eq!(
        number(&s, "DELETE FROM t WHERE id IN (SELECT id FROM gone)").await,
        3
    );
    assert_eq!(number(&s, "SELECT count(*) FROM t").await, 7);
    // A correlated subquery is refused (nothing deleted), and MERGE says the same.
    assert_eq!(
        code(
            &s,
            "DELETE FROM t WHERE EXISTS (SELECT 1 FROM gone WHERE gone.id + 3 = t.id)"
        )
        .await,
        "0A000"
    );
    assert_eq!(number(&s, "SELECT count(*) FROM t").await, 7);
    assert_eq!(
        number(
            &s,
            "MERGE INTO t USING (SELECT id + 3 AS id FROM gone) g ON t.id = g.id \
             WHEN MATCHED THEN DELETE"
        )
        .await,
        3
    );
    assert_eq!(number(&s, "SELECT count(*) FROM t").await, 4);
    assert_eq!(
        number(&s, "DELETE FROM t WHERE NOT EXISTS (SELECT 1 FROM gone)").await,
        0
    );
    assert_eq!(number(&s, "DELETE FROM t WHERE 1 = 0").await, 0);
    assert_eq!(
        number(&s, "UPDATE t SET id = 0 WHERE id IS NULL AND id > 1").await,
        0
    );
    assert_eq!(number(&s, "SELECT count(*) FROM t").await, 4);
    assert_eq!(
        number(
            &s,
            "UPDATE t SET id = id * 100 WHERE id = (SELECT max(id) FROM gone) + 4"
        )
        .await,
        1
    );
    assert_eq!(
        column(&s, "SELECT id FROM t ORDER BY id").await,
        ["8", "9", "10", "700"]
    );
}
