//! The sums behind the vector operations, over eight interleaved partial sums (`LANES`), taken
//! by [`Portable`] code (any CPU; the compiler vectorizes it as it can) or by explicit 256-bit
//! instructions ([`Avx2`], x86-64 CPUs that have them). `f32` elements are widened to `f64`
//! first. Both take the same additions in the same order, without fused multiply-adds, so they
//! agree bit for bit.

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::{
    __m256d, _mm256_add_pd, _mm256_mul_pd, _mm256_setzero_pd, _mm256_storeu_pd, _mm256_sub_pd,
};

use super::element::Element;

/// Partial sums per vector step; element `i` goes to partial sum `i % LANES`.
const LANES: usize = 8;

/// One operation's `K` sums: what a pair of elements adds to each.
pub(super) trait Terms<const K: usize> {
    /// Adds the terms of the pair `(p, q)` to `acc`.
    fn add(acc: &mut [f64; K], p: f64, q: f64);

    /// [`Self::add`] on four lanes at once.
    ///
    /// # Safety
    /// The CPU has AVX2.
    #[cfg(target_arch = "x86_64")]
    unsafe fn add4(acc: &mut [__m256d; K], p: __m256d, q: __m256d);
}

/// `Σ aᵢ·bᵢ`.
pub(super) struct Dot;
/// `Σ (aᵢ − bᵢ)²`.
pub(super) struct SquaredDistance;
/// `(Σ aᵢ·bᵢ, Σ aᵢ²)`.
pub(super) struct DotAndNorm;
/// `(Σ aᵢ·bᵢ, Σ aᵢ², Σ bᵢ²)`.
pub(super) struct DotAndNorms;

/// Implements [`Terms`] from one expression, used for scalars and (with the vector operators)
/// for four lanes.
macro_rules! terms {
    ($op:ty, $k:literal, |$acc:ident, $p:ident, $q:ident, $mul:ident, $add:ident, $sub:ident| $body:block) => {
        impl Terms<$k> for $op {
            #[inline(always)]
            fn add($acc: &mut [f64; $k], $p: f64, $q: f64) {
                let $mul = |x: f64, y: f64| x * y;
                let $add = |x: f64, y: f64| x + y;
                let $sub = |x: f64, y: f64| x - y;
                $body
            }

            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx2")]
            #[inline]
            unsafe fn add4($acc: &mut [__m256d; $k], $p: __m256d, $q: __m256d) {
                let $mul = |x, y| _mm256_mul_pd(x, y);
                let $add = |x, y| _mm256_add_pd(x, y);
                let $sub = |x, y| _mm256_sub_pd(x, y);
                $body
            }
        }
    };
}

terms!(Dot, 1, |acc, p, q, mul, add, _sub| {
    acc[0] = add(acc[0], mul(p, q));
});
terms!(SquaredDistance, 1, |acc, p, q, mul, add, sub| {
    let d = sub(p, q);
    acc[0] = add(acc[0], mul(d, d));
});
terms!(DotAndNorm, 2, |acc, p, q, mul, add, _sub| {
    acc[0] = add(acc[0], mul(p, q));
    acc[1] = add(acc[1], mul(p, p));
});
terms!(DotAndNorms, 3, |acc, p, q, mul, add, _sub| {
    acc[0] = add(acc[0], mul(p, q));
    acc[1] = add(acc[1], mul(p, p));
    acc[2] = add(acc[2], mul(q, q));
});

/// How the sums are taken: by which instructions.
pub(super) trait Width: Copy {
    /// The `K` sums of `T`'s terms over the pairs of `a` and `b` (of the same length): element
    /// `i` goes to partial sum `i % LANES` while whole steps of `LANES` remain, the rest to a
    /// tail; each sum is then `((s₀ + s₁) + (s₂ + s₃)) + ((s₄ + s₅) + (s₆ + s₇)) + tail`.
    fn sums<T: Terms<K>, const K: usize, A: Element, B: Element>(
        self,
        a: &[A],
        b: &[B],
    ) -> [f64; K];
}

