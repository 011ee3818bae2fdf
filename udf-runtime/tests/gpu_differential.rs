//! CPU/GPU differential tests of the built-in GPU implementations, and tests of the GPU runtime
//! through small kernels of its own (chunking, out-of-memory retries, output checks).
//!
//! Tests that need a CUDA device look for one (NVML inventory, CUDA libraries, a device that
//! opens) and, where there is none, print `SKIPPED (no CUDA device): <test>` and pass (with
//! `ACCELSQL_REQUIRE_GPU` set they fail instead). Run them on a GPU machine with `cargo test -p
//! accelsql-udf-runtime --test gpu_differential`, or carry them there with
//! `scripts/gpu-verify/pack.sh`.
//!
//! Tolerances (NULL positions must always agree exactly):
//! - vectors: both sides sum the same exact products (f32·f32 and f64 products of these inputs
//!   are exact or correctly rounded) in `f64`, in different orders, so each sum is within
//!   `n·ε·Σ|termᵢ|` of the exact one (n ≤ 768: n·ε < 2e-13). We allow `1e-12·(1 + Σ|aᵢ·bᵢ|)`
//!   for dot products, `1e-12·(1 + |result|)` for L2 distances (positive terms) and `1e-12` for
//!   cosines (|cos error| ≲ 2n·ε because Σ|aᵢ·bᵢ| ≤ |a|·|b|).
//! - haversine: CUDA's `sin`/`cos`/`asin`/`sqrt` are within 2 ULP of the CPU's: we allow
//!   `1e-12·|d| + 1e-9` km.
//! - Black–Scholes: a price is a difference of terms of the size of spot and strike, each within
//!   a few ULP (CUDA `exp`/`log`/`erfc`): we allow `1e-12·max(1, S, K)`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, OnceLock};

use accelsql_gpu_scheduler::{DeviceInfo, Inventory, NvmlInventory};
use accelsql_udf_runtime::gpu::{
    self, CudaLibraries, DeviceColumn, DeviceOperand, ElementType, GpuColumnarKernel, GpuDevice,
    KernelSource,
};
use accelsql_udf_runtime::kernels::Operand;
use accelsql_udf_runtime::kernels::geo::haversine_km_operands;
use accelsql_udf_runtime::kernels::options::{OptionKind, black_scholes};
use accelsql_udf_runtime::kernels::vectors::{VectorOp, vector_similarity};
use accelsql_udf_runtime::{Result, RuntimeError};
use arrow::array::{
    Array, ArrayRef, AsArray, FixedSizeListArray, Float64Array, LargeListArray, ListArray,
    NullArray,
};
use arrow::datatypes::{DataType, Float32Type, Float64Type};
use cudarc::driver::{CudaStream, PushKernelArg};

/// Sizes every built-in is tried at: empty, one row, odd sizes around chunk boundaries.
const SIZES: [usize; 5] = [0, 1, 7, 1023, 4097];

/// A CUDA device for the tests, or why there is none (looked for once).
fn gpu() -> &'static Result<DeviceInfo, String> {
    static GPU: OnceLock<Result<DeviceInfo, String>> = OnceLock::new();
    GPU.get_or_init(|| {
        if !CudaLibraries::probe().usable() {
            return Err("the CUDA driver or NVRTC library is missing".into());
        }
        let devices = Inventory::new(Arc::new(NvmlInventory::open(None)))
            .devices()
            .map_err(|e| e.to_string())?;
        let mut reasons = Vec::new();
        for device in devices {
            match GpuDevice::open(&device) {
                Ok(_) => return Ok(device),
                Err(e) => reasons.push(e.to_string()),
            }
        }
        Err(if reasons.is_empty() {
            "NVML reports no devices".into()
        } else {
            reasons.join("; ")
        })
    })
}

/// The test's device, or a visible skip (see `gpu::device_or_skip`).
macro_rules! require_gpu {
    ($name:expr) => {
        match gpu::device_or_skip($name, gpu()) {
            Some(device) => device.clone(),
            None => return,
        }
    };
}

/// splitmix64: a tiny seeded generator (no rand crate in the workspace).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.unit()
    }

    fn chance(&mut self, p: f64) -> bool {
        self.unit() < p
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

fn assert_same_nulls(what: &str, gpu: &Float64Array, cpu: &Float64Array) {
    assert_eq!(gpu.len(), cpu.len(), "{what}: lengths");
    for r in 0..cpu.len() {
        assert_eq!(gpu.is_null(r), cpu.is_null(r), "{what}: NULL of row {r}");
    }
}

fn assert_close_row(what: &str, r: usize, g: f64, c: f64, tolerance: f64) {
    if c.is_nan() {
        assert!(g.is_nan(), "{what}: row {r}: GPU {g}, CPU NaN");
        return;
    }
    if c.is_infinite() {
        assert_eq!(g, c, "{what}: row {r}");
        return;
    }
    assert!(
        (g - c).abs() <= tolerance,
        "{what}: row {r}: GPU {g} CPU {c} differ by {} > {tolerance}",
        (g - c).abs()
    );
}

// ---------------------------------------------------------------------------------------------
// Vectors
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy)]
enum Kind {
    Fixed,
    List,
    LargeList,
}

