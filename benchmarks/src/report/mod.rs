//! The report of a run: `results.json` (everything, machine-readable), `REPORT.md` (tables and
//! notes per suite, with the plots), and the PNG plots themselves; plus the console tables.

pub mod cells;
pub mod plots;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::error::Result;
use crate::results::{Results, SuiteResult};

/// The name of the machine-readable results file.
pub const RESULTS_JSON: &str = "results.json";
/// The name of the Markdown report.
pub const REPORT_MD: &str = "REPORT.md";

/// Prints a suite's tables and notes to stdout.
pub fn print_suite(suite: &SuiteResult) {
    println!("\n== {} ==", suite.title);
    for table in &suite.tables {
        println!("\n{}", table.title);
        print!("{}", cells::console(&cells::text_table(table)));
    }
    for note in &suite.notes {
        println!("- {note}");
    }
    if let Some(e) = &suite.error {
        println!("ERROR: the suite stopped: {e}");
    }
    println!("({:.1} s)", suite.wall_s);
}

/// Reads an earlier `results.json` from `dir`, if there is a readable one.
pub fn read_results(dir: &Path) -> Option<Results> {
    let text = std::fs::read_to_string(dir.join(RESULTS_JSON)).ok()?;
    serde_json::from_str(&text).ok()
}

/// Draws the plots, then writes `results.json` and `REPORT.md` into `dir`; returns the files.
pub fn write(dir: &Path, results: &mut Results) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)?;
    let mut files = Vec::new();
    for suite in &mut results.suites {
        suite.plots = draw(dir, suite)?;
        files.extend(suite.plots.iter().map(|p| dir.join(p)));
    }
    let json = dir.join(RESULTS_JSON);
    std::fs::write(&json, serde_json::to_string_pretty(results)?)?;
    let md = dir.join(REPORT_MD);
    std::fs::write(&md, markdown(results))?;
    files.push(json);
    files.push(md);
    Ok(files)
}

/// A file-name stem from a title: `geo: haversine + GROUP BY` → `geo-haversine-group-by`.
pub fn slug(title: &str) -> String {
    let mut out = String::new();
    for c in title.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_lowercase());
        } else if !out.ends_with('-') && !out.is_empty() {
            out.push('-');
        }
    }
    out.trim_end_matches('-').to_string()
}

/// Draws a suite's plots; returns their file names.
fn draw(dir: &Path, suite: &SuiteResult) -> Result<Vec<String>> {
    let mut names = Vec::new();
    for table in &suite.tables {
        let stem = slug(&table.title);
        if table.rate && table.sizes().len() >= 2 {
            let name = format!("{stem}-throughput.png");
            if plots::throughput(&dir.join(&name), table)? {
                names.push(name);
            }
        }
        if table.engines().len() >= 2 {
            let name = format!("{stem}-engines.png");
            if plots::engines(&dir.join(&name), table)? {
                names.push(name);
            }
        }
        if !table.rate && table.sizes().len() >= 2 {
            // Latency (or queries/s, where measured) against waiters / sessions.
            let metric = table
                .figures
                .iter()
                .any(|f| f.metrics.contains_key("throughput_qps"));
            let series: Vec<plots::Series> = table
                .engines()
                .into_iter()
                .map(|engine| plots::Series {
                    name: engine.to_string(),
                    points: table
                        .figures
                        .iter()
                        .filter(|f| f.engine == engine)
                        .filter_map(|f| {
                            let y = if metric {
                                *f.metrics.get("throughput_qps")?
                            } else {
                                f.outcome.stats()?.median_s
                            };
                            Some((f.rows as f64, y))
                        })
                        .collect(),
                })
                .collect();
            let (y_axis, what) = if metric {
                (
                    ("queries/s (all sessions)", plots::YAxis::Rate),
                    "throughput",
                )
            } else {
                (("median latency", plots::YAxis::Seconds), "latency")
            };
            let name = format!("{stem}-{what}.png");
            let title = format!("{}: {what} vs {}", table.title, table.unit);
            if plots::lines(&dir.join(&name), &title, &table.unit, y_axis, &series)? {
                names.push(name);
            }
        }
    }
    for d in &suite.distributions {
        let name = format!("{}.png", d.slug);
        if plots::histogram(&dir.join(&name), d)? {
            names.push(name);
        }
    }
    Ok(names)
}

