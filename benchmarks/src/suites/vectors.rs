//! `vectors` and `vectors-large`: the 10 embeddings most similar (cosine) to a query vector,
//! out of N — accelsql's built-ins (`cosine_similarity` + ORDER BY … LIMIT 10, and the set UDF
//! `vector_topk`) on CPU and GPU beside plain DataFusion (its built-in `cosine_distance`, and a
//! plain `ScalarUDF` running accelsql's own kernel) and DuckDB (`array_cosine_similarity`).
//! `vectors-large` runs 2M × FLOAT[768] and 10M × FLOAT[128] and measures the machine's memory
//! bandwidth over the same bytes in the same run, then `vector_topk` per group over 1M ×
//! FLOAT[768] in 16 groups with both groupings of SET calls (`accelsql.set_grouping`).

use crate::data::{self, Dataset, EMBEDDING_DIM, query_vector};
use crate::error::Result;
use crate::measure::measure;
use crate::peers::datafusion::plain_datafusion;
use crate::progress::Progress;
use crate::results::{Figure, Outcome};
use crate::results::{SuiteResult, Table};

use super::Context;
use super::sql::{self, Comparison, Contender, DuckDbContender};

/// Embeddings at `--scale 1` (the largest size; the suite also runs a quarter and a sixteenth).
pub const BASE_ROWS: u64 = 1_000_000;
/// How many neighbours.
pub const K: usize = 10;

/// Wide embeddings of `vectors-large` at `--scale 1`.
pub const WIDE_ROWS: u64 = 2_000_000;
/// Narrow embeddings of `vectors-large` at `--scale 1`.
pub const MANY_ROWS: u64 = 10_000_000;
/// Wide embeddings of `vectors-large`'s per-group top-k at `--scale 1`.
pub const GROUPED_ROWS: u64 = 1_000_000;
/// Groups of the per-group top-k (`GROUP BY id % GROUPS`).
pub const GROUPS: u64 = 16;

/// The query vector of `dim` dimensions as a SQL list literal (`[0.12, -0.5, …]`, DOUBLE
/// items).
pub fn query_literal(seed: u64, dim: usize) -> String {
    let items: Vec<String> = query_vector(seed, dim)
        .iter()
        .map(|v| format!("{v:?}"))
        .collect();
    format!("[{}]", items.join(", "))
}

fn by_similarity(id: &str, score: &str) -> String {
    format!("SELECT {id} AS id, {score} AS score FROM {{table}} ORDER BY score DESC LIMIT {K}")
}

const REFERENCE: &str = "DataFusion ScalarUDF, same kernel";
const ACCELSQL_COSINE: &str = "accelsql cosine_similarity";
const ACCELSQL_TOPK: &str = "accelsql vector_topk";
const DUCKDB: &str = "DuckDB array_cosine_similarity";
const BANDWIDTH: &str = "memory bandwidth: sum of the same FLOAT bytes";
const GATHERED: &str = "accelsql vector_topk per group, gathered (set_grouping 'gather')";
const SORTED: &str = "accelsql vector_topk per group, input sorted (set_grouping 'sort')";

/// The per-group top-K rows agree: the same `(group, id)` pairs (near-equal scores may swap
/// places within a group).
fn same_groups(answer: &[Vec<f64>], reference: &[Vec<f64>]) -> std::result::Result<(), String> {
    let (a, r) = (leading_ints(answer, 2), leading_ints(reference, 2));
    if a == r {
        Ok(())
    } else {
        Err(format!(
            "{} (group, id) pairs, the reference {}; first difference {:?}",
            a.len(),
            r.len(),
            a.iter().zip(&r).find(|(x, y)| x != y)
        ))
    }
}

/// The first `n` values of each row (of at least `n`) as integers, the rows sorted.
fn leading_ints(rows: &[Vec<f64>], n: usize) -> Vec<Vec<i64>> {
    let mut out: Vec<Vec<i64>> = rows
        .iter()
        .filter_map(|r| r.get(..n))
        .map(|r| r.iter().map(|v| *v as i64).collect())
        .collect();
    out.sort_unstable();
    out
}

