//! The shape most suites share: one SQL case over a generated data set at several sizes, run by
//! each in-process engine and by DuckDB, every answer checked against a reference engine's.

use std::collections::HashMap;

use accelsql_engine::Engine;

use crate::data::{Dataset, EMBEDDING_DIM};
use crate::error::Result;
use crate::measure::{Stats, measure};
use crate::peers::accelsql::{last_call_on_gpu, session};
use crate::peers::duckdb::{self, DuckDbSpec};
use crate::peers::{Runner, numbers};
use crate::progress::Progress;
use crate::results::{Figure, Outcome, Table};

use super::Context;

/// Compares an answer with the reference's; `Err` says how they differ.
pub(crate) type Check = fn(&[Vec<f64>], &[Vec<f64>]) -> std::result::Result<(), String>;

/// An in-process engine running the case's SQL (`{table}` stands for the table's name).
pub(crate) struct Contender {
    pub(crate) engine: String,
    pub(crate) runner: std::result::Result<Runner, Outcome>,
    pub(crate) sql: String,
    /// For accelsql on a GPU: its engine, to check the call really ran its GPU implementation.
    pub(crate) gpu: Option<Engine>,
}

impl Contender {
    pub(crate) fn new(engine: &str, runner: Runner, sql: impl Into<String>) -> Self {
        Self {
            engine: engine.to_string(),
            runner: Ok(runner),
            sql: sql.into(),
            gpu: None,
        }
    }
}

/// The accelsql contenders `<label> CPU` and `<label> GPU` (the latter "no GPU" without one).
pub(crate) async fn accelsql_pair(ctx: &Context, label: &str, sql: &str) -> Result<[Contender; 2]> {
    let cpu = Contender::new(
        &format!("{label} CPU"),
        session(&ctx.accelsql.cpu, ctx.partitions).await?,
        sql,
    );
    let gpu = match &ctx.accelsql.gpu {
        Ok(engine) => Contender {
            engine: format!("{label} GPU"),
            runner: Ok(session(engine, ctx.partitions).await?),
            sql: sql.to_string(),
            gpu: Some(engine.clone()),
        },
        Err(_) => Contender {
            engine: format!("{label} GPU"),
            runner: Err(Outcome::NoGpu),
            sql: sql.to_string(),
            gpu: None,
        },
    };
    Ok([cpu, gpu])
}

/// DuckDB running the case's SQL (`{table}` stands for the table's name).
pub(crate) struct DuckDbContender {
    pub(crate) engine: String,
    pub(crate) sql: String,
}

/// One case of a suite.
pub(crate) struct Comparison {
    pub(crate) case: String,
    pub(crate) dataset: Dataset,
    pub(crate) contenders: Vec<Contender>,
    pub(crate) duckdb: Vec<DuckDbContender>,
    /// The engine whose answer the others are checked against.
    pub(crate) reference: String,
    pub(crate) check: Check,
}

/// How DuckDB loads a data set's Parquet file into a memory table.
fn duckdb_load(dataset: Dataset, path: &str) -> String {
    let path = path.replace('\'', "''");
    match dataset {
        Dataset::Embeddings | Dataset::Embeddings768 => format!(
            "SELECT id, CAST(emb AS FLOAT[{}]) AS emb FROM read_parquet('{path}')",
            dataset.dim().unwrap_or(EMBEDDING_DIM)
        ),
        _ => format!("SELECT * FROM read_parquet('{path}')"),
    }
}

/// Runs `cmp` at each of `sizes`, adding a figure per engine and size to `table` and a note per
/// wrong answer to `notes`.
pub(crate) async fn run(
    ctx: &Context,
    cmp: Comparison,
    sizes: &[u64],
    table: &mut Table,
    notes: &mut Vec<String>,
) -> Result<()> {
    let name = cmp.dataset.name();
    let python = ctx.python().map(std::path::Path::to_path_buf);
    let mut spec = DuckDbSpec::new(ctx.plan);
    let in_process = cmp.contenders.iter().filter(|c| c.runner.is_ok()).count();
    let duckdb_runs = if python.is_ok() {
        sizes.len() * cmp.duckdb.len() * ctx.plan.total()
    } else {
        0
    };
    let progress = Progress::new(
        &format!("{} runs", table.title),
        (sizes.len() * in_process * ctx.plan.total() + duckdb_runs) as u64,
        "runs",
    );
    let mut answers: HashMap<(String, u64), Vec<Vec<f64>>> = HashMap::new();
    for &rows in sizes {
        let (path, mem) = ctx.load(cmp.dataset, rows)?;
        let duck_table = format!("{name}_{rows}");
        spec.setup.push(format!(
            "CREATE TABLE {duck_table} AS {}",
            duckdb_load(cmp.dataset, &path.to_string_lossy())
        ));
        for d in &cmp.duckdb {
            spec.case(
                format!("{}@{rows}", d.engine),
                d.sql.replace("{table}", &duck_table),
            );
        }
        for c in &cmp.contenders {
            let runner = match &c.runner {
                Ok(r) => r,
                Err(outcome) => {
                    table.push(Figure::new(&cmp.case, &c.engine, rows, outcome.clone()));
                    continue;
                }
            };
            runner.register(name, &mem)?;
            progress.set_message(&format!("{} @ {rows} rows", c.engine));
            let sql = c.sql.replace("{table}", name);
            let timed = measure(ctx.plan, &progress, || async { runner.query(&sql).await }).await;
            let figure = match timed {
                Ok((stats, batches)) => {
                    answers.insert((c.engine.clone(), rows), numbers(&batches)?);
                    gpu_checked(&cmp.case, &c.engine, rows, stats, c.gpu.as_ref())
                }
                Err(e) => Figure::new(
                    &cmp.case,
                    &c.engine,
                    rows,
                    Outcome::unavailable(e.message()),
                ),
            };
            table.push(figure);
        }
        for c in &cmp.contenders {
            if let Ok(runner) = &c.runner {
                runner.context().deregister_table(name)?;
            }
        }
    }
    run_duckdb(
        ctx,
        &cmp,
        sizes,
        python,
        &spec,
        &progress,
        table,
        &mut answers,
        notes,
    );
    progress.finish();
    // By size, each size's engines in the order they were listed (a stable sort).
    table.figures.sort_by_key(|f| f.rows);
    check_answers(&cmp, table, &answers, notes);
    Ok(())
}

