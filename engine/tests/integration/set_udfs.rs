//! Set UDFs through SQL: SCALAR EMITS, SET EMITS with GROUP BY (and `GROUP BY iproc()`), SET
//! RETURNS as aggregates, EMITS position errors, and their placement.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic: that is a failed test

use crate::helpers::flat;
use accelsql_engine::datafusion::arrow::array::RecordBatch;
use accelsql_engine::{Engine, SchedulerConfig, Session, testing};

fn session(gpus: usize) -> Session {
    let engine = Engine::with_config(SchedulerConfig::default().with_simulated_gpus(gpus)).unwrap();
    testing::register_fixtures(&engine).unwrap();
    engine.session()
}

/// The result as rows of text cells ("NULL" for nulls).
fn rows(batches: &[RecordBatch]) -> Vec<Vec<String>> {
    testing::cells(batches).unwrap()
}

async fn err_code(s: &Session, sql: &str) -> (String, String) {
    let e = s.sql(sql).await.expect_err(sql);
    (e.code().to_string(), e.to_string())
}

const T: &str = "CREATE TABLE t AS SELECT * FROM (VALUES \
    ('a', 1.0), ('a', 2.0), ('b', 10.0), ('c', 100.0), ('c', 200.0), ('c', 300.0)) AS v(k, x)";

#[tokio::test]
async fn scalar_emits_gives_zero_to_n_rows_per_input_row() {
    let s = session(0);
    let b = s
        .sql("SELECT explode(n) FROM (VALUES (0), (2), (3), (-1)) AS t(n) ORDER BY i")
        .await
        .unwrap();
    assert_eq!(b[0].schema().field(0).name(), "i");
    assert_eq!(flat(&b), ["1", "1", "2", "2", "3"]);
    // Without FROM, and read by an outer query by its EMITS column name.
    let b = s.sql("SELECT explode(2)").await.unwrap();
    assert_eq!(flat(&b), ["1", "2"]);
    let b = s
        .sql("SELECT sum(i) AS total FROM (SELECT explode(4))")
        .await
        .unwrap();
    assert_eq!(flat(&b), ["10"]);
}

#[tokio::test]
async fn set_emits_runs_once_per_group_and_keeps_the_keys() {
    let s = session(0);
    s.sql(T).await.unwrap();
    let b = s
        .sql("SELECT k, group_probe(x) FROM t GROUP BY k ORDER BY k")
        .await
        .unwrap();
    let schema = b[0].schema();
    let names: Vec<_> = schema.fields().iter().map(|f| f.name().as_str()).collect();
    assert_eq!(names, ["k", "rows", "device"]);
    assert_eq!(
        flat(&b),
        ["a|2|<invalid>", "b|1|<invalid>", "c|3|<invalid>"]
    );
    // No GROUP BY: the whole input is one group.
    let b = s.sql("SELECT group_probe(x) FROM t").await.unwrap();
    assert_eq!(flat(&b), ["6|<invalid>"]);
    // Groups that span many small batches and partitions are still one run each.
    s.sql("SET datafusion.execution.batch_size = 2")
        .await
        .unwrap();
    s.sql("SET datafusion.execution.target_partitions = 3")
        .await
        .unwrap();
    let b = s
        .sql(
            "SELECT g, group_probe(v) FROM (SELECT value % 7 AS g, value AS v FROM range(1000)) \
             GROUP BY g ORDER BY g",
        )
        .await
        .unwrap();
    let got: Vec<_> = rows(&b).into_iter().map(|r| r[1].clone()).collect();
    let want: Vec<_> = (0..7)
        .map(|g| (0..1000).filter(|v| v % 7 == g).count().to_string())
        .collect();
    assert_eq!(got, want);
}

