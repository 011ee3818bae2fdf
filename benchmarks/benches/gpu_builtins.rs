//! GPU built-ins against their CPU kernels, in the same run: rows/s of `cosine_similarity`
//! (768-dim FLOAT embeddings against a scalar query), `haversine_km` (four DOUBLE columns) and
//! `black_scholes_call` (spot, strike, years, volatility columns, a scalar rate) on all CPU cores
//! and on one GPU including every transfer, at 1K to 100M rows; beside them the host-to-device
//! bandwidth of a plain pinned copy, cosine's end-to-end input bandwidth as a share of it (goal
//! ≥ 80% on an H100), Black–Scholes' GPU/CPU speedup (goal ≥ 20×), and the smallest row count at
//! which the GPU beats the CPU.
//!
//! Also the fixed costs: NVRTC's cold compile (and load) of each built-in's module with the disk
//! cache off, and the warm per-call overhead of a 1-row call (context, cached kernel, transfers;
//! goal < 1 ms).
//!
//! Run: `cargo bench -p accelsql-benchmarks --bench gpu_builtins -- [--max-rows N] [--runs N]
//! [--json PATH]` (`ACCELSQL_BENCH_MAX_ROWS` also sets the row limit). Without a GPU the GPU
//! columns say "no GPU" and the CPU part still runs, up to 10M rows by default; each built-in
//! is also capped so that its input takes at most 40% of the available host memory. Each figure
//! is the median of `--runs` timed runs (default 5) after one warm-up run.
//!
//! Only GPU hardware gives GPU figures. With `ACCELSQL_BENCH_FAKE_GPU=1` a device of the fake
//! CUDA driver (`scripts/fake-cuda`) is used for a smoke run instead: every GPU path runs once
//! per size and must succeed, and each GPU column says "fake device" (never a figure).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use accelsql_gpu_scheduler::{DeviceInfo, Inventory, NvmlInventory};
use accelsql_udf_runtime::gpu::{
    self, CudaLibraries, GpuDevice, KernelSource, geo_source, options_source, set_kernel_cache_dir,
    vectors_source,
};
use accelsql_udf_runtime::kernels::Operand;
use accelsql_udf_runtime::kernels::geo::haversine_km_operands;
use accelsql_udf_runtime::kernels::options::{OptionKind, black_scholes};
use accelsql_udf_runtime::kernels::vectors::{VectorOp, vector_similarity};
use arrow::array::{Array, ArrayRef, FixedSizeListArray, Float32Array, Float64Array};
use arrow::datatypes::{DataType, Field};

type BoxError = Box<dyn std::error::Error>;

const ROW_COUNTS: [usize; 6] = [1_000, 10_000, 100_000, 1_000_000, 10_000_000, 100_000_000];
const DIM: usize = 768;
/// Timed 1-row calls for the warm per-call overhead.
const PER_CALL_RUNS: usize = 200;
/// Bytes of the plain pinned copy whose bandwidth is the reference.
const COPY_BYTES: usize = 256 << 20;

/// Command-line options.
struct Options {
    max_rows: Option<usize>,
    runs: usize,
    json: Option<PathBuf>,
}

fn options() -> Result<Options, BoxError> {
    let mut out = Options {
        max_rows: std::env::var("ACCELSQL_BENCH_MAX_ROWS")
            .ok()
            .and_then(|v| v.parse().ok()),
        runs: 5,
        json: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--max-rows" => out.max_rows = Some(args.next().ok_or("--max-rows needs N")?.parse()?),
            "--runs" => {
                out.runs = args
                    .next()
                    .ok_or("--runs needs N")?
                    .parse::<usize>()?
                    .max(1)
            }
            "--json" => out.json = Some(args.next().ok_or("--json needs a path")?.into()),
            // `cargo bench` passes `--bench`; other harness flags are ignored too.
            _ => {}
        }
    }
    Ok(out)
}

/// splitmix64, for deterministic data without a rand dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * ((self.next() >> 11) as f64 / (1u64 << 53) as f64)
    }
}

fn threads() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}