/// `vector_topk` per group (`GROUP BY id % GROUPS`) over `dataset` at `rows`: the gathered
/// grouping (with a constant query and `k`: each input batch's groups scored where the batch
/// is, their rows gathered from it, each run's top `k` merged per group) against the sorted one
/// (the whole input, embeddings included, hash-partitioned and sorted by the key first, one run
/// per group), in one run.
async fn compare_grouped(
    ctx: &Context,
    dataset: Dataset,
    rows: u64,
    notes: &mut Vec<String>,
) -> Result<Table> {
    let dim = dataset.dim().unwrap_or(EMBEDDING_DIM);
    let q = query_literal(ctx.seed, dim);
    let sql = format!(
        "SELECT grp, vector_topk(id, emb, {q}, {K}) \
         FROM (SELECT id % {GROUPS} AS grp, id, emb FROM {{table}}) GROUP BY grp"
    );
    let gathered = crate::peers::accelsql::session(&ctx.accelsql.cpu, ctx.partitions).await?;
    gathered
        .query("SET accelsql.set_grouping = 'gather'")
        .await?;
    let sorted = crate::peers::accelsql::session(&ctx.accelsql.cpu, ctx.partitions).await?;
    sorted.query("SET accelsql.set_grouping = 'sort'").await?;
    let case = format!("top-{K} cosine per group, {GROUPS} groups, dim {dim}");
    let cmp = Comparison {
        case: case.clone(),
        dataset,
        contenders: vec![
            Contender::new(SORTED, sorted, sql.clone()),
            Contender::new(GATHERED, gathered, sql),
        ],
        duckdb: Vec::new(),
        reference: SORTED.into(),
        check: same_groups,
    };
    let mut table = Table::new(format!("vectors-large: {case}"), "embeddings", Some(SORTED));
    sql::run(ctx, cmp, &[rows], &mut table, notes).await?;
    let time = |engine: &str| table.median_s(engine, |_| true);
    if let (Some(old), Some(new)) = (time(SORTED), time(GATHERED)) {
        let speedup = old / new;
        let verdict = if speedup >= 5.0 { "met" } else { "MISSED" };
        notes.push(format!(
            "dim {dim}, {rows} rows in {GROUPS} groups: the gathered grouping is {speedup:.2}× \
             as fast as the sorted one ({new:.3} s against {old:.3} s; goal ≥ 5×: {verdict})."
        ));
    }
    Ok(table)
}

/// The top-K ids agree (as sets: near-equal scores may swap places).
fn same_ids(answer: &[Vec<f64>], reference: &[Vec<f64>]) -> std::result::Result<(), String> {
    let ids = |rows: &[Vec<f64>]| leading_ints(rows, 1).concat();
    let (a, r) = (ids(answer), ids(reference));
    if a == r {
        Ok(())
    } else {
        Err(format!("top-{K} ids {a:?}, the reference {r:?}"))
    }
}

/// The top-K comparison over `dataset` (an embedding data set) at `sizes`, in a table titled
/// after `suite` (the suites' tables and plots must not share names).
async fn compare(
    ctx: &Context,
    suite: &str,
    dataset: Dataset,
    sizes: &[u64],
    notes: &mut Vec<String>,
) -> Result<Table> {
    let dim = dataset.dim().unwrap_or(EMBEDDING_DIM);
    let q = query_literal(ctx.seed, dim);
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
            ACCELSQL_COSINE,
            &by_similarity("id", &format!("cosine_similarity(emb, {q})")),
        )
        .await?,
    );
    contenders.extend(
        sql::accelsql_pair(
            ctx,
            ACCELSQL_TOPK,
            &format!(
                "SELECT row_id, score FROM (SELECT vector_topk(id, emb, {q}, {K}) FROM {{table}}) \
                 ORDER BY score DESC LIMIT {K}"
            ),
        )
        .await?,
    );
    let case = format!("top-{K} cosine, dim {dim}");
    let cmp = Comparison {
        case: case.clone(),
        dataset,
        contenders,
        duckdb: vec![DuckDbContender {
            engine: DUCKDB.into(),
            sql: by_similarity(
                "id",
                &format!("array_cosine_similarity(emb, CAST({q} AS FLOAT[{dim}]))"),
            ),
        }],
        reference: REFERENCE.into(),
        check: same_ids,
    };
    let mut table = Table::new(format!("{suite}: {case}"), "embeddings", Some(REFERENCE));
    sql::run(ctx, cmp, sizes, &mut table, notes).await?;
    notes.extend(topk_note(&table, dim));
    Ok(table)
}

