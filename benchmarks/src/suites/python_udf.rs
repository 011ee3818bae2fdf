//! `python-udf`: accelsql's Python script UDFs — per row (`run(ctx)`), per batch
//! (`run_batch(ctx)`), a SET script walking groups with `ctx.next()`, and a worker's start —
//! beside DuckDB's Python UDFs (`create_function`, native and arrow mode; run by
//! `python/duckdb_udf.py`), the same function over the same rows under the same Python.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde::Deserialize;

use crate::error::Result;
use crate::measure::{Stats, measure};
use crate::peers::python_env::{output_of, scripts_dir};
use crate::peers::{Runner, numbers};
use crate::progress::Progress;
use crate::results::{Figure, Outcome, SuiteResult, Table};

use super::Context;

/// Rows at `--scale 1` (the largest size; the suite also runs a quarter and a sixteenth).
pub const BASE_ROWS: u64 = 1_000_000;
/// Groups of the SET case.
pub const GROUPS: u64 = 1000;

const F_ROW: &str = "CREATE OR REPLACE PYTHON3 SCALAR SCRIPT f_row(x DOUBLE) RETURNS DOUBLE AS
def run(ctx):
    return ctx.x * 2.0 + 1.0
/";

const F_BATCH: &str = "CREATE OR REPLACE PYTHON3 SCALAR SCRIPT f_batch(x DOUBLE) RETURNS DOUBLE AS
try:
    import numpy
except ImportError:
    numpy = None

def run_batch(ctx):
    x = ctx.x
    if numpy is not None and isinstance(x, numpy.ndarray) and x.dtype.kind == 'f':
        return x * 2.0 + 1.0
    return [None if v is None else v * 2.0 + 1.0 for v in x]

def run(ctx):
    return ctx.x * 2.0 + 1.0
/";

/// The SET script of the group case (also the `cluster` suite's).
pub(crate) const GRP_SUM: &str =
    "CREATE OR REPLACE PYTHON3 SET SCRIPT grp_sum(x DOUBLE) EMITS (n BIGINT, total DOUBLE) AS
def run(ctx):
    n = 0
    total = 0.0
    while True:
        total += ctx.x
        n += 1
        if not ctx.next():
            break
    ctx.emit(n, total)
/";

const SET_TOTAL: &str = "CREATE OR REPLACE PYTHON3 SET SCRIPT set_total(x DOUBLE) RETURNS DOUBLE AS
def run(ctx):
    total = 0.0
    while True:
        total += ctx.x
        if not ctx.next():
            break
    return total
/";

/// Rows of the batch-size case: the table of an issue's report (16k rows built by many small
/// INSERTs), at every scale.
const SMALL_BATCH_ROWS: u64 = 16_000;
const ONE_ROW_BATCHES: &str = "accelsql, 1-row batches";
const FULL_BATCHES: &str = "accelsql, 8192-row batches";

const PY_ONE: &str = "CREATE OR REPLACE PYTHON3 SCALAR SCRIPT py_one() RETURNS BIGINT AS
def run(ctx):
    return 1
/";

const ROW: &str = "accelsql run(ctx)";
const BATCH: &str = "accelsql run_batch(ctx)";
/// The per-core rows: one partition, so one worker (DuckDB's Python UDFs run one at a time).
const ROW_ONE: &str = "accelsql run(ctx), 1 partition";
const BATCH_ONE: &str = "accelsql run_batch(ctx), 1 partition";
const DUCK_NATIVE: &str = "DuckDB native UDF";
const DUCK_ARROW: &str = "DuckDB arrow UDF";
const CASE: &str = "sum(f(x)), f(x) = 2x + 1";

/// One DuckDB case of `duckdb_udf.py`'s answer.
#[derive(Debug, Deserialize)]
struct DuckCase {
    samples_s: Vec<f64>,
    result: f64,
}

/// `duckdb_udf.py`'s answer.
#[derive(Debug, Deserialize)]
struct DuckAnswer {
    duckdb: String,
    python_version: String,
    native: DuckCase,
    arrow: DuckCase,
}

