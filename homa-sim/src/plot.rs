//! Plots in the style of the paper's figures: slowdown (log scale) per message-size bin, with
//! bins placed along the x-axis by the cumulative fraction of messages (feature `plot`).

use std::io;
use std::path::Path;

use plotters::prelude::*;

use crate::report::Report;

/// A curve to draw: its name, colour, width and value per bin.
type Series<'a> = (&'static str, RGBColor, u32, Box<dyn Fn(usize) -> Option<f64> + 'a>);

/// A message size as the plots label it: 1M, 10K, 100.
pub fn size_label(bytes: u64) -> String {
    match bytes {
        b if b >= 1_000_000 => format!("{}M", b / 1_000_000),
        b if b >= 1_000 => format!("{}K", b / 1_000),
        b => b.to_string(),
    }
}

/// A step curve: each bin's value held across its share of messages.
fn steps(report: &Report, value: impl Fn(usize) -> Option<f64>) -> Vec<Vec<(f64, f64)>> {
    let mut curves = Vec::new();
    let mut current = Vec::new();
    let mut left = 0.0;
    for (i, b) in report.bins.iter().enumerate() {
        let right = b.cum_fraction;
        match value(i) {
            Some(v) if v > 0.0 && right > left => {
                current.push((left, v));
                current.push((right, v));
            }
            Some(_) => {}
            None => {
                if !current.is_empty() {
                    curves.push(std::mem::take(&mut current));
                }
            }
        }
        left = right.max(left);
    }
    if !current.is_empty() {
        curves.push(current);
    }
    curves
}

/// Draws the report's median and 99th-percentile slowdowns per bin (and the paper's, where
/// it has them, and the SRPT oracle's p99 in runs with it) into an SVG file.
pub fn svg(report: &Report, path: &Path) -> io::Result<()> {
    let root = SVGBackend::new(path, (900, 520)).into_drawing_area();
    draw(report, &root).map_err(|e| io::Error::other(e.to_string()))?;
    root.present().map_err(|e| io::Error::other(e.to_string()))
}

fn draw<DB: DrawingBackend>(
    report: &Report,
    root: &DrawingArea<DB, plotters::coord::Shift>,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    root.fill(&WHITE)?;
    let values = report
        .bins
        .iter()
        .flat_map(|b| [b.p99, b.median, b.paper_p99, b.paper_median, b.oracle_p99])
        .flatten();
    let top = values.fold(2.0f64, f64::max) * 1.3;
    let title = format!(
        "{}: {:.0}% load, {} hosts ({:?})",
        report.workload.to_uppercase(),
        report.offered.load * 100.0,
        report.topology.hosts,
        report.mode
    );
    let mut chart = ChartBuilder::on(root)
        .caption(title, ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(48)
        .y_label_area_size(56)
        .build_cartesian_2d(0.0f64..1.0f64, (0.9f64..top).log_scale())?;
    let bins = &report.bins;
    let label = |x: &f64| {
        let i = bins.partition_point(|b| b.cum_fraction < *x - 1e-9).min(bins.len() - 1);
        size_label(bins[i].upper)
    };
    chart
        .configure_mesh()
        .x_desc("Message size (placed by cumulative fraction of messages)")
        .y_desc("Slowdown")
        .x_labels(11)
        .x_label_formatter(&label)
        .y_label_formatter(&|y| format!("{y:.0}"))
        .light_line_style(WHITE.mix(0.0))
        .draw()?;
    let series: [Series<'_>; 5] = [
        ("99th percentile", RED, 2, Box::new(|i| bins[i].p99)),
        ("median", BLUE, 2, Box::new(|i| bins[i].median)),
        ("paper 99th percentile", BLACK, 1, Box::new(|i| bins[i].paper_p99)),
        ("paper median", RGBColor(120, 120, 120), 1, Box::new(|i| bins[i].paper_median)),
        ("SRPT oracle 99th percentile", RGBColor(0, 150, 0), 1, Box::new(|i| bins[i].oracle_p99)),
    ];
    for (name, color, width, value) in series {
        let curves = steps(report, value);
        if curves.is_empty() {
            continue;
        }
        let style = ShapeStyle::from(color).stroke_width(width);
        for (k, curve) in curves.into_iter().enumerate() {
            let drawn = chart.draw_series(LineSeries::new(curve, style))?;
            if k == 0 {
                drawn
                    .label(name)
                    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
            }
        }
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;
    Ok(())
}
