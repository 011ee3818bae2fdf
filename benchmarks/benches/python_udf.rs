//! Python script UDFs: accelsql's PYTHON3 scripts (per-row `run(ctx)`, vectorized
//! `run_batch(ctx)`, a SET script walking its groups with `ctx.next()`, and worker start) beside
//! DuckDB's Python UDFs (`create_function` in native and arrow mode) — same function, same rows,
//! same Python interpreter, in the same run.
//!
//! Run: `cargo bench -p accelsql-benchmarks --bench python_udf` (`ACCELSQL_BENCH_ROWS` overrides
//! the 1M rows, `ACCELSQL_BENCH_VENV` the virtualenv's directory). Setup: a virtualenv
//! `target/bench-python-env` is made (or reused) with duckdb,
//! pyarrow and numpy from PyPI; its `bin` goes first on `PATH` before the engine is created, so
//! accelsql's `builtin_python3` workers and the DuckDB peer
//! (`benchmarks/python/duckdb_udf.py`, run as a subprocess) use the same Python with numpy. When
//! that cannot be installed, DuckDB's figures are reported unavailable and accelsql's are still
//! printed. Prints each case's median, min, max and rows/s, and the ratios beside their goals.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use accelsql_engine::datafusion::arrow::array::RecordBatch;
use accelsql_engine::{Engine, SchedulerConfig, Session};

type BoxError = Box<dyn std::error::Error>;

const WARMUP: usize = 2;
/// Timed runs of each case per round; rounds alternate the cases so drift hits all alike.
const RUNS: usize = 5;
const ROUNDS: usize = 3;
/// Worker starts timed (after [`WARMUP`] untimed ones).
const STARTS: usize = 20;
const GROUPS: u64 = 1000;
const PACKAGES: [&str; 3] = ["duckdb", "pyarrow", "numpy"];

const F_ROW: &str = "CREATE PYTHON3 SCALAR SCRIPT f_row(x DOUBLE) RETURNS DOUBLE AS
def run(ctx):
    return ctx.x * 2.0 + 1.0
/";

const F_BATCH: &str = "CREATE PYTHON3 SCALAR SCRIPT f_batch(x DOUBLE) RETURNS DOUBLE AS
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

const GRP_SUM: &str =
    "CREATE PYTHON3 SET SCRIPT grp_sum(x DOUBLE) EMITS (n BIGINT, total DOUBLE) AS
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

const PY_ONE: &str = "CREATE PYTHON3 SCALAR SCRIPT py_one() RETURNS BIGINT AS
def run(ctx):
    return 1
/";

const PY_INFO: &str = "CREATE PYTHON3 SCALAR SCRIPT py_info() RETURNS VARCHAR(2000) AS
import platform, sys
try:
    import numpy
    np = 'numpy ' + numpy.__version__
except ImportError:
    np = 'no numpy (run_batch gets lists)'

def run(ctx):
    return '%s (Python %s, %s)' % (sys.executable, platform.python_version(), np)
/";

/// Median, min and max of some samples.
#[derive(Clone, Copy)]
struct Stats {
    median: Duration,
    min: Duration,
    max: Duration,
}

fn stats(mut samples: Vec<Duration>) -> Stats {
    samples.sort_unstable();
    Stats {
        median: samples.get(samples.len() / 2).copied().unwrap_or_default(),
        min: samples.first().copied().unwrap_or_default(),
        max: samples.last().copied().unwrap_or_default(),
    }
}

fn workspace_root() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().unwrap_or(manifest).to_path_buf()
}

/// Runs `cmd`, returning its stdout, or why it failed (exit status and the end of stderr).
fn output_of(cmd: &mut Command) -> Result<String, String> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{cmd:?} cannot be run: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = stderr.lines().rev().take(5).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        Err(format!(
            "{:?} failed ({}): {}",
            cmd.get_program(),
            out.status,
            tail.join(" | ")
        ))
    }
}

fn has_packages(python: &Path) -> bool {
    Command::new(python)
        .args(["-c", &format!("import {}", PACKAGES.join(", "))])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Makes (or reuses) the virtualenv `venv` with [`PACKAGES`]. Returns its python (when the venv
/// exists at all, even if the install failed) and whether the packages are importable, or why not.
fn prepare_venv(venv: &Path) -> (Option<PathBuf>, Result<(), String>) {
    let python = venv.join("bin").join("python3");
    if python.is_file() && has_packages(&python) {
        return (Some(python), Ok(()));
    }
    if !python.is_file() {
        eprintln!("python-udf: creating virtualenv {}", venv.display());
        if let Err(e) = output_of(Command::new("python3").arg("-m").arg("venv").arg(venv)) {
            return (None, Err(format!("python3 -m venv: {e}")));
        }
    }
    eprintln!(
        "python-udf: installing {} into {} (pip)",
        PACKAGES.join(" "),
        venv.display()
    );
    let install = output_of(
        Command::new(&python)
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
            ])
            .args(PACKAGES),
    );
    let python = python.is_file().then_some(python);
    match (install, &python) {
        (Err(e), _) => (python, Err(format!("pip install: {e}"))),
        (Ok(_), Some(p)) if !has_packages(p) => (
            python,
            Err("pip install succeeded but the packages do not import".to_string()),
        ),
        (Ok(_), Some(_)) => (python, Ok(())),
        (Ok(_), None) => (None, Err("the virtualenv has no bin/python3".to_string())),
    }
}