/// Plain Rust, for any CPU.
#[derive(Debug, Clone, Copy)]
pub(super) struct Portable;

impl Width for Portable {
    #[inline(always)]
    fn sums<T: Terms<K>, const K: usize, A: Element, B: Element>(
        self,
        a: &[A],
        b: &[B],
    ) -> [f64; K] {
        let mut lanes = [[0.0f64; K]; LANES];
        let (mut ca, mut cb) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
        for (x, y) in (&mut ca).zip(&mut cb) {
            for l in 0..LANES {
                T::add(&mut lanes[l], x[l].widen(), y[l].widen());
            }
        }
        let mut tail = [0.0f64; K];
        for (x, y) in ca.remainder().iter().zip(cb.remainder()) {
            T::add(&mut tail, x.widen(), y.widen());
        }
        std::array::from_fn(|k| sum_lanes(lanes.map(|l| l[k])) + tail[k])
    }
}

/// Explicit AVX2 instructions: the eight partial sums in two registers of four. Only
/// [`Avx2::detect`] makes one, on a CPU that has AVX2.
#[cfg(target_arch = "x86_64")]
#[derive(Debug, Clone, Copy)]
pub(super) struct Avx2(());

#[cfg(target_arch = "x86_64")]
impl Avx2 {
    /// The AVX2 sums, where this CPU has AVX2.
    #[inline]
    pub(super) fn detect() -> Option<Self> {
        std::arch::is_x86_feature_detected!("avx2").then_some(Self(()))
    }
}

#[cfg(target_arch = "x86_64")]
impl Width for Avx2 {
    #[inline(always)]
    fn sums<T: Terms<K>, const K: usize, A: Element, B: Element>(
        self,
        a: &[A],
        b: &[B],
    ) -> [f64; K] {
        // SAFETY: an `Avx2` exists only where the CPU has AVX2 (`Avx2::detect`).
        unsafe { sums_avx2::<T, K, A, B>(a, b) }
    }
}

/// [`Width::sums`] in AVX2 instructions: partial sums 0–3 in `lo`, 4–7 in `hi`.
///
/// # Safety
/// The CPU has AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn sums_avx2<T: Terms<K>, const K: usize, A: Element, B: Element>(
    a: &[A],
    b: &[B],
) -> [f64; K] {
    let n = a.len().min(b.len());
    let whole = n - n % LANES;
    let (mut lo, mut hi) = ([_mm256_setzero_pd(); K], [_mm256_setzero_pd(); K]);
    let (pa, pb) = (a.as_ptr(), b.as_ptr());
    let mut i = 0;
    while i < whole {
        // SAFETY: `i + LANES <= whole <= n`, so both sides have these eight elements; AVX2 is
        // the caller's contract.
        unsafe {
            T::add4(&mut lo, A::load4(pa.add(i)), B::load4(pb.add(i)));
            T::add4(&mut hi, A::load4(pa.add(i + 4)), B::load4(pb.add(i + 4)));
        }
        i += LANES;
    }
    let mut tail = [0.0f64; K];
    for (x, y) in a[whole..n].iter().zip(&b[whole..n]) {
        T::add(&mut tail, x.widen(), y.widen());
    }
    std::array::from_fn(|k| {
        let mut lanes = [0.0f64; LANES];
        // SAFETY: `lanes` has room for both stores of four.
        unsafe {
            _mm256_storeu_pd(lanes.as_mut_ptr(), lo[k]);
            _mm256_storeu_pd(lanes.as_mut_ptr().add(4), hi[k]);
        }
        sum_lanes(lanes) + tail[k]
    })
}

#[inline(always)]
fn sum_lanes(acc: [f64; LANES]) -> f64 {
    ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]))
}
