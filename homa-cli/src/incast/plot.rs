//! `homa incast --plot`: the mixed workload at its highest load, median and 99th-percentile
//! slowdown per message-size bin, one curve per contender (log scale, as in the papers).

use std::path::Path;

use homa_sim::plot::size_label;
use plotters::prelude::*;
use serde_json::Value;

use crate::error::Error;

const COLORS: [RGBColor; 5] =
    [RGBColor(200, 30, 30), RGBColor(230, 130, 0), BLUE, RGBColor(0, 140, 0), BLACK];

/// One contender's slowdowns per size bin (`None`: no message fell in the bin).
struct Curve {
    name: String,
    p50: Vec<Option<f64>>,
    p99: Vec<Option<f64>>,
}

/// Writes the plot of `report` (the JSON `--json` writes) to `path` as SVG.
pub(super) fn svg(report: &Value, path: &Path) -> Result<(), Error> {
    let load = report["load"].as_f64().unwrap_or(0.0);
    let mut bounds: Vec<u64> = Vec::new();
    let mut curves = Vec::new();
    for c in report["contenders"].as_array().into_iter().flatten() {
        let mut runs = c["runs"].as_array().into_iter().flatten();
        let Some(mixed) =
            runs.find(|r| r["workload"] == "mixed" && r["load"].as_f64() == Some(load))
        else {
            continue;
        };
        let bins = mixed["bins"].as_array().cloned().unwrap_or_default();
        bounds = bins.iter().map(|b| b["max_bytes"].as_u64().unwrap_or(0)).collect();
        curves.push(Curve {
            name: c["name"].as_str().unwrap_or("?").to_string(),
            p50: bins.iter().map(|b| b["slowdown_p50"].as_f64()).collect(),
            p99: bins.iter().map(|b| b["slowdown_p99"].as_f64()).collect(),
        });
    }
    if curves.is_empty() {
        return Err(Error::Input("--plot needs the mixed workload among --workloads".into()));
    }
    let root = SVGBackend::new(path, (1200, 500)).into_drawing_area();
    let drawn = draw(&root, load, &bounds, &curves).and_then(|()| root.present());
    drawn.map_err(|e| Error::Failed(format!("drawing {}: {e}", path.display())))
}

fn draw<DB: DrawingBackend>(
    root: &DrawingArea<DB, plotters::coord::Shift>,
    load: f64,
    bounds: &[u64],
    curves: &[Curve],
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    root.fill(&WHITE)?;
    let (left, right) = root.split_horizontally(600);
    let pick_p50: fn(&Curve) -> &[Option<f64>] = |c| &c.p50;
    let pick_p99: fn(&Curve) -> &[Option<f64>] = |c| &c.p99;
    for (area, what, pick) in [(left, "median", pick_p50), (right, "99th percentile", pick_p99)] {
        let top =
            curves.iter().flat_map(|c| pick(c).iter().flatten()).fold(2.0f64, |a, &b| a.max(b));
        let mut chart = ChartBuilder::on(&area)
            .caption(
                format!("{what} slowdown, mixed workload at {:.0} %", load * 100.0),
                ("sans-serif", 20),
            )
            .margin(12)
            .x_label_area_size(44)
            .y_label_area_size(52)
            .build_cartesian_2d(
                -0.5f64..bounds.len() as f64 - 0.5,
                (0.9f64..top * 1.3).log_scale(),
            )?;
        let label = |x: &f64| {
            let i = x.round().clamp(0.0, bounds.len() as f64 - 1.0) as usize;
            bounds.get(i).map_or(String::new(), |&b| size_label(b))
        };
        chart
            .configure_mesh()
            .x_desc("Message size (bins of equal message counts, upper bound)")
            .y_desc("Slowdown")
            .x_labels(bounds.len())
            .x_label_formatter(&label)
            .y_label_formatter(&|y| format!("{y:.0}"))
            .draw()?;
        for (curve, &color) in curves.iter().zip(COLORS.iter().cycle()) {
            let points: Vec<(f64, f64)> = pick(curve)
                .iter()
                .enumerate()
                .filter_map(|(i, v)| Some((i as f64, (*v)?)))
                .collect();
            let style = ShapeStyle::from(color).stroke_width(2);
            chart
                .draw_series(LineSeries::new(points, style))?
                .label(curve.name.as_str())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()?;
    }
    Ok(())
}