/// The first cell of a result, as f64s per column.
fn first_row(batches: &[RecordBatch]) -> Result<Vec<f64>, BoxError> {
    let cells = accelsql_engine::testing::cells(batches)?;
    let row = cells.first().ok_or("empty result")?;
    row.iter()
        .map(|c| c.parse::<f64>().map_err(|e| format!("{c:?}: {e}").into()))
        .collect()
}

async fn timed(session: &Session, sql: &str, runs: usize) -> Result<Vec<Duration>, BoxError> {
    let mut samples = Vec::with_capacity(runs);
    for i in 0..WARMUP + runs {
        let start = Instant::now();
        session.sql(sql).await?;
        if i >= WARMUP {
            samples.push(start.elapsed());
        }
    }
    Ok(samples)
}

// --- the DuckDB peer's JSON (flat, `sort_keys`, written by duckdb_udf.py) --------------------

/// The raw text of the value of `"key"` in `json`: a string's contents, a number, or an array's
/// inside.
fn json_value<'a>(json: &'a str, key: &str) -> Option<&'a str> {
    let at = json.find(&format!("\"{key}\":"))? + key.len() + 3;
    let rest = json[at..].trim_start();
    if let Some(s) = rest.strip_prefix('"') {
        s.find('"').map(|end| &s[..end])
    } else if let Some(s) = rest.strip_prefix('[') {
        s.find(']').map(|end| &s[..end])
    } else {
        let end = rest.find([',', '}', ']']).unwrap_or(rest.len());
        Some(rest[..end].trim())
    }
}

/// The object `"key": { … }` (no nested objects inside) of `json`.
fn json_object<'a>(json: &'a str, key: &str) -> Option<&'a str> {
    let at = json.find(&format!("\"{key}\":"))?;
    let rest = &json[at..];
    let open = rest.find('{')?;
    let close = rest.find('}')?;
    (open < close).then(|| &rest[open..=close])
}

/// One DuckDB case: its timed samples and its query's result.
struct PeerCase {
    samples: Vec<Duration>,
    result: f64,
}

