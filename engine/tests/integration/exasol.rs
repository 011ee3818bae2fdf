//! Exasol's forms that change how results read: `accelsql.identifier_case = 'upper'` (result
//! columns named as Exasol folds unquoted names; sqllogictest does not compare column names, so
//! this is tested here) and `accelsql.create_schema_opens`.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic: that is a failed test

use accelsql_engine::datafusion::arrow::array::RecordBatch;
use accelsql_engine::{Engine, EngineOptions, SQL_TYPE_METADATA_KEY, SchedulerConfig, Session};

fn session() -> Session {
    Engine::with_options(EngineOptions {
        scheduler: SchedulerConfig::default().with_simulated_gpus(0),
        ..EngineOptions::default()
    })
    .unwrap()
    .session()
}

fn names(batches: &[RecordBatch]) -> Vec<String> {
    batches[0]
        .schema()
        .fields()
        .iter()
        .map(|f| f.name().clone())
        .collect()
}

async fn result_names(s: &Session, sql: &str) -> Vec<String> {
    let stream = s.sql_stream(sql).await.unwrap();
    stream
        .schema()
        .fields()
        .iter()
        .map(|f| f.name().clone())
        .collect()
}

#[tokio::test]
async fn upper_identifier_case_names_results_as_exasol_does() {
    let s = session();
    s.sql("CREATE TABLE t(id BIGINT, Label VARCHAR) AS VALUES (1, 'a')")
        .await
        .unwrap();
    let sql = r#"SELECT 1 AS a, 2 AS "b", 3 AS "MiXed", id, t.label, upper(label) FROM t"#;
    // Off by default: DataFusion's names.
    assert_eq!(
        result_names(&s, sql).await,
        ["a", "b", "MiXed", "id", "label", "upper(t.label)"]
    );
    s.sql("SET accelsql.identifier_case = 'upper'")
        .await
        .unwrap();
    let b = s.sql(sql).await.unwrap();
    assert_eq!(
        names(&b),
        ["A", "b", "MiXed", "ID", "LABEL", "UPPER(T.LABEL)"]
    );
    assert_eq!(b[0].num_rows(), 1);
    // Names in the text are found whatever their case; a wildcard's columns are upper-cased.
    assert_eq!(
        result_names(&s, "SELECT * FROM T WHERE ID = 1").await,
        ["ID", "LABEL"]
    );
    // A set operation is named by its first branch; repeated items keep a shared name.
    assert_eq!(
        result_names(&s, r#"SELECT 1 AS "x" UNION ALL SELECT 2 AS y"#).await,
        ["x"]
    );
    assert_eq!(result_names(&s, "SELECT id, id FROM t").await, ["ID", "ID"]);
    s.sql("RESET accelsql.identifier_case").await.unwrap();
    assert_eq!(result_names(&s, "SELECT 1 AS a").await, ["a"]);
}

#[tokio::test]
async fn create_schema_opens_can_be_turned_off() {
    let s = session();
    s.sql("CREATE SCHEMA first_s").await.unwrap();
    assert_eq!(s.current_schema(), "first_s");
    s.sql("SET accelsql.create_schema_opens = false")
        .await
        .unwrap();
    s.sql("CREATE SCHEMA second_s").await.unwrap();
    assert_eq!(s.current_schema(), "first_s");
    // A table made unqualified lands in the current schema.
    s.sql("CREATE TABLE here(x INT)").await.unwrap();
    s.sql("SELECT * FROM first_s.here").await.unwrap();
}

#[tokio::test]
async fn the_exasol_dialect_names_results_columns_and_errors_as_exasol_does() {
    let s = session();
    s.sql("SET accelsql.sql_dialect = 'exasol'").await.unwrap();
    s.sql(r#"CREATE TABLE t (id BIGINT, "lbl" VARCHAR(10), "MiXed" DOUBLE)"#)
        .await
        .unwrap();
    s.sql("INSERT INTO t VALUES (1, 'a', 1.0)").await.unwrap();
    assert_eq!(
        result_names(&s, "SELECT * FROM t").await,
        ["ID", "lbl", "MiXed"]
    );
    assert_eq!(
        result_names(&s, r#"SELECT id AS x, 1 AS "y", upper("lbl") FROM t"#).await,
        ["X", "y", "UPPER(T.lbl)"]
    );
    // DESCRIBE: names and types as Exasol shows them, as declared.
    let b = s.sql("DESCRIBE t").await.unwrap();
    let shown = accelsql_engine::datafusion::arrow::util::pretty::pretty_format_batches(&b)
        .unwrap()
        .to_string();
    assert!(shown.contains("| ID          | DECIMAL(19,0)"), "{shown}");
    assert!(
        shown.contains("| lbl         | VARCHAR(10) UTF8"),
        "{shown}"
    );
    assert!(shown.contains("| MiXed       | DOUBLE"), "{shown}");
    // A result's Arrow schema says the declared types, and a string literal's.
    let b = s
        .sql(r#"SELECT "lbl", 'abc' AS l, id FROM t"#)
        .await
        .unwrap();
    let declared: Vec<Option<String>> = b[0]
        .schema()
        .fields()
        .iter()
        .map(|f| f.metadata().get(SQL_TYPE_METADATA_KEY).cloned())
        .collect();
    assert_eq!(
        declared,
        [
            Some("VARCHAR(10) UTF8".to_string()),
            Some("CHAR(3) ASCII".to_string()),
            Some("DECIMAL(19,0)".to_string())
        ]
    );
    // A missing name is named as the statement wrote it.
    let e = s.sql(r#"SELECT "id" FROM t"#).await.unwrap_err();
    assert_eq!(e.code(), "42000");
    assert!(e.to_string().contains(r#"object "id" not found"#), "{e}");
    let e = s.sql("SELECT * FROM nope").await.unwrap_err();
    assert!(e.to_string().contains("object NOPE not found"), "{e}");
    // Back in the default dialect the same table has the engine's names.
    s.sql("SET accelsql.sql_dialect = 'datafusion'")
        .await
        .unwrap();
    assert_eq!(
        result_names(&s, "SELECT * FROM t").await,
        ["id", "LBL", "mIxED"]
    );
}

#[tokio::test]
async fn an_engine_can_start_its_sessions_in_the_exasol_dialect() {
    let engine = Engine::with_options(EngineOptions {
        scheduler: SchedulerConfig::default().with_simulated_gpus(0),
        sql_dialect: accelsql_engine::SqlDialect::Exasol,
        ..EngineOptions::default()
    })
    .unwrap();
    let s = engine.session();
    assert_eq!(result_names(&s, "SELECT 1 AS a").await, ["A"]);
    let b = s.sql("SELECT '' IS NULL").await.unwrap();
    let shown = accelsql_engine::datafusion::arrow::util::pretty::pretty_format_batches(&b)
        .unwrap()
        .to_string();
    assert!(shown.contains("true"), "{shown}");
    // RESET goes back to the engine's dialect, not DataFusion's.
    s.sql("SET accelsql.sql_dialect = 'datafusion'")
        .await
        .unwrap();
    s.sql("RESET accelsql.sql_dialect").await.unwrap();
    assert_eq!(result_names(&s, "SELECT 1 AS a").await, ["A"]);
}