/// A measured figure; on a GPU engine, unless the call ran its GPU implementation, it becomes
/// "unavailable" with the reason (a GPU column never shows a CPU figure).
fn gpu_checked(case: &str, engine: &str, rows: u64, stats: Stats, gpu: Option<&Engine>) -> Figure {
    match gpu.map(last_call_on_gpu) {
        Some(Err(why)) => Figure::new(
            case,
            engine,
            rows,
            Outcome::unavailable(format!(
                "{why} (median {:.3} ms, not shown as a GPU figure)",
                stats.median_s * 1e3
            )),
        ),
        _ => Figure::new(case, engine, rows, Outcome::Measured { stats }),
    }
}

#[allow(clippy::too_many_arguments)]
fn run_duckdb(
    ctx: &Context,
    cmp: &Comparison,
    sizes: &[u64],
    python: std::result::Result<std::path::PathBuf, String>,
    spec: &DuckDbSpec,
    progress: &Progress,
    table: &mut Table,
    answers: &mut HashMap<(String, u64), Vec<Vec<f64>>>,
    notes: &mut Vec<String>,
) {
    if cmp.duckdb.is_empty() {
        return;
    }
    progress.set_message("DuckDB");
    let run = python
        .and_then(|python| tokio::task::block_in_place(|| duckdb::run(&python, spec, progress)));
    if let Ok(run) = &run {
        for (name, version) in run.versions() {
            ctx.note_version(&name, &version);
        }
        let said = format!("DuckDB ran with threads = {} (its default).", run.threads);
        if !notes.contains(&said) {
            notes.push(said);
        }
    }
    for &rows in sizes {
        for d in &cmp.duckdb {
            let outcome = run.as_ref().map_err(Clone::clone).and_then(|run| {
                let (samples, rows_out) = run.case(&format!("{}@{rows}", d.engine))?;
                let stats = Stats::of_secs(samples).ok_or("DuckDB: no samples")?;
                let answer = rows_out
                    .iter()
                    .map(|r| r.iter().map(duckdb::number).collect())
                    .collect();
                Ok((stats, answer))
            });
            let figure = match outcome {
                Ok((stats, answer)) => {
                    answers.insert((d.engine.clone(), rows), answer);
                    Figure::new(&cmp.case, &d.engine, rows, Outcome::Measured { stats })
                }
                Err(e) => Figure::new(&cmp.case, &d.engine, rows, Outcome::unavailable(e)),
            };
            table.push(figure);
        }
    }
}

fn check_answers(
    cmp: &Comparison,
    table: &mut Table,
    answers: &HashMap<(String, u64), Vec<Vec<f64>>>,
    notes: &mut Vec<String>,
) {
    for figure in table.figures.iter_mut().filter(|f| f.case == cmp.case) {
        let Some(answer) = answers.get(&(figure.engine.clone(), figure.rows)) else {
            continue;
        };
        let Some(reference) = answers.get(&(cmp.reference.clone(), figure.rows)) else {
            continue;
        };
        if let Err(why) = (cmp.check)(answer, reference) {
            let note = format!("answer differs from {}'s: {why}", cmp.reference);
            notes.push(format!("{} at {} rows: {note}", figure.engine, figure.rows));
            figure.note = Some(note);
        }
    }
}

/// Every cell within relative tolerance `rel` of the reference's (same shape).
/// What a SQL suite says of its engines' threads and of what its queries return.
pub(crate) fn engines_note(ctx: &Context, returns: &str) -> String {
    format!(
        "accelsql and plain DataFusion run {} partitions (one thread each) over memory tables \
         (the Parquet file is read into memory first, not timed); the query returns {returns}, \
         so no other result is materialized.",
        ctx.partitions
    )
}

pub(crate) fn cells_close(
    answer: &[Vec<f64>],
    reference: &[Vec<f64>],
    rel: f64,
) -> std::result::Result<(), String> {
    if answer.len() != reference.len() {
        return Err(format!(
            "{} rows, the reference has {}",
            answer.len(),
            reference.len()
        ));
    }
    for (i, (a, r)) in answer.iter().zip(reference).enumerate() {
        if a.len() != r.len()
            || a.iter()
                .zip(r)
                .any(|(x, y)| !crate::peers::close(*x, *y, rel))
        {
            return Err(format!("row {i}: {a:?}, the reference {r:?}"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_are_compared_with_a_relative_tolerance() {
        let r = vec![vec![1.0, 1000.0]];
        assert!(cells_close(&[vec![1.0, 1_000.000_000_1]], &r, 1e-9).is_ok());
        assert!(cells_close(&[vec![1.0, 1001.0]], &r, 1e-9).is_err());
        assert!(cells_close(&[], &r, 1e-9).is_err());
    }

    #[test]
    fn duckdb_loads_embeddings_as_fixed_size_arrays() {
        assert_eq!(
            duckdb_load(Dataset::Embeddings, "/d/it's.parquet"),
            "SELECT id, CAST(emb AS FLOAT[128]) AS emb FROM read_parquet('/d/it''s.parquet')"
        );
    }
}
