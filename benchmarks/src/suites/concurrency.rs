//! `concurrency`: K sessions at once, each running a query whose UDF requires the GPU
//! (`GpuNvidia`), back to back for a fixed window: throughput, per-query lease wait (mean and
//! max) and fairness (Jain's index over the sessions' completed queries) — beside plain
//! DataFusion running the same UDF in K sessions with no lease at all.
//!
//! The devices are simulated (one device; the UDF runs its CPU code while holding the lease):
//! the lease queue, the waits and the fairness are real, the throughput is that of CPU work
//! serialized by the lease, and is labelled so.
//!
//! A second case compares the node's GPU sharing settings: [`BURST`] statements arrive at once,
//! each holding the GPU for [`SIMULATED_GPU_WORK`] and declaring a tenth of an 80 GiB simulated
//! device (`%perInstanceRequiredAcceleratorMemory`); `exclusive` runs them one at a time,
//! `memory` as many as fit (nine, with the 10% headroom). The GPU work is a sleep while the
//! lease is held — simulated, and labelled so: the figures show what the scheduler admits, not
//! what a GPU computes.

use std::sync::Arc;
use std::time::{Duration, Instant};

use accelsql_engine::datafusion::arrow::datatypes::DataType;
use accelsql_engine::datafusion::catalog::MemTable;
use accelsql_engine::datafusion::logical_expr::ColumnarValue;
use accelsql_engine::gpu_scheduler::{GpuSharing, SIMULATED_MEMORY};
use accelsql_engine::{Engine, InstanceContext, ScalarUdf, SchedulerConfig};

use crate::data::Dataset;
use crate::error::Result;
use crate::measure::{Stats, jain_fairness, percentile_of_sorted};
use crate::peers::Runner;
use crate::peers::accelsql::session;
use crate::peers::datafusion::plain_datafusion;
use crate::peers::kernels::poly;
use crate::progress::Progress;
use crate::results::{Distribution, Figure, Outcome, SuiteResult, Table};

use super::Context;

/// Rows each query reads at `--scale 1`.
pub const BASE_ROWS: u64 = 1_000_000;
/// The session counts.
pub const SESSIONS: [usize; 5] = [1, 2, 4, 8, 16];
/// How long each session count runs.
pub const WINDOW: Duration = Duration::from_secs(2);

const ACCELSQL: &str = "accelsql, GpuNvidia required (1 simulated GPU)";
const PEER: &str = "DataFusion ScalarUDF (no lease)";
const CASE: &str = "sum(udf(x)) per session";

/// Statements that arrive at once in the sharing case.
pub const BURST: usize = 32;
/// How long each statement of the sharing case holds the GPU (simulated work: a sleep).
pub const SIMULATED_GPU_WORK: Duration = Duration::from_millis(50);
/// Bursts per sharing setting.
pub const BURST_RUNS: usize = 5;

const SHARING_CASE: &str = "32 statements, 10% of a device each (SIMULATED GPU work)";
const EXCLUSIVE: &str = "gpu_sharing = exclusive (1 simulated GPU)";
const MEMORY: &str = "gpu_sharing = memory (1 simulated GPU)";

/// What K sessions did in one window.
struct Window {
    /// Queries each session completed.
    per_session: Vec<u64>,
    /// Every query's latency.
    latencies: Vec<Duration>,
    /// Wall time from start until the last query ended.
    elapsed: Duration,
}

/// Runs `sql` back to back in each of `runners` until `window` has passed.
async fn run_window(runners: Vec<Runner>, sql: &str, window: Duration) -> Result<Window> {
    let start = Instant::now();
    let deadline = start + window;
    let mut tasks = Vec::new();
    for runner in runners {
        let sql = sql.to_string();
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            while Instant::now() < deadline {
                let t = Instant::now();
                runner.query(&sql).await?;
                latencies.push(t.elapsed());
            }
            Ok::<_, crate::error::BenchError>(latencies)
        }));
    }
    let mut out = Window {
        per_session: Vec::new(),
        latencies: Vec::new(),
        elapsed: Duration::ZERO,
    };
    for task in tasks {
        let latencies = task.await??;
        out.per_session.push(latencies.len() as u64);
        out.latencies.extend(latencies);
    }
    out.elapsed = start.elapsed();
    Ok(out)
}