fn run_duckdb(python: &Path, rows: u64, ctx: &Context) -> std::result::Result<DuckAnswer, String> {
    let out = tokio::task::block_in_place(|| {
        output_of(
            Command::new(python)
                .arg(scripts_dir().join("duckdb_udf.py"))
                .args(["--rows", &rows.to_string()])
                .args(["--runs", &ctx.plan.runs.max(1).to_string()])
                .args(["--warmup", &ctx.plan.warmup.to_string()]),
        )
    })?;
    let line = out
        .lines()
        .rev()
        .find(|l| l.trim_start().starts_with('{'))
        .ok_or_else(|| format!("no JSON from duckdb_udf.py: {out}"))?;
    serde_json::from_str(line).map_err(|e| format!("duckdb_udf.py's answer: {e}"))
}

/// `p` relative to the workspace root where it lies inside it (reports do not name home dirs).
fn shown_path(p: &Path) -> String {
    let root = crate::peers::python_env::workspace_root();
    p.strip_prefix(&root)
        .map_or_else(|_| p.display().to_string(), |r| r.display().to_string())
}

fn duck_figure(engine: &str, rows: u64, case: &DuckCase) -> Figure {
    let want = rows as f64 * rows as f64;
    let outcome = match Stats::of_secs(&case.samples_s) {
        Some(stats) => Outcome::Measured { stats },
        None => Outcome::unavailable("DuckDB: no samples"),
    };
    let f = Figure::new(CASE, engine, rows, outcome);
    if crate::peers::close(case.result, want, 1e-9) {
        f
    } else {
        f.with_note(format!("wrong answer {} (want {want})", case.result))
    }
}

/// SET and SCALAR RETURNS scripts over the same 16k rows stored as 1-row batches (written under
/// a batch size of 1, which keeps them: many small INSERTs under the default batch size leave a
/// table that is compacted when each ends) and as 8192-row batches: the script's share of the time should
/// not depend on the input's batch sizes (a SCALAR RETURNS script's tiny batches are coalesced
/// before the worker sees them). A built-in aggregate over the same tables shows what
/// DataFusion itself pays per batch.
async fn batch_sizes(ctx: &Context, runner: &Runner, progress: &Progress) -> Result<Table> {
    let rows = SMALL_BATCH_ROWS;
    let mut table = Table::new(
        "python-udf: SET script over 16k rows, by input batch size",
        "rows",
        Some(FULL_BATCHES),
    );
    for (batch_size, name) in [(1, "tiny_batches"), (8192, "full_batches")] {
        runner
            .query(&format!(
                "SET datafusion.execution.batch_size = {batch_size}"
            ))
            .await?;
        runner
            .query(&format!(
                "CREATE OR REPLACE TABLE {name} AS SELECT value % 16 AS g, CAST(value AS DOUBLE) \
                 AS x FROM range({rows})"
            ))
            .await?;
    }
    runner
        .query("SET datafusion.execution.batch_size = 8192")
        .await?;
    let n = rows as f64;
    for (engine, name) in [
        (ONE_ROW_BATCHES, "tiny_batches"),
        (FULL_BATCHES, "full_batches"),
    ] {
        progress.set_message(&format!("{engine} @ {rows} rows"));
        let returns = timed(
            ctx,
            runner,
            &format!("SELECT set_total(x) FROM {name}"),
            progress,
            &[n * (n - 1.0) / 2.0],
        )
        .await;
        table.push(Figure::new("SET RETURNS, one group", engine, rows, returns));
        let emits = timed(
            ctx,
            runner,
            &format!("SELECT count(*), sum(n), sum(total) FROM (SELECT grp_sum(x) FROM {name} GROUP BY g)"),
            progress,
            &[16.0, n, n * (n - 1.0) / 2.0],
        )
        .await;
        table.push(Figure::new("SET EMITS, 16 groups", engine, rows, emits));
        let scalar = timed(
            ctx,
            runner,
            &format!("SELECT sum(f_row(x)) FROM {name}"),
            progress,
            &[n * n],
        )
        .await;
        table.push(Figure::new(SCALAR_RETURNS, engine, rows, scalar));
        // What DataFusion itself pays for the batches: a built-in aggregate over the same table.
        let builtin = timed(
            ctx,
            runner,
            &format!("SELECT count(*), sum(s) FROM (SELECT g, sum(x) AS s FROM {name} GROUP BY g)"),
            progress,
            &[16.0, n * (n - 1.0) / 2.0],
        )
        .await;
        table.push(Figure::new(
            "built-in sum(x), 16 groups (reference)",
            engine,
            rows,
            builtin,
        ));
    }
    Ok(table)
}