#[tokio::test]
async fn group_by_iproc_makes_one_group_per_node() {
    let s = session(0);
    s.sql(T).await.unwrap();
    let b = s
        .sql("SELECT group_probe(x) FROM t GROUP BY iproc()")
        .await
        .unwrap();
    assert_eq!(flat(&b), ["6|<invalid>"]);
    let b = s
        .sql("SELECT k, group_probe(x) FROM t GROUP BY iproc(), k ORDER BY k")
        .await
        .unwrap();
    assert_eq!(
        flat(&b),
        ["a|2|<invalid>", "b|1|<invalid>", "c|3|<invalid>"]
    );
}

#[tokio::test]
async fn set_returns_is_an_aggregate_across_partitions() {
    let s = session(0);
    s.sql(T).await.unwrap();
    s.sql("SET datafusion.execution.target_partitions = 4")
        .await
        .unwrap();
    let b = s
        .sql("SELECT k, group_sum(x) AS s, count(*) AS n FROM t GROUP BY k ORDER BY k")
        .await
        .unwrap();
    assert_eq!(flat(&b), ["a|3.0|2", "b|10.0|1", "c|600.0|3"]);
    let b = s
        .sql(
            "SELECT group_sum(CAST(value AS DOUBLE)) FROM \
             (SELECT value FROM range(10000) UNION ALL SELECT value FROM range(10000))",
        )
        .await
        .unwrap();
    assert_eq!(flat(&b), [format!("{}.0", 2 * (0..10000).sum::<i64>())]);
    // An aggregate over no rows: no run, NULL.
    let b = s
        .sql("SELECT group_sum(x) FROM t WHERE x < 0")
        .await
        .unwrap();
    assert_eq!(flat(&b), ["NULL"]);
}

#[tokio::test]
async fn emits_calls_in_illegal_positions_are_coded_errors() {
    let s = session(0);
    s.sql(T).await.unwrap();
    for sql in [
        "SELECT explode(CAST(group_sum(x) AS BIGINT)) FROM t",
        "SELECT explode(2) + 1",
        "SELECT * FROM t WHERE k IN (SELECT 'a' FROM t WHERE explode(1) IS NOT NULL)",
        "SELECT explode(1) AS e",
        "SELECT explode(1), explode(2)",
        "SELECT k, group_probe(x), count(*) FROM t GROUP BY k",
        "SELECT k, group_probe(x) FROM t GROUP BY k HAVING count(*) > 1",
        "SELECT k, group_probe(x) FROM t GROUP BY k ORDER BY group_probe(x)",
    ] {
        let (code, message) = err_code(&s, sql).await;
        assert_eq!(code, "42E02", "{sql}: {message}");
        assert!(
            message.contains("explode") || message.contains("group_probe"),
            "{message}"
        );
    }
    // Items beside a SCALAR EMITS call are repeated for each row their input row emits.
    let b = s
        .sql("SELECT k, explode(CAST(x AS BIGINT)), 1 AS one FROM t WHERE x < 3 ORDER BY k, i")
        .await
        .unwrap();
    assert_eq!(flat(&b), ["a|1|1", "a|1|1", "a|2|1"]);
    // Columns beside a SET EMITS call must be GROUP BY keys: DataFusion's own check answers.
    let (code, message) = err_code(&s, "SELECT x, group_probe(x) FROM t GROUP BY k").await;
    assert_eq!(code, "42000", "{message}");
    // Expressions of keys are allowed beside it.
    let b = s
        .sql("SELECT upper(k) AS uk, group_probe(x) FROM t GROUP BY k ORDER BY uk")
        .await
        .unwrap();
    assert_eq!(
        flat(&b),
        ["A|2|<invalid>", "B|1|<invalid>", "C|3|<invalid>"]
    );
    let (code, message) = err_code(&s, "SELECT explode(2) + 1").await;
    assert_eq!(code, "42E02", "{message}");
    assert!(message.contains("explode"), "{message}");
    let (code, message) =
        err_code(&s, "SELECT k, group_probe(x), count(*) FROM t GROUP BY k").await;
    assert_eq!(code, "42E02", "{message}");
    // A broken implementation is a coded error, and the session stays usable.
    let (code, message) = err_code(&s, "SELECT bad_emits(x) FROM t").await;
    assert_eq!(code, "22E02", "{message}");
    assert_eq!(flat(&s.sql("SELECT count(*) FROM t").await.unwrap()), ["6"]);
}

