//! The suites: what each measures, the sizes it runs at (base sizes × `--scale`), and the shared
//! context they run in (engines, data directory, run plan, Python).

pub mod cluster;
pub mod concurrency;
pub mod geo;
pub mod options;
pub mod python_udf;
pub mod scheduler;
pub mod server;
mod sql;
pub mod udf_overhead;
pub mod vectors;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use accelsql_engine::datafusion::catalog::MemTable;
use clap::ValueEnum;

use crate::data::{self, Dataset};
use crate::error::Result;
use crate::measure::RunPlan;
use crate::peers::accelsql::AccelsqlEngines;
use crate::peers::python_env::PythonEnv;
use crate::progress::Progress;
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
}

impl Suite {
    /// Every suite, in the order `all` runs them.
    pub const ALL: [Suite; 10] = [
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

/// What every suite runs with.
#[derive(Debug)]
pub struct Context {
    /// Multiplier on each suite's base sizes.
    pub scale: f64,
    /// Seed of the data generators.
    pub seed: u64,
    /// Warm-ups and timed runs per measurement.
    pub plan: RunPlan,
    /// Target partitions of every in-process engine (the machine's cores).
    pub partitions: usize,
    /// Where the Parquet data sets live (`<out>/data`).
    pub data_dir: PathBuf,
    /// accelsql on CPU and (where there is one) on the GPU.
    pub accelsql: AccelsqlEngines,
    /// The Python environment of the Python peers, when a suite needs one.
    pub python: Option<PythonEnv>,
    /// Versions of the peers that ran (DuckDB, Python, …), for the machine facts.
    pub versions: Mutex<BTreeMap<String, String>>,
}

impl Context {
    /// `base × scale` rounded, at least `min`.
    pub fn scaled(&self, base: u64, min: u64) -> u64 {
        ((base as f64 * self.scale).round() as u64).max(min)
    }

    /// The sizes a throughput suite runs at: `base × scale` and its quarter and sixteenth
    /// (at least 1000 rows each; duplicates removed).
    pub fn sizes(&self, base: u64) -> Vec<u64> {
        let full = self.scaled(base, 1000);
        let mut sizes: Vec<u64> = [full / 16, full / 4, full]
            .into_iter()
            .map(|n| n.max(1000))
            .collect();
        sizes.dedup();
        sizes
    }

    /// The interpreter of the Python peers, or why there is none.
    pub fn python(&self) -> std::result::Result<&Path, String> {
        match &self.python {
            Some(env) => env.interpreter(),
            None => Err("the Python environment was not prepared".into()),
        }
    }

    /// Records a peer's version for the machine facts.
    pub fn note_version(&self, name: &str, version: &str) {
        self.versions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(name.to_string(), version.to_string());
    }

    /// The Parquet file of `rows` rows of `dataset`, generated now if it is not there yet
    /// (not timed; a progress bar counts the rows).
    pub fn dataset(&self, dataset: Dataset, rows: u64) -> Result<PathBuf> {
        self.dataset_noting(dataset, rows).map(|(path, _)| path)
    }

    /// [`Self::dataset`], saying whether the file was reused or generated now (and how long
    /// generating took).
    pub fn dataset_noting(&self, dataset: Dataset, rows: u64) -> Result<(PathBuf, String)> {
        let start = Instant::now();
        let path = data::parquet_path(&self.data_dir, dataset, rows, self.seed);
        let progress = if path.exists() {
            Progress::hidden()
        } else {
            Progress::new(&format!("generating {}", dataset.name()), rows, "rows")
        };
        let (path, provenance) =
            data::ensure_parquet(&self.data_dir, dataset, rows, self.seed, &progress)?;
        progress.finish();
        let file = path
            .file_name()
            .map_or_else(String::new, |f| f.to_string_lossy().into_owned());
        let said = match provenance {
            data::Provenance::Reused => format!("{file} reused (generated by an earlier run)"),
            data::Provenance::Generated => format!(
                "{file} generated now in {:.0} s (kept for later runs)",
                start.elapsed().as_secs_f64()
            ),
        };
        Ok((path, said))
    }

    /// The data set read back from Parquet into a memory table (so timed queries do no I/O).
    pub fn load(&self, dataset: Dataset, rows: u64) -> Result<(PathBuf, Arc<MemTable>)> {
        let path = self.dataset(dataset, rows)?;
        let table = data::mem_table(data::read_parquet(&path)?, self.partitions)?;
        Ok((path, table))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_scale_and_stay_above_a_floor() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = test_context::context(dir.path(), 0.5);
        assert_eq!(ctx.sizes(1_600_000), [50_000, 200_000, 800_000]);
        assert_eq!(ctx.sizes(100), [1000]);
        assert_eq!(ctx.scaled(10, 3), 5);
    }
}