/// `n` values from `f`, generated on all cores (each thread with its own seed).
fn generate<T: Send + Default + Clone>(
    n: usize,
    seed: u64,
    f: impl Fn(&mut Rng) -> T + Sync,
) -> Vec<T> {
    let mut out = vec![T::default(); n];
    let per = n.div_ceil(threads()).max(1);
    std::thread::scope(|s| {
        for (i, part) in out.chunks_mut(per).enumerate() {
            let f = &f;
            s.spawn(move || {
                let mut rng = Rng(seed ^ (i as u64).wrapping_mul(0xa076_1d64_78bd_642f));
                for v in part {
                    *v = f(&mut rng);
                }
            });
        }
    });
    out
}

fn doubles(n: usize, seed: u64, lo: f64, hi: f64) -> ArrayRef {
    Arc::new(Float64Array::from(generate(n, seed, |r| r.uniform(lo, hi))))
}

fn scalar(v: f64) -> Operand {
    Operand::Scalar(Arc::new(Float64Array::from(vec![v])))
}

/// The host memory a benchmark may use (40% of what is available).
fn host_budget() -> usize {
    let available = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find(|l| l.starts_with("MemAvailable:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<usize>().ok())
        })
        .map_or(8 << 30, |kib| kib << 10);
    available / 10 * 4
}

#[derive(Clone, Copy, PartialEq)]
enum Builtin {
    Cosine,
    Haversine,
    BlackScholesCall,
}

impl Builtin {
    fn name(self) -> &'static str {
        match self {
            Self::Cosine => "cosine_similarity",
            Self::Haversine => "haversine_km",
            Self::BlackScholesCall => "black_scholes_call",
        }
    }

    /// Input bytes per row that cross to the device.
    fn input_bytes(self) -> usize {
        match self {
            Self::Cosine => DIM * 4,
            Self::Haversine => 4 * 8,
            Self::BlackScholesCall => 4 * 8,
        }
    }

    /// The arguments for `rows` rows (columns of that length; smaller runs slice them).
    fn data(self, rows: usize) -> Vec<Operand> {
        match self {
            Self::Cosine => {
                let field = Arc::new(Field::new_list_field(DataType::Float32, true));
                let values = generate(rows * DIM, 1, |r| r.uniform(-1.0, 1.0) as f32);
                let embeddings = FixedSizeListArray::new(
                    Arc::clone(&field),
                    DIM as i32,
                    Arc::new(Float32Array::from(values)),
                    None,
                );
                let query: Vec<f32> = generate(DIM, 2, |r| r.uniform(-1.0, 1.0) as f32);
                let query = FixedSizeListArray::new(
                    field,
                    DIM as i32,
                    Arc::new(Float32Array::from(query)),
                    None,
                );
                vec![
                    Operand::Column(Arc::new(embeddings)),
                    Operand::Scalar(Arc::new(query)),
                ]
            }
            Self::Haversine => vec![
                Operand::Column(doubles(rows, 3, -90.0, 90.0)),
                Operand::Column(doubles(rows, 4, -180.0, 180.0)),
                Operand::Column(doubles(rows, 5, -90.0, 90.0)),
                Operand::Column(doubles(rows, 6, -180.0, 180.0)),
            ],
            Self::BlackScholesCall => vec![
                Operand::Column(doubles(rows, 7, 10.0, 200.0)),
                Operand::Column(doubles(rows, 8, 10.0, 200.0)),
                Operand::Column(doubles(rows, 9, 0.05, 3.0)),
                scalar(0.04),
                Operand::Column(doubles(rows, 10, 0.05, 0.8)),
            ],
        }
    }

    fn cpu(self, rows: usize, args: &[Operand]) -> Result<usize, BoxError> {
        let out = match self {
            Self::Cosine => vector_similarity(VectorOp::Cosine, rows, &args[0], &args[1])?,
            Self::Haversine => haversine_km_operands(rows, &four(args)?)?,
            Self::BlackScholesCall => black_scholes(OptionKind::Call, rows, &five(args)?)?,
        };
        Ok(out.len())
    }

    fn gpu(self, device: &DeviceInfo, rows: usize, args: &[Operand]) -> Result<usize, BoxError> {
        let out = match self {
            Self::Cosine => {
                gpu::vector_similarity(device, VectorOp::Cosine, rows, &args[0], &args[1])?
            }
            Self::Haversine => gpu::haversine_km(device, rows, &four(args)?)?,
            Self::BlackScholesCall => {
                gpu::black_scholes(device, OptionKind::Call, rows, &five(args)?)?
            }
        };
        Ok(out.len())
    }
}

