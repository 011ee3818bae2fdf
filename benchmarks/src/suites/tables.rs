//! `tables`: tables stored in a data directory (Delta Lake through delta-rs) beside memory
//! tables and DuckDB, in one run: bulk loads (10M rows × 4 columns at `--scale 1`, `INSERT …
//! SELECT` and `COPY FROM` a Parquet file, against DuckDB's own `INSERT INTO … SELECT * FROM
//! read_parquet(…)` into a DuckDB file database), the geo/options/vectors queries over a stored
//! table (compacted, and left in 1,000 small files) against the same rows in a memory table,
//! single-row `INSERT` latency, and the rows per second of 1 and 8 sessions inserting at once.

use std::path::Path;
use std::time::{Duration, Instant};

use accelsql_engine::{Engine, EngineOptions, SchedulerConfig, Session};

use crate::data::Dataset;
use crate::error::Result;
use crate::measure::{Stats, percentile_of_sorted};
use crate::peers::duckdb::{self, DuckDbSpec};
use crate::progress::Progress;
use crate::results::{Figure, Outcome, SuiteResult, Table};

use super::Context;

/// Rows of the bulk load at `--scale 1`.
pub const BULK_ROWS: u64 = 10_000_000;
/// Rows of the scanned data sets at `--scale 1` (embeddings: a tenth).
pub const SCAN_ROWS: u64 = 1_000_000;
/// Files a table is left in before compaction.
pub const SMALL_FILES: usize = 1000;
/// Single-row INSERTs timed one after another.
pub const SINGLE_INSERTS: usize = 400;
/// Sessions inserting at once, and how long.
pub const WRITERS: [usize; 2] = [1, 8];
/// How long each writer count runs.
pub const WRITE_WINDOW: Duration = Duration::from_secs(4);

const STORED: &str = "accelsql, stored table (Delta Lake)";
const MEMORY: &str = "accelsql, memory table";
const DUCKDB: &str = "DuckDB, file database";

/// An engine of the benchmark: stored tables under `dir`, or memory tables.
fn engine(dir: Option<&Path>, partitions: usize) -> Result<Engine> {
    let _ = partitions;
    Ok(Engine::with_options(EngineOptions {
        scheduler: SchedulerConfig::default().with_simulated_gpus(0),
        data_dir: dir.map(Path::to_path_buf),
        url_tables: true,
        ..EngineOptions::default()
    })?)
}

/// A session with `partitions` target partitions.
async fn session(engine: &Engine, partitions: usize) -> Result<Session> {
    let s = engine.session();
    s.sql(&format!(
        "SET datafusion.execution.target_partitions = {partitions}"
    ))
    .await?;
    Ok(s)
}

/// `sql`'s wall time, run to its last row.
async fn timed(session: &Session, sql: &str) -> Result<Duration> {
    let start = Instant::now();
    session.sql(sql).await?;
    Ok(start.elapsed())
}

/// Runs the suite.
pub(crate) async fn run(ctx: &Context, result: &mut SuiteResult) -> Result<()> {
    result.title = "tables: stored (Delta Lake) vs memory tables and DuckDB".into();
    result.what = "Bulk loads into a stored table beside DuckDB's into its file database; the \
                   geo/options/vectors queries over a stored table (compacted, and in 1,000 \
                   small files) beside a memory table; single-row INSERT latency; rows/s of 1 \
                   and 8 sessions inserting at once."
        .into();
    // A fresh folder under the data sets' (removed at the end): the tables and DuckDB's file.
    let work = ctx.data_dir.join(format!("tables-{}", std::process::id()));
    if work.exists() {
        std::fs::remove_dir_all(&work)?;
    }
    std::fs::create_dir_all(&work)?;
    // `ACCELSQL_BENCH_TABLES=writes` (or `bulk`, `scans`): that part alone (profiling).
    let only = std::env::var("ACCELSQL_BENCH_TABLES").unwrap_or_default();
    let part = |name: &str| only.is_empty() || only.split(',').any(|p| p == name);
    let outcome = async {
        if part("bulk") {
            bulk(ctx, result, &work).await?;
        }
        if part("scans") {
            scans(ctx, result, &work).await?;
        }
        if part("writes") {
            small_writes(ctx, result, &work).await?;
        }
        Ok(())
    }
    .await;
    let _ = std::fs::remove_dir_all(&work);
    outcome
}

