//! The store through DataFusion's own SQL: tables shared by sessions, durable across a reopen,
//! statements atomic, transactions isolated, conflicts coded, versions readable.

use std::sync::Arc;

use arrow::array::{Int64Array, RecordBatch};
use arrow::datatypes::{DataType, Field, Schema};
use datafusion::prelude::{SessionConfig, SessionContext};

use crate::catalog::StoreCatalog;
use crate::error::StorageError;
use crate::store::{CreateMode, TableStore};
use crate::txn::Transaction;

/// A session over `store` with its own transaction.
fn session(store: &Arc<TableStore>) -> (SessionContext, Arc<Transaction>) {
    let txn = Arc::new(Transaction::new());
    let config = SessionConfig::new()
        .with_extension(Arc::clone(&txn))
        .with_target_partitions(2);
    let ctx = SessionContext::new_with_config(config);
    ctx.register_catalog("datafusion", Arc::new(StoreCatalog::new(Arc::clone(store))));
    (ctx, txn)
}

async fn run(
    ctx: &SessionContext,
    txn: &Transaction,
    sql: &str,
) -> datafusion::common::Result<Vec<RecordBatch>> {
    txn.begin_statement();
    ctx.sql(sql).await?.collect().await
}

/// The single integer `sql` answers.
async fn number(ctx: &SessionContext, txn: &Transaction, sql: &str) -> i64 {
    let batches = run(ctx, txn, sql).await.unwrap();
    let column = batches[0].column(0);
    match column.data_type() {
        DataType::Int64 => column
            .as_any()
            .downcast_ref::<Int64Array>()
            .unwrap()
            .value(0),
        DataType::UInt64 => column
            .as_any()
            .downcast_ref::<arrow::array::UInt64Array>()
            .unwrap()
            .value(0) as i64,
        other => panic!("{sql}: {other}"),
    }
}

async fn store_with_table(dir: &std::path::Path) -> Arc<TableStore> {
    let store = Arc::new(TableStore::open(dir).unwrap());
    store.create_schema("public", None).unwrap();
    let columns = Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("name", DataType::Utf8View, true),
    ]);
    store
        .create_table("public", "t", &columns, Some("ANN"), None, CreateMode::New)
        .await
        .unwrap();
    store
}

/// The code of the storage error inside a DataFusion error.
fn code(e: &datafusion::error::DataFusionError) -> String {
    let mut current: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = current {
        if let Some(s) = err.downcast_ref::<StorageError>() {
            return s.code().to_string();
        }
        if let Some(datafusion::error::DataFusionError::External(inner)) =
            err.downcast_ref::<datafusion::error::DataFusionError>()
        {
            if let Some(s) = inner.downcast_ref::<StorageError>() {
                return s.code().to_string();
            }
        }
        current = err.source();
    }
    format!("uncoded: {e}")
}

#[tokio::test]
async fn tables_are_shared_durable_and_changed_by_dml() {
    let dir = tempfile::tempdir().unwrap();
    let store = store_with_table(dir.path()).await;
    let (a, ta) = session(&store);
    let (b, tb) = session(&store);
    run(
        &a,
        &ta,
        "INSERT INTO t VALUES (1, 'one'), (2, 'two'), (3, 'three')",
    )
    .await
    .unwrap();
    assert_eq!(number(&b, &tb, "SELECT count(*) FROM t").await, 3);
    assert_eq!(
        number(&b, &tb, "UPDATE t SET name = 'TWO' WHERE id = 2").await,
        1
    );
    assert_eq!(number(&a, &ta, "DELETE FROM t WHERE id = 1").await, 1);
    assert_eq!(
        number(&a, &ta, "SELECT count(*) FROM t WHERE name = 'TWO'").await,
        1
    );
    assert_eq!(number(&a, &ta, "SELECT sum(id) FROM t").await, 5);
    // Reopened, as after a restart.
    drop((a, b));
    let store = Arc::new(TableStore::open(dir.path()).unwrap());
    let (c, tc) = session(&store);
    assert_eq!(number(&c, &tc, "SELECT sum(id) FROM t").await, 5);
    assert_eq!(
        number(&c, &tc, "SELECT count(*) FROM t WHERE name = 'TWO'").await,
        1
    );
    // The first versions are still there.
    assert_eq!(
        number(&c, &tc, "SELECT count(*) FROM \"t@@version=1\"").await,
        3
    );
    assert_eq!(
        number(&c, &tc, "SELECT count(*) FROM \"t@@version=0\"").await,
        0
    );
    let e = run(&c, &tc, "INSERT INTO \"t@@version=1\" VALUES (9, 'x')")
        .await
        .unwrap_err();
    assert_eq!(code(&e), "0A000", "{e}");
    assert_eq!(number(&c, &tc, "TRUNCATE TABLE t").await, 2);
    assert_eq!(number(&c, &tc, "SELECT count(*) FROM t").await, 0);
    let snapshot = store
        .table("public", "t")
        .unwrap()
        .unwrap()
        .latest()
        .await
        .unwrap();
    assert_eq!(snapshot.owner.as_deref(), Some("ANN"));
    assert_eq!(snapshot.version, 4);
}

