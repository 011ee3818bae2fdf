//! The `accelsql-benchmarks` command: runs benchmark suites beside their peers and writes the
//! report (its binary, src/main.rs, only calls [`main`]).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::error::{BenchError, Result};
use crate::machine::Machine;
use crate::measure::RunPlan;
use crate::peers::accelsql::AccelsqlEngines;
use crate::peers::python_env::{PythonEnv, venv_dir};
use crate::report;
use crate::results::{RESULTS_VERSION, Results};
use crate::suites::{Context, Suite};
use clap::{Parser, ValueEnum};

const SIZES: &str = "\
Suites and their sizes at --scale 1 (each size is multiplied by --scale; the throughput suites
also run a quarter and a sixteenth of it):
  scheduler     200000 uncontended acquires; 20000 hand-offs per waiter count (1, 4, 16, 64, 256)
  udf-overhead  10M rows of DOUBLE through the same Rust UDF (accelsql vs plain DataFusion)
  python-udf    1M rows through Python UDFs (accelsql run/run_batch/SET vs DuckDB native/arrow)
  vectors       1M embeddings FLOAT[128]: top-10 cosine similarity
  vectors-large 2M × FLOAT[768] (6 GB) and 10M × FLOAT[128] (5 GB): top-10 cosine, beside the
                memory bandwidth over the same bytes (one size each; needs ~16 GB of memory)
  geo           10M point pairs: haversine_km + GROUP BY region (64 groups)
  options       10M options: black_scholes_call, summed
  concurrency   1M rows per query; 1, 2, 4, 8, 16 sessions for 2 s each
  server        10M rows × 4 columns fetched whole (in process, arrow-rs Flight SQL, ADBC);
                SELECT 1 from 1, 8, 32 clients for 2 s each; 200 GPU statements per client

Output (--out DIR, default target/bench-out): results.json, REPORT.md and PNG plots; the
generated Parquet data under DIR/data (reused while seed, size and generator match). A run
merges into an existing results.json of the same scale and seed (suites run now replace their
earlier entries) unless --fresh is given.";

/// What to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Target {
    /// Every suite.
    All,
    /// Only redraw REPORT.md and the plots from DIR/results.json.
    Report,
    /// Lease latency and hand-off (1…256 waiters), vs tokio's Mutex.
    Scheduler,
    /// accelsql vs plain DataFusion, the same Rust UDF.
    UdfOverhead,
    /// Python UDFs, row and batch forms, vs DuckDB's.
    PythonUdf,
    /// Top-10 cosine similarity over N embeddings.
    Vectors,
    /// Top-10 cosine at 768 dimensions and 10M rows, beside the memory bandwidth.
    VectorsLarge,
    /// Haversine per row + GROUP BY.
    Geo,
    /// Black–Scholes.
    Options,
    /// K sessions each running a GPU-annotated query.
    Concurrency,
    /// accelsql over Arrow Flight SQL (`accelsql serve`) vs in process.
    Server,
    /// accelsql on a Ballista cluster of 1, 2 and 3 executors vs one process.
    Cluster,
    /// Stored tables (Delta Lake): bulk loads vs DuckDB, scans vs memory tables, small writes.
    Tables,
}

impl Target {
    fn suite(self) -> Option<Suite> {
        Some(match self {
            Self::All | Self::Report => return None,
            Self::Scheduler => Suite::Scheduler,
            Self::UdfOverhead => Suite::UdfOverhead,
            Self::PythonUdf => Suite::PythonUdf,
            Self::Vectors => Suite::Vectors,
            Self::VectorsLarge => Suite::VectorsLarge,
            Self::Geo => Suite::Geo,
            Self::Options => Suite::Options,
            Self::Concurrency => Suite::Concurrency,
            Self::Server => Suite::Server,
            Self::Cluster => Suite::Cluster,
            Self::Tables => Suite::Tables,
        })
    }
}