fn four(args: &[Operand]) -> Result<[Operand; 4], BoxError> {
    <[Operand; 4]>::try_from(args.to_vec()).map_err(|_| "4 arguments expected".into())
}

fn five(args: &[Operand]) -> Result<[Operand; 5], BoxError> {
    <[Operand; 5]>::try_from(args.to_vec()).map_err(|_| "5 arguments expected".into())
}

/// Rows `start .. start + len` of every column (scalars stay).
fn slice(args: &[Operand], start: usize, len: usize) -> Vec<Operand> {
    args.iter()
        .map(|a| match a {
            Operand::Column(c) => Operand::Column(c.slice(start, len)),
            Operand::Scalar(s) => Operand::Scalar(Arc::clone(s)),
        })
        .collect()
}

/// The CPU kernel over `rows` rows, split into one contiguous part per core.
fn cpu_all_cores(b: Builtin, rows: usize, args: &[Operand]) -> Result<(), BoxError> {
    let parts = threads().min(rows.div_ceil(1024)).max(1);
    let per = rows.div_ceil(parts);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..parts)
            .map(|i| {
                let (start, len) = (i * per, per.min(rows.saturating_sub(i * per)));
                let part = slice(args, start, len);
                s.spawn(move || b.cpu(len, &part).map_err(|e| e.to_string()))
            })
            .collect();
        for h in handles {
            h.join().map_err(|_| "a CPU thread panicked")??;
        }
        Ok::<(), BoxError>(())
    })
}

/// Median seconds of `runs` timed calls of `f` after one warm-up call.
fn median_secs(runs: usize, mut f: impl FnMut() -> Result<(), BoxError>) -> Result<f64, BoxError> {
    f()?;
    let mut times = Vec::with_capacity(runs);
    for _ in 0..runs {
        let start = Instant::now();
        f()?;
        times.push(start.elapsed().as_secs_f64());
    }
    times.sort_by(f64::total_cmp);
    Ok(times[times.len() / 2])
}

/// One measured size of one built-in.
struct Row {
    builtin: Builtin,
    rows: usize,
    cpu_rows_per_s: f64,
    /// GPU rows/s, or why there is no figure.
    gpu_rows_per_s: Result<f64, String>,
}

/// Whether `ACCELSQL_BENCH_FAKE_GPU` asks for a smoke run on the fake CUDA driver.
fn fake_allowed() -> bool {
    std::env::var_os("ACCELSQL_BENCH_FAKE_GPU").is_some_and(|v| !v.is_empty() && v != "0")
}

/// What a smoke run on a fake device prints where a GPU figure would be.
const FAKE: &str = "fake device (ran; not a GPU figure)";

/// A CUDA device, or why there is none.
fn find_gpu() -> Result<DeviceInfo, String> {
    if !CudaLibraries::probe().usable() {
        return Err("no CUDA driver or NVRTC".into());
    }
    let devices = Inventory::new(Arc::new(NvmlInventory::open(None)))
        .devices()
        .map_err(|e| e.to_string())?;
    let mut why = String::from("NVML reports no devices");
    for d in devices {
        if !d.is_hardware() && !fake_allowed() {
            why = format!("{} is not GPU hardware", d.label());
            continue;
        }
        match GpuDevice::open(&d) {
            Ok(_) => return Ok(d),
            Err(e) => why = e.to_string(),
        }
    }
    Err(why)
}

fn rate(x: f64) -> String {
    match x {
        x if x >= 1e9 => format!("{:.2} G", x / 1e9),
        x if x >= 1e6 => format!("{:.2} M", x / 1e6),
        x if x >= 1e3 => format!("{:.2} K", x / 1e3),
        x => format!("{x:.0}"),
    }
}