/// The note on `vector_topk`'s goal: ≥ 90% of `cosine_similarity` + ORDER BY … LIMIT's
/// throughput on the CPU, at the table's largest size.
fn topk_note(table: &Table, dim: usize) -> Option<String> {
    let rows = table.figures.iter().map(|f| f.rows).max()?;
    let time = |engine: &str| table.median_s(engine, |f| f.rows == rows);
    let topk = time(&format!("{ACCELSQL_TOPK} CPU"))?;
    let cosine = time(&format!("{ACCELSQL_COSINE} CPU"))?;
    let share = cosine / topk;
    let verdict = if share >= 0.9 { "met" } else { "MISSED" };
    Some(format!(
        "dim {dim}, {rows} rows: {ACCELSQL_TOPK} CPU runs at {:.0}% of {ACCELSQL_COSINE} + ORDER \
         BY … LIMIT's throughput ({:.1} ms against {:.1} ms; goal ≥ 90%: {verdict}).",
        share * 100.0,
        topk * 1e3,
        cosine * 1e3
    ))
}

/// What every `vectors` suite says of its engines.
fn engine_notes(ctx: &Context) -> String {
    format!(
        "{} `{REFERENCE}` is a plain DataFusion ScalarUDF running accelsql's own CPU kernel \
         (eight-lane f64 sums, in AVX2 instructions where the CPU has them): the accelsql \
         rows beside it measure only what accelsql's layer costs. `{ACCELSQL_TOPK}` (a SET \
         function) without GROUP BY runs as each partition's top {K} and a merge of those \
         (one call, one lease), so every partition scores rows, as `cosine_similarity` does; \
         with GROUP BY (per group, gathered) each input batch's groups run where the batch is \
         and a merge keeps each group's top {K}, while `set_grouping 'sort'` moves and sorts \
         the whole input by the key first. DataFusion's built-in \
         `cosine_distance` (datafusion-functions-nested 55.2, feature `nested_expressions`) \
         casts FLOAT lists to DOUBLE lists first and ranks by distance ascending; it and DuckDB's \
         `array_cosine_similarity` are the real-world peers.",
        sql::engines_note(ctx, &format!("only the {K} nearest rows"))
    )
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
        "Sizes: {sizes:?} embeddings (base {BASE_ROWS} × scale {}).",
        ctx.scale
    ));
    result.notes.push(engine_notes(ctx));
    let table = compare(
        ctx,
        "vectors",
        Dataset::Embeddings,
        &sizes,
        &mut result.notes,
    )
    .await?;
    result.tables.push(table);
    Ok(())
}