#[tokio::test]
async fn a_failed_statement_leaves_the_table_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let store = store_with_table(dir.path()).await;
    let (a, ta) = session(&store);
    run(&a, &ta, "INSERT INTO t VALUES (1, 'one')")
        .await
        .unwrap();
    // Rows in one-row batches: the statement fails after the first rows were written.
    run(&a, &ta, "SET datafusion.execution.batch_size = 1")
        .await
        .unwrap();
    let e = run(
        &a,
        &ta,
        "INSERT INTO t SELECT 10 / (3 - value), 'x' FROM generate_series(1, 5)",
    )
    .await
    .unwrap_err();
    assert!(e.to_string().contains("Divide by zero"), "{e}");
    assert_eq!(number(&a, &ta, "SELECT count(*) FROM t").await, 1);
    let e = run(
        &a,
        &ta,
        "INSERT INTO t SELECT CASE WHEN value = 3 THEN NULL ELSE value END, 'x' FROM generate_series(1, 5)",
    )
    .await
    .unwrap_err();
    assert!(
        code(&e) == "23502" || e.to_string().contains("non-nullable"),
        "{e}"
    );
    assert_eq!(number(&a, &ta, "SELECT count(*) FROM t").await, 1);
    let e = run(&a, &ta, "UPDATE t SET id = 1 / (id - 1)")
        .await
        .unwrap_err();
    assert!(e.to_string().contains("Divide by zero"), "{e}");
    assert_eq!(number(&a, &ta, "SELECT sum(id) FROM t").await, 1);
    // Only committed files remain in the folder.
    let files: Vec<_> = std::fs::read_dir(dir.path().join("public").join("t"))
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".parquet"))
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
}

#[tokio::test]
async fn an_explicit_transaction_is_seen_by_its_session_only_until_commit() {
    let dir = tempfile::tempdir().unwrap();
    let store = store_with_table(dir.path()).await;
    let (a, ta) = session(&store);
    let (b, tb) = session(&store);
    ta.set_explicit(true).await.unwrap();
    run(&a, &ta, "INSERT INTO t VALUES (1, 'one'), (2, 'two')")
        .await
        .unwrap();
    run(&a, &ta, "DELETE FROM t WHERE id = 1").await.unwrap();
    run(&a, &ta, "UPDATE t SET name = 'zwei'").await.unwrap();
    assert_eq!(
        number(&a, &ta, "SELECT count(*) FROM t WHERE name = 'zwei'").await,
        1
    );
    assert_eq!(number(&b, &tb, "SELECT count(*) FROM t").await, 0);
    ta.commit().await.unwrap();
    assert_eq!(
        number(&b, &tb, "SELECT count(*) FROM t WHERE name = 'zwei'").await,
        1
    );
    // A rollback leaves nothing, files included.
    run(&a, &ta, "INSERT INTO t VALUES (7, 'seven')")
        .await
        .unwrap();
    ta.rollback().await;
    assert_eq!(number(&a, &ta, "SELECT count(*) FROM t").await, 1);
    let parquet = std::fs::read_dir(dir.path().join("public").join("t"))
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".parquet"))
        .count();
    // The first insert's file was rewritten by the DELETE and UPDATE inside the transaction:
    // one committed file, the intermediate ones deleted.
    assert_eq!(parquet, 1);
}

#[tokio::test]
async fn conflicting_rewrites_give_one_40001_and_appends_both_land() {
    let dir = tempfile::tempdir().unwrap();
    let store = store_with_table(dir.path()).await;
    let (a, ta) = session(&store);
    let (b, tb) = session(&store);
    run(&a, &ta, "INSERT INTO t VALUES (1, 'one'), (2, 'two')")
        .await
        .unwrap();
    ta.set_explicit(true).await.unwrap();
    tb.set_explicit(true).await.unwrap();
    run(&a, &ta, "UPDATE t SET name = 'a' WHERE id = 1")
        .await
        .unwrap();
    run(&b, &tb, "DELETE FROM t WHERE id = 2").await.unwrap();
    ta.commit().await.unwrap();
    let e = tb.commit().await.unwrap_err();
    assert_eq!(e.code(), "40001", "{e}");
    // Appends from both commit.
    run(&a, &ta, "INSERT INTO t VALUES (3, 'x')").await.unwrap();
    run(&b, &tb, "INSERT INTO t VALUES (4, 'y')").await.unwrap();
    ta.commit().await.unwrap();
    tb.commit().await.unwrap();
    assert_eq!(number(&a, &ta, "SELECT sum(id) FROM t").await, 10);
    assert_eq!(
        number(&a, &ta, "SELECT count(*) FROM t WHERE name = 'a'").await,
        1
    );
}