/// The SCALAR RETURNS case of the batch-size table.
const SCALAR_RETURNS: &str = "SCALAR RETURNS sum(f_row(x))";

/// The note on the SCALAR RETURNS goal: one-row batches within 2× of full ones.
fn scalar_batches_note(table: &Table) -> Option<String> {
    let time = |engine: &str| table.median_s(engine, |f| f.case == SCALAR_RETURNS);
    let (tiny, full) = (time(ONE_ROW_BATCHES)?, time(FULL_BATCHES)?);
    let ratio = tiny / full;
    let verdict = if ratio <= 2.0 { "met" } else { "MISSED" };
    Some(format!(
        "SCALAR RETURNS over 16k one-row batches: {:.1} ms against {:.1} ms in 8192-row \
         batches, {ratio:.2}× (goal ≤ 2×: {verdict}).",
        tiny * 1e3,
        full * 1e3
    ))
}

async fn timed(
    ctx: &Context,
    runner: &Runner,
    sql: &str,
    progress: &Progress,
    want: &[f64],
) -> Outcome {
    let run = measure(ctx.plan, progress, || async { runner.query(sql).await }).await;
    match run.and_then(|(stats, batches)| Ok((stats, numbers(&batches)?))) {
        Ok((stats, got)) => {
            let first = got.into_iter().next().unwrap_or_default();
            let right = first.len() == want.len()
                && first
                    .iter()
                    .zip(want)
                    .all(|(a, b)| crate::peers::close(*a, *b, 1e-9));
            if right {
                Outcome::Measured { stats }
            } else {
                Outcome::unavailable(format!("wrong answer {first:?}, want {want:?}"))
            }
        }
        Err(e) => Outcome::unavailable(e.message()),
    }
}

/// The cold-start row of the worker-start table.
const COLD: &str = "accelsql first SELECT py_one() of a fresh process";

/// Makes `session`'s PYTHON3 scripts run `python`.
async fn use_python(session: &Runner, python: &Path) -> Result<()> {
    session
        .query(&format!(
            "ALTER SESSION SET SCRIPT_LANGUAGES = 'PYTHON3={}'",
            python.display()
        ))
        .await?;
    Ok(())
}

/// The environment variable that makes the harness binary a cold-start child: it opens an
/// engine whose scripts run the interpreter named there, times its first `SELECT py_one()`
/// and prints `cold_s=<seconds>` ([`cold_child`]).
pub const COLD_CHILD_ENV: &str = "ACCELSQL_BENCH_COLD_CHILD";

/// The cold-start child's work (see [`COLD_CHILD_ENV`]): in this fresh process no interpreter
/// or fork server runs yet, so the statement pays for starting them; the engine's own opening
/// is not timed.
pub async fn cold_child(python: &str) -> Result<f64> {
    let engine = accelsql_engine::Engine::with_config(
        accelsql_engine::SchedulerConfig::default().with_simulated_gpus(0),
    )?;
    let session = crate::peers::accelsql::session(&engine, 2).await?;
    if !python.is_empty() {
        use_python(&session, Path::new(python)).await?;
    }
    session.query(PY_ONE).await?;
    let start = std::time::Instant::now();
    let out = session.query("SELECT py_one()").await?;
    let took = start.elapsed().as_secs_f64();
    if numbers(&out)?.first().and_then(|r| r.first()) != Some(&1.0) {
        return Err(crate::error::BenchError::new("py_one() did not return 1"));
    }
    Ok(took)
}

