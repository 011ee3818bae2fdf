//! A table of figures as rows of text cells: what the console and `REPORT.md` both print.

use crate::measure::{format_rate, format_secs};
use crate::results::{Figure, Table};

/// Header and rows of one table, as text.
#[derive(Debug, Clone, PartialEq)]
pub struct TextTable {
    /// Column headings.
    pub header: Vec<String>,
    /// One row per figure.
    pub rows: Vec<Vec<String>>,
    /// How many leading columns hold text (left-aligned; so does the last, the note).
    pub text_columns: usize,
}

/// How a metric is shown: its heading and value format.
fn metric_cell(name: &str, value: f64) -> (String, String) {
    match name {
        "throughput_qps" => ("queries/s".into(), format!("{value:.1}")),
        "fairness" => ("fairness".into(), format!("{value:.3}")),
        "queries" => ("queries".into(), format!("{value:.0}")),
        n if n.ends_with("_ms") => (
            n.trim_end_matches("_ms").replace('_', " "),
            format_secs(value / 1e3),
        ),
        n if n.ends_with("_us") => (
            n.trim_end_matches("_us").replace('_', " "),
            format_secs(value / 1e6),
        ),
        n => (n.replace('_', " "), format!("{value:.3}")),
    }
}

/// `0.95×`, or `baseline` for the baseline itself.
fn ratio_cell(table: &Table, figure: &Figure) -> String {
    if table.baseline.as_deref() == Some(figure.engine.as_str()) {
        return if figure.outcome.stats().is_some() {
            "1 (baseline)".into()
        } else {
            "baseline".into()
        };
    }
    figure
        .ratio
        .map_or_else(|| "-".into(), |r| format!("{r:.2}×"))
}

/// The figure's note, or the reason it is missing.
fn note_cell(figure: &Figure) -> String {
    let reason = match &figure.outcome {
        crate::results::Outcome::Unavailable { reason } => Some(reason.as_str()),
        _ => None,
    };
    match (reason, &figure.note) {
        (Some(r), Some(n)) => format!("{r}; {n}"),
        (Some(r), None) => r.to_string(),
        (None, Some(n)) => n.clone(),
        (None, None) => String::new(),
    }
}

/// Lays `table` out as text: [case,] engine, size, median, min, max, [rate,] metrics…,
/// [time ÷ baseline,] note.
pub fn text_table(table: &Table) -> TextTable {
    let cases: Vec<&str> = {
        let mut c: Vec<&str> = table.figures.iter().map(|f| f.case.as_str()).collect();
        c.dedup();
        c
    };
    let with_case = cases.len() > 1;
    let mut metrics: Vec<&str> = Vec::new();
    for f in &table.figures {
        for k in f.metrics.keys() {
            if !metrics.contains(&k.as_str()) {
                metrics.push(k);
            }
        }
    }
    // Counts and rates first, then waits, then fairness; the rest alphabetically after them.
    const ORDER: [&str; 7] = [
        "queries",
        "throughput_qps",
        "mean_wait_ms",
        "p99_wait_ms",
        "max_wait_ms",
        "fairness",
        "p99_us",
    ];
    metrics.sort_by_key(|m| ORDER.iter().position(|o| o == m).unwrap_or(ORDER.len()));
    let mut header = Vec::new();
    if with_case {
        header.push("case".to_string());
    }
    header.extend(["engine".to_string(), table.unit.clone()]);
    header.extend(["median", "min", "max"].map(String::from));
    if table.rate {
        header.push(format!("{}/s", table.unit));
    }
    for m in &metrics {
        header.push(metric_cell(m, 0.0).0);
    }
    if let Some(b) = &table.baseline {
        header.push(format!("time ÷ {b}"));
    }
    header.push("note".into());

    let rows = table
        .figures
        .iter()
        .map(|f| {
            let mut row = Vec::new();
            if with_case {
                row.push(f.case.clone());
            }
            row.push(f.engine.clone());
            row.push(f.rows.to_string());
            match f.outcome.stats() {
                Some(s) => row.extend([s.median_s, s.min_s, s.max_s].map(format_secs)),
                None => row.extend([f.outcome.label().to_string(), "-".into(), "-".into()]),
            }
            if table.rate {
                row.push(f.rate().map_or_else(|| "-".into(), format_rate));
            }
            for m in &metrics {
                row.push(
                    f.metrics
                        .get(*m)
                        .map_or_else(|| "-".into(), |v| metric_cell(m, *v).1),
                );
            }
            if table.baseline.is_some() {
                row.push(ratio_cell(table, f));
            }
            row.push(note_cell(f));
            row
        })
        .collect();
    TextTable {
        header,
        rows,
        text_columns: if with_case { 2 } else { 1 },
    }
}

