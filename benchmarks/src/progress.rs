//! Progress of long steps: a bar on a terminal, plain lines (about every 10%) when not on one.

use std::io::IsTerminal;
use std::sync::Mutex;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

/// One step's progress (rows generated, runs done): a bar on a terminal, else plain lines on
/// stderr at each tenth, or nothing at all ([`Progress::hidden`]).
#[derive(Debug)]
pub struct Progress {
    bar: Option<ProgressBar>,
    plain: Option<Mutex<PlainLines>>,
}

#[derive(Debug)]
struct PlainLines {
    label: String,
    unit: String,
    total: u64,
    done: u64,
    /// The last tenth printed.
    printed_tenth: u64,
}

impl PlainLines {
    fn advance(&mut self, n: u64) -> Option<String> {
        self.done = self.done.saturating_add(n).min(self.total);
        let tenth = (self.done * 10).checked_div(self.total).unwrap_or(10);
        (tenth > self.printed_tenth).then(|| {
            self.printed_tenth = tenth;
            format!(
                "{}: {}/{} {} ({}%)",
                self.label,
                self.done,
                self.total,
                self.unit,
                tenth * 10
            )
        })
    }
}

impl Progress {
    /// Progress over `total` `unit`s (e.g. "rows", "runs") of the step `label`: a bar when stderr
    /// is a terminal, plain lines when it is not.
    pub fn new(label: &str, total: u64, unit: &str) -> Self {
        if std::io::stderr().is_terminal() {
            let bar = ProgressBar::new(total);
            let template = format!(
                "{{prefix:>24}} [{{bar:32.cyan/blue}}] {{human_pos}}/{{human_len}} {unit} {{msg}} ({{elapsed}}, ETA {{eta}})"
            );
            if let Ok(style) = ProgressStyle::with_template(&template) {
                bar.set_style(style.progress_chars("=> "));
            }
            bar.set_prefix(label.to_string());
            bar.enable_steady_tick(Duration::from_millis(200));
            Self {
                bar: Some(bar),
                plain: None,
            }
        } else {
            Self {
                bar: None,
                plain: Some(Mutex::new(PlainLines {
                    label: label.to_string(),
                    unit: unit.to_string(),
                    total,
                    done: 0,
                    printed_tenth: 0,
                })),
            }
        }
    }

    /// Progress that shows nothing (tests, and steps too short to report).
    pub fn hidden() -> Self {
        Self {
            bar: None,
            plain: None,
        }
    }

    /// `n` more units done.
    pub fn inc(&self, n: u64) {
        if let Some(bar) = &self.bar {
            bar.inc(n);
        }
        if let Some(plain) = &self.plain {
            let line = plain.lock().unwrap_or_else(|e| e.into_inner()).advance(n);
            if let Some(line) = line {
                eprintln!("{line}");
            }
        }
    }

    /// Shows what is running now (on the bar only: plain lines stay terse).
    pub fn set_message(&self, message: &str) {
        if let Some(bar) = &self.bar {
            bar.set_message(message.to_string());
        }
    }

    /// Prints a line without breaking the bar.
    pub fn println(&self, line: &str) {
        match &self.bar {
            Some(bar) => bar.println(line),
            None => eprintln!("{line}"),
        }
    }

    /// Ends the bar (it stays on screen).
    pub fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish();
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        if let Some(bar) = &self.bar
            && !bar.is_finished()
        {
            bar.abandon();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_lines_at_each_tenth() {
        let mut p = PlainLines {
            label: "geo".into(),
            unit: "runs".into(),
            total: 20,
            done: 0,
            printed_tenth: 0,
        };
        assert_eq!(p.advance(1), None);
        assert_eq!(p.advance(1).as_deref(), Some("geo: 2/20 runs (10%)"));
        assert_eq!(p.advance(17).as_deref(), Some("geo: 19/20 runs (90%)"));
        assert_eq!(p.advance(5).as_deref(), Some("geo: 20/20 runs (100%)"));
        assert_eq!(p.advance(1), None);
    }
}