/// The first statement with a Python call in a fresh process's engine: the interpreter and
/// the fork server start (the warm rows fork from a running fork server). Each sample is a
/// child process of this binary ([`COLD_CHILD_ENV`]) that times only that statement.
async fn cold_start(
    python: Option<&Path>,
    plan: crate::measure::RunPlan,
    progress: &Progress,
) -> Outcome {
    let exe = match std::env::current_exe() {
        Ok(exe) => exe,
        Err(e) => return Outcome::unavailable(format!("cannot find this binary: {e}")),
    };
    let python = python.map(|p| p.display().to_string()).unwrap_or_default();
    let mut samples = Vec::with_capacity(plan.runs);
    for i in 0..plan.total() {
        let out = tokio::task::block_in_place(|| {
            output_of(Command::new(&exe).env(COLD_CHILD_ENV, &python))
        });
        let took = out.and_then(|text| {
            text.lines()
                .find_map(|l| l.strip_prefix("cold_s="))
                .and_then(|v| v.trim().parse::<f64>().ok())
                .ok_or_else(|| format!("the cold-start child said: {text}"))
        });
        match took {
            Ok(took) if i >= plan.warmup => samples.push(took),
            Ok(_) => {}
            Err(e) => return Outcome::unavailable(e),
        }
        progress.inc(1);
    }
    match Stats::of_secs(&samples) {
        Some(stats) => Outcome::Measured { stats },
        None => Outcome::unavailable("no samples"),
    }
}

