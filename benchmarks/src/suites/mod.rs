//! The suites: what each measures, the sizes it runs at (base sizes × `--scale`), and the shared
//! context they run in (engines, data directory, run plan, Python).

pub mod cluster;
pub mod concurrency;
mod context;
pub mod geo;
pub mod options;
pub mod python_udf;
pub mod scheduler;
pub mod server;
mod sql;
pub mod tables;
pub mod udf_overhead;
pub mod vectors;

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Instant;

use clap::ValueEnum;

pub use self::context::Context;
use crate::error::Result;
use crate::measure::RunPlan;
use crate::peers::accelsql::AccelsqlEngines;
use crate::peers::python_env::PythonEnv;
use crate::results::SuiteResult;

/// A benchmark suite.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Suite {
    /// Lease latency and hand-off to the next of 1…256 waiters (vs tokio's FIFO Mutex).
    Scheduler,
    /// The same Rust UDF through accelsql and through plain DataFusion.
    UdfOverhead,
    /// Python script UDFs, row and batch forms, vs DuckDB's Python UDFs.
    PythonUdf,
    /// Top-10 cosine similarity over N embeddings.
    Vectors,
    /// Top-10 cosine over 2M × FLOAT[768] and 10M × FLOAT[128], beside the memory bandwidth.
    VectorsLarge,
    /// Haversine distance per row, then GROUP BY.
    Geo,
    /// Black–Scholes call prices.
    Options,
    /// K sessions each running a GPU-annotated query: throughput, waits, fairness.
    Concurrency,
    /// accelsql over Arrow Flight SQL (`accelsql serve`) vs in process.
    Server,
    /// accelsql on a Ballista cluster of 1, 2 and 3 executors vs one process.
    Cluster,
    /// Stored tables (Delta Lake): bulk loads vs DuckDB, scans vs memory tables, small writes.
    Tables,
}

impl Suite {
    /// Every suite, in the order `all` runs them.
    pub const ALL: [Suite; 11] = [
        Self::Scheduler,
        Self::UdfOverhead,
        Self::PythonUdf,
        Self::Vectors,
        Self::VectorsLarge,
        Self::Geo,
        Self::Options,
        Self::Concurrency,
        Self::Server,
        Self::Cluster,
        Self::Tables,
    ];

    /// Its CLI name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Scheduler => "scheduler",
            Self::UdfOverhead => "udf-overhead",
            Self::PythonUdf => "python-udf",
            Self::Vectors => "vectors",
            Self::VectorsLarge => "vectors-large",
            Self::Geo => "geo",
            Self::Options => "options",
            Self::Concurrency => "concurrency",
            Self::Server => "server",
            Self::Cluster => "cluster",
            Self::Tables => "tables",
        }
    }

    /// Whether it runs a Python peer (so the virtualenv is prepared first).
    pub fn needs_python(self) -> bool {
        matches!(
            self,
            Self::PythonUdf
                | Self::Vectors
                | Self::VectorsLarge
                | Self::Geo
                | Self::Options
                | Self::Server
                | Self::Tables
        )
    }

    /// Runs the suite; an error stops it and is recorded in its result (the others still run).
    pub async fn run(self, ctx: &Context) -> SuiteResult {
        let start = Instant::now();
        let mut result = SuiteResult {
            name: self.name().to_string(),
            ..SuiteResult::default()
        };
        let outcome = match self {
            Self::Scheduler => scheduler::run(ctx, &mut result).await,
            Self::UdfOverhead => udf_overhead::run(ctx, &mut result).await,
            Self::PythonUdf => python_udf::run(ctx, &mut result).await,
            Self::Vectors => vectors::run(ctx, &mut result).await,
            Self::VectorsLarge => vectors::run_large(ctx, &mut result).await,
            Self::Geo => geo::run(ctx, &mut result).await,
            Self::Options => options::run(ctx, &mut result).await,
            Self::Concurrency => concurrency::run(ctx, &mut result).await,
            Self::Server => server::run(ctx, &mut result).await,
            Self::Cluster => cluster::run(ctx, &mut result).await,
            Self::Tables => tables::run(ctx, &mut result).await,
        };
        if let Err(e) = outcome {
            result.error = Some(e.to_string());
        }
        for table in &mut result.tables {
            table.fill_ratios();
        }
        result.wall_s = start.elapsed().as_secs_f64();
        result
    }
}

/// The environment variable the `cargo bench` wrappers read their scale from (default 1).
pub const ENV_BENCH_SCALE: &str = "ACCELSQL_BENCH_SCALE";

/// Runs one suite on its own and prints its tables: what the `cargo bench` targets `lease` and
/// `udf_overhead` do (scale from `ACCELSQL_BENCH_SCALE`, data under `target/bench-out/data`, 5
/// timed runs after 1 warm-up, no Python peers). The harness binary does more (all suites,
/// peers, the report).
pub fn run_standalone(suite: Suite) -> Result<SuiteResult> {
    let scale = match std::env::var(ENV_BENCH_SCALE) {
        Ok(v) => v
            .trim()
            .parse::<f64>()
            .ok()
            .filter(|s| s.is_finite() && *s > 0.0)
            .ok_or_else(|| crate::bench_err!("{ENV_BENCH_SCALE}={v:?} is not a positive number"))?,
        Err(_) => 1.0,
    };
    let python = suite
        .needs_python()
        .then(|| PythonEnv::prepare(&crate::peers::python_env::venv_dir(), &|l| eprintln!("{l}")));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let ctx = Context {
        scale,
        seed: 42,
        plan: RunPlan { warmup: 1, runs: 5 },
        partitions: std::thread::available_parallelism().map_or(1, |n| n.get()),
        data_dir: crate::peers::python_env::workspace_root()
            .join("target")
            .join("bench-out")
            .join("data"),
        accelsql: AccelsqlEngines::open()?,
        python,
        versions: Mutex::new(BTreeMap::new()),
    };
    let result = rt.block_on(suite.run(&ctx));
    crate::report::print_suite(&result);
    match &result.error {
        Some(e) => Err(crate::bench_err!("{e}")),
        None => Ok(result),
    }
}

#[cfg(test)]
pub(crate) mod test_context {
    use std::path::Path;

    use super::*;

    /// A context over a temporary data directory with tiny runs.
    pub(crate) fn context(dir: &Path, scale: f64) -> Context {
        Context {
            scale,
            seed: 1,
            plan: RunPlan { warmup: 0, runs: 2 },
            partitions: 2,
            data_dir: dir.to_path_buf(),
            accelsql: AccelsqlEngines::open().unwrap(),
            python: None,
            versions: Mutex::new(BTreeMap::new()),
        }
    }
}
