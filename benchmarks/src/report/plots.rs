//! PNG plots drawn with plotters (bitmap backend, text in the committed DejaVu Sans font so no
//! system font lookup is needed): throughput vs size, engines side by side, latency histograms.

use std::path::Path;
use std::sync::OnceLock;

use plotters::prelude::*;
use plotters::style::FontStyle;

use crate::bench_err;
use crate::error::Result;
use crate::measure::{format_rate, format_secs, percentile_of_sorted};
use crate::results::{Distribution, Outcome, Table};

/// DejaVu Sans (Bitstream Vera license, `assets/DejaVuSans-LICENSE.txt`).
static FONT: &[u8] = include_bytes!("../../assets/DejaVuSans.ttf");
const FAMILY: &str = "sans-serif";

/// Line and bar colours, one per engine in order.
const COLORS: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
];

fn color(i: usize) -> RGBColor {
    COLORS[i % COLORS.len()]
}

/// Registers the font once; every plot calls this first.
fn font() -> Result<()> {
    static REGISTERED: OnceLock<bool> = OnceLock::new();
    let ok = *REGISTERED
        .get_or_init(|| plotters::style::register_font(FAMILY, FontStyle::Normal, FONT).is_ok());
    if ok {
        Ok(())
    } else {
        Err(bench_err!("the plot font could not be loaded"))
    }
}

fn plot_err(e: impl std::fmt::Display) -> crate::error::BenchError {
    bench_err!("plot: {e}")
}

/// One line of a line plot.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// Legend text.
    pub name: String,
    /// Points (x, y), both positive (the axes are logarithmic).
    pub points: Vec<(f64, f64)>,
}

/// What a line plot's y values are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum YAxis {
    /// Counts per second (labels `950`, `12.3 k`, `4.56 M`).
    Rate,
    /// Seconds (labels `420 ns`, `3.41 µs`, `12.3 ms`).
    Seconds,
}

/// A log-log line plot of `series` (series with no points are left out; nothing is drawn and
/// `false` returned when none has any).
pub fn lines(
    path: &Path,
    title: &str,
    x_desc: &str,
    (y_desc, y_axis): (&str, YAxis),
    series: &[Series],
) -> Result<bool> {
    let all: Vec<(f64, f64)> = series
        .iter()
        .flat_map(|s| s.points.iter().copied())
        .filter(|(x, y)| *x > 0.0 && *y > 0.0 && x.is_finite() && y.is_finite())
        .collect();
    if all.is_empty() {
        return Ok(false);
    }
    font()?;
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for (x, y) in &all {
        x0 = x0.min(*x);
        x1 = x1.max(*x);
        y0 = y0.min(*y);
        y1 = y1.max(*y);
    }
    let (x0, x1) = (x0 / 1.5, x1 * 1.5);
    let (y0, y1) = (y0 / 2.0, y1 * 3.0);
    let root = BitMapBackend::new(path, (960, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(plot_err)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, (FAMILY, 22))
        .margin(16)
        .x_label_area_size(50)
        .y_label_area_size(80)
        .build_cartesian_2d((x0..x1).log_scale(), (y0..y1).log_scale())
        .map_err(plot_err)?;
    chart
        .configure_mesh()
        .x_desc(x_desc)
        .y_desc(y_desc)
        .label_style((FAMILY, 14))
        .axis_desc_style((FAMILY, 16))
        .x_label_formatter(&|v| log_label(v, format_rate))
        .y_label_formatter(&|v| match y_axis {
            YAxis::Rate => log_label(v, format_rate),
            YAxis::Seconds => log_label(v, format_secs),
        })
        .draw()
        .map_err(plot_err)?;
    for (i, s) in series.iter().enumerate() {
        let points: Vec<(f64, f64)> = s
            .points
            .iter()
            .copied()
            .filter(|(x, y)| *x > 0.0 && *y > 0.0)
            .collect();
        if points.is_empty() {
            continue;
        }
        let c = color(i);
        chart
            .draw_series(LineSeries::new(points.clone(), c.stroke_width(2)))
            .map_err(plot_err)?
            .label(s.name.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2)));
        chart
            .draw_series(points.iter().map(|p| Circle::new(*p, 4, c.filled())))
            .map_err(plot_err)?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font((FAMILY, 14))
        .draw()
        .map_err(plot_err)?;
    root.present().map_err(plot_err)?;
    Ok(true)
}

