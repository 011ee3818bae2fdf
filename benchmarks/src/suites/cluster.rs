//! `cluster`: the same queries on an accelsql cluster (Apache DataFusion Ballista: a scheduler and
//! 1, 2 or 3 executors, each one accelsql node, in this process on loopback) and in the
//! single-process engine: a Python SET script over groups, the vectors top-k, and a query that
//! does almost nothing (what the cluster path itself costs per query). Every answer is checked
//! against the single-process engine's.

use std::path::{Path, PathBuf};
use std::time::Duration;

use accelsql_cluster::{
    ClusterAuth, ClusterClient, ExecutorOptions, NodeOptions, SchedulerHandle, SchedulerOptions,
    run_executor, start_scheduler,
};
use accelsql_engine::datafusion::arrow::array::RecordBatch;
use accelsql_engine::{Engine, EngineOptions, SchedulerConfig, testing};

use crate::bench_err;
use crate::data::{Dataset, EMBEDDING_DIM};
use crate::error::Result;
use crate::measure::measure;
use crate::progress::Progress;
use crate::results::{Figure, Outcome, SuiteResult, Table};

use super::Context;
use super::python_udf::GRP_SUM;
use super::vectors::{K, query_literal};

/// Rows of the SET-script case and embeddings of the top-k case at `--scale 1`.
pub const BASE_ROWS: u64 = 400_000;
/// The executor counts measured.
pub const EXECUTORS: [usize; 3] = [1, 2, 3];
/// Parquet files each data set is split into (so that a scan spreads over the nodes).
pub const FILES: u64 = 6;
/// Groups of the SET-script case.
pub const GROUPS: u64 = 16;

const SINGLE: &str = "single process";
/// The case that scans the files and keeps no row.
const ALMOST_NOTHING: &str = "almost nothing (a scan that keeps no row)";
/// The case that reads nothing: what the cluster path itself costs per statement (job
/// submission, a task, its result's shuffle file, the fetch).
const TINY: &str = "a tiny query (SELECT 1)";
/// The goal: a tiny query costs at most this many seconds more on a cluster than in one process.
const GOAL_EXTRA_S: f64 = 0.015;

fn on_cluster(n: usize) -> String {
    format!("cluster, {n} executor{}", if n == 1 { "" } else { "s" })
}

/// A running in-process cluster: the scheduler and its executors' tasks.
struct LocalCluster {
    scheduler: SchedulerHandle,
    executors: Vec<tokio::task::JoinHandle<()>>,
}

impl LocalCluster {
    async fn start(executors: usize, vcores: usize) -> Result<Self> {
        let scheduler = start_scheduler(SchedulerOptions {
            listen: ([127, 0, 0, 1], 0).into(),
            ..SchedulerOptions::default()
        })
        .await
        .map_err(|e| bench_err!("scheduler: {e}"))?;
        let address = scheduler.address().to_string();
        let mut tasks = Vec::new();
        for node in 0..executors {
            let mut options = ExecutorOptions::new(
                address.clone(),
                NodeOptions::new(
                    node,
                    executors,
                    SchedulerConfig::default().with_simulated_gpus(0),
                ),
            );
            options.vcores = vcores;
            tasks.push(tokio::spawn(async move {
                if let Err(e) = run_executor(options).await {
                    eprintln!("cluster bench: executor {node}: {e}");
                }
            }));
        }
        let cluster = Self {
            scheduler,
            executors: tasks,
        };
        cluster
            .scheduler
            .wait_for_executors(executors, Duration::from_secs(60))
            .await
            .map_err(|e| bench_err!("executors: {e}"))?;
        Ok(cluster)
    }

    async fn client(&self, nodes: usize) -> Result<Engine> {
        let client = ClusterClient::connect(
            &self.scheduler.address().to_string(),
            ClusterAuth::none(),
            Some(nodes),
        )
        .await
        .map_err(|e| bench_err!("client: {e}"))?
        .with_devices_per_node(0);
        let engine = Engine::with_options(client.engine_options(engine_options()))?;
        setup(&engine).await?;
        Ok(engine)
    }
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        for e in &self.executors {
            e.abort();
        }
    }
}

fn engine_options() -> EngineOptions {
    EngineOptions {
        scheduler: SchedulerConfig::default().with_simulated_gpus(0),
        url_tables: true,
        ..EngineOptions::default()
    }
}