/// The machine's memory bandwidth over `batches`' embedding bytes: a sum of every FLOAT of
/// `emb`, split over `threads` threads as the engines split the table, timed like a query.
async fn bandwidth(
    ctx: &Context,
    batches: &[accelsql_engine::datafusion::arrow::array::RecordBatch],
    progress: &Progress,
) -> Result<Outcome> {
    use accelsql_engine::datafusion::arrow::array::AsArray;
    use accelsql_engine::datafusion::arrow::datatypes::Float32Type;
    let slices: Vec<&[f32]> = batches
        .iter()
        .filter_map(|b| b.column_by_name("emb"))
        .filter_map(|c| c.as_fixed_size_list_opt())
        .filter_map(|l| l.values().as_primitive_opt::<Float32Type>())
        .map(|v| v.values().as_ref())
        .collect();
    let threads = ctx.partitions.max(1);
    let run = measure(ctx.plan, progress, || async {
        let total = tokio::task::block_in_place(|| {
            std::thread::scope(|scope| {
                let handles: Vec<_> = (0..threads)
                    .map(|t| {
                        let mine: Vec<&[f32]> =
                            slices.iter().skip(t).step_by(threads).copied().collect();
                        scope.spawn(move || {
                            mine.iter().map(|s| f64::from(sum_floats(s))).sum::<f64>()
                        })
                    })
                    .collect();
                handles
                    .into_iter()
                    .map(|h| h.join().unwrap_or(f64::NAN))
                    .sum::<f64>()
            })
        });
        Ok(std::hint::black_box(total))
    })
    .await;
    Ok(match run {
        Ok((stats, _)) => Outcome::Measured { stats },
        Err(e) => Outcome::unavailable(e.message()),
    })
}

/// The sum of `values`, read as fast as this CPU can: 256-bit loads into four AVX2
/// accumulators where the CPU has AVX2, else eight partial sums the compiler vectorizes. It
/// stands for "reading the bytes once", the physical floor under any scan of them.
fn sum_floats(values: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2, checked just above.
        return unsafe { sum_floats_avx2(values) };
    }
    let mut acc = [0.0f32; 8];
    let chunks = values.chunks_exact(8);
    let tail: f32 = chunks.remainder().iter().sum();
    for c in chunks {
        for l in 0..8 {
            acc[l] += c[l];
        }
    }
    acc.iter().sum::<f32>() + tail
}

/// [`sum_floats`] with AVX2: 32 floats per step, in four independent accumulators.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn sum_floats_avx2(values: &[f32]) -> f32 {
    use std::arch::x86_64::{_mm256_add_ps, _mm256_loadu_ps, _mm256_setzero_ps, _mm256_storeu_ps};
    let mut acc = [_mm256_setzero_ps(); 4];
    let chunks = values.chunks_exact(32);
    let tail: f32 = chunks.remainder().iter().sum();
    for c in chunks {
        for (k, acc) in acc.iter_mut().enumerate() {
            // SAFETY: `c` has 32 floats, so `8 * k .. 8 * k + 8` (k < 4) lies inside it.
            *acc = _mm256_add_ps(*acc, unsafe { _mm256_loadu_ps(c.as_ptr().add(8 * k)) });
        }
    }
    let both = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
    let mut lanes = [0.0f32; 8];
    // SAFETY: `lanes` holds eight floats.
    unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), both) };
    lanes.iter().sum::<f32>() + tail
}

