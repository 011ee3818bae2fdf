//! Timing: warm-up then repeated runs, and the figures made of them (median, min/max, ratios).

use std::future::Future;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::progress::Progress;

/// How often each measurement runs: untimed warm-ups, then timed runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunPlan {
    /// Untimed runs first (caches, worker processes, JIT-like first-call costs).
    pub warmup: usize,
    /// Timed runs; the figures are their median, min and max.
    pub runs: usize,
}

impl RunPlan {
    /// Runs per measurement in all.
    pub fn total(&self) -> usize {
        self.warmup + self.runs
    }
}

/// The summary of a set of timed samples, in seconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Stats {
    /// Number of samples.
    pub runs: usize,
    /// Median (the mean of the two middle samples for an even count).
    pub median_s: f64,
    /// Fastest sample.
    pub min_s: f64,
    /// Slowest sample.
    pub max_s: f64,
    /// Arithmetic mean.
    pub mean_s: f64,
    /// 99th percentile (nearest rank).
    pub p99_s: f64,
}

impl Stats {
    /// Summarizes samples given in seconds; `None` when there are none.
    pub fn of_secs(samples: &[f64]) -> Option<Self> {
        if samples.is_empty() {
            return None;
        }
        let mut sorted = samples.to_vec();
        sorted.sort_by(f64::total_cmp);
        Some(Self {
            runs: sorted.len(),
            median_s: median_of_sorted(&sorted),
            min_s: sorted[0],
            max_s: sorted[sorted.len() - 1],
            mean_s: sorted.iter().sum::<f64>() / sorted.len() as f64,
            p99_s: percentile_of_sorted(&sorted, 0.99),
        })
    }

    /// Summarizes durations; `None` when there are none.
    pub fn of(samples: &[Duration]) -> Option<Self> {
        let secs: Vec<f64> = samples.iter().map(Duration::as_secs_f64).collect();
        Self::of_secs(&secs)
    }

    /// Items per second at the median (`items / median`), or `None` for a zero median.
    pub fn per_second(&self, items: u64) -> Option<f64> {
        (self.median_s > 0.0).then(|| items as f64 / self.median_s)
    }
}

/// The median of ascending `sorted` values (0 for none).
pub fn median_of_sorted(sorted: &[f64]) -> f64 {
    let n = sorted.len();
    match n {
        0 => 0.0,
        _ if n % 2 == 1 => sorted[n / 2],
        _ => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
    }
}

/// The `q` quantile (0..=1) of ascending `sorted` values by nearest rank (0 for none).
pub fn percentile_of_sorted(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

/// `value / baseline`: how many times the baseline's time a figure took (below 1: faster).
/// `None` when the baseline is not positive.
pub fn time_ratio(value: f64, baseline: f64) -> Option<f64> {
    (baseline > 0.0 && value.is_finite()).then(|| value / baseline)
}

/// Jain's fairness index of per-party shares: 1 when all are equal, 1/n when one gets everything.
pub fn jain_fairness(shares: &[f64]) -> f64 {
    let sum: f64 = shares.iter().sum();
    let squares: f64 = shares.iter().map(|x| x * x).sum();
    if shares.is_empty() || squares == 0.0 {
        return 1.0;
    }
    sum * sum / (shares.len() as f64 * squares)
}

/// Runs `f` `plan.warmup` times untimed, then `plan.runs` times timed, ticking `progress` once
/// per run. Returns the summary and the last run's value (for checking the answer).
pub async fn measure<T, F, Fut>(plan: RunPlan, progress: &Progress, mut f: F) -> Result<(Stats, T)>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T>>,
{
    let mut samples = Vec::with_capacity(plan.runs);
    let mut last = None;
    for i in 0..plan.total().max(1) {
        let start = Instant::now();
        let value = f().await?;
        let elapsed = start.elapsed();
        if i >= plan.warmup || plan.runs == 0 {
            samples.push(elapsed);
        }
        last = Some(value);
        progress.inc(1);
    }
    let stats = Stats::of(&samples).ok_or_else(|| crate::bench_err!("no timed runs"))?;
    let value = last.ok_or_else(|| crate::bench_err!("no runs"))?;
    Ok((stats, value))
}

/// A duration in seconds printed with a unit that fits: `812 ns`, `3.41 µs`, `12.3 ms`, `1.52 s`.
pub fn format_secs(s: f64) -> String {
    if !s.is_finite() {
        return "-".into();
    }
    if s < 1e-6 {
        format!("{:.0} ns", s * 1e9)
    } else if s < 1e-3 {
        format!("{:.2} µs", s * 1e6)
    } else if s < 1.0 {
        format!("{:.1} ms", s * 1e3)
    } else {
        format!("{s:.2} s")
    }
}

/// A rate printed with an SI prefix: `950`, `12.3 k`, `4.56 M`, `1.20 G`.
pub fn format_rate(v: f64) -> String {
    if !v.is_finite() {
        "-".into()
    } else if v >= 1e9 {
        format!("{:.2} G", v / 1e9)
    } else if v >= 1e6 {
        format!("{:.2} M", v / 1e6)
    } else if v >= 1e3 {
        format!("{:.1} k", v / 1e3)
    } else {
        format!("{v:.0}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median_of_sorted(&[1.0, 2.0, 9.0]), 2.0);
        assert_eq!(median_of_sorted(&[1.0, 2.0, 4.0, 9.0]), 3.0);
        assert_eq!(median_of_sorted(&[]), 0.0);
    }

    #[test]
    fn stats_of_unsorted_samples() {
        let s = Stats::of_secs(&[3.0, 1.0, 2.0, 10.0, 4.0]).unwrap();
        assert_eq!((s.runs, s.median_s, s.min_s, s.max_s), (5, 3.0, 1.0, 10.0));
        assert_eq!(s.mean_s, 4.0);
        assert_eq!(s.p99_s, 10.0);
        assert_eq!(s.per_second(30), Some(10.0));
        assert!(Stats::of_secs(&[]).is_none());
    }

    #[test]
    fn p99_by_nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile_of_sorted(&v, 0.99), 99.0);
        assert_eq!(percentile_of_sorted(&v, 0.5), 50.0);
    }

    #[test]
    fn ratio_and_fairness() {
        assert_eq!(time_ratio(2.0, 4.0), Some(0.5));
        assert_eq!(time_ratio(2.0, 0.0), None);
        assert_eq!(jain_fairness(&[5.0, 5.0, 5.0]), 1.0);
        assert!((jain_fairness(&[1.0, 0.0, 0.0, 0.0]) - 0.25).abs() < 1e-12);
    }

    #[test]
    fn units_fit_the_value() {
        assert_eq!(format_secs(4.2e-7), "420 ns");
        assert_eq!(format_secs(3.411e-6), "3.41 µs");
        assert_eq!(format_secs(0.0123), "12.3 ms");
        assert_eq!(format_secs(1.523), "1.52 s");
        assert_eq!(format_rate(4_560_000.0), "4.56 M");
        assert_eq!(format_rate(950.0), "950");
    }

    #[test]
    fn measure_skips_warmups() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let mut calls = 0;
        let plan = RunPlan { warmup: 2, runs: 3 };
        let progress = Progress::hidden();
        let (stats, last) = rt
            .block_on(measure(plan, &progress, || {
                calls += 1;
                let n = calls;
                async move { Ok(n) }
            }))
            .unwrap();
        assert_eq!((stats.runs, last), (3, 5));
    }
}
