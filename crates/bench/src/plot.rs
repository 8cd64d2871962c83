//! Line charts written as PNG and SVG side by side (`<out>/<name>.png` and `.svg`).
//!
//! One function draws both backends from the same description, so the two files never disagree.

use anyhow::{anyhow, Result};
use plotters::coord::Shift;
use plotters::prelude::*;
use std::path::Path;

/// One named line of (x, y) points.
#[derive(Debug, Clone)]
pub struct Series {
    /// Legend label.
    pub label: String,
    /// Points in x order.
    pub points: Vec<(f64, f64)>,
}

/// A vertical marker (for example a checkpoint's start or end) at `x`.
#[derive(Debug, Clone)]
pub struct Marker {
    /// Where on the x axis.
    pub x: f64,
    /// Which series' colour to draw it in (index into the series list), or `None` for grey.
    pub series: Option<usize>,
    /// Dashed markers are drawn lighter (for example checkpoint ends).
    pub end: bool,
}

/// What to draw.
#[derive(Debug, Clone)]
pub struct LineChart {
    /// Title at the top.
    pub title: String,
    /// X axis label, with its unit.
    pub x_label: String,
    /// Y axis label, with its unit.
    pub y_label: String,
    /// The lines.
    pub series: Vec<Series>,
    /// Vertical markers.
    pub markers: Vec<Marker>,
    /// Draw x on a log scale.
    pub log_x: bool,
}

/// Writes `<dir>/<name>.png` and `<dir>/<name>.svg`.
pub fn write_line_chart(chart: &LineChart, dir: &Path, name: &str) -> Result<()> {
    std::fs::create_dir_all(dir)?;
    let png = dir.join(format!("{name}.png"));
    let svg = dir.join(format!("{name}.svg"));
    {
        let root = BitMapBackend::new(&png, (1100, 650)).into_drawing_area();
        draw(chart, &root)?;
        root.present()
            .map_err(|e| anyhow!("writing {}: {e}", png.display()))?;
    }
    {
        let root = SVGBackend::new(&svg, (1100, 650)).into_drawing_area();
        draw(chart, &root)?;
        root.present()
            .map_err(|e| anyhow!("writing {}: {e}", svg.display()))?;
    }
    Ok(())
}

fn colour(index: usize) -> RGBColor {
    const PALETTE: [RGBColor; 8] = [
        RGBColor(31, 119, 180),
        RGBColor(255, 127, 14),
        RGBColor(44, 160, 44),
        RGBColor(214, 39, 40),
        RGBColor(148, 103, 189),
        RGBColor(140, 86, 75),
        RGBColor(227, 119, 194),
        RGBColor(23, 190, 207),
    ];
    PALETTE[index % PALETTE.len()]
}

fn draw<DB: DrawingBackend>(chart: &LineChart, root: &DrawingArea<DB, Shift>) -> Result<()>
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE).map_err(|e| anyhow!("{e:?}"))?;
    let points = chart.series.iter().flat_map(|s| s.points.iter());
    let (mut x_min, mut x_max, mut y_max) = (f64::INFINITY, f64::NEG_INFINITY, 0.0f64);
    for &(x, y) in points {
        x_min = x_min.min(x);
        x_max = x_max.max(x);
        y_max = y_max.max(y);
    }
    if !x_min.is_finite() {
        (x_min, x_max) = (0.0, 1.0);
    }
    if x_max <= x_min {
        x_max = x_min + 1.0;
    }
    let y_max = if y_max > 0.0 { y_max * 1.1 } else { 1.0 };
    let mut builder = ChartBuilder::on(root);
    builder
        .caption(&chart.title, ("sans-serif", 24))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(80);
    macro_rules! body {
        ($ctx:expr) => {{
            let mut ctx = $ctx;
            ctx.configure_mesh()
                .x_desc(chart.x_label.as_str())
                .y_desc(chart.y_label.as_str())
                .draw()
                .map_err(|e| anyhow!("{e:?}"))?;
            for marker in &chart.markers {
                let base = marker.series.map_or(RGBColor(128, 128, 128), colour);
                let style = if marker.end {
                    base.mix(0.25)
                } else {
                    base.mix(0.6)
                };
                ctx.draw_series(std::iter::once(PathElement::new(
                    vec![(marker.x, 0.0), (marker.x, y_max)],
                    style.stroke_width(1),
                )))
                .map_err(|e| anyhow!("{e:?}"))?;
            }
            for (index, series) in chart.series.iter().enumerate() {
                let style = colour(index);
                ctx.draw_series(LineSeries::new(
                    series.points.iter().copied(),
                    style.stroke_width(2),
                ))
                .map_err(|e| anyhow!("{e:?}"))?
                .label(series.label.as_str())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], style.stroke_width(2))
                });
                if series.points.len() < 40 {
                    ctx.draw_series(
                        series
                            .points
                            .iter()
                            .map(|&p| Circle::new(p, 3, style.filled())),
                    )
                    .map_err(|e| anyhow!("{e:?}"))?;
                }
            }
            ctx.configure_series_labels()
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK)
                .position(SeriesLabelPosition::UpperRight)
                .draw()
                .map_err(|e| anyhow!("{e:?}"))?;
        }};
    }
    if chart.log_x {
        let x_min = x_min.max(f64::MIN_POSITIVE);
        body!(builder
            .build_cartesian_2d((x_min..x_max).log_scale(), 0.0..y_max)
            .map_err(|e| anyhow!("{e:?}"))?);
    } else {
        body!(builder
            .build_cartesian_2d(x_min..x_max, 0.0..y_max)
            .map_err(|e| anyhow!("{e:?}"))?);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_png_and_svg() {
        let dir = tempfile::tempdir().unwrap();
        let chart = LineChart {
            title: "t".into(),
            x_label: "x".into(),
            y_label: "y".into(),
            series: vec![Series {
                label: "a".into(),
                points: vec![(1.0, 2.0), (2.0, 3.0)],
            }],
            markers: vec![Marker {
                x: 1.5,
                series: Some(0),
                end: false,
            }],
            log_x: false,
        };
        write_line_chart(&chart, dir.path(), "chart").unwrap();
        assert!(
            std::fs::metadata(dir.path().join("chart.png"))
                .unwrap()
                .len()
                > 1000
        );
        let svg = std::fs::read_to_string(dir.path().join("chart.svg")).unwrap();
        assert!(svg.contains("<svg"));
    }
}
