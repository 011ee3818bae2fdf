//! A vector element: `f32` or `f64`, widened to `f64` for every sum.

/// A vector element: `f32` or `f64`, widened to `f64` for every sum.
pub(super) trait Element: Copy {
    /// The value as `f64`.
    fn widen(self) -> f64;
}

impl Element for f32 {
    #[inline(always)]
    fn widen(self) -> f64 {
        f64::from(self)
    }
}

impl Element for f64 {
    #[inline(always)]
    fn widen(self) -> f64 {
        self
    }
}
