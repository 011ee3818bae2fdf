//! The sums behind the vector operations, over eight interleaved partial sums (`LANES`) so
//! that the loops vectorize; `f32` elements are widened to `f64` first. They are always
//! inlined, so each compiled form of a caller (SSE2, AVX2) vectorizes them for its own width.

use super::element::Element;

/// Partial sums per vector step; eight independent ones let the compiler use SIMD lanes.
const LANES: usize = 8;

/// `Σ aᵢ·bᵢ` (`a` and `b` have the same length).
#[inline(always)]
pub(super) fn dot<A: Element, B: Element>(a: &[A], b: &[B]) -> f64 {
    let mut acc = [0.0f64; LANES];
    let (mut ca, mut cb) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
    for (x, y) in (&mut ca).zip(&mut cb) {
        for l in 0..LANES {
            acc[l] += x[l].widen() * y[l].widen();
        }
    }
    let mut tail = 0.0;
    for (x, y) in ca.remainder().iter().zip(cb.remainder()) {
        tail += x.widen() * y.widen();
    }
    sum_lanes(acc) + tail
}

/// `Σ (aᵢ − bᵢ)²`.
#[inline(always)]
pub(super) fn squared_distance<A: Element, B: Element>(a: &[A], b: &[B]) -> f64 {
    let mut acc = [0.0f64; LANES];
    let (mut ca, mut cb) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
    for (x, y) in (&mut ca).zip(&mut cb) {
        for l in 0..LANES {
            let d = x[l].widen() - y[l].widen();
            acc[l] += d * d;
        }
    }
    let mut tail = 0.0;
    for (x, y) in ca.remainder().iter().zip(cb.remainder()) {
        let d = x.widen() - y.widen();
        tail += d * d;
    }
    sum_lanes(acc) + tail
}

/// `(Σ aᵢ·bᵢ, Σ aᵢ²)` in one pass.
#[inline(always)]
pub(super) fn dot_and_norm<A: Element, B: Element>(a: &[A], b: &[B]) -> (f64, f64) {
    let (mut d, mut n) = ([0.0f64; LANES], [0.0f64; LANES]);
    let (mut ca, mut cb) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
    for (x, y) in (&mut ca).zip(&mut cb) {
        for l in 0..LANES {
            let (p, q) = (x[l].widen(), y[l].widen());
            d[l] += p * q;
            n[l] += p * p;
        }
    }
    let (mut td, mut tn) = (0.0, 0.0);
    for (x, y) in ca.remainder().iter().zip(cb.remainder()) {
        let (p, q) = (x.widen(), y.widen());
        td += p * q;
        tn += p * p;
    }
    (sum_lanes(d) + td, sum_lanes(n) + tn)
}

/// `(Σ aᵢ·bᵢ, Σ aᵢ², Σ bᵢ²)` in one pass.
#[inline(always)]
pub(super) fn dot_and_norms<A: Element, B: Element>(a: &[A], b: &[B]) -> (f64, f64, f64) {
    let (mut d, mut na, mut nb) = ([0.0f64; LANES], [0.0f64; LANES], [0.0f64; LANES]);
    let (mut ca, mut cb) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
    for (x, y) in (&mut ca).zip(&mut cb) {
        for l in 0..LANES {
            let (p, q) = (x[l].widen(), y[l].widen());
            d[l] += p * q;
            na[l] += p * p;
            nb[l] += q * q;
        }
    }
    let (mut td, mut ta, mut tb) = (0.0, 0.0, 0.0);
    for (x, y) in ca.remainder().iter().zip(cb.remainder()) {
        let (p, q) = (x.widen(), y.widen());
        td += p * q;
        ta += p * p;
        tb += q * q;
    }
    (sum_lanes(d) + td, sum_lanes(na) + ta, sum_lanes(nb) + tb)
}

#[inline(always)]
fn sum_lanes(acc: [f64; LANES]) -> f64 {
    ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]))
}