/// The script of the SET case (plain Python: the python3 on PATH runs it, on every node).
async fn setup(engine: &Engine) -> Result<()> {
    engine.session().sql(GRP_SUM).await?;
    Ok(())
}

/// `rows` of (g, x) in [`FILES`] Parquet files under the data directory (kept for the next run).
async fn groups_dir(ctx: &Context, single: &Engine, rows: u64) -> Result<PathBuf> {
    let dir = ctx
        .data_dir
        .join(format!("cluster-groups-{rows}-{FILES}files"));
    split_into_files(
        single,
        &dir,
        &format!(
            "SELECT value % {GROUPS} AS g, CAST(value AS DOUBLE) AS x FROM range({rows}) WHERE value % {FILES} = {{i}}"
        ),
    )
    .await?;
    Ok(dir)
}

/// The embeddings data set of `rows` in [`FILES`] Parquet files.
async fn embeddings_dir(ctx: &Context, single: &Engine, rows: u64) -> Result<PathBuf> {
    let source = ctx.dataset(Dataset::Embeddings, rows)?;
    let dir = ctx.data_dir.join(format!(
        "cluster-embeddings-{rows}-seed{}-{FILES}files",
        ctx.seed
    ));
    split_into_files(
        single,
        &dir,
        &format!(
            "SELECT * FROM '{}' WHERE id % {FILES} = {{i}}",
            source.display()
        ),
    )
    .await?;
    Ok(dir)
}

/// Writes `select` (with `{i}` = 0..FILES) to `dir/part{i}.parquet`, unless all are there.
async fn split_into_files(engine: &Engine, dir: &Path, select: &str) -> Result<()> {
    let done = dir.join("complete");
    if done.exists() {
        return Ok(());
    }
    std::fs::create_dir_all(dir)?;
    let s = engine.session();
    for i in 0..FILES {
        let path = dir.join(format!("part{i}.parquet"));
        s.sql(&format!(
            "COPY ({}) TO '{}' STORED AS PARQUET",
            select.replace("{i}", &i.to_string()),
            path.display()
        ))
        .await?;
    }
    std::fs::write(done, b"")?;
    Ok(())
}

/// The answer as text cells, sorted (row order is not part of these answers).
fn sorted_cells(batches: &[RecordBatch]) -> Result<Vec<Vec<String>>> {
    let mut rows = testing::cells(batches)?;
    rows.sort();
    Ok(rows)
}

/// Times `sql` on `engine` and checks its answer against `reference` (sorted text cells, the
/// floats of a column compared to 9 significant digits).
async fn timed(
    ctx: &Context,
    engine: &Engine,
    sql: &str,
    reference: Option<&[Vec<String>]>,
    label: &str,
) -> Result<(crate::measure::Stats, Vec<Vec<String>>)> {
    let progress = Progress::new(label, ctx.plan.total() as u64, "runs");
    let (stats, answer) = measure(ctx.plan, &progress, || async {
        let batches = engine.session().sql(sql).await?;
        sorted_cells(&batches)
    })
    .await?;
    progress.finish();
    if let Some(reference) = reference
        && !same_answer(&answer, reference)
    {
        return Err(bench_err!(
            "{label}: {sql} gave {answer:?}, the single process {reference:?}"
        ));
    }
    Ok((stats, answer))
}

/// Equal, with numbers equal to 9 significant digits (sums of doubles in another order).
fn same_answer(a: &[Vec<String>], b: &[Vec<String>]) -> bool {
    let close = |x: &str, y: &str| match (x.parse::<f64>(), y.parse::<f64>()) {
        (Ok(x), Ok(y)) => x == y || ((x - y) / x.abs().max(y.abs())).abs() < 1e-9,
        _ => x == y,
    };
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(r, s)| r.len() == s.len() && r.iter().zip(s).all(|(x, y)| close(x, y)))
}