/// Bulk loads: `INSERT … SELECT` and `COPY FROM` a Parquet file into a new stored table, and
/// DuckDB's `INSERT INTO … SELECT * FROM read_parquet(…)` into a table of a DuckDB file.
async fn bulk(ctx: &Context, result: &mut SuiteResult, work: &Path) -> Result<()> {
    let rows = ctx.scaled(BULK_ROWS, 10_000);
    let file = work.join("bulk.parquet");
    let file_sql = file.display().to_string();
    let memory = engine(None, ctx.partitions)?;
    let maker = session(&memory, ctx.partitions).await?;
    maker
        .sql(&format!(
            "COPY (SELECT value AS id, value * 0.5 AS x, value % 1000 AS k, 'row ' || value AS s \
             FROM generate_series(1, {rows})) TO '{file_sql}'"
        ))
        .await?;
    result.notes.push(format!(
        "Bulk load: {rows} rows × 4 columns (BIGINT, DOUBLE, BIGINT, VARCHAR) from one Parquet \
         file; each run makes the table anew (untimed) and loads it (timed)."
    ));
    let columns = "(id BIGINT, x DOUBLE, k BIGINT, s VARCHAR)";
    let stored = engine(Some(&work.join("bulk-data")), ctx.partitions)?;
    let s = session(&stored, ctx.partitions).await?;
    let mut table = Table::new(
        format!("tables: bulk load of {rows} rows × 4 columns"),
        "rows",
        Some(DUCKDB),
    );
    let progress = Progress::new("tables: bulk loads", (ctx.plan.total() * 2) as u64, "runs");
    for (case, load) in [
        (
            "INSERT … SELECT from Parquet",
            format!("INSERT INTO bulk SELECT * FROM '{file_sql}'"),
        ),
        ("COPY FROM Parquet", format!("COPY bulk FROM '{file_sql}'")),
    ] {
        let mut samples = Vec::new();
        for run in 0..ctx.plan.total() {
            s.sql(&format!(
                "DROP TABLE IF EXISTS bulk; CREATE TABLE bulk {columns}"
            ))
            .await?;
            let took = timed(&s, &load).await?;
            if run >= ctx.plan.warmup {
                samples.push(took);
            }
            progress.inc(1);
        }
        let n: i64 = count(&s, "SELECT count(*) FROM bulk").await?;
        let mut figure = Figure::new(case, STORED, rows, measured(&samples));
        if n as u64 != rows {
            figure = figure.with_note(format!("loaded {n} rows, not {rows}"));
        }
        table.push(figure);
    }
    progress.finish();
    match ctx.python() {
        Ok(python) => {
            let mut spec = DuckDbSpec::new(ctx.plan);
            spec.database = Some(work.join("duck.db").display().to_string());
            for case in ["INSERT … SELECT from Parquet", "COPY FROM Parquet"] {
                spec.case(
                    case,
                    format!(
                        "CREATE OR REPLACE TABLE bulk {columns}; INSERT INTO bulk SELECT * FROM \
                         read_parquet('{file_sql}')"
                    ),
                );
            }
            let progress = Progress::new(
                "tables: DuckDB bulk loads",
                spec.total_runs() as u64,
                "runs",
            );
            match duckdb::run(python, &spec, &progress) {
                Ok(run) => {
                    for (k, v) in run.versions() {
                        ctx.note_version(&k, &v);
                    }
                    for case in ["INSERT … SELECT from Parquet", "COPY FROM Parquet"] {
                        let outcome = match run.case(case) {
                            Ok((samples, _)) => Stats::of_secs(samples)
                                .map(|stats| Outcome::Measured { stats })
                                .unwrap_or_else(|| Outcome::unavailable("no samples")),
                            Err(e) => Outcome::unavailable(e),
                        };
                        table.push(Figure::new(case, DUCKDB, rows, outcome));
                    }
                }
                Err(e) => {
                    table.push(Figure::new(
                        "INSERT … SELECT from Parquet",
                        DUCKDB,
                        rows,
                        Outcome::unavailable(e),
                    ));
                }
            }
            progress.finish();
        }
        Err(e) => table.push(Figure::new(
            "INSERT … SELECT from Parquet",
            DUCKDB,
            rows,
            Outcome::unavailable(e),
        )),
    }
    result.notes.push(
        "DuckDB's figure for both cases is its own `CREATE OR REPLACE TABLE …; INSERT INTO bulk \
         SELECT * FROM read_parquet(…)` into a DuckDB file database (it has no COPY of Parquet \
         into an existing table that differs)."
            .into(),
    );
    table.fill_ratios();
    result.tables.push(table);
    Ok(())
}

