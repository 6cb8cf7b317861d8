//! Scaling curves from sweeps: heap peak against batch (one line per sequence length) and against
//! sequence length (one line per batch, with the least-squares line and parabola when there are
//! enough points). Configurations that did not run (out of memory, skipped, crashed, timed out)
//! are marked with a red × at the top of the axis at their x, so the wall is visible.

use super::svg::{color, draw_svg, esc, figure, padded, DrawResult, MIB, RED};
use crate::analysis::least_squares::{fit_linear, fit_quadratic};
use crate::record::sweep_row::{Row, Status};
use plotters::prelude::*;
use std::collections::BTreeMap;

/// Which axis a chart sweeps.
#[derive(Clone, Copy)]
enum Axis {
    Batch,
    Seq,
}

impl Axis {
    fn of(self, r: &Row) -> usize {
        match self {
            Axis::Batch => r.spec.batch,
            Axis::Seq => r.spec.seq,
        }
    }
    fn other(self, r: &Row) -> usize {
        match self {
            Axis::Batch => r.spec.seq,
            Axis::Seq => r.spec.batch,
        }
    }
    fn name(self) -> &'static str {
        match self {
            Axis::Batch => "batch",
            Axis::Seq => "seq",
        }
    }
    fn other_name(self) -> &'static str {
        match self {
            Axis::Batch => "s",
            Axis::Seq => "b",
        }
    }
}

/// The scaling charts for the sweeps given as (input index, file name, rows).
pub fn section(sweeps: &[(usize, String, &[Row])]) -> anyhow::Result<String> {
    let mut html = String::new();
    for axis in [Axis::Batch, Axis::Seq] {
        let mut xs: Vec<usize> = sweeps
            .iter()
            .flat_map(|(_, _, rows)| rows.iter().map(|r| axis.of(r)))
            .collect();
        xs.sort();
        xs.dedup();
        if xs.len() < 2 {
            continue;
        }
        html += &chart(axis, sweeps)?;
    }
    Ok(html)
}

/// Lines keyed by (input, mode, dtype, plan, the other axis): (x, heap peak bytes) of ok rows.
type Lines = BTreeMap<(usize, String, String, Option<String>, usize), Vec<(f64, f64)>>;

fn chart(axis: Axis, sweeps: &[(usize, String, &[Row])]) -> anyhow::Result<String> {
    let mut lines: Lines = BTreeMap::new();
    let mut failed: Vec<(usize, f64, &'static str)> = Vec::new();
    for (i, _, rows) in sweeps {
        for r in rows.iter() {
            let x = axis.of(r) as f64;
            match (&r.status, &r.summary) {
                (Status::Ok, Some(s)) => lines
                    .entry((
                        *i,
                        r.spec.mode.name().to_string(),
                        r.spec.dtype.name().to_string(),
                        // Each plan (a pipeline's each micro-batch count) its own line.
                        crate::record::sweep_row::plan_label(&r.spec),
                        axis.other(r),
                    ))
                    .or_default()
                    .push((x, s.heap_peak_bytes as f64)),
                (st, _) => failed.push((*i, x, st.name())),
            }
        }
    }
    for pts in lines.values_mut() {
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    let x_hi = lines
        .values()
        .flatten()
        .map(|p| p.0)
        .chain(failed.iter().map(|f| f.1))
        .fold(1.0, f64::max);
    let y_hi = lines.values().flatten().map(|p| p.1).fold(0.0, f64::max) / MIB;
    let y1 = padded(0.0, y_hi).1 * 1.08;
    let title = format!("Heap peak vs {}", axis.name());
    let n_lines = lines.len();
    let mut fits_text = Vec::new();
    let svg = draw_svg(1100, 440, |root| -> DrawResult {
        let mut chart = ChartBuilder::on(root)
            .caption(&title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .build_cartesian_2d(0.0..x_hi * 1.05, 0.0..y1)?;
        chart
            .configure_mesh()
            .x_desc(axis.name())
            .y_desc("heap peak, MiB (2^20 bytes)")
            .draw()?;
        for (k, ((i, mode, dtype, plan, other), pts)) in lines.iter().enumerate() {
            // Inputs keep their colour; lines within one input vary the marker size and dash.
            let c = color(*i).mix(1.0 - 0.5 * k as f64 / n_lines.max(1) as f64);
            let plan = plan.as_ref().map_or(String::new(), |p| format!(" {p}"));
            let label = format!(
                "#{} {mode} {dtype}{plan} {}{other}",
                i + 1,
                axis.other_name()
            );
            let mib: Vec<(f64, f64)> = pts.iter().map(|p| (p.0, p.1 / MIB)).collect();
            chart
                .draw_series(LineSeries::new(mib.clone(), c.stroke_width(2)))?
                .label(label.clone())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2))
                });
            chart.draw_series(mib.iter().map(|p| Circle::new(*p, 4, c.filled())))?;
            let (x, y): (Vec<f64>, Vec<f64>) = pts.iter().cloned().unzip();
            let fit = match axis {
                Axis::Seq => fit_quadratic(&x, &y).map(|f| ("parabola", f)),
                Axis::Batch => None,
            }
            .or_else(|| fit_linear(&x, &y).map(|f| ("line", f)));
            if let Some((kind, f)) = fit {
                let (a, b) = (x[0], x[x.len() - 1]);
                let curve: Vec<(f64, f64)> = (0..=40)
                    .map(|t| {
                        let xv = a + (b - a) * t as f64 / 40.0;
                        (xv, f.predict(xv) / MIB)
                    })
                    .collect();
                chart.draw_series(DashedLineSeries::new(curve, 4, 4, c.stroke_width(1)))?;
                fits_text.push(format!(
                    "{label}: least-squares {kind} (dashed), R² {:.4}",
                    f.r2
                ));
            }
        }
        for (i, x, status) in &failed {
            let c = RED;
            chart.draw_series(std::iter::once(Cross::new(
                (*x, y1 * 0.96),
                7,
                c.stroke_width(3),
            )))?;
            chart.draw_series(std::iter::once(Text::new(
                format!("#{} {status}", i + 1),
                (*x, y1 * 0.9),
                ("sans-serif", 12).into_font().color(&c),
            )))?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()?;
        Ok(())
    })?;
    let mut caption = format!(
        "heap peak: the most heap live at any moment of the run (each configuration in its own \
         worker process). Red ×: a configuration that did not complete ({} of them).<br>",
        failed.len()
    );
    for (i, name, rows) in sweeps {
        let ok = rows.iter().filter(|r| r.status == Status::Ok).count();
        caption += &format!(
            "#{} {}: {} configurations, {} ok<br>",
            i + 1,
            esc(name),
            rows.len(),
            ok
        );
    }
    for t in fits_text {
        caption += &format!("{}<br>", esc(&t));
    }
    Ok(figure(
        &format!("scaling-{}", axis.name()),
        &title,
        &svg,
        &caption,
    ))
}