/// The table as aligned console text (notes cut at 100 characters).
pub fn console(table: &TextTable) -> String {
    let cut = |s: &str| {
        if s.chars().count() > 100 {
            format!("{}…", s.chars().take(99).collect::<String>())
        } else {
            s.to_string()
        }
    };
    let rows: Vec<Vec<String>> = table
        .rows
        .iter()
        .map(|r| r.iter().map(|c| cut(c)).collect())
        .collect();
    let mut widths: Vec<usize> = table.header.iter().map(|h| h.chars().count()).collect();
    for r in &rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |cells: &[String]| {
        cells
            .iter()
            .zip(&widths)
            .enumerate()
            .map(|(i, (c, w))| {
                let pad = w.saturating_sub(c.chars().count());
                // Text columns (the first ones and the note) left-aligned, figures right-aligned.
                if i < table.text_columns || i + 1 == cells.len() {
                    format!("{c}{}", " ".repeat(pad))
                } else {
                    format!("{}{c}", " ".repeat(pad))
                }
            })
            .collect::<Vec<_>>()
            .join("  ")
            .trim_end()
            .to_string()
    };
    let mut out = line(&table.header);
    out.push('\n');
    for r in &rows {
        out.push_str(&line(r));
        out.push('\n');
    }
    out
}

/// The table as a Markdown table (pipes in cells escaped).
pub fn markdown(table: &TextTable) -> String {
    let esc = |s: &str| s.replace('|', "\\|").replace('\n', " ");
    let mut out = format!(
        "| {} |\n|{}|\n",
        table
            .header
            .iter()
            .map(|h| esc(h))
            .collect::<Vec<_>>()
            .join(" | "),
        table
            .header
            .iter()
            .enumerate()
            .map(|(i, _)| {
                if i < table.text_columns || i + 1 == table.header.len() {
                    "---"
                } else {
                    "---:"
                }
            })
            .collect::<Vec<_>>()
            .join("|")
    );
    for r in &table.rows {
        out.push_str(&format!(
            "| {} |\n",
            r.iter().map(|c| esc(c)).collect::<Vec<_>>().join(" | ")
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::Stats;
    use crate::results::Outcome;

    fn sample() -> Table {
        let m = |s: f64| Outcome::Measured {
            stats: Stats::of_secs(&[s, s * 2.0, s * 0.5]).unwrap(),
        };
        let mut t = Table::new("t", "rows", Some("DataFusion"));
        t.push(Figure::new("q", "DataFusion", 1000, m(0.002)));
        t.push(Figure::new("q", "accelsql CPU", 1000, m(0.001)));
        t.push(Figure::new("q", "accelsql GPU", 1000, Outcome::NoGpu));
        t.push(Figure::new(
            "q",
            "DuckDB",
            1000,
            Outcome::unavailable("no venv | pip"),
        ));
        t.fill_ratios();
        t
    }

    #[test]
    fn rows_show_figures_ratios_and_missing_ones() {
        let t = text_table(&sample());
        assert_eq!(
            t.header,
            [
                "engine",
                "rows",
                "median",
                "min",
                "max",
                "rows/s",
                "time ÷ DataFusion",
                "note"
            ]
        );
        assert_eq!(
            t.rows[0],
            [
                "DataFusion",
                "1000",
                "2.0 ms",
                "1.0 ms",
                "4.0 ms",
                "500.0 k",
                "1 (baseline)",
                ""
            ]
        );
        assert_eq!(t.rows[1][6], "0.50×");
        assert_eq!(t.rows[2][2], "no GPU");
        assert_eq!(t.rows[3][2], "unavailable");
        assert_eq!(t.rows[3][7], "no venv | pip");
    }

    #[test]
    fn markdown_escapes_pipes_and_aligns_figures_right() {
        let md = markdown(&text_table(&sample()));
        let lines: Vec<&str> = md.lines().collect();
        assert!(lines[0].starts_with("| engine | rows | median |"));
        assert_eq!(lines[1], "|---|---:|---:|---:|---:|---:|---:|---|");
        assert!(lines[5].contains("no venv \\| pip"));
        assert_eq!(lines.len(), 6);
    }

    #[test]
    fn console_lines_align() {
        let text = console(&text_table(&sample()));
        let widths: Vec<usize> = text.lines().map(|l| l.find("rows").unwrap_or(0)).collect();
        assert!(widths[0] > 0);
        assert_eq!(text.lines().count(), 5);
    }
}
