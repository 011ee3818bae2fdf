//! What a run found, as `results.json` holds it: machine facts, and per suite its tables of
//! figures (each beside its peer's, with the ratio) and its distributions.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::machine::Machine;
use crate::measure::{RunPlan, Stats, time_ratio};

/// Bumped when the layout of `results.json` changes.
pub const RESULTS_VERSION: u32 = 1;

/// One run of the harness (or several merged: see [`Results::merge`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Results {
    /// [`RESULTS_VERSION`].
    pub version: u32,
    /// The machine the figures were taken on.
    pub machine: Machine,
    /// The command line.
    pub command: String,
    /// A remark of whoever ran it (`--note`), e.g. what else the machine was doing.
    #[serde(default)]
    pub note: Option<String>,
    /// `--scale`.
    pub scale: f64,
    /// `--seed`.
    pub seed: u64,
    /// Warm-ups and timed runs per measurement.
    pub plan: RunPlan,
    /// Seconds since the Unix epoch when the run started.
    pub started_unix: u64,
    /// The suites, in the order they ran.
    pub suites: Vec<SuiteResult>,
}

impl Results {
    /// Takes `newer`'s suites into `self`, replacing those of the same name (the machine facts,
    /// command and time become `newer`'s). Both must have the same scale and seed.
    pub fn merge(&mut self, newer: Results) {
        for suite in newer.suites {
            match self.suites.iter_mut().find(|s| s.name == suite.name) {
                Some(old) => *old = suite,
                None => self.suites.push(suite),
            }
        }
        self.machine = newer.machine;
        self.command = newer.command;
        self.note = newer.note;
        self.plan = newer.plan;
        self.started_unix = newer.started_unix;
    }
}

/// One suite's findings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct SuiteResult {
    /// Its CLI name (`geo`).
    pub name: String,
    /// Its heading.
    pub title: String,
    /// What it measures, in a sentence or two.
    pub what: String,
    /// Notes: sizes, caveats, answer checks.
    pub notes: Vec<String>,
    /// Its tables of figures.
    pub tables: Vec<Table>,
    /// Raw latency samples worth plotting as a distribution (lease waits).
    pub distributions: Vec<Distribution>,
    /// Wall time of the suite, seconds (data generation included).
    pub wall_s: f64,
    /// Why the suite stopped early, if it did.
    pub error: Option<String>,
    /// PNG plots written for it (file names in the report directory).
    pub plots: Vec<String>,
}

/// Figures of several engines over the same cases and sizes; each is compared with the
/// baseline engine's figure of the same case and size.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct Table {
    /// Heading.
    pub title: String,
    /// The engine every other figure is divided by (`time ÷ baseline`), if any.
    pub baseline: Option<String>,
    /// What a figure's size counts (`rows`, `embeddings`, `waiters`, `sessions`).
    pub unit: String,
    /// Whether `size ÷ median` is a throughput worth showing (rows/s); false where a figure's
    /// samples are latencies of single operations.
    #[serde(default = "yes")]
    pub rate: bool,
    /// The figures.
    pub figures: Vec<Figure>,
}

fn yes() -> bool {
    true
}

impl Table {
    /// A table comparing with `baseline`.
    pub fn new(title: impl Into<String>, unit: impl Into<String>, baseline: Option<&str>) -> Self {
        Self {
            title: title.into(),
            baseline: baseline.map(str::to_string),
            unit: unit.into(),
            rate: true,
            figures: Vec::new(),
        }
    }

    /// The same table without a throughput column.
    pub fn without_rate(mut self) -> Self {
        self.rate = false;
        self
    }

    /// The median seconds of the first measured figure of `engine` that `matches` (its case
    /// and rows, say), if there is one.
    pub fn median_s(&self, engine: &str, matches: impl Fn(&Figure) -> bool) -> Option<f64> {
        self.figures
            .iter()
            .find(|f| f.engine == engine && matches(f))
            .and_then(|f| f.outcome.stats())
            .map(|s| s.median_s)
    }

    /// Adds a figure.
    pub fn push(&mut self, figure: Figure) {
        self.figures.push(figure);
    }

    /// The baseline figure for `figure` (same case and size, the baseline engine), if measured.
    pub fn baseline_of(&self, figure: &Figure) -> Option<&Stats> {
        let baseline = self.baseline.as_deref()?;
        self.figures
            .iter()
            .find(|f| f.engine == baseline && f.case == figure.case && f.rows == figure.rows)
            .and_then(|f| f.outcome.stats())
    }

    /// `figure`'s median ÷ its baseline's median.
    pub fn ratio_of(&self, figure: &Figure) -> Option<f64> {
        let own = figure.outcome.stats()?;
        let base = self.baseline_of(figure)?;
        time_ratio(own.median_s, base.median_s)
    }

    /// Fills every figure's `ratio` from the baseline.
    pub fn fill_ratios(&mut self) {
        let ratios: Vec<Option<f64>> = self.figures.iter().map(|f| self.ratio_of(f)).collect();
        for (figure, ratio) in self.figures.iter_mut().zip(ratios) {
            figure.ratio = ratio;
        }
    }

    /// The distinct engines, in order of first appearance.
    pub fn engines(&self) -> Vec<&str> {
        let mut out: Vec<&str> = Vec::new();
        for f in &self.figures {
            if !out.contains(&f.engine.as_str()) {
                out.push(&f.engine);
            }
        }
        out
    }

    /// The distinct sizes, ascending.
    pub fn sizes(&self) -> Vec<u64> {
        let mut out: Vec<u64> = self.figures.iter().map(|f| f.rows).collect();
        out.sort_unstable();
        out.dedup();
        out
    }
}

