//! The leak chart of a long Record (`leak --record`): heap live and RSS after each step, the
//! warm-up cut (the first step of the tail the trend is measured on), the fitted tail — Sen's
//! slope through the tail's median point — with its confidence band, and the verdict. The verdict
//! is recomputed from the Record's series with the `leak` command's default parameters, so it is
//! the one `memscope leak` printed (a `--budget` given to leak is not in the Record).

use super::svg::{color, draw_svg, esc, figure, padded, DrawResult, GREY, MIB, RED};
use crate::analysis::leak::analyze;
use crate::analysis::record_series::{series, steps_per_hour};
use crate::quantile::median;
use crate::record::leak::{LeakParams, LeakReport};
use crate::record::Record;
use crate::units::fmt_bytes;
use plotters::prelude::*;

/// Records with at least this many steps get a leak chart (a 10-step bench does not).
pub const MIN_STEPS: usize = 30;

/// The verdict of a Record's heap live series, as `memscope leak` computes it.
pub fn verdict(r: &Record) -> LeakReport {
    let params = LeakParams {
        steps_per_hour: steps_per_hour(r),
        ..LeakParams::default()
    };
    analyze(
        &series(r, "heap live", |s| Some(s.heap_live_bytes)),
        &params,
    )
}

/// One chart per long Record.
pub fn section(records: &[(usize, String, &Record)]) -> anyhow::Result<String> {
    let mut html = String::new();
    for (i, label, r) in records {
        if r.memory.series.len() >= MIN_STEPS {
            html += &chart(*i, label, r)?;
        }
    }
    Ok(html)
}

fn chart(i: usize, label: &str, r: &Record) -> anyhow::Result<String> {
    let v = verdict(r);
    let pts: Vec<(f64, f64)> = r
        .memory
        .series
        .iter()
        .map(|s| (s.step as f64, s.heap_live_bytes as f64))
        .collect();
    let rss: Vec<(f64, f64)> = r
        .memory
        .series
        .iter()
        .filter_map(|s| Some((s.step as f64, s.rss_bytes? as f64 / MIB)))
        .collect();
    let x1 = pts.last().map_or(1.0, |p| p.0).max(1.0);
    let lo = pts.iter().map(|p| p.1).fold(f64::INFINITY, f64::min) / MIB;
    let hi = pts.iter().map(|p| p.1).fold(0.0, f64::max) / MIB;
    let (y0, y1) = padded(lo, hi);
    // The fitted tail: slope through (median tail step, median of y − slope·x).
    let cut = v.tail_start_step.map(|s| s as f64);
    let fit = match (cut, v.slope_bytes_per_step) {
        (Some(c), Some(slope)) => {
            let tail: Vec<&(f64, f64)> = pts.iter().filter(|p| p.0 >= c).collect();
            let xm = median(&tail.iter().map(|p| p.0).collect::<Vec<_>>());
            let b = median(&tail.iter().map(|p| p.1 - slope * p.0).collect::<Vec<_>>());
            xm.zip(b).map(|(xm, b)| (c, xm, slope * xm + b, slope))
        }
        _ => None,
    };
    let title = format!(
        "#{} leak check: {}",
        i + 1,
        v.verdict.as_str().to_uppercase()
    );
    let c = color(i);
    let svg = draw_svg(1100, 420, |root| -> DrawResult {
        let mut chart = ChartBuilder::on(root)
            .caption(&title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(80)
            .build_cartesian_2d(0.0..x1 * 1.02, y0..y1)?;
        chart
            .configure_mesh()
            .x_desc("step")
            .y_desc("heap live, MiB (2^20 bytes)")
            .draw()?;
        if let Some((c0, xm, ym, _)) = fit {
            if let Some([s_lo, s_hi]) = v.slope_ci_bytes_per_step {
                let at = |x: f64, s: f64| (ym + s * (x - xm)) / MIB;
                let band = vec![
                    (c0, at(c0, s_lo)),
                    (x1, at(x1, s_lo)),
                    (x1, at(x1, s_hi)),
                    (c0, at(c0, s_hi)),
                ];
                chart
                    .draw_series(std::iter::once(Polygon::new(band, RED.mix(0.15).filled())))?
                    .label(format!("slope {:.0}% CI", v.params.confidence * 100.0))
                    .legend(|(x, y)| {
                        Rectangle::new([(x, y - 5), (x + 14, y + 5)], RED.mix(0.15).filled())
                    });
            }
        }
        chart
            .draw_series(
                pts.iter()
                    .map(|p| Circle::new((p.0, p.1 / MIB), 2, c.filled())),
            )?
            .label("heap live after each step")
            .legend(move |(x, y)| Circle::new((x + 7, y), 3, c.filled()));
        if let Some(c0) = cut {
            chart
                .draw_series(std::iter::once(PathElement::new(
                    vec![(c0, y0), (c0, y1)],
                    GREY.stroke_width(2),
                )))?
                .label(format!("warm-up cut (tail from step {c0:.0})"))
                .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], GREY.stroke_width(2)));
        }
        if let Some((c0, xm, ym, slope)) = fit {
            let line = vec![
                (c0, (ym + slope * (c0 - xm)) / MIB),
                (x1, (ym + slope * (x1 - xm)) / MIB),
            ];
            chart
                .draw_series(LineSeries::new(line, RED.stroke_width(2)))?
                .label("fitted tail (Sen's slope)")
                .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], RED.stroke_width(2)));
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()?;
        Ok(())
    })?;
    let mut caption = format!("#{} {}: <b>{}</b><br>", i + 1, esc(label), esc(&v.sentence));
    if let (Some(s), Some([a, b])) = (v.slope_bytes_per_step, v.slope_ci_bytes_per_step) {
        caption += &format!(
            "Tail slope {}/step ({:.0}% CI {} to {}/step), smallest leak this run could detect {}/step.",
            fmt_bytes(s),
            v.params.confidence * 100.0,
            fmt_bytes(a),
            fmt_bytes(b),
            v.min_detectable_bytes_per_step
                .map_or("unknown".into(), fmt_bytes)
        );
    }
    if let Some((steps, bytes)) = v.extrapolation.last() {
        caption += &format!(
            " At this slope, {steps} more steps reach {} heap live.",
            fmt_bytes(*bytes)
        );
    }
    if !rss.is_empty() {
        let (a, b) = rss.iter().fold((f64::INFINITY, 0.0f64), |(a, b), p| {
            (a.min(p.1), b.max(p.1))
        });
        caption += &format!(
            " RSS (what the OS sees, not drawn) stayed within {}–{}.",
            fmt_bytes(a * MIB),
            fmt_bytes(b * MIB)
        );
    }
    Ok(figure(&format!("leak-{}", i + 1), &title, &svg, &caption))
}