/// The one integer `sql` answers.
async fn count(s: &Session, sql: &str) -> Result<i64> {
    use accelsql_engine::datafusion::arrow::array::Int64Array;
    let batches = s.sql(sql).await?;
    Ok(batches
        .first()
        .and_then(|b| {
            b.column(0)
                .as_any()
                .downcast_ref::<Int64Array>()
                .map(|a| a.value(0))
        })
        .unwrap_or(-1))
}

/// Stats of timed samples.
fn measured(samples: &[Duration]) -> Outcome {
    Stats::of(samples)
        .map(|stats| Outcome::Measured { stats })
        .unwrap_or_else(|| Outcome::unavailable("no samples"))
}

/// The geo, options and vectors queries over a memory table, a stored table in 1,000 small
/// files, and the same stored table after OPTIMIZE.
async fn scans(ctx: &Context, result: &mut SuiteResult, work: &Path) -> Result<()> {
    let rows = ctx.scaled(SCAN_ROWS, 10_000);
    let cases = [
        (
            "geo: haversine_km + GROUP BY",
            Dataset::Points,
            rows,
            "SELECT region, count(*), avg(haversine_km(lat1, lon1, lat2, lon2)) FROM {t} \
             GROUP BY region ORDER BY region"
                .to_string(),
        ),
        (
            "options: sum(black_scholes_call)",
            Dataset::Options,
            rows,
            "SELECT sum(black_scholes_call(spot, strike, years, rate, volatility)) FROM {t}"
                .to_string(),
        ),
        (
            "vectors: top-10 cosine, dim 128",
            Dataset::Embeddings,
            (rows / 10).max(1000),
            format!(
                "SELECT id, cosine_similarity(emb, {}) AS score FROM {{t}} ORDER BY score DESC \
                 LIMIT 10",
                super::vectors::query_literal(ctx.seed, 128)
            ),
        ),
    ];
    // No compaction in the background: the small-files case must stay small files.
    // SAFETY: set before the engines below start; the harness runs suites one at a time.
    unsafe { std::env::set_var("ACCELSQL_AUTO_COMPACT", "off") };
    let memory = engine(None, ctx.partitions)?;
    let stored = engine(Some(&work.join("scan-data")), ctx.partitions)?;
    let m = session(&memory, ctx.partitions).await?;
    let s = session(&stored, ctx.partitions).await?;
    let mut table = Table::new(
        "tables: queries over stored vs memory tables",
        "rows",
        Some(MEMORY),
    );
    let progress = Progress::new(
        "tables: scans",
        (cases.len() * 3 * ctx.plan.total()) as u64,
        "runs",
    );
    for (case, dataset, n, query) in cases {
        let path = ctx.dataset(dataset, n)?;
        let name = dataset.name();
        m.sql(&format!(
            "CREATE TABLE {name} AS SELECT * FROM '{}'",
            path.display()
        ))
        .await?;
        // 1,000 files: 1,000 INSERTs of a thousandth of the rows each, as row-by-row loads
        // leave a table (background compaction is off for this suite).
        let columns: Vec<String> = dataset
            .schema()
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect();
        let columns = columns.join(", ");
        s.sql(&format!(
            "CREATE TEMPORARY TABLE {name}_src AS SELECT *, row_number() OVER () AS rn FROM '{}'",
            path.display()
        ))
        .await?;
        s.sql(&format!(
            "CREATE TABLE {name} AS SELECT {columns} FROM {name}_src LIMIT 0"
        ))
        .await?;
        for i in 0..SMALL_FILES {
            s.sql(&format!(
                "INSERT INTO {name} SELECT {columns} FROM {name}_src WHERE rn % {SMALL_FILES} = {i}"
            ))
            .await?;
        }
        s.sql(&format!("DROP TABLE {name}_src")).await?;
        let files = count(
            &s,
            &format!(
                "SELECT CAST(files AS BIGINT) FROM accelsql.tables WHERE \"table\" = '{name}'"
            ),
        )
        .await?;
        let sql = query.replace("{t}", name);
        for (engine_name, session, note) in [
            (MEMORY, &m, None),
            (
                "accelsql, stored table, 1,000 small files",
                &s,
                Some(format!("{files} files")),
            ),
        ] {
            let samples = repeat(ctx, session, &sql, &progress).await?;
            let mut f = Figure::new(case, engine_name, n, measured(&samples));
            if let Some(note) = note {
                f = f.with_note(note);
            }
            table.push(f);
        }
        s.sql(&format!("OPTIMIZE {name}")).await?;
        let samples = repeat(ctx, &s, &sql, &progress).await?;
        table.push(Figure::new(
            case,
            "accelsql, stored table after OPTIMIZE",
            n,
            measured(&samples),
        ));
    }
    progress.finish();
    // SAFETY: as above.
    unsafe { std::env::remove_var("ACCELSQL_AUTO_COMPACT") };
    table.fill_ratios();
    result.tables.push(table);
    Ok(())
}