/// Runs `vectors-large`: 2M × FLOAT[768] and 10M × FLOAT[128] (× scale), each beside the
/// machine's memory bandwidth over the same bytes.
pub(crate) async fn run_large(ctx: &Context, result: &mut SuiteResult) -> Result<()> {
    result.title = format!("vectors-large: top-{K} cosine at 768 dimensions and 10M rows");
    result.what = format!(
        "The {K} most similar of {} × FLOAT[768] (≈ {:.1} GB) and of {} × FLOAT[128] (≈ {:.1} \
         GB), uniform in [-1, 1); time per query (memory tables), beside the time to read the \
         same bytes once (a sum over them): how close each engine gets to memory speed.",
        ctx.scaled(WIDE_ROWS, 1000),
        ctx.scaled(WIDE_ROWS, 1000) as f64 * 768.0 * 4.0 / 1e9,
        ctx.scaled(MANY_ROWS, 1000),
        ctx.scaled(MANY_ROWS, 1000) as f64 * 128.0 * 4.0 / 1e9,
    );
    result.notes.push(engine_notes(ctx));
    let progress = Progress::new(
        "vectors-large bandwidth",
        2 * ctx.plan.total() as u64,
        "runs",
    );
    for (dataset, base) in [
        (Dataset::Embeddings768, WIDE_ROWS),
        (Dataset::Embeddings, MANY_ROWS),
    ] {
        let rows = ctx.scaled(base, 1000);
        let (path, said) = ctx.dataset_noting(dataset, rows)?;
        result.notes.push(format!("Data: {said}."));
        let measured = {
            let batches = data::read_parquet(&path)?;
            progress.set_message(&format!("{} @ {rows} rows", dataset.name()));
            bandwidth(ctx, &batches, &progress).await?
        };
        let mut table = compare(ctx, "vectors-large", dataset, &[rows], &mut result.notes).await?;
        let dim = dataset.dim().unwrap_or(EMBEDDING_DIM);
        let case = format!("top-{K} cosine, dim {dim}");
        let bytes = rows as f64 * dim as f64 * 4.0;
        let time = |engine: &str| table.median_s(engine, |_| true);
        if let Some(read) = measured.stats().map(|s| s.median_s) {
            result.notes.push(format!(
                "dim {dim}, {rows} rows: memory bandwidth {:.1} GB/s ({} threads summing the \
                 {:.2} GB of FLOATs in {:.3} s).",
                bytes / read / 1e9,
                ctx.partitions,
                bytes / 1e9,
                read
            ));
            for engine in [ACCELSQL_COSINE, ACCELSQL_TOPK].map(|e| format!("{e} CPU")) {
                if let Some(t) = time(&engine) {
                    let fraction = read / t;
                    let verdict = if fraction >= 0.6 { "met" } else { "MISSED" };
                    result.notes.push(format!(
                        "dim {dim}: {engine} reads its bytes at {:.1} GB/s, {:.0}% of the \
                         memory bandwidth (goal ≥ 60%: {verdict}).",
                        bytes / t / 1e9,
                        fraction * 100.0
                    ));
                }
            }
        }
        if let (Some(duck), Some(ours)) = (time(DUCKDB), time(&format!("{ACCELSQL_COSINE} CPU"))) {
            let speedup = duck / ours;
            let verdict = if speedup >= 2.0 { "met" } else { "MISSED" };
            result.notes.push(format!(
                "dim {dim}: accelsql cosine_similarity CPU is {speedup:.2}× as fast as DuckDB's \
                 array_cosine_similarity (goal ≥ 2×: {verdict})."
            ));
        }
        table.push(Figure::new(&case, BANDWIDTH, rows, measured));
        result.tables.push(table);
    }
    progress.finish();
    let rows = ctx.scaled(GROUPED_ROWS, 1000);
    let table = compare_grouped(ctx, Dataset::Embeddings768, rows, &mut result.notes).await?;
    result.tables.push(table);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bandwidth_sum_adds_every_float() {
        // Integers, so every order of the additions gives the exact sum.
        for n in [0usize, 7, 32, 33, 1000] {
            let values: Vec<f32> = (0..n).map(|i| (i % 13) as f32).collect();
            let want: f32 = values.iter().sum();
            assert_eq!(sum_floats(&values), want, "{n} floats");
        }
    }

    #[test]
    fn groups_are_compared_as_sets_of_pairs() {
        let r = vec![vec![0.0, 3.0, 0.9], vec![1.0, 1.0, 0.8]];
        assert!(same_groups(&[vec![1.0, 1.0, 0.7], vec![0.0, 3.0, 0.9]], &r).is_ok());
        assert!(same_groups(&[vec![0.0, 1.0, 0.8], vec![0.0, 3.0, 0.9]], &r).is_err());
        assert!(same_groups(&[vec![0.0, 3.0, 0.9]], &r).is_err());
    }

    #[test]
    fn ids_are_compared_as_sets() {
        let r = vec![vec![3.0, 0.9], vec![1.0, 0.8]];
        assert!(same_ids(&[vec![1.0, 0.8], vec![3.0, 0.9]], &r).is_ok());
        assert!(same_ids(&[vec![2.0, 0.8], vec![3.0, 0.9]], &r).is_err());
        assert!(query_literal(1, EMBEDDING_DIM).starts_with('['));
    }
}