/// GitHub's anchor of a Markdown heading: lower case, spaces to `-`, other punctuation dropped.
pub fn anchor(title: &str) -> String {
    title
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            '-' | '_' => Some(c),
            c if c.is_alphanumeric() => Some(c.to_ascii_lowercase()),
            _ => None,
        })
        .collect()
}

/// `YYYY-MM-DD HH:MM UTC` of a Unix time.
pub fn utc(unix: u64) -> String {
    let days = (unix / 86_400) as i64;
    let secs = unix % 86_400;
    // Howard Hinnant's civil-from-days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02} UTC",
        secs / 3600,
        secs % 3600 / 60
    )
}

/// `REPORT.md`.
pub fn markdown(r: &Results) -> String {
    let m = &r.machine;
    let mut out = String::new();
    let _ = writeln!(out, "# accelsql benchmark report\n");
    let _ = writeln!(out, "**Machine: {}.**", m.label);
    if m.has_gpu() {
        let _ = writeln!(
            out,
            "GPU figures are accelsql running its GPU implementations on the GPUs below.\n"
        );
    } else {
        let _ = writeln!(
            out,
            "Every accelsql figure here ran on the CPU. The GPU columns say \"no GPU\": they are \
             never filled with CPU figures (simulated devices run CPU code and do not count as \
             GPUs; only the `concurrency` suite uses one, to exercise the lease queue, and says \
             so).\n"
        );
    }
    let gpus = if m.gpus.is_empty() {
        // The inventory's note, up to its parenthesized details (results.json has them all).
        format!(
            "none{}",
            m.gpu_note
                .as_ref()
                .map(|n| format!(" ({})", n.split(" (").next().unwrap_or(n).trim()))
                .unwrap_or_default()
        )
    } else {
        m.gpus
            .iter()
            .map(|g| format!("{} ({:.0} GiB)", g.name, g.memory_gib))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let versions = m
        .versions
        .iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect::<Vec<_>>()
        .join(", ");
    let rows = [
        ("CPU", format!("{} ({} cores)", m.cpu_model, m.cores)),
        (
            "memory",
            m.memory_gib
                .map_or_else(|| "unknown".into(), |g| format!("{g:.1} GiB")),
        ),
        ("OS", m.os.clone()),
        ("GPU", gpus),
        (
            "GPU driver",
            m.gpu_driver.clone().unwrap_or_else(|| "none".into()),
        ),
        ("versions", versions),
        ("command", format!("`{}`", r.command)),
        (
            "scale, seed",
            format!("{} (sizes below), seed {}", r.scale, r.seed),
        ),
        (
            "runs",
            format!(
                "{} warm-up + {} timed per figure (median, min, max of the timed)",
                r.plan.warmup, r.plan.runs
            ),
        ),
        ("date", utc(r.started_unix)),
    ];
    if let Some(note) = &r.note {
        let _ = writeln!(out, "Note from the run: {note}\n");
    }
    let _ = writeln!(out, "| | |\n|---|---|");
    for (k, v) in rows {
        let _ = writeln!(out, "| {k} | {} |", v.replace('|', "\\|"));
    }
    let _ = writeln!(
        out,
        "\nHow to read the tables: each time is per query (or per operation), the median of the \
         timed runs, with the fastest and slowest beside it; `rows/s` is the size divided by the \
         median; `time ÷ X` divides a median by the baseline X's median at the same size (below \
         1: faster than X). Timed queries read memory tables (the Parquet files are loaded \
         first, for every engine alike); data generation and loading are not timed. Every \
         answer is checked against the baseline's; a mismatch is noted beside the figure.\n"
    );
    let _ = writeln!(out, "## Suites\n");
    for s in &r.suites {
        let _ = writeln!(
            out,
            "- [{}](#{}) ({:.0} s)",
            s.title,
            anchor(&s.title),
            s.wall_s
        );
    }
    for s in &r.suites {
        let _ = writeln!(out, "\n## {}\n", s.title);
        let _ = writeln!(out, "{}\n", s.what);
        for note in &s.notes {
            let _ = writeln!(out, "- {note}");
        }
        if let Some(e) = &s.error {
            let _ = writeln!(out, "- **The suite stopped early:** {e}");
        }
        for t in &s.tables {
            let _ = writeln!(out, "\n### {}\n", t.title);
            out.push_str(&cells::markdown(&cells::text_table(t)));
        }
        if !s.plots.is_empty() {
            let _ = writeln!(out);
            for p in &s.plots {
                let _ = writeln!(out, "![{p}]({p})\n");
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::machine::Machine;
    use crate::measure::{RunPlan, Stats};
    use crate::results::{Figure, Outcome, Table};

    fn results() -> Results {
        let mut t = Table::new("geo: haversine", "rows", Some("DataFusion ScalarUDF"));
        for (engine, s) in [("DataFusion ScalarUDF", 0.02), ("accelsql CPU", 0.021)] {
            for rows in [1000, 4000] {
                t.push(Figure::new(
                    "q",
                    engine,
                    rows,
                    Outcome::Measured {
                        stats: Stats::of_secs(&[s * rows as f64 / 1000.0]).unwrap(),
                    },
                ));
            }
        }
        t.push(Figure::new("q", "accelsql GPU", 4000, Outcome::NoGpu));
        t.fill_ratios();
        Results {
            version: crate::results::RESULTS_VERSION,
            machine: Machine::probe(Err("no NVML".into())),
            command: "accelsql-benchmarks geo --scale 0.001".into(),
            note: Some("a shared machine".into()),
            scale: 0.001,
            seed: 42,
            plan: RunPlan { warmup: 1, runs: 3 },
            started_unix: 1_700_000_000,
            suites: vec![SuiteResult {
                name: "geo".into(),
                title: "geo: haversine".into(),
                what: "what".into(),
                notes: vec!["a note".into()],
                tables: vec![t],
                ..SuiteResult::default()
            }],
        }
    }

    #[test]
    fn results_json_has_machine_suites_and_figures() {
        let dir = tempfile::tempdir().unwrap();
        let mut r = results();
        let files = write(dir.path(), &mut r).unwrap();
        assert!(
            files
                .iter()
                .any(|f| f.ends_with("geo-haversine-throughput.png"))
        );
        let json: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.path().join(RESULTS_JSON)).unwrap())
                .unwrap();
        assert_eq!(json["version"], 1);
        assert_eq!(json["scale"], 0.001);
        assert!(json["machine"]["cores"].as_u64().unwrap() >= 1);
        assert!(json["machine"]["versions"]["rustc"].is_string());
        let fig = &json["suites"][0]["tables"][0]["figures"][2];
        assert_eq!(fig["engine"], "accelsql CPU");
        assert!(fig["outcome"]["stats"]["median_s"].as_f64().unwrap() > 0.0);
        assert!((fig["ratio"].as_f64().unwrap() - 1.05).abs() < 1e-9);
        assert_eq!(
            json["suites"][0]["tables"][0]["figures"][4]["outcome"]["status"],
            "no-gpu"
        );
        assert_eq!(read_results(dir.path()), Some(r));
    }

    #[test]
    fn the_markdown_labels_the_machine_and_links_the_plots() {
        let mut r = results();
        r.suites[0].plots = vec!["geo-haversine-throughput.png".into()];
        let md = markdown(&r);
        assert!(md.contains("CPU-only machine ("), "{md}");
        assert!(md.contains("Note from the run: a shared machine"), "{md}");
        assert!(md.contains("| GPU | none (no NVML) |"), "{md}");
        assert!(md.contains("| accelsql GPU | 4000 | no GPU |"), "{md}");
        assert!(md.contains("| accelsql CPU | 1000 | 21.0 ms |"), "{md}");
        assert!(md.contains("![geo-haversine-throughput.png](geo-haversine-throughput.png)"));
        assert!(md.contains("- [geo: haversine](#geo-haversine)"));
    }

    #[test]
    fn dates_and_slugs() {
        assert_eq!(utc(0), "1970-01-01 00:00 UTC");
        assert_eq!(utc(1_700_000_000), "2023-11-14 22:13 UTC");
        assert_eq!(slug("geo: haversine + GROUP BY"), "geo-haversine-group-by");
        assert_eq!(
            anchor("geo: haversine + GROUP BY"),
            "geo-haversine--group-by"
        );
    }

    #[test]
    fn merging_replaces_suites_of_the_same_name() {
        let mut a = results();
        let mut b = results();
        b.suites[0].notes = vec!["newer".into()];
        b.suites.push(SuiteResult {
            name: "options".into(),
            ..SuiteResult::default()
        });
        a.merge(b);
        assert_eq!(a.suites.len(), 2);
        assert_eq!(a.suites[0].notes, ["newer"]);
    }
}