#[derive(Debug, Clone, Copy)]
enum Elem {
    F32,
    F64,
}

/// Vectors as plain data: `None` a NULL vector, `Some(None)` elements NULL elements.
type Vectors = Vec<Option<Vec<Option<f64>>>>;

/// Random vectors: `lengths[r]` elements in row r (ignored by fixed-size lists, which use
/// `dim`), with NULL vectors, NULL elements, zero vectors and the odd NaN; values are exactly
/// representable in `elem`.
fn random_vectors(rng: &mut Rng, lengths: &[usize], elem: Elem, nulls: bool) -> Vectors {
    lengths
        .iter()
        .map(|&len| {
            if nulls && rng.chance(0.08) {
                return None;
            }
            let zero = rng.chance(0.03);
            Some(
                (0..len)
                    .map(|_| {
                        if nulls && rng.chance(0.002) {
                            return None;
                        }
                        if rng.chance(0.0005) {
                            return Some(f64::NAN);
                        }
                        let v = if zero { 0.0 } else { rng.uniform(-1.0, 1.0) };
                        Some(match elem {
                            Elem::F32 => f64::from(v as f32),
                            Elem::F64 => v,
                        })
                    })
                    .collect(),
            )
        })
        .collect()
}

/// The Arrow array of `data` (rows of `dim` elements for fixed-size lists), built inside a larger
/// array and sliced out of it, so that offsets are exercised.
fn vector_array(data: &Vectors, kind: Kind, elem: Elem, dim: usize) -> ArrayRef {
    let pad = |n: usize| -> Vectors { (0..n).map(|i| Some(vec![Some(i as f64); dim])).collect() };
    let padded: Vectors = pad(3)
        .into_iter()
        .chain(data.iter().cloned())
        .chain(pad(2))
        .collect();
    let array: ArrayRef = match elem {
        Elem::F32 => {
            let rows = padded.iter().map(|r| {
                r.as_ref()
                    .map(|v| v.iter().map(|x| x.map(|x| x as f32)).collect::<Vec<_>>())
            });
            match kind {
                Kind::Fixed => Arc::new(
                    FixedSizeListArray::from_iter_primitive::<Float32Type, _, _>(rows, dim as i32),
                ),
                Kind::List => Arc::new(ListArray::from_iter_primitive::<Float32Type, _, _>(rows)),
                Kind::LargeList => Arc::new(
                    LargeListArray::from_iter_primitive::<Float32Type, _, _>(rows),
                ),
            }
        }
        Elem::F64 => {
            let rows = padded.iter().cloned();
            match kind {
                Kind::Fixed => Arc::new(
                    FixedSizeListArray::from_iter_primitive::<Float64Type, _, _>(rows, dim as i32),
                ),
                Kind::List => Arc::new(ListArray::from_iter_primitive::<Float64Type, _, _>(rows)),
                Kind::LargeList => Arc::new(
                    LargeListArray::from_iter_primitive::<Float64Type, _, _>(rows),
                ),
            }
        }
    };
    array.slice(3, data.len())
}

/// The allowed difference for one row (see the file's documentation).
fn vector_tolerance(op: VectorOp, a: &[Option<f64>], b: &[Option<f64>], cpu: f64) -> f64 {
    let magnitude: f64 = a
        .iter()
        .zip(b)
        .map(|(x, y)| (x.unwrap_or(0.0) * y.unwrap_or(0.0)).abs())
        .sum();
    match op {
        VectorOp::Dot => 1e-12 * (1.0 + magnitude),
        VectorOp::L2 => 1e-12 * (1.0 + cpu.abs()),
        VectorOp::Cosine => 1e-12,
    }
}