/// `ctx.plan`'s runs of `sql`: the timed samples.
async fn repeat(
    ctx: &Context,
    s: &Session,
    sql: &str,
    progress: &Progress,
) -> Result<Vec<Duration>> {
    let mut samples = Vec::new();
    for run in 0..ctx.plan.total() {
        let took = timed(s, sql).await?;
        if run >= ctx.plan.warmup {
            samples.push(took);
        }
        progress.inc(1);
    }
    Ok(samples)
}

/// Single-row INSERT latency, and rows per second of 1 and 8 sessions inserting at once.
async fn small_writes(ctx: &Context, result: &mut SuiteResult, work: &Path) -> Result<()> {
    let stored = engine(Some(&work.join("write-data")), ctx.partitions)?;
    let memory = engine(None, ctx.partitions)?;
    let mut latency =
        Table::new("tables: one single-row INSERT", "statements", Some(MEMORY)).without_rate();
    let progress = Progress::new(
        "tables: single-row inserts",
        (SINGLE_INSERTS * 2) as u64,
        "statements",
    );
    for (name, engine) in [(MEMORY, &memory), (STORED, &stored)] {
        let s = session(engine, ctx.partitions).await?;
        s.sql("CREATE TABLE one (id BIGINT, at DOUBLE, label VARCHAR)")
            .await?;
        let mut samples = Vec::with_capacity(SINGLE_INSERTS);
        for i in 0..SINGLE_INSERTS {
            let took = timed(&s, &format!("INSERT INTO one VALUES ({i}, {i}.5, 'r{i}')")).await?;
            samples.push(took);
            progress.inc(1);
        }
        let mut secs: Vec<f64> = samples.iter().map(Duration::as_secs_f64).collect();
        secs.sort_by(f64::total_cmp);
        let p90 = percentile_of_sorted(&secs, 0.9);
        latency.push(
            Figure::new("INSERT INTO one VALUES (…)", name, 1, measured(&samples))
                .with_metric("p90_ms", p90 * 1000.0),
        );
    }
    progress.finish();
    latency.fill_ratios();
    result.tables.push(latency);
    let mut writers = Table::new(
        "tables: sessions inserting single rows at once",
        "sessions",
        None,
    );
    for &k in &WRITERS {
        let s0 = session(&stored, ctx.partitions).await?;
        s0.sql(&format!("CREATE TABLE w{k} (id BIGINT, session BIGINT)"))
            .await?;
        let deadline = Instant::now() + WRITE_WINDOW;
        let mut tasks = Vec::new();
        for w in 0..k {
            let engine = stored.clone();
            let partitions = ctx.partitions;
            tasks.push(tokio::spawn(async move {
                let s = session(&engine, partitions).await?;
                let mut n = 0u64;
                while Instant::now() < deadline {
                    s.sql(&format!("INSERT INTO w{k} VALUES ({n}, {w})"))
                        .await?;
                    n += 1;
                }
                Ok::<u64, crate::error::BenchError>(n)
            }));
        }
        let mut total = 0u64;
        for t in tasks {
            total += t
                .await
                .map_err(|e| crate::error::BenchError::new(e.to_string()))??;
        }
        let stored_rows = count(&s0, &format!("SELECT count(*) FROM w{k}")).await?;
        let rate = total as f64 / WRITE_WINDOW.as_secs_f64();
        let mut f = Figure::new(
            "single-row INSERTs, rows/s",
            &format!("{STORED}, {k} session(s)"),
            k as u64,
            measured(&[WRITE_WINDOW]),
        )
        .with_metric("rows_per_s", rate);
        if stored_rows as u64 != total {
            f = f.with_note(format!("{total} acknowledged, {stored_rows} in the table"));
        }
        writers.push(f);
    }
    result.tables.push(writers);
    Ok(())
}