/// A log axis label: only at 1, 2 and 5 × 10^k (the other grid lines stay unlabelled).
fn log_label(v: &f64, format: fn(f64) -> String) -> String {
    if *v <= 0.0 {
        return String::new();
    }
    let mantissa = v / 10f64.powf(v.log10().floor());
    if [1.0, 2.0, 5.0, 10.0]
        .iter()
        .any(|m| (mantissa - m).abs() < 1e-6)
    {
        format(*v)
    } else {
        String::new()
    }
}

/// Throughput (size ÷ median) against size, one line per engine.
pub fn throughput(path: &Path, table: &Table) -> Result<bool> {
    let series: Vec<Series> = table
        .engines()
        .into_iter()
        .map(|engine| Series {
            name: engine.to_string(),
            points: table
                .figures
                .iter()
                .filter(|f| f.engine == engine)
                .filter_map(|f| Some((f.rows as f64, f.rate()?)))
                .collect(),
        })
        .collect();
    lines(
        path,
        &format!("{}: throughput vs size", table.title),
        &table.unit,
        (&format!("{}/s (median)", table.unit), YAxis::Rate),
        &series,
    )
}

/// Median time per engine at the largest size, as horizontal bars; engines without a figure
/// there get their reason ("no GPU", "unavailable") instead of a bar.
pub fn engines(path: &Path, table: &Table) -> Result<bool> {
    let Some(&size) = table.sizes().last() else {
        return Ok(false);
    };
    let bars: Vec<(String, &Outcome)> = table
        .figures
        .iter()
        .filter(|f| f.rows == size)
        .map(|f| (f.engine.clone(), &f.outcome))
        .collect();
    let max = bars
        .iter()
        .filter_map(|(_, o)| o.stats().map(|s| s.median_s))
        .fold(0.0f64, f64::max);
    if bars.is_empty() || max <= 0.0 {
        return Ok(false);
    }
    font()?;
    let n = bars.len();
    let height = 120 + 46 * n as u32;
    let root = BitMapBackend::new(path, (1000, height)).into_drawing_area();
    root.fill(&WHITE).map_err(plot_err)?;
    let names: Vec<String> = bars.iter().map(|(e, _)| e.clone()).collect();
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!("{}: median time at {size} {}", table.title, table.unit),
            (FAMILY, 20),
        )
        .margin(16)
        .x_label_area_size(45)
        .y_label_area_size(330)
        .build_cartesian_2d(0.0..max * 1.3, (0..n - 1).into_segmented())
        .map_err(plot_err)?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .x_labels(6)
        .y_labels(n)
        .y_label_formatter(&|v| match v {
            SegmentValue::CenterOf(i) => n
                .checked_sub(1 + *i)
                .and_then(|j| names.get(j))
                .cloned()
                .unwrap_or_default(),
            _ => String::new(),
        })
        .x_label_formatter(&|v| format_secs(*v))
        .x_desc("median time (lower is faster)")
        .label_style((FAMILY, 14))
        .axis_desc_style((FAMILY, 15))
        .draw()
        .map_err(plot_err)?;
    for (i, (_, outcome)) in bars.iter().enumerate() {
        let row = n - 1 - i;
        let c = color(i);
        match outcome.stats() {
            Some(s) => {
                chart
                    .draw_series(std::iter::once(Rectangle::new(
                        [
                            (0.0, SegmentValue::Exact(row)),
                            (s.median_s, SegmentValue::Exact(row + 1)),
                        ],
                        c.mix(0.8).filled(),
                    )))
                    .map_err(plot_err)?;
                chart
                    .draw_series(std::iter::once(Text::new(
                        format!(" {}", format_secs(s.median_s)),
                        (s.median_s, SegmentValue::CenterOf(row)),
                        (FAMILY, 14).into_font(),
                    )))
                    .map_err(plot_err)?;
            }
            None => {
                chart
                    .draw_series(std::iter::once(Text::new(
                        format!(" {}", outcome.label()),
                        (0.0, SegmentValue::CenterOf(row)),
                        (FAMILY, 14).into_font().color(&RGBColor(160, 0, 0)),
                    )))
                    .map_err(plot_err)?;
            }
        }
    }
    root.present().map_err(plot_err)?;
    Ok(true)
}