/// Runs the suite.
pub(crate) async fn run(ctx: &Context, result: &mut SuiteResult) -> Result<()> {
    result.title = "cluster: accelsql on Ballista vs one process".into();
    let rows = ctx.scaled(BASE_ROWS, 6_000);
    let vcores = ctx.partitions.max(1);
    result.what = format!(
        "The same queries on an accelsql cluster (Ballista 55: a scheduler and 1, 2 or 3 \
         executors in this process, gRPC and Arrow Flight over loopback) and in the single-process \
         engine, over the same Parquet files ({FILES} per data set), read by every run (unlike \
         the other suites' memory tables: a cluster's nodes read files; a client's memory table \
         would travel inside the plan). Each executor offers {vcores} task slots; the client \
         plans one partition per node (its default), the single process {} partitions. A new \
         session per run. Results are materialized and checked against the single process.",
        ctx.partitions
    );
    result.notes.push(format!(
        "This machine has {} cores: every executor shares them, so more executors cannot run \
         faster here; the figure that matters is the per-query cost of the cluster path (the \
         `almost nothing` case) and that the answers agree.",
        ctx.partitions
    ));
    let single = Engine::with_options(engine_options())?;
    setup(&single).await?;
    let groups = groups_dir(ctx, &single, rows).await?;
    let embeddings = embeddings_dir(ctx, &single, rows).await?;
    let q = query_literal(ctx.seed, EMBEDDING_DIM);
    let cases = [
        (
            format!("Python SET script, {GROUPS} groups"),
            format!(
                "SELECT g, grp_sum(x) FROM '{}/' GROUP BY g",
                groups.display()
            ),
        ),
        (
            format!("top-{K} cosine, dim {EMBEDDING_DIM}"),
            format!(
                "SELECT id, cosine_similarity(emb, {q}) AS score FROM '{}/' ORDER BY score DESC \
                 LIMIT {K}",
                embeddings.display()
            ),
        ),
        (
            ALMOST_NOTHING.to_string(),
            format!("SELECT count(*) FROM '{}/' WHERE g < 0", groups.display()),
        ),
        (TINY.to_string(), "SELECT 1".to_string()),
    ];
    let rows_of = |case: &str| if case == TINY { 1 } else { rows };
    let mut table = Table::new("cluster vs one process", "rows", Some(SINGLE));
    let mut references = Vec::new();
    for (case, sql) in &cases {
        let (stats, answer) = timed(ctx, &single, sql, None, &format!("{case}: {SINGLE}")).await?;
        table.push(Figure::new(
            case,
            SINGLE,
            rows_of(case),
            Outcome::Measured { stats },
        ));
        references.push(answer);
    }
    for n in EXECUTORS {
        let cluster = LocalCluster::start(n, vcores).await?;
        let engine = cluster.client(n).await?;
        for ((case, sql), reference) in cases.iter().zip(&references) {
            let label = format!("{case}: {}", on_cluster(n));
            match timed(ctx, &engine, sql, Some(reference), &label).await {
                Ok((stats, _)) => {
                    table.push(Figure::new(
                        case,
                        &on_cluster(n),
                        rows_of(case),
                        Outcome::Measured { stats },
                    ));
                }
                Err(e) => table.push(Figure::new(
                    case,
                    &on_cluster(n),
                    rows_of(case),
                    Outcome::unavailable(e.to_string()),
                )),
            }
        }
        drop(engine);
        drop(cluster);
        // The executors' ports and tasks wind down before the next cluster starts.
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    result.notes.extend(tiny_goals(&table));
    result.tables.push(table);
    Ok(())
}

/// The tiny cases' goal, a note per cluster size: the median's excess over the single process's
/// at most [`GOAL_EXTRA_S`].
fn tiny_goals(table: &Table) -> Vec<String> {
    let verdict = |met: bool| if met { "met" } else { "MISSED" };
    let mut notes = Vec::new();
    for case in [TINY, ALMOST_NOTHING] {
        let Some(single) = table.median_s(SINGLE, |f| f.case == case) else {
            continue;
        };
        for n in EXECUTORS {
            if let Some(cluster) = table.median_s(&on_cluster(n), |f| f.case == case) {
                let extra = cluster - single;
                notes.push(format!(
                    "{case} on {}: {:.1} ms median against {:.1} ms in one process, {:.1} ms \
                     more (goal ≤ {:.0} ms: {})",
                    on_cluster(n),
                    cluster * 1e3,
                    single * 1e3,
                    extra * 1e3,
                    GOAL_EXTRA_S * 1e3,
                    verdict(extra <= GOAL_EXTRA_S)
                ));
            }
        }
    }
    notes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_agree_to_nine_digits() {
        let a = vec![vec!["1".to_string(), "0.30000000000000004".to_string()]];
        let b = vec![vec!["1".to_string(), "0.3".to_string()]];
        assert!(same_answer(&a, &b));
        let c = vec![vec!["2".to_string(), "0.3".to_string()]];
        assert!(!same_answer(&a, &c));
        assert!(!same_answer(&a, &[]));
    }
}