#[tokio::test]
async fn emits_calls_are_placed_and_pinned_like_scalar_calls() {
    let s = session(2);
    s.sql(T).await.unwrap();
    s.sql("SET datafusion.execution.target_partitions = 4")
        .await
        .unwrap();
    // The optional set call gets the GPUs; its instances are pinned to leased devices.
    let b = s
        .sql("SELECT k, group_probe(x) FROM t GROUP BY k ORDER BY k")
        .await
        .unwrap();
    for row in rows(&b) {
        assert!(row[2] == "0" || row[2] == "1", "{row:?}");
    }
    // A required EMITS call and a required scalar call in one select: 22069 before running.
    let (code, message) = err_code(
        &s,
        "SELECT k, gpu_group_probe(gpu_probe_required()) FROM t GROUP BY k",
    )
    .await;
    assert_eq!(code, "22069", "{message}");
    // EXPLAIN shows the UdfCall node and the placement.
    let b = s
        .sql("EXPLAIN SELECT k, gpu_group_probe(x) FROM t GROUP BY k")
        .await
        .unwrap();
    let text = flat(&b).join("\n");
    assert!(text.contains("UdfCall: SET gpu_group_probe"), "{text}");
    assert!(text.contains("UdfCallExec"), "{text}");
    assert!(text.contains("gpu_group_probe() in block 1: GPU"), "{text}");
    // EXPLAIN ANALYZE runs it (under the lease) and adds each call's placement and counters.
    let b = s
        .sql("EXPLAIN ANALYZE SELECT k, gpu_group_probe(x) FROM t GROUP BY k")
        .await
        .unwrap();
    let text = flat(&b).join("\n");
    assert!(
        text.contains("gpu_calls|call 1 gpu_group_probe() in block 1: GPU"),
        "{text}"
    );
    assert!(text.contains("rows in 6 out 3"), "{text}");
    assert!(text.contains("lease wait"), "{text}");
    assert!(text.contains("runs=3"), "{text}");
    // udf_calls records the run: 3 groups in, 3 rows out.
    s.sql("SELECT k, gpu_group_probe(x) FROM t GROUP BY k")
        .await
        .unwrap();
    let b = s
        .sql(
            "SELECT placement, rows_in, rows_out FROM accelsql.udf_calls \
             WHERE udf = 'gpu_group_probe' ORDER BY statement_id DESC LIMIT 1",
        )
        .await
        .unwrap();
    assert_eq!(flat(&b), ["GPU|6|3"]);
}

#[tokio::test]
async fn with_zero_gpus_required_emits_calls_fail_and_optional_ones_run_on_cpu() {
    let s = session(0);
    s.sql(T).await.unwrap();
    let (code, message) = err_code(&s, "SELECT gpu_group_probe(x) FROM t").await;
    assert_eq!(code, "22069", "{message}");
    assert!(message.contains("gpu_group_probe"), "{message}");
    let b = s.sql("SELECT group_probe(x) FROM t").await.unwrap();
    assert_eq!(flat(&b), ["6|<invalid>"]);
}