/// Runs the suite.
pub(crate) async fn run(ctx: &Context, result: &mut SuiteResult) -> Result<()> {
    result.title = "python-udf: Python script UDFs vs DuckDB's Python UDFs".into();
    result.what = "f(x DOUBLE) = x * 2.0 + 1.0 over range(N), summed: accelsql's PYTHON3 scripts \
                   (run(ctx) per row, run_batch(ctx) per batch with numpy) beside DuckDB's \
                   create_function (native: per row; arrow: per chunk with pyarrow.compute), same \
                   Python; a SET script over 1000 groups; and what starting a worker costs."
        .into();
    let sizes = ctx.sizes(BASE_ROWS);
    let python = ctx.python().map(Path::to_path_buf);
    let runner = crate::peers::accelsql::session(&ctx.accelsql.cpu, ctx.partitions).await?;
    match &python {
        Ok(p) => {
            use_python(&runner, p).await?;
            result.notes.push(format!(
                "Sizes: {sizes:?} rows (base {BASE_ROWS} × scale {}). accelsql's workers and \
                 DuckDB run {}.",
                ctx.scale,
                shown_path(p)
            ));
        }
        Err(e) => result.notes.push(format!(
            "Sizes: {sizes:?} rows. No virtualenv ({e}): accelsql's workers run the python3 on \
             PATH (run_batch gets lists without numpy); DuckDB's figures are unavailable."
        )),
    }
    for ddl in [F_ROW, F_BATCH, GRP_SUM, SET_TOTAL, PY_ONE] {
        runner.query(ddl).await?;
    }
    // The same engine (and scripts) with one partition: one worker per call.
    let single = crate::peers::accelsql::session(&ctx.accelsql.cpu, 1).await?;
    if let Ok(p) = &python {
        use_python(&single, p).await?;
    }
    result.notes.push(format!(
        "Threads: accelsql runs {} partitions (one Python worker per partition, so up to {} \
         run at once: the whole machine); the `, 1 partition` rows run one partition, one \
         worker — the per-core comparison with DuckDB, whose Python UDFs run one call at a \
         time on one thread. Results are aggregated in the engine (one row comes back), for \
         every engine alike.",
        ctx.partitions, ctx.partitions
    ));
    let total =
        sizes.len() * 7 * ctx.plan.total() + 4 * (ctx.plan.total() + 10) + 8 * ctx.plan.total();
    let progress = Progress::new("python-udf", total as u64, "runs");
    let mut row_table = Table::new("python-udf: per-row form", "rows", Some(DUCK_NATIVE));
    let mut batch_table = Table::new("python-udf: batch form", "rows", Some(DUCK_ARROW));
    let mut set_table = Table::new("python-udf: SET script, 1000 groups", "rows", None);
    for &rows in &sizes {
        let n = rows as f64;
        let sum = |f: &str| format!("SELECT sum({f}(CAST(value AS DOUBLE))) FROM range({rows})");
        progress.set_message(&format!("accelsql @ {rows} rows"));
        let row = timed(ctx, &runner, &sum("f_row"), &progress, &[n * n]).await;
        row_table.push(Figure::new(CASE, ROW, rows, row));
        let batch = timed(ctx, &runner, &sum("f_batch"), &progress, &[n * n]).await;
        batch_table.push(Figure::new(CASE, BATCH, rows, batch));
        progress.set_message(&format!("accelsql, 1 partition @ {rows} rows"));
        let row = timed(ctx, &single, &sum("f_row"), &progress, &[n * n]).await;
        row_table.push(Figure::new(CASE, ROW_ONE, rows, row));
        let batch = timed(ctx, &single, &sum("f_batch"), &progress, &[n * n]).await;
        batch_table.push(Figure::new(CASE, BATCH_ONE, rows, batch));
        let groups = GROUPS.min(rows);
        let q_set = format!(
            "SELECT count(*), sum(n), sum(total) FROM (SELECT grp_sum(x) FROM (SELECT value % \
             {GROUPS} AS g, CAST(value AS DOUBLE) AS x FROM range({rows})) GROUP BY g)"
        );
        let set = timed(
            ctx,
            &runner,
            &q_set,
            &progress,
            &[groups as f64, n, n * (n - 1.0) / 2.0],
        )
        .await;
        set_table.push(Figure::new(
            "SET script, ctx.next() over each group",
            "accelsql SET script",
            rows,
            set,
        ));
        progress.set_message(&format!("DuckDB @ {rows} rows"));
        match python
            .as_ref()
            .map_err(Clone::clone)
            .and_then(|p| run_duckdb(p, rows, ctx))
        {
            Ok(answer) => {
                ctx.note_version("duckdb", &answer.duckdb);
                ctx.note_version("python", &answer.python_version);
                row_table.push(duck_figure(DUCK_NATIVE, rows, &answer.native));
                batch_table.push(duck_figure(DUCK_ARROW, rows, &answer.arrow));
            }
            Err(e) => {
                row_table.push(Figure::new(
                    CASE,
                    DUCK_NATIVE,
                    rows,
                    Outcome::unavailable(&e),
                ));
                batch_table.push(Figure::new(CASE, DUCK_ARROW, rows, Outcome::unavailable(e)));
            }
        }
        progress.inc(2 * ctx.plan.total() as u64);
    }

    let input_batches_table = batch_sizes(ctx, &runner, &progress).await?;
    result
        .notes
        .extend(scalar_batches_note(&input_batches_table));

    // Starting a worker: a one-row statement with a Python call, beside a bare interpreter.
    let start_plan = crate::measure::RunPlan {
        warmup: ctx.plan.warmup,
        runs: ctx.plan.runs + 10,
    };
    let mut start_table = Table::new(
        "python-udf: worker start",
        "statements",
        Some("python3 -c pass"),
    )
    .without_rate();
    let interpreter = python
        .clone()
        .unwrap_or_else(|_| std::path::PathBuf::from("python3"));
    let bare = measure(start_plan, &progress, || async {
        tokio::task::block_in_place(|| output_of(Command::new(&interpreter).args(["-c", "pass"])))
            .map_err(crate::error::BenchError::new)
    })
    .await;
    start_table.push(Figure::new(
        "start",
        "python3 -c pass",
        1,
        match bare {
            Ok((stats, _)) => Outcome::Measured { stats },
            Err(e) => Outcome::unavailable(e.message()),
        },
    ));
    start_table.push(Figure::new(
        "start",
        COLD,
        1,
        cold_start(python.as_deref().ok(), start_plan, &progress).await,
    ));
    for (engine, sql) in [
        ("accelsql SELECT py_one()", "SELECT py_one()"),
        ("accelsql SELECT 1", "SELECT 1"),
    ] {
        let run = measure(start_plan, &progress, || async { runner.query(sql).await }).await;
        start_table.push(Figure::new(
            "start",
            engine,
            1,
            match run {
                Ok((stats, _)) => Outcome::Measured { stats },
                Err(e) => Outcome::unavailable(e.message()),
            },
        ));
    }
    progress.finish();
    if let Some(s) = start_table
        .figures
        .iter()
        .find(|f| f.engine == "accelsql SELECT py_one()")
        .and_then(|f| f.outcome.stats())
    {
        let goal = Duration::from_millis(50).as_secs_f64();
        let verdict = if s.median_s < goal { "met" } else { "MISSED" };
        result.notes.push(format!(
            "Worker start (median SELECT py_one()): {:.1} ms (goal < 50 ms: {verdict}).",
            s.median_s * 1e3
        ));
    }
    result.tables.extend([
        row_table,
        batch_table,
        set_table,
        input_batches_table,
        start_table,
    ]);
    Ok(())
}
