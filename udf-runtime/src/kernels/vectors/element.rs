//! A vector element: `f32` or `f64`, widened to `f64` for every sum.

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::{__m256d, _mm_loadu_ps, _mm256_cvtps_pd, _mm256_loadu_pd};

/// A vector element: `f32` or `f64`, widened to `f64` for every sum.
pub(super) trait Element: Copy {
    /// The value as `f64`.
    fn widen(self) -> f64;

    /// The four elements from `p`, widened to `f64` lanes (exactly: `f32` → `f64` is exact).
    ///
    /// # Safety
    /// `p .. p + 4` is readable, and the CPU has AVX2.
    #[cfg(target_arch = "x86_64")]
    unsafe fn load4(p: *const Self) -> __m256d;
}

impl Element for f32 {
    #[inline(always)]
    fn widen(self) -> f64 {
        f64::from(self)
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    #[inline]
    unsafe fn load4(p: *const Self) -> __m256d {
        // SAFETY: the caller's contract (four readable elements, AVX2).
        unsafe { _mm256_cvtps_pd(_mm_loadu_ps(p)) }
    }
}

impl Element for f64 {
    #[inline(always)]
    fn widen(self) -> f64 {
        self
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    #[inline]
    unsafe fn load4(p: *const Self) -> __m256d {
        // SAFETY: the caller's contract (four readable elements, AVX2).
        unsafe { _mm256_loadu_pd(p) }
    }
}