fn window_figure(engine: &str, k: usize, w: &Window) -> Figure {
    let queries: u64 = w.per_session.iter().sum();
    let shares: Vec<f64> = w.per_session.iter().map(|&n| n as f64).collect();
    let outcome = match Stats::of(&w.latencies) {
        Some(stats) => Outcome::Measured { stats },
        None => Outcome::unavailable("no query finished"),
    };
    Figure::new(CASE, engine, k as u64, outcome)
        .with_metric("queries", queries as f64)
        .with_metric(
            "throughput_qps",
            queries as f64 / w.elapsed.as_secs_f64().max(1e-9),
        )
        .with_metric("fairness", jain_fairness(&shares))
}

/// Lease waits read from the engine's call log so far.
struct WaitLog {
    /// Statements before this one belong to earlier windows.
    first_id: u64,
    /// Statements read already (they may finish out of order).
    seen: std::collections::HashSet<u64>,
    /// Waits, seconds.
    waits: Vec<f64>,
}

impl WaitLog {
    /// Reads the calls that finished since the last read.
    fn collect(&mut self, engine: &Engine) {
        for call in engine.recent_calls() {
            if call.statement_id >= self.first_id
                && self.seen.insert(call.statement_id)
                && let Some(wait) = call.lease_wait
            {
                self.waits.push(wait.as_secs_f64());
            }
        }
    }
}

fn lock(log: &std::sync::Mutex<WaitLog>) -> std::sync::MutexGuard<'_, WaitLog> {
    log.lock().unwrap_or_else(|e| e.into_inner())
}

/// Registers `gpu_work(x DOUBLE) → DOUBLE` (GpuNvidia, required; CPU code = poly) in `engine`.
fn register_gpu_work(engine: &Engine) -> Result<()> {
    engine.register_scalar_udf(
        ScalarUdf::builder("gpu_work")
            .inputs([DataType::Float64])
            .returns(DataType::Float64)
            .accelerator("GpuNvidia")?
            .cpu(|_: &InstanceContext, rows: usize, args: &[ColumnarValue]| poly(args, rows))
            .build()?,
    )?;
    Ok(())
}

/// Registers `gpu_sim(ms)`: holds the GPU for `ms` (a sleep standing for device work),
/// requiring it and declaring a tenth of a simulated device's memory, one instance per call.
fn register_gpu_sim(engine: &Engine) -> Result<()> {
    engine.register_scalar_udf(
        ScalarUdf::builder("gpu_sim")
            .inputs([DataType::Int64])
            .returns(DataType::Int64)
            .accelerator("GpuNvidia")?
            .instance_limit(1)
            .device_memory(SIMULATED_MEMORY / 10)
            .cpu(|_: &InstanceContext, rows: usize, args: &[ColumnarValue]| {
                let ms = match &args[0] {
                    ColumnarValue::Scalar(v) => v.to_string().parse::<u64>().unwrap_or(0),
                    ColumnarValue::Array(_) => 0,
                };
                // Device time: the sleep hands its runtime worker to other tasks meanwhile, as
                // time on a GPU would not keep a CPU busy.
                let pause = || std::thread::sleep(Duration::from_millis(ms));
                match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
                    Ok(tokio::runtime::RuntimeFlavor::MultiThread) => {
                        tokio::task::block_in_place(pause);
                    }
                    _ => pause(),
                }
                Ok(
                    Arc::new(accelsql_engine::datafusion::arrow::array::Int64Array::from(
                        vec![ms as i64; rows],
                    )) as accelsql_engine::datafusion::arrow::array::ArrayRef,
                )
            })
            .build()?,
    )?;
    Ok(())
}

/// One burst: [`BURST`] sessions each start `SELECT gpu_sim(ms)` at once. Returns the time
/// until the last ended and each statement's latency.
async fn burst(engine: &Engine, work: Duration) -> Result<(Duration, Vec<Duration>)> {
    let sql = format!("SELECT gpu_sim({})", work.as_millis());
    let start = Instant::now();
    let mut tasks = Vec::with_capacity(BURST);
    for _ in 0..BURST {
        let session = engine.session();
        let sql = sql.clone();
        tasks.push(tokio::spawn(async move {
            let t = Instant::now();
            session.sql(&sql).await?;
            Ok::<_, crate::error::BenchError>(t.elapsed())
        }));
    }
    let mut latencies = Vec::with_capacity(BURST);
    for task in tasks {
        latencies.push(task.await??);
    }
    Ok((start.elapsed(), latencies))
}