/// A histogram of `d`'s samples: 40 bins from the fastest sample to the 99th percentile, the
/// slower ones in the last bin.
pub fn histogram(path: &Path, d: &Distribution) -> Result<bool> {
    let mut v: Vec<f64> = d
        .samples_us
        .iter()
        .copied()
        .filter(|x| x.is_finite())
        .collect();
    if v.is_empty() {
        return Ok(false);
    }
    font()?;
    v.sort_by(f64::total_cmp);
    let lo = v[0];
    let hi = percentile_of_sorted(&v, 0.99).max(lo + 1e-3);
    const BINS: usize = 40;
    let width = (hi - lo) / BINS as f64;
    let mut counts = [0u32; BINS];
    for x in &v {
        let bin = (((x - lo) / width) as usize).min(BINS - 1);
        counts[bin] += 1;
    }
    let top = counts.iter().copied().max().unwrap_or(1);
    let root = BitMapBackend::new(path, (960, 520)).into_drawing_area();
    root.fill(&WHITE).map_err(plot_err)?;
    let us = |x: f64| format_secs(x / 1e6);
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!(
                "{}: n = {}, median {}, p99 {}, max {}",
                d.title,
                v.len(),
                us(crate::measure::median_of_sorted(&v)),
                us(hi),
                us(v[v.len() - 1])
            ),
            (FAMILY, 17),
        )
        .margin(16)
        .x_label_area_size(50)
        .y_label_area_size(70)
        .build_cartesian_2d(lo..hi + width, 0u32..top + top / 10 + 1)
        .map_err(plot_err)?;
    chart
        .configure_mesh()
        .x_desc("time (the last bin holds everything above the 99th percentile)")
        .x_labels(8)
        .y_desc("samples")
        .x_label_formatter(&|x| us(*x))
        .label_style((FAMILY, 14))
        .axis_desc_style((FAMILY, 15))
        .draw()
        .map_err(plot_err)?;
    chart
        .draw_series(counts.iter().enumerate().map(|(i, &c)| {
            let left = lo + i as f64 * width;
            Rectangle::new(
                [(left, 0), (left + width * 0.95, c)],
                color(0).mix(0.8).filled(),
            )
        }))
        .map_err(plot_err)?;
    root.present().map_err(plot_err)?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::Stats;
    use crate::results::Figure;

    #[test]
    fn plots_are_written_as_png() {
        let dir = tempfile::tempdir().unwrap();
        let mut t = Table::new("geo", "rows", Some("a"));
        for (engine, k) in [("a", 1.0), ("b", 2.0)] {
            for rows in [1000u64, 4000, 16000] {
                let s = rows as f64 * 1e-7 * k;
                t.push(Figure::new(
                    "q",
                    engine,
                    rows,
                    Outcome::Measured {
                        stats: Stats::of_secs(&[s]).unwrap(),
                    },
                ));
            }
        }
        t.push(Figure::new("q", "accelsql GPU", 16000, Outcome::NoGpu));
        let png = |name: &str| dir.path().join(name);
        assert!(throughput(&png("t.png"), &t).unwrap());
        assert!(engines(&png("e.png"), &t).unwrap());
        let d = Distribution::new("waits", "w", (1..500).map(f64::from).collect());
        assert!(histogram(&png("h.png"), &d).unwrap());
        for name in ["t.png", "e.png", "h.png"] {
            let bytes = std::fs::read(png(name)).unwrap();
            assert_eq!(&bytes[1..4], b"PNG", "{name}");
        }
        assert!(!lines(&png("none.png"), "x", "x", ("y", YAxis::Rate), &[]).unwrap());
    }
}
