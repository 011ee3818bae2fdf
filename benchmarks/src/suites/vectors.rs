//! `vectors`: the 10 embeddings most similar (cosine) to a query vector, out of N — accelsql's
//! built-ins (`cosine_similarity` + ORDER BY … LIMIT 10, and the set UDF `vector_topk`) on CPU
//! and GPU beside plain DataFusion (its built-in `cosine_distance`, and a plain `ScalarUDF`) and
//! DuckDB (`array_cosine_similarity`).

use crate::data::{Dataset, EMBEDDING_DIM, query_vector};
use crate::error::Result;
use crate::peers::datafusion::plain_datafusion;
use crate::results::{SuiteResult, Table};

use super::Context;
use super::sql::{self, Comparison, Contender, DuckDbContender};

/// Embeddings at `--scale 1` (the largest size; the suite also runs a quarter and a sixteenth).
pub const BASE_ROWS: u64 = 1_000_000;
/// How many neighbours.
pub const K: usize = 10;

/// The query vector as a SQL list literal (`[0.12, -0.5, …]`, DOUBLE items).
pub fn query_literal(seed: u64) -> String {
    let items: Vec<String> = query_vector(seed)
        .iter()
        .map(|v| format!("{v:?}"))
        .collect();
    format!("[{}]", items.join(", "))
}

fn by_similarity(id: &str, score: &str) -> String {
    format!("SELECT {id} AS id, {score} AS score FROM {{table}} ORDER BY score DESC LIMIT {K}")
}

const REFERENCE: &str = "DataFusion ScalarUDF";

/// The top-K ids agree (as sets: near-equal scores may swap places).
fn same_ids(answer: &[Vec<f64>], reference: &[Vec<f64>]) -> std::result::Result<(), String> {
    let ids = |rows: &[Vec<f64>]| {
        let mut ids: Vec<i64> = rows
            .iter()
            .filter_map(|r| r.first())
            .map(|v| *v as i64)
            .collect();
        ids.sort_unstable();
        ids
    };
    let (a, r) = (ids(answer), ids(reference));
    if a == r {
        Ok(())
    } else {
        Err(format!("top-{K} ids {a:?}, the reference {r:?}"))
    }
}

/// Runs the suite.
pub(crate) async fn run(ctx: &Context, result: &mut SuiteResult) -> Result<()> {
    result.title = format!("vectors: top-{K} cosine similarity");
    result.what = format!(
        "The {K} of N embeddings (FLOAT[{EMBEDDING_DIM}], uniform in [-1, 1)) most similar to a \
         query vector by cosine; time per query (memory tables)."
    );
    let sizes = ctx.sizes(BASE_ROWS);
    result.notes.push(format!(
        "Sizes: {sizes:?} embeddings (base {BASE_ROWS} × scale {}). DataFusion's built-in \
         `cosine_distance` (datafusion-functions-nested 55.2, feature `nested_expressions`) \
         casts FLOAT lists to DOUBLE lists first; it ranks by distance ascending.",
        ctx.scale
    ));
    let q = query_literal(ctx.seed);
    let df = plain_datafusion(ctx.partitions);
    let mut contenders = vec![
        Contender::new(
            REFERENCE,
            df.clone(),
            by_similarity("id", &format!("cosine_udf(emb, {q})")),
        ),
        Contender::new(
            "DataFusion cosine_distance",
            df,
            format!(
                "SELECT id, cosine_distance(emb, {q}) AS d FROM {{table}} ORDER BY d ASC LIMIT {K}"
            ),
        ),
    ];
    contenders.extend(
        sql::accelsql_pair(
            ctx,
            "accelsql cosine_similarity",
            &by_similarity("id", &format!("cosine_similarity(emb, {q})")),
        )
        .await?,
    );
    contenders.extend(
        sql::accelsql_pair(
            ctx,
            "accelsql vector_topk",
            &format!(
                "SELECT row_id, score FROM (SELECT vector_topk(id, emb, {q}, {K}) FROM {{table}}) \
                 ORDER BY score DESC LIMIT {K}"
            ),
        )
        .await?,
    );
    let cmp = Comparison {
        case: format!("top-{K} cosine, dim {EMBEDDING_DIM}"),
        dataset: Dataset::Embeddings,
        contenders,
        duckdb: vec![DuckDbContender {
            engine: "DuckDB array_cosine_similarity".into(),
            sql: by_similarity(
                "id",
                &format!("array_cosine_similarity(emb, CAST({q} AS FLOAT[{EMBEDDING_DIM}]))"),
            ),
        }],
        reference: REFERENCE.into(),
        check: same_ids,
    };
    let mut table = Table::new(
        format!("vectors: top-{K} cosine"),
        "embeddings",
        Some(REFERENCE),
    );
    sql::run(ctx, cmp, &sizes, &mut table, &mut result.notes).await?;
    result.tables.push(table);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_compared_as_sets() {
        let r = vec![vec![3.0, 0.9], vec![1.0, 0.8]];
        assert!(same_ids(&[vec![1.0, 0.8], vec![3.0, 0.9]], &r).is_ok());
        assert!(same_ids(&[vec![2.0, 0.8], vec![3.0, 0.9]], &r).is_err());
        assert!(query_literal(1).starts_with('['));
    }
}