/// The sharing case's figure for one setting: makespans of `runs` bursts, with throughput and
/// per-statement latency percentiles (p50, p99) over every statement of every burst.
async fn sharing_figure(sharing: GpuSharing, runs: usize, work: Duration) -> Result<Figure> {
    let engine = Engine::with_config(
        SchedulerConfig::default()
            .with_simulated_gpus(1)
            .with_gpu_sharing(sharing, None),
    )?;
    register_gpu_sim(&engine)?;
    let mut makespans = Vec::with_capacity(runs);
    let mut latencies = Vec::with_capacity(runs * BURST);
    for _ in 0..runs {
        let (makespan, l) = burst(&engine, work).await?;
        makespans.push(makespan);
        latencies.extend(l);
    }
    let mut secs: Vec<f64> = latencies.iter().map(Duration::as_secs_f64).collect();
    secs.sort_by(f64::total_cmp);
    let label = match sharing {
        GpuSharing::Exclusive => EXCLUSIVE,
        GpuSharing::Memory => MEMORY,
    };
    let outcome = match Stats::of(&makespans) {
        Some(stats) => Outcome::Measured { stats },
        None => Outcome::unavailable("no burst ran"),
    };
    let median = Stats::of(&makespans).map_or(0.0, |s| s.median_s);
    Ok(Figure::new(SHARING_CASE, label, BURST as u64, outcome)
        .with_metric("throughput_sps", BURST as f64 / median.max(1e-9))
        .with_metric("p50_latency_ms", percentile_of_sorted(&secs, 0.50) * 1e3)
        .with_metric("p99_latency_ms", percentile_of_sorted(&secs, 0.99) * 1e3))
}

async fn accelsql_runners(
    engine: &Engine,
    k: usize,
    partitions: usize,
    table: &Arc<MemTable>,
) -> Result<Vec<Runner>> {
    let mut runners = Vec::with_capacity(k);
    for _ in 0..k {
        let runner = session(engine, partitions).await?;
        runner.register("doubles", table)?;
        runners.push(runner);
    }
    Ok(runners)
}