/// One engine's figure for one case at one size.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Figure {
    /// What ran (`top-10 cosine, dim 128`).
    pub case: String,
    /// Who ran it (`accelsql CPU`, `DuckDB 1.4.1`, …).
    pub engine: String,
    /// Input size: rows (or acquires, or queries) per timed run.
    pub rows: u64,
    /// Its timings, or why there are none.
    pub outcome: Outcome,
    /// Median ÷ the baseline's median (filled by [`Table::fill_ratios`]).
    pub ratio: Option<f64>,
    /// Further figures (throughput, waits, fairness), by name.
    pub metrics: BTreeMap<String, f64>,
    /// A caveat for this figure alone.
    pub note: Option<String>,
}

impl Figure {
    /// A figure with this outcome and nothing else.
    pub fn new(case: &str, engine: &str, rows: u64, outcome: Outcome) -> Self {
        Self {
            case: case.to_string(),
            engine: engine.to_string(),
            rows,
            outcome,
            ratio: None,
            metrics: BTreeMap::new(),
            note: None,
        }
    }

    /// Adds a named metric.
    pub fn with_metric(mut self, name: &str, value: f64) -> Self {
        self.metrics.insert(name.to_string(), value);
        self
    }

    /// Adds a note.
    pub fn with_note(mut self, note: impl Into<String>) -> Self {
        self.note = Some(note.into());
        self
    }

    /// Rows per second at the median.
    pub fn rate(&self) -> Option<f64> {
        self.outcome.stats().and_then(|s| s.per_second(self.rows))
    }
}

/// A figure's timings, or why there are none.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "kebab-case")]
pub enum Outcome {
    /// Measured: the summary of the timed runs.
    Measured {
        /// The timings.
        stats: Stats,
    },
    /// The machine has no (real) GPU: GPU columns are never filled with CPU figures.
    NoGpu,
    /// The engine could not run this (not installed, failed), and why.
    Unavailable {
        /// Why.
        reason: String,
    },
}

impl Outcome {
    /// The timings, if measured.
    pub fn stats(&self) -> Option<&Stats> {
        match self {
            Self::Measured { stats } => Some(stats),
            _ => None,
        }
    }

    /// An unavailable outcome.
    pub fn unavailable(reason: impl Into<String>) -> Self {
        Self::Unavailable {
            reason: reason.into(),
        }
    }

    /// How a table cell shows a missing figure.
    pub fn label(&self) -> &str {
        match self {
            Self::Measured { .. } => "",
            Self::NoGpu => "no GPU",
            Self::Unavailable { .. } => "unavailable",
        }
    }
}

/// Samples worth a histogram (lease waits), in microseconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Distribution {
    /// What was sampled.
    pub title: String,
    /// File-name stem of its plot.
    pub slug: String,
    /// The samples, microseconds (at most [`MAX_DISTRIBUTION_SAMPLES`], evenly thinned).
    pub samples_us: Vec<f64>,
}

/// The most samples a [`Distribution`] keeps.
pub const MAX_DISTRIBUTION_SAMPLES: usize = 5_000;

impl Distribution {
    /// A distribution of `samples_us`, thinned evenly to [`MAX_DISTRIBUTION_SAMPLES`] and
    /// rounded to nanoseconds.
    pub fn new(title: &str, slug: &str, samples_us: Vec<f64>) -> Self {
        let step = samples_us.len().div_ceil(MAX_DISTRIBUTION_SAMPLES).max(1);
        Self {
            title: title.to_string(),
            slug: slug.to_string(),
            samples_us: samples_us
                .into_iter()
                .step_by(step)
                .map(|v| (v * 1e3).round() / 1e3)
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn measured(median: f64) -> Outcome {
        Outcome::Measured {
            stats: Stats::of_secs(&[median]).unwrap(),
        }
    }

    #[test]
    fn ratios_pair_figures_of_the_same_case_and_size() {
        let mut t = Table::new("t", "rows", Some("peer"));
        t.push(Figure::new("c", "peer", 10, measured(2.0)));
        t.push(Figure::new("c", "peer", 20, measured(4.0)));
        t.push(Figure::new("c", "us", 10, measured(1.0)));
        t.push(Figure::new("c", "us", 20, measured(6.0)));
        t.push(Figure::new("c", "gpu", 20, Outcome::NoGpu));
        t.fill_ratios();
        let ratios: Vec<Option<f64>> = t.figures.iter().map(|f| f.ratio).collect();
        assert_eq!(ratios, [Some(1.0), Some(1.0), Some(0.5), Some(1.5), None]);
        assert_eq!(t.engines(), ["peer", "us", "gpu"]);
        assert_eq!(t.sizes(), [10, 20]);
        assert_eq!(t.figures[2].rate(), Some(10.0));
    }

    #[test]
    fn outcomes_serialize_with_a_status_tag() {
        let json = serde_json::to_value(Outcome::NoGpu).unwrap();
        assert_eq!(json, serde_json::json!({"status": "no-gpu"}));
        let json = serde_json::to_value(Outcome::unavailable("no venv")).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"status": "unavailable", "reason": "no venv"})
        );
    }

    #[test]
    fn distributions_are_thinned() {
        let d = Distribution::new("w", "w", (0..50_000).map(f64::from).collect());
        assert!(d.samples_us.len() <= MAX_DISTRIBUTION_SAMPLES);
        assert_eq!(d.samples_us[1], 10.0);
        let d = Distribution::new("w", "w", vec![1.234_567_8]);
        assert_eq!(d.samples_us, [1.235]);
    }
}