/// A grouped SET call gathers each group's rows itself by default: no sort of the input (and
/// its payloads) before it, the same groups and rows as the sorted path. (The query vector is a
/// column here, so `vector_topk` runs whole per group rather than split.)
#[tokio::test]
async fn grouped_set_calls_gather_their_groups_without_sorting_the_input() {
    let s = session(0);
    // 3,000 rows of 8-float embeddings in 30 groups, a NULL group among them.
    s.sql(
        "CREATE TABLE docs AS SELECT value AS id, \
         CASE WHEN value % 31 = 0 THEN NULL ELSE value % 29 END AS cat, \
         [sin(value), cos(value), sin(2 * value), cos(3 * value), \
          sin(5 * value), cos(7 * value), 1.0, sin(value / 7)] AS emb, \
         [1, 0, 0.5, 0, 0, 0.25, 1, 0] AS q \
         FROM generate_series(1, 3000)",
    )
    .await
    .unwrap();
    let sql = "SELECT cat, vector_topk(id, emb, q, 3) \
               FROM docs GROUP BY cat ORDER BY cat NULLS LAST, score DESC, row_id";
    let explain = format!("EXPLAIN {sql}");
    let gathered = flat(&s.sql(&explain).await.unwrap()).join("\n");
    assert!(gathered.contains("(gathered)"), "{gathered}");
    // Nothing below the call sorts (the ORDER BY above it does).
    let (_, below) = gathered.split_once("UdfCallExec").unwrap();
    assert!(!below.contains("SortExec"), "{gathered}");
    let gather = flat(&s.sql(sql).await.unwrap());
    assert_eq!(gather.len(), 30 * 3, "{gather:?}");
    assert!(gather.iter().any(|r| r.starts_with("NULL|")), "{gather:?}");

    s.sql("SET accelsql.set_grouping = 'sort'").await.unwrap();
    let sorted = flat(&s.sql(&explain).await.unwrap()).join("\n");
    assert!(!sorted.contains("(gathered)"), "{sorted}");
    let (_, below) = sorted.split_once("UdfCallExec").unwrap();
    assert!(below.contains("SortExec"), "{sorted}");
    assert_eq!(flat(&s.sql(sql).await.unwrap()), gather);
}

/// A session of `partitions` partitions with table `docs` for the split `vector_topk` tests:
/// 3,000 rows whose embeddings repeat every 50 rows (equal scores), every 7th id NULL, every
/// 11th embedding NULL; keys `many` (37 values, every 13th NULL), `two` and `one`; `q` holds
/// the query as data, so a call given it runs whole.
async fn topk_docs(partitions: usize) -> Session {
    let s = session(0);
    s.sql(&format!(
        "SET datafusion.execution.target_partitions = {partitions}"
    ))
    .await
    .unwrap();
    s.sql(
        "CREATE TABLE docs AS SELECT \
         CASE WHEN value % 7 = 0 THEN NULL ELSE value END AS id, \
         CASE WHEN value % 13 = 0 THEN NULL ELSE value % 37 END AS many, \
         value % 2 AS two, 'all' AS one, \
         CASE WHEN value % 11 = 0 THEN NULL ELSE \
           [sin(value % 50), cos(value % 50), 0.5] END AS emb, \
         [1.0, 0.0, 0.5] AS q \
         FROM generate_series(1, 3000)",
    )
    .await
    .unwrap();
    s
}

/// `vector_topk` without GROUP BY, with a constant query and `k`, runs as each partition's `k`
/// best and a merge: the same rows as one run over the whole input — ties (equal scores break
/// by id, NULL ids last), NULL embeddings, `k` beyond the rows, empty input.
#[tokio::test]
async fn vector_topk_without_group_by_merges_each_partitions_best() {
    let s = topk_docs(4).await;
    for (k, filter) in [
        (7, ""),
        (40, ""),
        (5000, ""),
        (3, " WHERE id < 20"),
        (5, " WHERE false"),
    ] {
        let split = format!(
            "SELECT row_id, score FROM (SELECT vector_topk(id, emb, [1.0, 0.0, 0.5], {k}) \
             FROM docs{filter})"
        );
        let whole = format!(
            "SELECT row_id, score FROM (SELECT vector_topk(id, emb, q, {k}) FROM docs{filter})"
        );
        let plan = flat(&s.sql(&format!("EXPLAIN {split}")).await.unwrap()).join("\n");
        assert!(plan.contains("partial: each partition's best"), "{plan}");
        assert!(plan.contains("SortPreservingMergeExec"), "{plan}");
        let whole_plan = flat(&s.sql(&format!("EXPLAIN {whole}")).await.unwrap()).join("\n");
        assert!(!whole_plan.contains("partial"), "{whole_plan}");
        let got = flat(&s.sql(&split).await.unwrap());
        let want = flat(&s.sql(&whole).await.unwrap());
        assert_eq!(got, want, "k = {k}{filter}");
        let scored = if filter.is_empty() {
            3000 - 3000 / 11
        } else {
            0
        };
        if k == 5000 {
            assert_eq!(got.len(), scored);
        }
    }
    // Ties: the top rows share a score and come by id, the NULL id last among them.
    let top = flat(
        &s.sql("SELECT row_id FROM (SELECT vector_topk(id, emb, [1.0, 0.0, 0.5], 3) FROM docs)")
            .await
            .unwrap(),
    );
    assert_eq!(top.len(), 3);
    let ids: Vec<i64> = top.iter().filter_map(|r| r.parse().ok()).collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "{top:?}");
}