fn json_number(x: Option<f64>) -> String {
    x.filter(|v| v.is_finite())
        .map_or("null".into(), |v| format!("{v}"))
}

fn json_string(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

fn main() -> Result<(), BoxError> {
    let options = options()?;
    let gpu = find_gpu();
    let default_max = if gpu.is_ok() { 100_000_000 } else { 10_000_000 };
    let max_rows = options.max_rows.unwrap_or(default_max);
    let budget = host_budget();
    let (device, gpu_note) = match &gpu {
        Ok(d) => (
            Some(d.clone()),
            format!("{} ({}, {})", d.name, d.uuid, d.memory_summary()),
        ),
        Err(why) => (None, format!("no GPU: {why}")),
    };
    println!(
        "GPU built-ins vs CPU kernels on {} cores; GPU: {gpu_note}",
        threads()
    );
    println!(
        "median of {} runs after a warm-up; GPU figures include every transfer",
        options.runs
    );

    // A smoke run on a fake device runs every GPU path once and reports no GPU figure.
    let smoke = device.as_ref().is_some_and(|d| !d.is_hardware());
    let pinned = match &device {
        Some(d) if smoke => {
            GpuDevice::open(d)?.pinned_upload_bandwidth(1 << 20, 1)?;
            Err(FAKE.to_string())
        }
        Some(d) => GpuDevice::open(d)
            .and_then(|g| g.pinned_upload_bandwidth(COPY_BYTES, options.runs))
            .map_err(|e| e.to_string()),
        None => Err("no GPU".to_string()),
    };

    // Fixed costs first, while nothing is compiled: NVRTC's cold compile of each module (the
    // disk cache off, so that an earlier run's cache cannot answer), then 1-row calls.
    let modules: [(&str, KernelSource); 3] = [
        ("vectors", vectors_source()),
        ("geo", geo_source()),
        ("options", options_source()),
    ];
    let mut compiles: Vec<(&str, Result<f64, String>)> = Vec::new();
    if let Some(d) = &device {
        set_kernel_cache_dir(None);
        let g = GpuDevice::open(d)?;
        for (name, source) in &modules {
            let start = Instant::now();
            let took = g
                .module(source)
                .map(|_| start.elapsed().as_secs_f64())
                .map_err(|e| e.to_string());
            compiles.push((
                *name,
                if smoke {
                    took.and(Err(FAKE.to_string()))
                } else {
                    took
                },
            ));
        }
    }
    for (name, took) in &compiles {
        match took {
            Ok(s) => println!(
                "NVRTC cold compile + load of module {name}: {:.1} ms",
                s * 1e3
            ),
            Err(e) => println!("NVRTC cold compile + load of module {name}: {e}"),
        }
    }
    let mut per_call: Vec<(Builtin, Result<f64, String>)> = Vec::new();
    if let Some(d) = &device {
        for builtin in [
            Builtin::Cosine,
            Builtin::Haversine,
            Builtin::BlackScholesCall,
        ] {
            let args = builtin.data(1);
            let took = if smoke {
                builtin
                    .gpu(d, 1, &args)
                    .map(|_| ())
                    .map_err(|e| e.to_string())
                    .and(Err(FAKE.to_string()))
            } else {
                median_secs(PER_CALL_RUNS, || builtin.gpu(d, 1, &args).map(|_| ()))
                    .map_err(|e| e.to_string())
            };
            match &took {
                Ok(s) => println!(
                    "warm per-call GPU overhead of {} (1 row, median of {PER_CALL_RUNS}): {:.3} ms (goal < 1 ms: {})",
                    builtin.name(),
                    s * 1e3,
                    if *s < 1e-3 { "met" } else { "MISSED" }
                ),
                Err(e) => println!("warm per-call GPU overhead of {}: {e}", builtin.name()),
            }
            per_call.push((builtin, took));
        }
    }

    let mut rows_out = Vec::new();
    for builtin in [
        Builtin::Cosine,
        Builtin::Haversine,
        Builtin::BlackScholesCall,
    ] {
        let cap = budget / builtin.input_bytes();
        let sizes: Vec<usize> = ROW_COUNTS
            .iter()
            .copied()
            .filter(|&n| n <= max_rows && n <= cap)
            .collect();
        let Some(&largest) = sizes.last() else {
            continue;
        };
        let data = builtin.data(largest);
        for &n in &sizes {
            let args = slice(&data, 0, n);
            // Small sizes are quick and noisy: more runs.
            let runs = if n < 1_000_000 {
                options.runs * 5
            } else {
                options.runs
            };
            let cpu = median_secs(runs, || cpu_all_cores(builtin, n, &args))?;
            let gpu_rate = match &device {
                Some(d) if smoke => {
                    builtin.gpu(d, n, &args)?;
                    Err(FAKE.to_string())
                }
                Some(d) => median_secs(runs, || builtin.gpu(d, n, &args).map(|_| ()))
                    .map(|s| n as f64 / s)
                    .map_err(|e| e.to_string()),
                None => Err("no GPU".to_string()),
            };
            let row = Row {
                builtin,
                rows: n,
                cpu_rows_per_s: n as f64 / cpu,
                gpu_rows_per_s: gpu_rate,
            };
            println!(
                "  measured {:<20} {:>11} rows: CPU {:>10} rows/s, GPU {}",
                builtin.name(),
                n,
                rate(row.cpu_rows_per_s),
                row.gpu_rows_per_s
                    .as_ref()
                    .map_or_else(|e| e.clone(), |g| format!("{} rows/s", rate(*g)))
            );
            rows_out.push(row);
        }
    }

    println!();
    println!(
        "{:<20} {:>11}  {:>14}  {:>14}  {:>8}  {:>12}",
        "built-in", "rows", "CPU rows/s", "GPU rows/s", "GPU/CPU", "GPU input/s"
    );
    for r in &rows_out {
        let (gpu, ratio, bandwidth) = match &r.gpu_rows_per_s {
            Ok(g) => (
                rate(*g),
                format!("{:.2}×", g / r.cpu_rows_per_s),
                format!("{}B", rate(g * r.builtin.input_bytes() as f64)),
            ),
            Err(_) if smoke => ("fake device".into(), "-".into(), "-".into()),
            Err(_) => ("no GPU".into(), "no GPU".into(), "no GPU".into()),
        };
        println!(
            "{:<20} {:>11}  {:>14}  {:>14}  {:>8}  {:>12}",
            r.builtin.name(),
            r.rows,
            rate(r.cpu_rows_per_s),
            gpu,
            ratio,
            bandwidth
        );
    }

    // The figures against the goals.
    let largest = |b: Builtin| {
        rows_out
            .iter()
            .filter(|r| r.builtin == b)
            .max_by_key(|r| r.rows)
    };
    println!();
    match &pinned {
        Ok(bw) => println!(
            "pinned host→device copy ({} MiB): {}B/s",
            COPY_BYTES >> 20,
            rate(*bw)
        ),
        Err(e) => println!("pinned host→device copy: {e}"),
    }
    let cosine_share = match (largest(Builtin::Cosine), &pinned) {
        (Some(r), Ok(bw)) => r.gpu_rows_per_s.as_ref().ok().map(|g| {
            let e2e = g * Builtin::Cosine.input_bytes() as f64;
            (r.rows, e2e, e2e / bw * 100.0)
        }),
        _ => None,
    };
    match cosine_share {
        Some((n, e2e, pct)) => println!(
            "cosine_similarity end to end at {n} rows: {}B/s of input = {pct:.1}% of the pinned copy (goal ≥ 80% on an H100: {})",
            rate(e2e),
            if pct >= 80.0 { "met" } else { "MISSED" }
        ),
        None => println!(
            "cosine_similarity end to end vs pinned copy: {}",
            if smoke { FAKE } else { "no GPU" }
        ),
    }
    let bs_speedup = largest(Builtin::BlackScholesCall).and_then(|r| {
        r.gpu_rows_per_s
            .as_ref()
            .ok()
            .map(|g| (r.rows, g / r.cpu_rows_per_s))
    });
    match bs_speedup {
        Some((n, s)) => println!(
            "black_scholes_call GPU/CPU at {n} rows: {s:.1}× (goal ≥ 20×: {})",
            if s >= 20.0 { "met" } else { "MISSED" }
        ),
        None => println!(
            "black_scholes_call GPU/CPU: {}",
            if smoke { FAKE } else { "no GPU" }
        ),
    }
    let mut crossovers = Vec::new();
    for b in [
        Builtin::Cosine,
        Builtin::Haversine,
        Builtin::BlackScholesCall,
    ] {
        // The smallest size from which the GPU beats the CPU at every larger size measured
        // (a single noisy win at 1K rows followed by losses is no crossover).
        let sizes: Vec<&Row> = rows_out.iter().filter(|r| r.builtin == b).collect();
        let wins = |r: &Row| {
            r.gpu_rows_per_s
                .as_ref()
                .is_ok_and(|g| *g > r.cpu_rows_per_s)
        };
        let first = (0..sizes.len())
            .find(|&i| sizes[i..].iter().all(|r| wins(r)))
            .map(|i| sizes[i].rows);
        match (&device, first) {
            (None, _) => println!("{}: GPU beats CPU from: no GPU", b.name()),
            (Some(_), _) if smoke => println!("{}: GPU beats CPU from: {FAKE}", b.name()),
            (Some(_), Some(n)) => println!(
                "{}: GPU beats CPU from {n} rows (and at every larger size measured)",
                b.name()
            ),
            (Some(_), None) => println!("{}: GPU never beats CPU up to the largest size", b.name()),
        }
        crossovers.push((b, first));
    }

    if let Some(path) = &options.json {
        let results: Vec<String> = rows_out
            .iter()
            .map(|r| {
                format!(
                    "{{\"builtin\":{},\"rows\":{},\"cpu_rows_per_s\":{},\"gpu_rows_per_s\":{},\"gpu_note\":{}}}",
                    json_string(r.builtin.name()),
                    r.rows,
                    json_number(Some(r.cpu_rows_per_s)),
                    json_number(r.gpu_rows_per_s.as_ref().ok().copied()),
                    r.gpu_rows_per_s.as_ref().err().map_or("null".into(), |e| json_string(e)),
                )
            })
            .collect();
        let crossovers: Vec<String> = crossovers
            .iter()
            .map(|(b, n)| {
                format!(
                    "{}:{}",
                    json_string(b.name()),
                    n.map_or("null".into(), |n| n.to_string())
                )
            })
            .collect();
        let compiles: Vec<String> = compiles
            .iter()
            .map(|(name, took)| {
                format!(
                    "{}:{}",
                    json_string(name),
                    json_number(took.as_ref().ok().map(|s| s * 1e3))
                )
            })
            .collect();
        let per_call: Vec<String> = per_call
            .iter()
            .map(|(b, took)| {
                format!(
                    "{}:{}",
                    json_string(b.name()),
                    json_number(took.as_ref().ok().map(|s| s * 1e3))
                )
            })
            .collect();
        let json = format!(
            "{{\"cpu_threads\":{},\"gpu\":{},\"nvrtc_cold_compile_ms\":{{{}}},\"warm_per_call_ms\":{{{}}},\"pinned_h2d_bytes_per_s\":{},\"cosine_e2e_bytes_per_s\":{},\"cosine_e2e_pct_of_pinned\":{},\"black_scholes_speedup\":{},\"gpu_beats_cpu_from_rows\":{{{}}},\"results\":[{}]}}\n",
            threads(),
            json_string(&gpu_note),
            compiles.join(","),
            per_call.join(","),
            json_number(pinned.as_ref().ok().copied()),
            json_number(cosine_share.map(|c| c.1)),
            json_number(cosine_share.map(|c| c.2)),
            json_number(bs_speedup.map(|s| s.1)),
            crossovers.join(","),
            results.join(",")
        );
        std::fs::write(path, json)?;
        println!("wrote {}", path.display());
    }
    Ok(())
}
