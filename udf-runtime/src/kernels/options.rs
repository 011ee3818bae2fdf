//! European option prices by the Black–Scholes formula (no dividends): `black_scholes_call` and
//! `black_scholes_put`.
//!
//! With spot `S`, strike `K`, time to expiry `T` in years, risk-free rate `r` (continuously
//! compounded, per year) and volatility `σ` (per year):
//!
//! ```text
//! d1 = (ln(S / K) + (r + σ² / 2)·T) / (σ·√T)        d2 = d1 − σ·√T
//! call = S·N(d1) − K·e^(−rT)·N(d2)                  put = K·e^(−rT)·N(−d2) − S·N(−d1)
//! ```
//!
//! where `N` is the standard normal CDF, computed as `0.5 · erfc(−x / √2)` with the `libm` crate's
//! `erfc` ([`normal_cdf`]). CUDA's `erfc` is within a few ULP of it, so a GPU kernel that
//! evaluates the same expressions in the same order agrees with this one to about 1e-12 relative.
//!
//! Edge cases, row by row (see [`black_scholes_value`]):
//! - a NULL in any argument gives NULL;
//! - any NaN or infinite argument, `S <= 0`, `K <= 0`, `T < 0` or `σ < 0` gives NULL (no price
//!   exists); the rate may be negative;
//! - `T = 0` or `σ = 0` (or `σ·√T` so small it is 0 in floating point) gives the discounted
//!   intrinsic value: call `max(S − K·e^(−rT), 0)`, put `max(K·e^(−rT) − S, 0)` — the limit of the
//!   formula, where the price no longer depends on chance;
//! - a price is never negative (rounding below 0 is clamped to 0), and a price that is not
//!   finite (overflow in extreme inputs) gives NULL.

use arrow::array::Float64Array;

use super::{Operand, map_f64_rows};

/// Call or put.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OptionKind {
    /// The right to buy at the strike: `black_scholes_call`.
    Call,
    /// The right to sell at the strike: `black_scholes_put`.
    Put,
}

impl OptionKind {
    /// The SQL name of the built-in pricing this kind.
    pub fn name(self) -> &'static str {
        match self {
            Self::Call => "black_scholes_call",
            Self::Put => "black_scholes_put",
        }
    }
}

/// The standard normal CDF, `0.5 · erfc(−x / √2)` (accurate in both tails, unlike
/// `0.5 · (1 + erf(x / √2))`, which loses everything below about −8).
pub fn normal_cdf(x: f64) -> f64 {
    0.5 * libm::erfc(-x * std::f64::consts::FRAC_1_SQRT_2)
}

/// One Black–Scholes price: spot `s`, strike `k`, years `t`, rate `r`, volatility `v`; `None`
/// where no price exists (see the module documentation for every edge case).
///
/// ```
/// use accelsql_udf_runtime::kernels::options::{OptionKind, black_scholes_value};
/// let call = black_scholes_value(OptionKind::Call, 100.0, 100.0, 1.0, 0.05, 0.2).unwrap();
/// assert!((call - 10.4506).abs() < 1e-4);
/// assert_eq!(black_scholes_value(OptionKind::Put, -1.0, 100.0, 1.0, 0.05, 0.2), None);
/// ```
pub fn black_scholes_value(
    kind: OptionKind,
    s: f64,
    k: f64,
    t: f64,
    r: f64,
    v: f64,
) -> Option<f64> {
    let finite = s.is_finite() && k.is_finite() && t.is_finite() && r.is_finite() && v.is_finite();
    if !finite || s <= 0.0 || k <= 0.0 || t < 0.0 || v < 0.0 {
        return None;
    }
    let discounted_strike = k * (-r * t).exp();
    let vol_sqrt_t = v * t.sqrt();
    let price = if vol_sqrt_t == 0.0 {
        match kind {
            OptionKind::Call => s - discounted_strike,
            OptionKind::Put => discounted_strike - s,
        }
    } else {
        let d1 = ((s / k).ln() + (r + 0.5 * v * v) * t) / vol_sqrt_t;
        let d2 = d1 - vol_sqrt_t;
        match kind {
            OptionKind::Call => s * normal_cdf(d1) - discounted_strike * normal_cdf(d2),
            OptionKind::Put => discounted_strike * normal_cdf(-d2) - s * normal_cdf(-d1),
        }
    };
    price.is_finite().then_some(price.max(0.0))
}

