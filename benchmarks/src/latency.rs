//! Latency summaries (median, p99) and their printed table, for the `cargo bench` targets.

use std::time::Duration;

/// Median, p99 and count of a set of latency samples.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Summary {
    /// Number of samples.
    pub count: usize,
    /// Median.
    pub median: Duration,
    /// 99th percentile (nearest rank).
    pub p99: Duration,
}

impl Summary {
    /// Summarizes `samples` (an empty set gives zeros).
    pub fn of(mut samples: Vec<Duration>) -> Self {
        samples.sort_unstable();
        let at = |q: f64| {
            if samples.is_empty() {
                Duration::ZERO
            } else {
                let rank = ((q * samples.len() as f64).ceil() as usize).clamp(1, samples.len());
                samples[rank - 1]
            }
        };
        Self {
            count: samples.len(),
            median: at(0.5),
            p99: at(0.99),
        }
    }
}

/// Prints one row per case: median, p99, sample count, and the goal with "met"/"MISSED".
pub fn print_table(rows: &[(String, Summary, Option<Duration>)]) {
    let width = rows.iter().map(|r| r.0.len()).max().unwrap_or(4).max(4);
    println!(
        "{:<width$}  {:>10}  {:>10}  {:>9}  goal",
        "case", "median", "p99", "samples"
    );
    for (name, s, goal) in rows {
        let verdict = match goal {
            Some(g) if s.median <= *g && s.count > 0 => format!("< {g:?}: met"),
            Some(g) => format!("< {g:?}: MISSED"),
            None => "-".to_string(),
        };
        println!(
            "{name:<width$}  {:>10}  {:>10}  {:>9}  {verdict}",
            micros(s.median),
            micros(s.p99),
            s.count
        );
    }
}

/// A duration in microseconds with two decimals, e.g. `0.42 µs`.
pub fn micros(d: Duration) -> String {
    format!("{:.2} µs", d.as_secs_f64() * 1e6)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_and_p99_by_nearest_rank() {
        let samples: Vec<Duration> = (1..=100).rev().map(Duration::from_micros).collect();
        let s = Summary::of(samples);
        assert_eq!(
            (s.count, s.median, s.p99),
            (100, Duration::from_micros(50), Duration::from_micros(99))
        );
        assert_eq!(Summary::of(Vec::new()).median, Duration::ZERO);
    }

    #[test]
    fn micros_prints_two_decimals() {
        assert_eq!(micros(Duration::from_nanos(420)), "0.42 µs");
    }
}