/// accelsql's benchmark harness: each figure beside its peers' (plain DataFusion, DuckDB,
/// accelsql on CPU and on GPU), measured in the same run on the same data.
#[derive(Debug, Parser)]
#[command(name = "accelsql-benchmarks", version, after_help = SIZES)]
struct Cli {
    /// Suites to run (several allowed), `all`, or `report`.
    #[arg(required = true, value_enum, value_name = "SUITE")]
    targets: Vec<Target>,
    /// Multiplier on every suite's base sizes (e.g. 0.01 for a quick look).
    #[arg(long, default_value_t = 1.0, value_parser = parse_scale)]
    scale: f64,
    /// Directory of the report (results.json, REPORT.md, PNGs) and of the data (DIR/data).
    #[arg(long, value_name = "DIR", default_value = "target/bench-out")]
    out: PathBuf,
    /// Seed of the data generators.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Timed runs per figure.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=1000))]
    runs: u64,
    /// Untimed warm-up runs before them.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(0..=100))]
    warmup: u64,
    /// Do not merge into an existing DIR/results.json: replace it.
    #[arg(long)]
    fresh: bool,
    /// Do not make or install the Python peers' virtualenv (DuckDB, ADBC): for a machine without
    /// network access. Those peers then report themselves unavailable; the others still run.
    #[arg(long)]
    no_python_peers: bool,
    /// A remark for the report's header (e.g. what else the machine was doing).
    #[arg(long, value_name = "TEXT")]
    note: Option<String>,
}

fn parse_scale(text: &str) -> std::result::Result<f64, String> {
    let scale: f64 = text
        .parse()
        .map_err(|_| format!("{text:?} is not a number; write e.g. --scale 0.1"))?;
    if scale.is_finite() && scale > 0.0 && scale <= 1000.0 {
        Ok(scale)
    } else {
        Err(format!(
            "{text} is out of range: the scale must be > 0 and ≤ 1000"
        ))
    }
}