/// Runs one vector case on both sides and compares.
fn vector_case(
    device: &DeviceInfo,
    what: &str,
    op: VectorOp,
    rows: usize,
    a: (&Vectors, Operand),
    b: (&Vectors, Operand),
) {
    let cpu = vector_similarity(op, rows, &a.1, &b.1);
    let gpu = gpu::vector_similarity(device, op, rows, &a.1, &b.1);
    let (cpu, gpu) = match (cpu, gpu) {
        (Ok(c), Ok(g)) => (c, g),
        (Err(c), Err(g)) => {
            assert_eq!(g.to_string(), c.to_string(), "{what}");
            return;
        }
        (c, g) => panic!("{what}: CPU {c:?} but GPU {g:?}"),
    };
    assert_same_nulls(what, &gpu, &cpu);
    let at = |data: &Vectors, op: &Operand, r: usize| -> Vec<Option<f64>> {
        let i = if matches!(op, Operand::Scalar(_)) {
            0
        } else {
            r
        };
        data[i].clone().unwrap_or_default()
    };
    for r in 0..rows {
        if cpu.is_valid(r) {
            let (va, vb) = (at(a.0, &a.1, r), at(b.0, &b.1, r));
            let tolerance = vector_tolerance(op, &va, &vb, cpu.value(r));
            assert_close_row(what, r, gpu.value(r), cpu.value(r), tolerance);
        }
    }
}

#[test]
fn vectors_agree_with_the_cpu() {
    let device = require_gpu!("vectors_agree_with_the_cpu");
    let mut rng = Rng(0x5eed_0001);
    for (kind_a, dim) in [
        (Kind::Fixed, 768),
        (Kind::List, 33),
        (Kind::LargeList, 5),
        (Kind::Fixed, 3),
    ] {
        for (ea, eb) in [
            (Elem::F32, Elem::F32),
            (Elem::F32, Elem::F64),
            (Elem::F64, Elem::F32),
            (Elem::F64, Elem::F64),
        ] {
            for rows in SIZES {
                let lengths = vec![dim; rows];
                let a = random_vectors(&mut rng, &lengths, ea, true);
                let aa = vector_array(&a, kind_a, ea, dim);
                // A scalar query (no NULLs in it), as a List.
                let q = random_vectors(&mut rng, &[dim], eb, false);
                let qa = vector_array(&q, Kind::List, eb, dim);
                // A column second argument of another kind.
                let b = random_vectors(&mut rng, &lengths, eb, true);
                let ba = vector_array(&b, Kind::Fixed, eb, dim);
                for op in VectorOp::ALL {
                    let what = format!("{op:?} {kind_a:?}<{ea:?}>[{dim}] × {eb:?}, {rows} rows");
                    vector_case(
                        &device,
                        &format!("{what} scalar query"),
                        op,
                        rows,
                        (&a, Operand::Column(Arc::clone(&aa))),
                        (&q, Operand::Scalar(Arc::clone(&qa))),
                    );
                    vector_case(
                        &device,
                        &format!("{what} column × column"),
                        op,
                        rows,
                        (&a, Operand::Column(Arc::clone(&aa))),
                        (&b, Operand::Column(Arc::clone(&ba))),
                    );
                    vector_case(
                        &device,
                        &format!("{what} scalar first"),
                        op,
                        rows,
                        (&q, Operand::Scalar(Arc::clone(&qa))),
                        (&a, Operand::Column(Arc::clone(&aa))),
                    );
                }
            }
        }
    }
}

#[test]
fn ragged_vectors_agree_with_the_cpu() {
    let device = require_gpu!("ragged_vectors_agree_with_the_cpu");
    let mut rng = Rng(0x5eed_0002);
    for rows in SIZES {
        // Row r of both sides has the same, varying length (0 included): the offsets path.
        let lengths: Vec<usize> = (0..rows).map(|_| rng.below(40)).collect();
        for (ka, kb) in [(Kind::List, Kind::LargeList), (Kind::LargeList, Kind::List)] {
            let a = random_vectors(&mut rng, &lengths, Elem::F32, true);
            let b = random_vectors(&mut rng, &lengths, Elem::F64, true);
            let (aa, ba) = (
                vector_array(&a, ka, Elem::F32, 0),
                vector_array(&b, kb, Elem::F64, 0),
            );
            for op in VectorOp::ALL {
                vector_case(
                    &device,
                    &format!("ragged {op:?} {ka:?}×{kb:?} {rows} rows"),
                    op,
                    rows,
                    (&a, Operand::Column(Arc::clone(&aa))),
                    (&b, Operand::Column(Arc::clone(&ba))),
                );
            }
        }
    }
}