/// `vector_topk` with GROUP BY, a constant query and `k`, runs as each input batch's groups'
/// `k` best and a merge per group (the arguments neither repartitioned nor sorted): the same
/// rows as the whole call per group — many groups and one, NULL keys, keys the select list does
/// not show, two keys, ties broken by id (NULL ids last), NULL embeddings, `k` beyond a group,
/// an empty input, tiny batches (a group spread over many runs).
#[tokio::test]
async fn vector_topk_with_group_by_merges_each_groups_best() {
    let s = topk_docs(3).await;
    let cases = [
        ("many", "many", 3, ""),
        ("many", "many", 500, ""),
        ("one", "one", 7, ""),
        ("two, many", "two, many", 2, ""),
        ("", "many", 4, ""),
        ("two", "many, two", 1, ""),
        ("many", "many", 3, " WHERE id < 20"),
        ("many", "many", 5, " WHERE false"),
    ];
    for batch_size in [8192, 7] {
        s.sql(&format!(
            "SET datafusion.execution.batch_size = {batch_size}"
        ))
        .await
        .unwrap();
        for (shown, keys, k, filter) in cases {
            let select = if shown.is_empty() {
                String::new()
            } else {
                format!("{shown}, ")
            };
            let query = |q: &str| {
                format!(
                    "SELECT * FROM (SELECT {select}vector_topk(id, emb, {q}, {k}) \
                     FROM docs{filter} GROUP BY {keys})"
                )
            };
            let (split, whole) = (query("[1.0, 0.0, 0.5]"), query("q"));
            let plan = flat(&s.sql(&format!("EXPLAIN {split}")).await.unwrap()).join("\n");
            assert!(
                plan.contains("partial: each batch's groups' best"),
                "{plan}"
            );
            let (_, below) = plan.split_once("UdfCallExec").unwrap();
            assert!(!below.contains("SortExec"), "{plan}");
            let whole_plan = flat(&s.sql(&format!("EXPLAIN {whole}")).await.unwrap()).join("\n");
            assert!(!whole_plan.contains("partial"), "{whole_plan}");
            // The same rows in any order.
            let mut got = flat(&s.sql(&split).await.unwrap());
            let mut want = flat(&s.sql(&whole).await.unwrap());
            got.sort();
            want.sort();
            assert_eq!(
                got, want,
                "GROUP BY {keys}, k = {k}{filter}, batch size {batch_size}"
            );
            if filter == " WHERE false" {
                assert!(got.is_empty());
            } else {
                assert!(!got.is_empty(), "GROUP BY {keys}, k = {k}{filter}");
            }
        }
    }
    // The sorted grouping keeps the old plan: the whole input sorted, no split.
    s.sql("SET accelsql.set_grouping = 'sort'").await.unwrap();
    let plan = flat(
        &s.sql(
            "EXPLAIN SELECT many, vector_topk(id, emb, [1.0, 0.0, 0.5], 3) FROM docs GROUP BY many",
        )
        .await
        .unwrap(),
    )
    .join("\n");
    assert!(!plan.contains("partial"), "{plan}");
}