fn peer_case(json: &str, case: &str) -> Result<PeerCase, String> {
    let obj = json_object(json, case).ok_or_else(|| format!("no {case:?} in {json}"))?;
    let samples = json_value(obj, "samples_s")
        .ok_or_else(|| format!("no samples in {obj}"))?
        .split(',')
        .filter(|s| !s.trim().is_empty())
        .map(|s| {
            s.trim()
                .parse::<f64>()
                .map(Duration::from_secs_f64)
                .map_err(|e| format!("{s:?}: {e}"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let result = json_value(obj, "result")
        .and_then(|r| r.parse::<f64>().ok())
        .ok_or_else(|| format!("no result in {obj}"))?;
    Ok(PeerCase { samples, result })
}

/// Runs duckdb_udf.py once (both cases, warm-up + `runs`); returns its JSON line.
fn run_peer(python: &Path, script: &Path, rows: u64, runs: usize) -> Result<String, String> {
    let out = output_of(
        Command::new(python)
            .arg(script)
            .args(["--rows", &rows.to_string()])
            .args(["--runs", &runs.to_string()])
            .args(["--warmup", &WARMUP.to_string()]),
    )?;
    out.lines()
        .rev()
        .find(|l| l.trim_start().starts_with('{'))
        .map(str::to_string)
        .ok_or_else(|| format!("no JSON on its stdout: {out}"))
}

fn main() -> Result<(), BoxError> {
    let rows: u64 = std::env::var("ACCELSQL_BENCH_ROWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let root = workspace_root();
    let venv = std::env::var_os("ACCELSQL_BENCH_VENV").map_or_else(
        || root.join("target").join("bench-python-env"),
        PathBuf::from,
    );
    let peer_script = root.join("benchmarks").join("python").join("duckdb_udf.py");

    // Python first, while this process has one thread: PATH must name the venv before the
    // engine resolves `python3`.
    let (venv_python, packages) = prepare_venv(&venv);
    if let Err(e) = &packages {
        eprintln!("python-udf: WARNING: {e}");
    }
    if let Some(python) = &venv_python
        && let Some(bin) = python.parent()
    {
        let old = std::env::var_os("PATH").unwrap_or_default();
        let path = std::env::join_paths(
            std::iter::once(bin.to_path_buf()).chain(std::env::split_paths(&old)),
        )?;
        // SAFETY: no other thread exists yet (the runtime and the engine are made below), so
        // nothing reads the environment concurrently.
        unsafe { std::env::set_var("PATH", path) };
    }
    let duckdb_python = venv_python.clone().filter(|_| packages.is_ok());

    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let engine = Engine::with_config(SchedulerConfig::default().with_simulated_gpus(0))?;
    let session = engine.session();
    for ddl in [F_ROW, F_BATCH, GRP_SUM, PY_ONE, PY_INFO] {
        rt.block_on(session.sql(ddl))?;
    }
    let partitions = session
        .context()
        .state()
        .config()
        .options()
        .execution
        .target_partitions;
    let info = accelsql_engine::testing::cells(&rt.block_on(session.sql("SELECT py_info()"))?)?
        .into_iter()
        .next()
        .and_then(|r| r.into_iter().next())
        .unwrap_or_default();

    let q_row = format!("SELECT sum(f_row(CAST(value AS DOUBLE))) FROM range({rows})");
    let q_batch = format!("SELECT sum(f_batch(CAST(value AS DOUBLE))) FROM range({rows})");
    let q_set = format!(
        "SELECT count(*), sum(n), sum(total) FROM (SELECT grp_sum(x) FROM \
         (SELECT value % {GROUPS} AS g, CAST(value AS DOUBLE) AS x FROM range({rows})) GROUP BY g)"
    );
    let q_start = "SELECT py_one()";

    // Right answers first: sum(2i + 1) over i < n is n²; the groups hold all n rows, Σi.
    let n = rows as f64;
    let groups = GROUPS.min(rows);
    for (q, want) in [
        (&q_row, vec![n * n]),
        (&q_batch, vec![n * n]),
        (&q_set, vec![groups as f64, n, n * (n - 1.0) / 2.0]),
    ] {
        let got = first_row(&rt.block_on(session.sql(q))?)?;
        if got != want {
            return Err(format!("{q}: got {got:?}, want {want:?}").into());
        }
    }

    let mut row_samples = Vec::new();
    let mut batch_samples = Vec::new();
    let mut set_samples = Vec::new();
    let mut native_samples = Vec::new();
    let mut arrow_samples = Vec::new();
    let mut peer_error: Option<String> = packages.err();
    let mut peer_versions = String::new();
    for round in 0..ROUNDS {
        eprintln!("python-udf: round {}/{ROUNDS}", round + 1);
        row_samples.extend(rt.block_on(timed(&session, &q_row, RUNS))?);
        batch_samples.extend(rt.block_on(timed(&session, &q_batch, RUNS))?);
        set_samples.extend(rt.block_on(timed(&session, &q_set, RUNS))?);
        if let (Some(python), None) = (&duckdb_python, &peer_error) {
            let peer = run_peer(python, &peer_script, rows, RUNS).and_then(|json| {
                let native = peer_case(&json, "native")?;
                let arrow = peer_case(&json, "arrow")?;
                for (case, c) in [("native", &native), ("arrow", &arrow)] {
                    if c.result != n * n {
                        return Err(format!("DuckDB {case}: got {}, want {}", c.result, n * n));
                    }
                }
                Ok((json, native, arrow))
            });
            match peer {
                Ok((json, native, arrow)) => {
                    native_samples.extend(native.samples);
                    arrow_samples.extend(arrow.samples);
                    peer_versions = format!(
                        "DuckDB {} (threads {}), pyarrow {}, Python {}",
                        json_value(&json, "duckdb").unwrap_or("?"),
                        json_value(&json, "threads").unwrap_or("?"),
                        json_value(&json, "pyarrow").unwrap_or("?"),
                        json_value(&json, "python").unwrap_or("?"),
                    );
                }
                Err(e) => peer_error = Some(e),
            }
        }
    }
    let start_samples = rt.block_on(timed(&session, q_start, STARTS))?;
    let numpy_start_samples = rt.block_on(timed(&session, "SELECT f_batch(1.0)", STARTS))?;
    let select1_samples = rt.block_on(timed(&session, "SELECT 1", STARTS))?;
    let python = venv_python.unwrap_or_else(|| PathBuf::from("python3"));
    let mut bare_samples = Vec::with_capacity(STARTS);
    for i in 0..WARMUP + STARTS {
        let start = Instant::now();
        output_of(Command::new(&python).args(["-c", "pass"]))?;
        if i >= WARMUP {
            bare_samples.push(start.elapsed());
        }
    }

    // The table.
    let ms = |d: Duration| format!("{:.1} ms", d.as_secs_f64() * 1e3);
    let per_s = |count: u64, d: Duration| {
        let v = count as f64 / d.as_secs_f64().max(1e-12);
        if v >= 1e6 {
            format!("{:.2} M", v / 1e6)
        } else {
            format!("{:.1} k", v / 1e3)
        }
    };
    println!(
        "python-udf: f(x DOUBLE) = x * 2.0 + 1.0 over {rows} rows of range({rows}), sum() of the \
         result; {partitions} partitions, {cores} cores; {} runs per case ({ROUNDS} rounds × \
         {RUNS}, each after {WARMUP} warm-ups), {STARTS} starts",
        ROUNDS * RUNS
    );
    println!("accelsql workers: {info}");
    match &peer_error {
        None => println!("DuckDB peer: {peer_versions}"),
        Some(e) => println!("DuckDB peer: figures unavailable: {e}"),
    }
    println!(
        "{:<44} {:>9} {:>10} {:>10} {:>10} {:>11}",
        "case", "rows", "median", "min", "max", "rows/s"
    );
    let line = |name: &str, count: &str, s: Stats, rate: String| {
        println!(
            "{:<44} {:>9} {:>10} {:>10} {:>10} {:>11}",
            name,
            count,
            ms(s.median),
            ms(s.min),
            ms(s.max),
            rate
        );
    };
    let rows_s = rows.to_string();
    let row = stats(row_samples);
    let batch = stats(batch_samples);
    let set = stats(set_samples);
    line(
        "accelsql run(ctx) per row",
        &rows_s,
        row,
        per_s(rows, row.median),
    );
    line(
        "accelsql run_batch(ctx)",
        &rows_s,
        batch,
        per_s(rows, batch.median),
    );
    line(
        &format!("accelsql SET ctx.next(), {groups} groups"),
        &rows_s,
        set,
        per_s(rows, set.median),
    );
    let peers = peer_error
        .is_none()
        .then(|| (stats(native_samples), stats(arrow_samples)));
    if let Some((native, arrow)) = peers {
        line(
            "DuckDB native UDF (per row)",
            &rows_s,
            native,
            per_s(rows, native.median),
        );
        line(
            "DuckDB arrow UDF (pyarrow.compute)",
            &rows_s,
            arrow,
            per_s(rows, arrow.median),
        );
    } else {
        println!(
            "{:<44} {:>9} (unavailable)",
            "DuckDB native UDF (per row)", rows
        );
        println!(
            "{:<44} {:>9} (unavailable)",
            "DuckDB arrow UDF (pyarrow.compute)", rows
        );
    }
    let start = stats(start_samples);
    line(
        "worker start: SELECT py_one() statement",
        "1",
        start,
        "-".into(),
    );
    line(
        "  for reference: SELECT f_batch(1.0) (numpy)",
        "1",
        stats(numpy_start_samples),
        "-".into(),
    );
    line(
        "  for reference: SELECT 1 statement",
        "1",
        stats(select1_samples),
        "-".into(),
    );
    line(
        "  for reference: python3 -c pass",
        "-",
        stats(bare_samples),
        "-".into(),
    );
    println!(
        "SET script: {} groups/s ({groups} groups of {} rows)",
        per_s(groups, set.median),
        rows / groups.max(1)
    );
    let verdict = |met: bool| if met { "met" } else { "MISSED" };
    if let Some((native, arrow)) = peers {
        let r = arrow.median.as_secs_f64() / batch.median.as_secs_f64();
        println!(
            "ratio run_batch vs DuckDB arrow (rows/s accelsql / DuckDB): {r:.3} (goal ≥ 1.0: {})",
            verdict(r >= 1.0)
        );
        let r = native.median.as_secs_f64() / row.median.as_secs_f64();
        println!(
            "ratio run vs DuckDB native (rows/s accelsql / DuckDB): {r:.3} (goal ≥ 1.0: {})",
            verdict(r >= 1.0)
        );
    } else {
        println!("ratio run_batch vs DuckDB arrow: unavailable (no DuckDB figures)");
        println!("ratio run vs DuckDB native: unavailable (no DuckDB figures)");
    }
    let start_ms = start.median.as_secs_f64() * 1e3;
    println!(
        "worker start (median SELECT py_one()): {start_ms:.1} ms (goal < 50 ms: {})",
        verdict(start_ms < 50.0)
    );
    Ok(())
}