#[tokio::test]
async fn create_or_replace_and_rename_and_drop() {
    let dir = tempfile::tempdir().unwrap();
    let store = store_with_table(dir.path()).await;
    let (a, ta) = session(&store);
    run(&a, &ta, "INSERT INTO t VALUES (1, 'one')")
        .await
        .unwrap();
    let columns = Schema::new(vec![Field::new("x", DataType::Float64, true)]);
    let e = store
        .create_table("public", "t", &columns, None, None, CreateMode::New)
        .await
        .unwrap_err();
    assert_eq!(e.code(), "42710");
    let created = store
        .create_table("public", "t", &columns, None, None, CreateMode::Replace)
        .await
        .unwrap();
    assert!(created.created);
    ta.begin_statement();
    let frame = a.sql("SELECT * FROM t").await.unwrap();
    assert_eq!(frame.schema().field(0).name(), "x");
    assert_eq!(frame.count().await.unwrap(), 0);
    store
        .rename_table(("public", "t"), ("public", "u"))
        .unwrap();
    assert!(!store.table_exists("public", "t"));
    run(&a, &ta, "INSERT INTO u VALUES (2.5)").await.unwrap();
    assert!(store.drop_table("public", "u").unwrap());
    assert!(run(&a, &ta, "SELECT * FROM u").await.is_err());
    assert!(store.table_names("public").is_empty());
}

#[tokio::test]
async fn the_table_cache_answers_scans_as_the_files_would() {
    use crate::cache::FileCache;
    use datafusion::execution::memory_pool::{GreedyMemoryPool, MemoryPool};
    let dir = tempfile::tempdir().unwrap();
    let store = store_with_table(dir.path()).await;
    let pool: Arc<dyn MemoryPool> = Arc::new(GreedyMemoryPool::new(1 << 30));
    let cache = Arc::new(FileCache::new(&pool, 64 << 20));
    let cached_session = || {
        let txn = Arc::new(Transaction::new());
        let config = SessionConfig::new()
            .with_extension(Arc::clone(&txn))
            .with_extension(Arc::clone(&cache))
            .with_target_partitions(2);
        let ctx = SessionContext::new_with_config(config);
        ctx.register_catalog(
            "datafusion",
            Arc::new(StoreCatalog::new(Arc::clone(&store))),
        );
        (ctx, txn)
    };
    let (a, ta) = cached_session();
    for i in 0..5 {
        run(
            &a,
            &ta,
            &format!("INSERT INTO t VALUES ({i}, 'n{i}'), ({}, NULL)", i + 100),
        )
        .await
        .unwrap();
    }
    // The writes' rows are in the cache already.
    assert!(cache.bytes() > 0);
    let held = cache.bytes();
    assert_eq!(number(&a, &ta, "SELECT sum(id) FROM t").await, 520);
    assert_eq!(number(&a, &ta, "SELECT count(name) FROM t").await, 5);
    // A file another process wrote is read from disk, then loaded in the background.
    let (plain, tp) = session(&store);
    run(&plain, &tp, "INSERT INTO t VALUES (1000, 'far')")
        .await
        .unwrap();
    assert_eq!(number(&a, &ta, "SELECT sum(id) FROM t").await, 1520);
    for _ in 0..100 {
        if cache.bytes() > held {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(
        cache.bytes() > held,
        "the file read from disk was not loaded"
    );
    assert_eq!(number(&a, &ta, "SELECT sum(id) FROM t").await, 1520);
    // Deleted rows are gone from what the cache answers too.
    assert_eq!(number(&a, &ta, "DELETE FROM t WHERE id >= 100").await, 6);
    assert_eq!(number(&a, &ta, "SELECT sum(id) FROM t").await, 10);
    // A new column: the cached files' rows are decoded anew, with it.
    let table = store.table("public", "t").unwrap().unwrap();
    crate::ddl::add_column(&table, &Field::new("extra", DataType::Int64, true))
        .await
        .unwrap();
    assert_eq!(
        number(&a, &ta, "SELECT count(*) FROM t WHERE extra IS NULL").await,
        5
    );
    assert_eq!(number(&a, &ta, "SELECT sum(id) FROM t").await, 10);
    // Time travel reads the old files, from the cache or the disk.
    assert_eq!(
        number(&a, &ta, "SELECT sum(id) FROM \"t@@version=6\"").await,
        1520
    );
}