/// Runs the suite.
pub(crate) async fn run(ctx: &Context, result: &mut SuiteResult) -> Result<()> {
    result.title = "concurrency: K sessions, GPU-required queries".into();
    result.what = "K sessions each run `SELECT sum(gpu_work(x)) FROM doubles` (gpu_work: \
                   `GpuNvidia` required) back to back for a fixed window. Every statement waits \
                   for the node lease (FIFO); the figures are per-query latency, throughput, \
                   lease wait and fairness (Jain's index over the sessions' query counts: 1 = \
                   equal shares). Peer: the same UDF in K plain DataFusion sessions, no lease."
        .into();
    let rows = ctx.scaled(BASE_ROWS, 1000);
    result.notes.push(format!(
        "SIMULATED devices: one simulated GPU; the lease queue, waits and fairness are real, but \
         gpu_work runs its CPU code, so the accelsql throughput is CPU work serialized by the \
         lease, not GPU throughput. {rows} rows per query (base {BASE_ROWS} × scale {}), \
         {} s per session count, sessions {SESSIONS:?}.",
        ctx.scale,
        WINDOW.as_secs_f64()
    ));
    let engine = Engine::with_config(SchedulerConfig::default().with_simulated_gpus(1))?;
    register_gpu_work(&engine)?;
    let (_, table) = ctx.load(Dataset::Doubles, rows)?;
    let progress = Progress::new("concurrency", SESSIONS.len() as u64 * 2, "windows");
    let mut figures = Table::new(
        "concurrency: K sessions (1 simulated GPU)",
        "sessions",
        Some(PEER),
    )
    .without_rate();
    for k in SESSIONS {
        progress.set_message(&format!("{k} sessions"));
        let peers: Vec<Runner> = (0..k)
            .map(|_| {
                let r = plain_datafusion(ctx.partitions);
                r.register("doubles", &table).map(|()| r)
            })
            .collect::<Result<_>>()?;
        let w = run_window(peers, "SELECT sum(poly_udf(x)) FROM doubles", WINDOW).await?;
        figures.push(window_figure(PEER, k, &w));
        progress.inc(1);

        // The call log keeps the last RECENT_CALLS calls: a sampler reads it while the window
        // runs, so every query's lease wait is seen.
        let seen = Arc::new(std::sync::Mutex::new(WaitLog {
            first_id: engine
                .recent_calls()
                .iter()
                .map(|c| c.statement_id + 1)
                .max()
                .unwrap_or(0),
            seen: std::collections::HashSet::new(),
            waits: Vec::new(),
        }));
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let sampler = {
            let (engine, seen, stop) = (engine.clone(), Arc::clone(&seen), Arc::clone(&stop));
            tokio::spawn(async move {
                while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    lock(&seen).collect(&engine);
                }
            })
        };
        let runners = accelsql_runners(&engine, k, ctx.partitions, &table).await?;
        let w = run_window(runners, "SELECT sum(gpu_work(x)) FROM doubles", WINDOW).await;
        stop.store(true, std::sync::atomic::Ordering::SeqCst);
        sampler.await?;
        let w = w?;
        let mut waits = {
            let mut log = lock(&seen);
            log.collect(&engine);
            std::mem::take(&mut log.waits)
        };
        waits.sort_by(f64::total_cmp);
        let mut f = window_figure(ACCELSQL, k, &w);
        if !waits.is_empty() {
            let mean = waits.iter().sum::<f64>() / waits.len() as f64;
            f = f
                .with_metric("mean_wait_ms", mean * 1e3)
                .with_metric("max_wait_ms", waits[waits.len() - 1] * 1e3)
                .with_metric("p99_wait_ms", percentile_of_sorted(&waits, 0.99) * 1e3);
            let queries = f.metrics.get("queries").copied().unwrap_or(0.0);
            if (waits.len() as f64) < queries {
                f.note = Some(format!(
                    "lease waits of {} of {queries} queries seen (the call log keeps the last {})",
                    waits.len(),
                    accelsql_engine::RECENT_CALLS
                ));
            }
        }
        if k == SESSIONS[SESSIONS.len() - 1] {
            result.distributions.push(Distribution::new(
                &format!("Lease wait per query, {k} sessions (1 simulated GPU)"),
                "concurrency-wait",
                waits.iter().map(|s| s * 1e6).collect(),
            ));
        }
        figures.push(f);
        progress.inc(1);
    }
    progress.finish();
    result.tables.push(figures);

    // Sharing a GPU by memory: the same burst under each setting.
    result.notes.push(format!(
        "SIMULATED GPU work in the sharing table: each of {BURST} statements arriving at once \
         holds the GPU for {} ms (a sleep) and declares 8 GiB, a tenth of the 80 GiB simulated \
         device; `exclusive` runs them one at a time, `memory` as many as fit in 90% of the \
         device (nine). Time = one burst's makespan (median of {BURST_RUNS}); latency \
         percentiles over every statement. What the scheduler admits is real; no GPU computed.",
        SIMULATED_GPU_WORK.as_millis()
    ));
    let mut sharing = Table::new(
        "concurrency: one GPU shared by memory (SIMULATED GPU work)",
        "statements",
        Some(EXCLUSIVE),
    );
    for mode in [GpuSharing::Exclusive, GpuSharing::Memory] {
        sharing.push(sharing_figure(mode, BURST_RUNS, SIMULATED_GPU_WORK).await?);
    }
    result.tables.push(sharing);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_sharing_runs_a_burst_of_small_statements_side_by_side() {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let work = Duration::from_millis(40);
        let (exclusive, memory) = rt
            .block_on(async {
                Ok::<_, crate::error::BenchError>((
                    sharing_figure(GpuSharing::Exclusive, 1, work).await?,
                    sharing_figure(GpuSharing::Memory, 1, work).await?,
                ))
            })
            .unwrap();
        let makespan = |f: &Figure| f.outcome.stats().unwrap().median_s;
        // One at a time: at least 32 × 40 ms; nine at a time: four waves.
        assert!(
            makespan(&exclusive) >= 32.0 * 0.040,
            "{}",
            makespan(&exclusive)
        );
        assert!(
            makespan(&memory) < makespan(&exclusive) / 2.0,
            "{} vs {}",
            makespan(&memory),
            makespan(&exclusive)
        );
        assert!(memory.metrics["p99_latency_ms"] < exclusive.metrics["p99_latency_ms"]);
    }

    #[test]
    fn a_window_counts_every_sessions_queries() {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let batches = {
            let mut out = Vec::new();
            crate::data::generate(Dataset::Doubles, 2000, 1, |b| {
                out.push(b);
                Ok(())
            })
            .unwrap();
            out
        };
        let table = crate::data::mem_table(batches, 2).unwrap();
        let engine =
            Engine::with_config(SchedulerConfig::default().with_simulated_gpus(1)).unwrap();
        register_gpu_work(&engine).unwrap();
        let w = rt
            .block_on(async {
                let runners = accelsql_runners(&engine, 2, 2, &table).await?;
                run_window(
                    runners,
                    "SELECT sum(gpu_work(x)) FROM doubles",
                    Duration::from_millis(200),
                )
                .await
            })
            .unwrap();
        assert_eq!(w.per_session.len(), 2);
        assert!(w.per_session.iter().all(|&n| n > 0));
        let f = window_figure(ACCELSQL, 2, &w);
        assert!(f.metrics["fairness"] > 0.5);
        assert!(engine.recent_calls().iter().any(|c| c.lease_wait.is_some()));
    }
}
