//! The roofline chart (SVG, drawn by plotters): log–log, arithmetic intensity (FLOP/byte) across,
//! achieved GFLOP/s up; the memory roof (measured bandwidth × intensity) up to the ridge, the
//! compute roof (measured f32 matmul peak) after it; each op kind a labelled point, forward as
//! circles and backward as triangles, one colour per section (train step, forward, prefill,
//! decode). Ops with no FLOPs or no time cannot sit on log axes and are listed under the chart by
//! the caller. Pure: from the report's rows to an SVG string.

use crate::record::roofline::{Head, SectionReport};
use crate::report::html::svg::{color, draw_svg, DrawResult, GREY};
use plotters::prelude::*;

const W: u32 = 900;
const H: u32 = 560;

/// A point on the chart: (intensity, achieved GFLOP/s).
fn point(r: &crate::record::roofline::OpRow) -> Option<(f64, f64)> {
    let ok = |x: f64| x.is_finite() && x > 0.0;
    (ok(r.intensity) && ok(r.achieved_gflops)).then_some((r.intensity, r.achieved_gflops))
}

/// Names of the ops that cannot be drawn (no FLOPs, no bytes or no measured time).
pub fn not_drawn(secs: &[SectionReport]) -> Vec<String> {
    secs.iter()
        .flat_map(|s| {
            s.ops
                .iter()
                .filter(|r| point(r).is_none())
                .map(move |r| format!("{} {} ({})", r.name, r.pass, s.name))
        })
        .collect()
}

/// The chart for one roofline run.
pub fn svg(h: &Head, secs: &[SectionReport]) -> anyhow::Result<String> {
    let roofs = h.roofs;
    let ridge = roofs.ridge();
    let pts: Vec<(f64, f64)> = secs
        .iter()
        .flat_map(|s| s.ops.iter().filter_map(point))
        .collect();
    let fold =
        |f: fn(f64, f64) -> f64, init: f64, xs: &mut dyn Iterator<Item = f64>| xs.fold(init, f);
    let x0 = fold(f64::min, ridge, &mut pts.iter().map(|p| p.0)) / 3.0;
    let x1 = fold(f64::max, ridge, &mut pts.iter().map(|p| p.0)) * 3.0;
    let y0 = fold(
        f64::min,
        x0 * roofs.bandwidth_gbs,
        &mut pts.iter().map(|p| p.1),
    ) / 2.0;
    let y1 = fold(f64::max, roofs.matmul_gflops, &mut pts.iter().map(|p| p.1)) * 2.0;
    let title = format!(
        "{} {} b{} s{} — roofs {:.1} GFLOP/s, {:.1} GB/s",
        h.model, h.mode, h.batch, h.seq, roofs.matmul_gflops, roofs.bandwidth_gbs
    );
    draw_svg(W, H, |root| -> DrawResult {
        let mut chart = ChartBuilder::on(root)
            .caption(title, ("sans-serif", 20))
            .margin(12)
            .x_label_area_size(50)
            .y_label_area_size(70)
            .build_cartesian_2d((x0..x1).log_scale(), (y0..y1).log_scale())?;
        chart
            .configure_mesh()
            .x_desc("arithmetic intensity (FLOP / byte, minimum bytes)")
            .y_desc("achieved GFLOP/s")
            .label_style(("sans-serif", 15))
            .axis_desc_style(("sans-serif", 16))
            .draw()?;
        // The roofs: bandwidth slope up to the ridge, then the matmul ceiling.
        let roof = [
            (x0, x0 * roofs.bandwidth_gbs),
            (ridge, roofs.matmul_gflops),
            (x1, roofs.matmul_gflops),
        ];
        chart
            .draw_series(LineSeries::new(roof, BLACK.stroke_width(2)))?
            .label(format!(
                "roof: min({:.1} GFLOP/s, {:.1} GB/s × intensity)",
                roofs.matmul_gflops, roofs.bandwidth_gbs
            ))
            .legend(|(x, y)| PathElement::new([(x, y), (x + 18, y)], BLACK.stroke_width(2)));
        chart.draw_series(LineSeries::new(
            [(ridge, y0), (ridge, roofs.matmul_gflops)],
            GREY,
        ))?;
        chart.draw_series(std::iter::once(Text::new(
            format!("ridge {ridge:.2} FLOP/B"),
            (ridge * 1.08, roofs.matmul_gflops * 0.8),
            ("sans-serif", 14).into_font().color(&GREY),
        )))?;
        let mut labels: Vec<(String, (i32, i32), RGBColor)> = Vec::new();
        for (si, s) in secs.iter().enumerate() {
            let passes = [
                ("forward", false),
                ("backward", true),
                ("optimizer step", false),
            ];
            for (pi, (pass, tri)) in passes.into_iter().enumerate() {
                let c = color(3 * si + pi);
                let rows: Vec<_> = s.ops.iter().filter(|r| r.pass == pass).collect();
                let xy: Vec<(f64, f64)> = rows.iter().filter_map(|r| point(r)).collect();
                if xy.is_empty() {
                    continue;
                }
                let label = format!("{} {pass}", s.name);
                let style = c.filled();
                let series = if tri {
                    chart.draw_series(xy.iter().map(|&p| TriangleMarker::new(p, 7, style)))?
                } else {
                    chart.draw_series(xy.iter().map(|&p| Circle::new(p, 6, style)))?
                };
                series.label(label).legend(move |(x, y)| {
                    if tri {
                        TriangleMarker::new((x + 9, y), 7, c.filled()).into_dyn()
                    } else {
                        Circle::new((x + 9, y), 6, c.filled()).into_dyn()
                    }
                });
                for r in rows {
                    if let Some(p) = point(r) {
                        labels.push((r.name.clone(), chart.backend_coord(&p), c));
                    }
                }
            }
        }
        for (text, at, c) in place_labels(labels) {
            root.draw(&Text::new(
                text,
                at,
                ("sans-serif", 13).into_font().color(&c),
            ))?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::LowerRight)
            .label_font(("sans-serif", 14))
            .background_style(WHITE.mix(0.85))
            .border_style(GREY)
            .draw()?;
        Ok(())
    })
}

/// Puts each label right of its point, moved down in whole lines until it overlaps no label
/// placed before it (points of the same kind cluster: the matmuls sit together at the top).
fn place_labels(
    mut labels: Vec<(String, (i32, i32), RGBColor)>,
) -> Vec<(String, (i32, i32), RGBColor)> {
    const LINE: i32 = 14;
    const CHAR: i32 = 7;
    labels.sort_by_key(|l| (l.1 .1, l.1 .0));
    let mut placed: Vec<(i32, i32, i32)> = Vec::new(); // x0, x1, top
    labels
        .into_iter()
        .map(|(text, (x, y), c)| {
            let (x0, x1) = (x + 9, x + 9 + CHAR * text.chars().count() as i32);
            let mut top = y - LINE / 2;
            while placed
                .iter()
                .any(|&(a0, a1, t)| x0 < a1 && a0 < x1 && (top - t).abs() < LINE)
            {
                top += LINE;
            }
            placed.push((x0, x1, top));
            (text, (x0, top), c)
        })
        .collect()
}