#[test]
fn vector_edge_cases_agree_with_the_cpu() {
    let device = require_gpu!("vector_edge_cases_agree_with_the_cpu");
    let mut rng = Rng(0x5eed_0003);
    let rows = 50;
    let a = random_vectors(&mut rng, &vec![4; rows], Elem::F32, true);
    let aa = vector_array(&a, Kind::Fixed, Elem::F32, 4);
    let column = Operand::Column(Arc::clone(&aa));
    // A NULL query: every row NULL.
    let null_query: Vectors = vec![None];
    let nq = Operand::Scalar(vector_array(&null_query, Kind::List, Elem::F32, 4));
    // A NULL-typed argument: every row NULL.
    let nulls: Vectors = vec![None; rows];
    let nt = Operand::Column(Arc::new(NullArray::new(rows)));
    // A query of another length: the length error, for the first non-NULL row.
    let short: Vectors = vec![Some(vec![Some(1.0); 3])];
    let sq = Operand::Scalar(vector_array(&short, Kind::List, Elem::F64, 3));
    // An all-zero query: cosine NULL everywhere, dot 0, L2 the norms.
    let zero: Vectors = vec![Some(vec![Some(0.0); 4])];
    let zq = Operand::Scalar(vector_array(&zero, Kind::Fixed, Elem::F64, 4));
    for op in VectorOp::ALL {
        for (name, data, b) in [
            ("NULL query", &null_query, &nq),
            ("NULL-typed", &nulls, &nt),
            ("short query", &short, &sq),
            ("zero query", &zero, &zq),
        ] {
            vector_case(
                &device,
                &format!("{op:?} {name}"),
                op,
                rows,
                (&a, column.clone()),
                (data, b.clone()),
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// haversine_km and Black–Scholes
// ---------------------------------------------------------------------------------------------

/// A DOUBLE column of `rows` values from `value`, NULL with probability `nulls`, sliced out of a
/// larger array.
fn doubles(
    rng: &mut Rng,
    rows: usize,
    nulls: f64,
    mut value: impl FnMut(&mut Rng) -> f64,
) -> ArrayRef {
    let values: Vec<Option<f64>> = (0..rows + 5)
        .map(|_| (!rng.chance(nulls)).then(|| value(rng)))
        .collect();
    Arc::new(Float64Array::from(values).slice(2, rows))
}

fn scalar(value: Option<f64>) -> Operand {
    Operand::Scalar(Arc::new(Float64Array::from(vec![value])))
}

fn compare_doubles(
    what: &str,
    gpu: Result<Float64Array>,
    cpu: Result<Float64Array>,
    tolerance: impl Fn(usize, f64) -> f64,
) {
    let (gpu, cpu) = match (gpu, cpu) {
        (Ok(g), Ok(c)) => (g, c),
        (Err(g), Err(c)) => {
            assert_eq!(g.to_string(), c.to_string(), "{what}");
            return;
        }
        (g, c) => panic!("{what}: CPU {c:?} but GPU {g:?}"),
    };
    assert_same_nulls(what, &gpu, &cpu);
    for r in 0..cpu.len() {
        if cpu.is_valid(r) {
            assert_close_row(
                what,
                r,
                gpu.value(r),
                cpu.value(r),
                tolerance(r, cpu.value(r)),
            );
        }
    }
}

fn haversine_case(device: &DeviceInfo, what: &str, rows: usize, args: &[Operand; 4]) {
    compare_doubles(
        what,
        gpu::haversine_km(device, rows, args),
        haversine_km_operands(rows, args),
        |_, d| 1e-12 * d.abs() + 1e-9,
    );
}

#[test]
fn haversine_agrees_with_the_cpu() {
    let device = require_gpu!("haversine_agrees_with_the_cpu");
    let mut rng = Rng(0x5eed_0004);
    for rows in SIZES {
        let lat = |rng: &mut Rng| rng.uniform(-90.0, 90.0);
        let lon = |rng: &mut Rng| rng.uniform(-180.0, 180.0);
        let cols: Vec<Operand> = (0..4)
            .map(|i| {
                Operand::Column(doubles(
                    &mut rng,
                    rows,
                    0.05,
                    if i % 2 == 0 { lat } else { lon },
                ))
            })
            .collect();
        let [a, b, c, d] = [0, 1, 2, 3].map(|i| cols[i].clone());
        haversine_case(
            &device,
            &format!("columns, {rows} rows"),
            rows,
            &[a.clone(), b.clone(), c, d],
        );
        let paris = [scalar(Some(48.8566)), scalar(Some(2.3522))];
        haversine_case(
            &device,
            &format!("to a scalar point, {rows} rows"),
            rows,
            &[a.clone(), b.clone(), paris[0].clone(), paris[1].clone()],
        );
        haversine_case(
            &device,
            &format!("from a scalar point, {rows} rows"),
            rows,
            &[paris[0].clone(), paris[1].clone(), a.clone(), b.clone()],
        );
        haversine_case(
            &device,
            &format!("NULL scalar, {rows} rows"),
            rows,
            &[a, b, scalar(None), paris[1].clone()],
        );
    }
    // All scalars, including antipodes and the same point twice.
    for (p, q) in [
        ((0.0, 0.0), (0.0, 180.0)),
        ((10.0, 20.0), (10.0, 20.0)),
        ((90.0, 0.0), (-90.0, 0.0)),
    ] {
        let args = [
            scalar(Some(p.0)),
            scalar(Some(p.1)),
            scalar(Some(q.0)),
            scalar(Some(q.1)),
        ];
        haversine_case(&device, &format!("scalars {p:?} {q:?}"), 3, &args);
    }
}

fn black_scholes_case(
    device: &DeviceInfo,
    what: &str,
    kind: OptionKind,
    rows: usize,
    args: &[Operand; 5],
) {
    let magnitude = |r: usize| {
        let at = |o: &Operand| {
            let a = o.array().as_primitive::<Float64Type>();
            let i = o.index(r);
            if a.is_valid(i) { a.value(i).abs() } else { 0.0 }
        };
        1f64.max(at(&args[0])).max(at(&args[1]))
    };
    compare_doubles(
        what,
        gpu::black_scholes(device, kind, rows, args),
        black_scholes(kind, rows, args),
        |r, _| 1e-12 * magnitude(r),
    );
}

#[test]
fn black_scholes_agrees_with_the_cpu() {
    let device = require_gpu!("black_scholes_agrees_with_the_cpu");
    let mut rng = Rng(0x5eed_0005);
    // Mostly valid inputs, with the odd invalid one (non-positive, negative, NaN, infinite).
    let odd = |rng: &mut Rng, v: f64| -> f64 {
        if rng.chance(0.02) {
            [0.0, -1.0, f64::NAN, f64::INFINITY][rng.below(4)]
        } else {
            v
        }
    };
    for rows in SIZES {
        let spot = doubles(&mut rng, rows, 0.03, |r| {
            let v = r.uniform(1.0, 500.0);
            odd(r, v)
        });
        let strike = doubles(&mut rng, rows, 0.03, |r| r.uniform(1.0, 500.0));
        let years = doubles(&mut rng, rows, 0.03, |r| {
            let v = if r.chance(0.05) {
                0.0
            } else {
                r.uniform(0.0, 5.0)
            };
            odd(r, v)
        });
        let rate = doubles(&mut rng, rows, 0.03, |r| r.uniform(-0.02, 0.15));
        let vol = doubles(&mut rng, rows, 0.03, |r| {
            let v = if r.chance(0.05) {
                0.0
            } else {
                r.uniform(0.0, 1.5)
            };
            odd(r, v)
        });
        let col = |a: &ArrayRef| Operand::Column(Arc::clone(a));
        for kind in [OptionKind::Call, OptionKind::Put] {
            let all = [col(&spot), col(&strike), col(&years), col(&rate), col(&vol)];
            black_scholes_case(
                &device,
                &format!("{kind:?} columns, {rows} rows"),
                kind,
                rows,
                &all,
            );
            let market = [
                col(&spot),
                col(&strike),
                col(&years),
                scalar(Some(0.05)),
                scalar(Some(0.2)),
            ];
            black_scholes_case(
                &device,
                &format!("{kind:?} scalar market, {rows} rows"),
                kind,
                rows,
                &market,
            );
            let null = [
                col(&spot),
                col(&strike),
                scalar(None),
                col(&rate),
                col(&vol),
            ];
            black_scholes_case(
                &device,
                &format!("{kind:?} NULL scalar, {rows} rows"),
                kind,
                rows,
                &null,
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Chunking, and errors that come before the device
// ---------------------------------------------------------------------------------------------

#[test]
fn batches_larger_than_a_chunk_agree_with_the_cpu() {
    let device = require_gpu!("batches_larger_than_a_chunk_agree_with_the_cpu");
    let mut rng = Rng(0x5eed_0006);
    let rows = 4097;
    // 768-dim FLOAT vectors are ~3 KiB a row: 64 KiB chunks hold 21 rows, 1 MiB ones 340.
    for limit in [64 << 10, 1 << 20, 100] {
        gpu::with_max_chunk_bytes(limit, || {
            let a = random_vectors(&mut rng, &vec![768; rows], Elem::F32, true);
            let aa = vector_array(&a, Kind::Fixed, Elem::F32, 768);
            let q = random_vectors(&mut rng, &[768], Elem::F32, false);
            let qa = vector_array(&q, Kind::Fixed, Elem::F32, 768);
            vector_case(
                &device,
                &format!("chunked cosine, {limit}-byte chunks"),
                VectorOp::Cosine,
                rows,
                (&a, Operand::Column(aa)),
                (&q, Operand::Scalar(qa)),
            );
            let cols: Vec<Operand> = (0..5)
                .map(|_| Operand::Column(doubles(&mut rng, rows, 0.05, |r| r.uniform(0.5, 2.0))))
                .collect();
            let four = [
                cols[0].clone(),
                cols[1].clone(),
                cols[2].clone(),
                cols[3].clone(),
            ];
            haversine_case(
                &device,
                &format!("chunked haversine, {limit}-byte chunks"),
                rows,
                &four,
            );
            let five = [
                cols[0].clone(),
                cols[1].clone(),
                cols[2].clone(),
                cols[3].clone(),
                cols[4].clone(),
            ];
            black_scholes_case(
                &device,
                &format!("chunked call, {limit}-byte chunks"),
                OptionKind::Call,
                rows,
                &five,
            );
        });
    }
}

/// A device that looks real but is not there (on a GPU machine, its UUID matches nothing).
fn phantom_device(simulated: bool) -> DeviceInfo {
    DeviceInfo {
        uuid: "GPU-00000000-dead-beef-0000-000000000000".into(),
        name: "NVIDIA Phantom".into(),
        simulated,
        ..DeviceInfo::simulated(7)
    }
}

#[test]
fn missing_and_simulated_devices_are_unavailable() {
    for simulated in [true, false] {
        let device = phantom_device(simulated);
        let e = GpuDevice::open(&device).unwrap_err();
        assert_eq!(e.code(), RuntimeError::GPU_UNAVAILABLE, "{e}");
        let args = [
            scalar(Some(1.0)),
            scalar(Some(2.0)),
            scalar(Some(3.0)),
            scalar(Some(4.0)),
        ];
        let e = gpu::haversine_km(&device, 1, &args).unwrap_err();
        assert_eq!(e.code(), RuntimeError::GPU_UNAVAILABLE, "{e}");
    }
}

#[test]
fn argument_errors_match_the_cpu_before_any_device_is_needed() {
    // Runs everywhere: arguments are checked before the device is opened.
    let device = phantom_device(false);
    let a = Operand::Column(vector_array(
        &vec![Some(vec![Some(1.0); 3]), None, Some(vec![Some(1.0); 2])],
        Kind::List,
        Elem::F32,
        0,
    ));
    let b = Operand::Scalar(vector_array(
        &vec![Some(vec![Some(1.0); 3])],
        Kind::List,
        Elem::F64,
        0,
    ));
    let gpu = gpu::vector_similarity(&device, VectorOp::Cosine, 3, &a, &b).unwrap_err();
    let cpu = vector_similarity(VectorOp::Cosine, 3, &a, &b).unwrap_err();
    assert_eq!(gpu.to_string(), cpu.to_string());
    assert_eq!(gpu.code(), RuntimeError::INVALID_ARGUMENT);
    let ints = Operand::Column(Arc::new(arrow::array::Int64Array::from(vec![1, 2])));
    let doubles2 = Operand::Column(Arc::new(Float64Array::from(vec![1.0, 2.0])));
    let args = [doubles2.clone(), ints, doubles2.clone(), doubles2.clone()];
    let gpu = gpu::haversine_km(&device, 2, &args).unwrap_err();
    let cpu = haversine_km_operands(2, &args).unwrap_err();
    assert_eq!(gpu.to_string(), cpu.to_string());
    let five = [
        doubles2.clone(),
        doubles2.clone(),
        doubles2.clone(),
        doubles2.clone(),
        doubles2,
    ];
    let gpu = gpu::black_scholes(&device, OptionKind::Put, 3, &five).unwrap_err();
    let cpu = black_scholes(OptionKind::Put, 3, &five).unwrap_err();
    assert_eq!(gpu.to_string(), cpu.to_string());
}

// ---------------------------------------------------------------------------------------------
// The runtime, through kernels of the test's own
// ---------------------------------------------------------------------------------------------

fn twice_source() -> KernelSource {
    KernelSource::new(
        "test_twice",
        r#"extern "C" __global__ void twice(const double* x, int x_scalar, long long n, double* out) {
               long long r = (long long)blockIdx.x * blockDim.x + threadIdx.x;
               if (r < n) out[r] = 2.0 * x[x_scalar ? 0 : r];
           }"#,
    )
}

/// How the test kernel misbehaves.
#[derive(Clone, Copy, PartialEq)]
enum Twice {
    /// Correct.
    Good,
    /// Claims one row too few.
    ShortOutput,
    /// Returns FLOAT while declaring DOUBLE.
    WrongType,
    /// Runs out of device memory for chunks of more than this many rows.
    OutOfMemoryAbove(usize),
}

impl GpuColumnarKernel for Twice {
    fn name(&self) -> &str {
        "twice"
    }

    fn output_type(&self) -> DataType {
        DataType::Float64
    }

    fn evaluate_columnar(
        &self,
        device: &GpuDevice,
        stream: &Arc<CudaStream>,
        rows: usize,
        args: &[DeviceOperand<'_>],
    ) -> Result<DeviceColumn> {
        if let Twice::OutOfMemoryAbove(limit) = *self
            && rows > limit
        {
            // Four times the device's memory: CUDA_ERROR_OUT_OF_MEMORY.
            let total = device.context().total_mem().unwrap();
            // SAFETY: never read; it is dropped at once (if it is allocated at all).
            return match unsafe { stream.alloc::<u8>(total.saturating_mul(4)) } {
                Err(e) => Err(device.error("allocating scratch", e)),
                Ok(_) => Err(RuntimeError::Gpu {
                    device: device.label().to_string(),
                    message: "allocated more memory than the device has".into(),
                }),
            };
        }
        let x = args[0];
        let function = device.function(&twice_source(), "twice")?;
        let (element, out_rows) = match self {
            Twice::ShortOutput => (ElementType::F64, rows - 1),
            Twice::WrongType => (ElementType::F32, rows),
            _ => (ElementType::F64, rows),
        };
        let mut out = DeviceColumn::alloc(device, stream, element, out_rows, false)?;
        let n = i64::try_from(out_rows.min(rows)).unwrap();
        let flag = x.scalar_flag();
        if self == &Twice::Good || matches!(self, Twice::OutOfMemoryAbove(_)) {
            let cfg = cudarc::driver::LaunchConfig::for_num_elems(u32::try_from(rows).unwrap());
            let mut launch = stream.launch_builder(&function);
            launch
                .arg(x.array().values())
                .arg(&flag)
                .arg(&n)
                .arg(out.values_mut());
            // SAFETY: (const double*, int, long long, double*) as in twice_source; `x` is DOUBLE
            // with `rows` values (or one, read at 0); `out` holds `rows` doubles.
            unsafe { launch.launch(cfg) }.map_err(|e| device.error("launching twice", e))?;
        }
        Ok(out)
    }
}

#[test]
fn an_elementwise_kernel_runs_from_its_cuda_source_alone() {
    let device = require_gpu!("an_elementwise_kernel_runs_from_its_cuda_source_alone");
    let gpu = GpuDevice::open(&device).unwrap();
    // SAFETY: twice_source()'s kernel has ElementwiseF64's parameters for one argument.
    let twice = unsafe { gpu::ElementwiseF64::new(twice_source(), "twice", 1) };
    let x = Operand::Column(Arc::new(Float64Array::from(vec![
        Some(1.5),
        None,
        Some(-2.0),
    ])));
    let out = gpu
        .run_columnar(&twice, 3, std::slice::from_ref(&x))
        .unwrap();
    assert_eq!(
        out.as_primitive::<Float64Type>(),
        &Float64Array::from(vec![Some(3.0), None, Some(-4.0)])
    );
    // A wrong argument count or type is an error before anything is launched.
    let e = gpu.run_columnar(&twice, 3, &[x.clone(), x]).unwrap_err();
    assert_eq!(e.code(), RuntimeError::GPU, "{e}");
    assert!(
        e.to_string().contains("twice takes 1 arguments, got 2"),
        "{e}"
    );
    let ints = Operand::Column(Arc::new(arrow::array::Int64Array::from(vec![1, 2, 3])));
    let e = gpu.run_columnar(&twice, 3, &[ints]).unwrap_err();
    assert!(
        e.to_string()
            .contains("argument 1 of twice is Int64, expected DOUBLE"),
        "{e}"
    );
}

#[test]
fn the_runtime_checks_kernel_outputs() {
    let device = require_gpu!("the_runtime_checks_kernel_outputs");
    let gpu = GpuDevice::open(&device).unwrap();
    let x = Operand::Column(Arc::new(Float64Array::from(vec![
        Some(1.0),
        None,
        Some(3.0),
    ])));
    let out = gpu
        .run_columnar(&Twice::Good, 3, std::slice::from_ref(&x))
        .unwrap();
    assert_eq!(
        out.as_primitive::<Float64Type>(),
        &Float64Array::from(vec![Some(2.0), None, Some(6.0)])
    );
    for bad in [Twice::ShortOutput, Twice::WrongType] {
        let e = gpu
            .run_columnar(&bad, 3, std::slice::from_ref(&x))
            .unwrap_err();
        assert_eq!(e.code(), RuntimeError::GPU, "{e}");
        assert!(
            e.to_string()
                .contains("the GPU implementation of twice returned"),
            "{e}"
        );
    }
    // The device still works after a refused output.
    let out = gpu
        .run_columnar(&Twice::Good, 3, &[scalar(Some(4.0))])
        .unwrap();
    assert_eq!(
        out.as_primitive::<Float64Type>(),
        &Float64Array::from(vec![8.0; 3])
    );
}

#[test]
fn out_of_memory_halves_the_chunk_then_fails_at_one_row() {
    let device = require_gpu!("out_of_memory_halves_the_chunk_then_fails_at_one_row");
    let gpu = GpuDevice::open(&device).unwrap();
    let rows = 5000;
    let values: Vec<Option<f64>> = (0..rows)
        .map(|i| (i % 11 != 0).then_some(i as f64))
        .collect();
    let x = Operand::Column(Arc::new(Float64Array::from(values.clone())));
    // Chunks of more than 300 rows run out of memory: the runtime halves them until they fit.
    let out = gpu
        .run_columnar(
            &Twice::OutOfMemoryAbove(300),
            rows,
            std::slice::from_ref(&x),
        )
        .unwrap();
    let expected: Float64Array = values.iter().map(|v| v.map(|v| 2.0 * v)).collect();
    assert_eq!(out.as_primitive::<Float64Type>(), &expected);
    // A kernel that cannot run even one row fails with the out-of-memory error.
    let e = gpu
        .run_columnar(&Twice::OutOfMemoryAbove(0), rows, &[x])
        .unwrap_err();
    assert_eq!(e.code(), RuntimeError::GPU_OUT_OF_MEMORY, "{e}");
    // And the device is fine afterwards.
    let out = gpu
        .run_columnar(&Twice::Good, 2, &[scalar(Some(1.5))])
        .unwrap();
    assert_eq!(
        out.as_primitive::<Float64Type>(),
        &Float64Array::from(vec![3.0, 3.0])
    );
}

#[test]
fn kernels_that_do_not_compile_say_why() {
    let device = require_gpu!("kernels_that_do_not_compile_say_why");
    let gpu = GpuDevice::open(&device).unwrap();
    let broken = KernelSource::new(
        "broken",
        "extern \"C\" __global__ void k() { this is not C }",
    );
    let e = gpu.function(&broken, "k").unwrap_err();
    assert_eq!(e.code(), RuntimeError::GPU, "{e}");
    assert!(e.to_string().contains("compiling module broken"), "{e}");
    let e = gpu.function(&twice_source(), "no_such_kernel").unwrap_err();
    assert_eq!(e.code(), RuntimeError::GPU, "{e}");
}

#[test]
fn modules_are_compiled_once_per_device_and_cached_on_disk() {
    let device = require_gpu!("modules_are_compiled_once_per_device_and_cached_on_disk");
    let gpu = GpuDevice::open(&device).unwrap();
    // Same device object for the same UUID; the same module object on a second request.
    assert!(Arc::ptr_eq(&gpu, &GpuDevice::open(&device).unwrap()));
    let dir = std::env::temp_dir().join(format!("accelsql-gpu-test-cache-{}", std::process::id()));
    let cache = gpu::KernelDiskCache::new(&dir);
    let source = KernelSource::new(
        "test_cached",
        format!(
            "extern \"C\" __global__ void cached_{}(double* x) {{ x[0] = 1.0; }}",
            std::process::id()
        ),
    );
    gpu::set_kernel_cache_dir(Some(dir.clone()));
    let first = gpu.module(&source).unwrap();
    let second = gpu.module(&source).unwrap();
    gpu::set_kernel_cache_dir(None);
    assert!(Arc::ptr_eq(&first, &second));
    // An H100 (or any device this NVRTC knows) gets machine code for its own architecture; only
    // a device newer than NVRTC gets PTX.
    let target = gpu.compile_target();
    let key = source.cache_key(target);
    match (
        target,
        cache.load(key).expect("the compiled module is on disk"),
    ) {
        (gpu::CompileTarget::Cubin(arch), gpu::ModuleImage::Cubin(bytes)) => {
            assert_eq!(
                Some(target),
                gpu::CompileTarget::native(gpu.compute_capability())
            );
            assert!(bytes.starts_with(b"\x7fELF"), "sm_{arch}");
        }
        (gpu::CompileTarget::Ptx(_), gpu::ModuleImage::Ptx(text)) => {
            assert!(text.contains(".target"), "{text}");
        }
        (target, image) => panic!("a {} image for target {target:?}", image.kind()),
    }
    let _ = std::fs::remove_dir_all(&dir);
}