/// Row-wise [`black_scholes_value`]: the CPU kernel of `black_scholes_call` / `black_scholes_put`.
/// `args` are spot, strike, years, rate and volatility, each a DOUBLE column or scalar (scalars
/// are not replicated).
///
/// Fails with [`crate::RuntimeError::InvalidArgument`] if an argument is not DOUBLE or does not
/// fit `rows`.
pub fn black_scholes(
    kind: OptionKind,
    rows: usize,
    args: &[Operand; 5],
) -> crate::Result<Float64Array> {
    map_f64_rows(kind.name(), rows, args, |[s, k, t, r, v]| {
        black_scholes_value(kind, s, k, t, r, v)
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{Array, Float32Array};

    use super::*;

    const CALL: OptionKind = OptionKind::Call;
    const PUT: OptionKind = OptionKind::Put;

    fn close(a: f64, b: f64, tolerance: f64) -> bool {
        (a - b).abs() <= tolerance * b.abs().max(1.0)
    }

    #[test]
    fn textbook_values() {
        // Hull, and every online calculator: S=100, K=100, T=1, r=5%, σ=20%.
        let call = black_scholes_value(CALL, 100.0, 100.0, 1.0, 0.05, 0.2).unwrap();
        let put = black_scholes_value(PUT, 100.0, 100.0, 1.0, 0.05, 0.2).unwrap();
        assert!((call - 10.450_583_572_185_565).abs() < 1e-9, "{call}");
        assert!((put - 5.573_526_022_256_971).abs() < 1e-9, "{put}");
        // Hull, Example 15.6: S=42, K=40, T=0.5, r=10%, σ=20% → c = 4.76, p = 0.81.
        let call = black_scholes_value(CALL, 42.0, 40.0, 0.5, 0.1, 0.2).unwrap();
        let put = black_scholes_value(PUT, 42.0, 40.0, 0.5, 0.1, 0.2).unwrap();
        assert!((call - 4.7594).abs() < 1e-4, "{call}");
        assert!((put - 0.8086).abs() < 1e-4, "{put}");
    }

    #[test]
    fn normal_cdf_known_values_and_tails() {
        assert_eq!(normal_cdf(0.0), 0.5);
        assert!((normal_cdf(1.96) - 0.975_002_104_851_780).abs() < 1e-15);
        assert!((normal_cdf(-1.0) - 0.158_655_253_931_457).abs() < 1e-15);
        // Far in the lower tail the value is tiny but not 0 (erf-based formulas give 0).
        let tail = normal_cdf(-30.0);
        assert!(tail > 0.0 && tail < 1e-190, "{tail}");
        assert_eq!(normal_cdf(40.0), 1.0);
    }

    #[test]
    fn put_call_parity_on_random_inputs() {
        // C − P = S − K·e^(−rT), for any valid input (xorshift: deterministic, no dependency).
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        let mut uniform = |lo: f64, hi: f64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            lo + (hi - lo) * (state >> 11) as f64 / (1u64 << 53) as f64
        };
        for _ in 0..10_000 {
            let (s, k) = (uniform(1.0, 500.0), uniform(1.0, 500.0));
            let (t, r, v) = (uniform(0.0, 5.0), uniform(-0.02, 0.15), uniform(0.0, 1.5));
            let call = black_scholes_value(CALL, s, k, t, r, v).unwrap();
            let put = black_scholes_value(PUT, s, k, t, r, v).unwrap();
            let parity = s - k * (-r * t).exp();
            assert!(
                close(call - put, parity, 1e-9),
                "S={s} K={k} T={t} r={r} σ={v}: C−P = {} but S−Ke^(−rT) = {parity}",
                call - put
            );
            assert!(call >= 0.0 && put >= 0.0);
            assert!(
                call <= s + 1e-9,
                "a call is never worth more than the stock"
            );
        }
    }

    #[test]
    fn edge_semantics() {
        let bs = |kind, s, k, t, r, v| black_scholes_value(kind, s, k, t, r, v);
        // No price: non-positive spot or strike, negative time or volatility, NaN or infinity.
        for (s, k, t, r, v) in [
            (0.0, 100.0, 1.0, 0.05, 0.2),
            (100.0, -1.0, 1.0, 0.05, 0.2),
            (100.0, 100.0, -0.1, 0.05, 0.2),
            (100.0, 100.0, 1.0, 0.05, -0.2),
            (f64::NAN, 100.0, 1.0, 0.05, 0.2),
            (100.0, 100.0, 1.0, f64::NAN, 0.2),
            (100.0, 100.0, f64::INFINITY, 0.05, 0.2),
        ] {
            assert_eq!(bs(CALL, s, k, t, r, v), None, "{s} {k} {t} {r} {v}");
            assert_eq!(bs(PUT, s, k, t, r, v), None, "{s} {k} {t} {r} {v}");
        }
        // At expiry: the intrinsic value.
        assert_eq!(bs(CALL, 110.0, 100.0, 0.0, 0.05, 0.2), Some(10.0));
        assert_eq!(bs(PUT, 110.0, 100.0, 0.0, 0.05, 0.2), Some(0.0));
        assert_eq!(bs(PUT, 90.0, 100.0, 0.0, 0.05, 0.2), Some(10.0));
        // No volatility: the discounted intrinsic value.
        let discounted = 100.0 * (-0.05f64).exp();
        assert_eq!(
            bs(CALL, 100.0, 100.0, 1.0, 0.05, 0.0),
            Some(100.0 - discounted)
        );
        assert_eq!(bs(PUT, 100.0, 100.0, 1.0, 0.05, 0.0), Some(0.0));
        assert_eq!(
            bs(PUT, 90.0, 100.0, 1.0, 0.05, 0.0),
            Some(discounted - 90.0)
        );
        // A tiny volatility converges to the same limit.
        let nearly = bs(CALL, 100.0, 100.0, 1.0, 0.05, 1e-9).unwrap();
        assert!(close(nearly, 100.0 - discounted, 1e-9), "{nearly}");
        // Deep out of the money: 0 (never a rounding-negative price); negative rates are fine.
        assert_eq!(bs(CALL, 1.0, 1000.0, 0.1, 0.0, 0.1), Some(0.0));
        assert!(bs(CALL, 100.0, 100.0, 1.0, -0.01, 0.2).unwrap() > 0.0);
    }

    fn column(values: Vec<Option<f64>>) -> Operand {
        Operand::Column(Arc::new(Float64Array::from(values)))
    }

    fn scalar(value: f64) -> Operand {
        Operand::Scalar(Arc::new(Float64Array::from(vec![value])))
    }

    #[test]
    fn kernel_rows_with_scalars_and_nulls() {
        let args = [
            column(vec![Some(100.0), None, Some(-5.0), Some(42.0)]),
            column(vec![Some(100.0), Some(100.0), Some(100.0), Some(40.0)]),
            column(vec![Some(1.0), Some(1.0), Some(1.0), Some(0.5)]),
            scalar(0.05),
            scalar(0.2),
        ];
        let calls = black_scholes(CALL, 4, &args).unwrap();
        assert_eq!(calls.len(), 4);
        assert!((calls.value(0) - 10.4506).abs() < 1e-4);
        assert!(calls.is_null(1) && calls.is_null(2));
        let expected = black_scholes_value(CALL, 42.0, 40.0, 0.5, 0.05, 0.2).unwrap();
        assert_eq!(calls.value(3), expected);
        // A sliced column: offsets are respected.
        let spot = Float64Array::from(vec![1.0, 2.0, 100.0, 42.0]).slice(2, 2);
        let args = [
            Operand::Column(Arc::new(spot)),
            column(vec![Some(100.0), Some(40.0)]),
            column(vec![Some(1.0), Some(0.5)]),
            scalar(0.05),
            scalar(0.2),
        ];
        let puts = black_scholes(PUT, 2, &args).unwrap();
        assert_eq!(puts.null_count(), 0);
        assert!((puts.value(0) - 5.5735).abs() < 1e-4);
        // Empty batch.
        let empty = || column(Vec::new());
        let args = [empty(), empty(), empty(), scalar(0.05), scalar(0.2)];
        assert_eq!(black_scholes(CALL, 0, &args).unwrap().len(), 0);
    }

    #[test]
    fn kernel_rejects_non_double_arguments() {
        let args = [
            scalar(100.0),
            scalar(100.0),
            Operand::Scalar(Arc::new(Float32Array::from(vec![1.0f32]))),
            scalar(0.05),
            scalar(0.2),
        ];
        let e = black_scholes(PUT, 1, &args).unwrap_err();
        assert_eq!(
            e.to_string(),
            "[22U20] black_scholes_put: argument 3 is Float32, expected DOUBLE"
        );
    }
}