/// The command: parses the arguments, runs the suites, writes the report.
pub fn main() -> ExitCode {
    // A cold-start child of the python-udf suite: one timed statement in a fresh process.
    if let Ok(python) = std::env::var(crate::suites::python_udf::COLD_CHILD_ENV) {
        let took = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .map_err(|e| BenchError::new(e.to_string()))
            .and_then(|rt| rt.block_on(crate::suites::python_udf::cold_child(&python)));
        return match took {
            Ok(s) => {
                println!("cold_s={s}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let cli = Cli::parse();
    match run(&cli) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Runs the CLI; `Ok(false)` when a suite stopped with an error (the report is still written).
fn run(cli: &Cli) -> Result<bool> {
    if cli.targets.contains(&Target::Report) {
        let mut results = report::read_results(&cli.out).ok_or_else(|| {
            BenchError::new(format!(
                "no readable {} in {}: run a suite first",
                report::RESULTS_JSON,
                cli.out.display()
            ))
        })?;
        print_files(&report::write(&cli.out, &mut results)?);
        return Ok(true);
    }
    let suites: Vec<Suite> = if cli.targets.contains(&Target::All) {
        Suite::ALL.to_vec()
    } else {
        Suite::ALL
            .into_iter()
            .filter(|s| cli.targets.iter().any(|t| t.suite() == Some(*s)))
            .collect()
    };
    let started_unix = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());

    // Python first (making the virtualenv may take a while; it is not part of any figure).
    let python = suites.iter().any(|s| s.needs_python()).then(|| {
        if cli.no_python_peers {
            eprintln!("python: the Python peers are skipped (--no-python-peers)");
            return PythonEnv {
                python: None,
                ready: Err("skipped (--no-python-peers)".into()),
            };
        }
        let env = PythonEnv::prepare(&venv_dir(), &|line| eprintln!("python: {line}"));
        if let Err(e) = &env.ready {
            eprintln!("python: WARNING: the Python peers are unavailable: {e}");
        }
        env
    });
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let accelsql = AccelsqlEngines::open()?;
    let mut machine = Machine::probe(accelsql.inventory.clone());
    eprintln!("machine: {}", machine.label);
    let ctx = Context {
        scale: cli.scale,
        seed: cli.seed,
        plan: RunPlan {
            warmup: cli.warmup as usize,
            runs: cli.runs as usize,
        },
        partitions: machine.cores,
        data_dir: cli.out.join("data"),
        accelsql,
        python,
        versions: Mutex::new(BTreeMap::new()),
    };
    let mut results = Results {
        version: RESULTS_VERSION,
        machine: machine.clone(),
        command: std::iter::once("accelsql-benchmarks".to_string())
            .chain(std::env::args().skip(1).map(|a| shell_quote(&a)))
            .collect::<Vec<_>>()
            .join(" "),
        note: cli.note.clone(),
        scale: cli.scale,
        seed: cli.seed,
        plan: ctx.plan,
        started_unix,
        suites: Vec::new(),
    };
    let mut all_ok = true;
    for suite in suites {
        eprintln!("suite {}: running", suite.name());
        let result = rt.block_on(suite.run(&ctx));
        report::print_suite(&result);
        all_ok &= result.error.is_none();
        results.suites.push(result);
    }
    machine.versions.extend(
        ctx.versions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone(),
    );
    results.machine = machine;
    if !cli.fresh
        && let Some(mut earlier) = report::read_results(&cli.out)
        && earlier.version == RESULTS_VERSION
        && earlier.scale == cli.scale
        && earlier.seed == cli.seed
    {
        eprintln!(
            "merging into {} (same scale and seed)",
            cli.out.join(report::RESULTS_JSON).display()
        );
        // Versions of peers that ran only in the earlier run stay recorded.
        let mut versions = earlier.machine.versions.clone();
        versions.extend(results.machine.versions.clone());
        earlier.merge(results);
        earlier.machine.versions = versions;
        results = earlier;
    }
    print_files(&report::write(&cli.out, &mut results)?);
    Ok(all_ok)
}

/// `arg` as a POSIX shell would need it written (quoted when it holds anything but plain
/// characters), so the recorded command can be pasted back.
fn shell_quote(arg: &str) -> String {
    let plain = !arg.is_empty()
        && arg
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_./=:,+-@%".contains(c));
    if plain {
        arg.to_string()
    } else {
        format!("'{}'", arg.replace('\'', "'\\''"))
    }
}

fn print_files(files: &[PathBuf]) {
    println!("\nwrote:");
    for f in files {
        println!("  {}", f.display());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_input_is_a_clap_error_not_a_panic() {
        for args in [
            vec!["x"],
            vec!["x", "nosuchsuite"],
            vec!["x", "geo", "--scale", "-1"],
            vec!["x", "geo", "--scale", "abc"],
            vec!["x", "geo", "--runs", "0"],
        ] {
            assert!(Cli::try_parse_from(&args).is_err(), "{args:?}");
        }
        let cli = Cli::try_parse_from(["x", "geo", "vectors", "--scale", "0.5"]).unwrap();
        assert_eq!(cli.targets, [Target::Geo, Target::Vectors]);
        assert_eq!((cli.scale, cli.runs, cli.warmup), (0.5, 5, 1));
        assert_eq!(cli.out, PathBuf::from("target/bench-out"));
    }

    #[test]
    fn recorded_commands_can_be_pasted_back() {
        assert_eq!(shell_quote("--scale"), "--scale");
        assert_eq!(shell_quote("a shared box"), "'a shared box'");
        assert_eq!(shell_quote("it's"), "'it'\\''s'");
        assert_eq!(shell_quote(""), "''");
    }

    #[test]
    fn every_suite_has_a_target() {
        let all: Vec<Suite> = Target::value_variants()
            .iter()
            .filter_map(|t| t.suite())
            .collect();
        assert_eq!(all, Suite::ALL);
        for s in Suite::ALL {
            assert_eq!(
                Target::from_str(s.name(), false)
                    .ok()
                    .and_then(Target::suite),
                Some(s)
            );
        }
    }
}
