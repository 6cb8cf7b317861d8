//! Step-time distribution: one chart per phase, one box per Record (quartiles, median line,
//! whiskers at min and max) with every raw sample drawn over it as a point, so the spread is
//! seen, not summarised away. Several Records of one phase share the axis.

use super::svg::{color, draw_svg, esc, figure, jitter, legend, padded, DrawResult};
use crate::quantile::percentile;
use crate::record::Record;
use crate::units::ms;
use plotters::prelude::*;

/// The phases in the order a step runs them; phases not listed come after, by name.
const ORDER: [&str; 6] = [
    "step",
    "forward",
    "backward",
    "optimizer",
    "prefill",
    "decode",
];

fn phase_rank(p: &str) -> (usize, String) {
    (
        ORDER.iter().position(|o| *o == p).unwrap_or(ORDER.len()),
        p.to_string(),
    )
}

/// Every phase any Record timed, in step order.
pub fn phases(records: &[(usize, String, &Record)]) -> Vec<String> {
    let mut ps: Vec<String> = records
        .iter()
        .flat_map(|(_, _, r)| r.timing.keys().cloned())
        .collect();
    ps.sort_by_key(|p| phase_rank(p));
    ps.dedup();
    ps
}

/// The charts of the timing section (empty when no Record has samples).
pub fn section(records: &[(usize, String, &Record)]) -> anyhow::Result<String> {
    let mut html = String::new();
    for phase in phases(records) {
        let boxes: Vec<(usize, &String, Vec<f64>)> = records
            .iter()
            .filter_map(|(i, label, r)| {
                let t = r.timing.get(&phase)?;
                (!t.samples_ms.is_empty()).then(|| (*i, label, t.samples_ms.clone()))
            })
            .collect();
        if boxes.is_empty() {
            continue;
        }
        html += &phase_chart(&phase, &boxes)?;
    }
    Ok(html)
}

fn phase_chart(phase: &str, boxes: &[(usize, &String, Vec<f64>)]) -> anyhow::Result<String> {
    let lo = boxes
        .iter()
        .flat_map(|b| b.2.iter())
        .cloned()
        .fold(f64::INFINITY, f64::min);
    let hi = boxes
        .iter()
        .flat_map(|b| b.2.iter())
        .cloned()
        .fold(f64::NEG_INFINITY, f64::max);
    let (y0, y1) = (0.0, padded(lo, hi).1.max(1e-3));
    let n = boxes.len();
    let names: Vec<String> = boxes.iter().map(|b| format!("#{}", b.0 + 1)).collect();
    let svg =
        draw_svg(560, 300, |root| -> DrawResult {
            let mut chart = ChartBuilder::on(root)
                .caption(format!("{phase}: time per step"), ("sans-serif", 16))
                .margin(10)
                .x_label_area_size(30)
                .y_label_area_size(60)
                .build_cartesian_2d(-0.5f64..(n as f64 - 0.5), y0..y1)?;
            chart
                .configure_mesh()
                .disable_x_mesh()
                .x_labels(n.max(2))
                .x_label_formatter(&|x| {
                    let i = x.round();
                    if (x - i).abs() < 1e-6 && i >= 0.0 && (i as usize) < n {
                        names[i as usize].clone()
                    } else {
                        String::new()
                    }
                })
                .y_desc("ms")
                .draw()?;
            for (k, (i, _, samples)) in boxes.iter().enumerate() {
                let c = color(*i);
                let x = k as f64;
                let mut s = samples.clone();
                s.sort_by(f64::total_cmp);
                let (q1, med, q3) = (
                    percentile(&s, 0.25),
                    percentile(&s, 0.5),
                    percentile(&s, 0.75),
                );
                let (mn, mx) = (s[0], s[s.len() - 1]);
                let w = 0.3;
                chart.draw_series(std::iter::once(Rectangle::new(
                    [(x - w, q1), (x + w, q3)],
                    c.mix(0.15).filled(),
                )))?;
                chart.draw_series(std::iter::once(Rectangle::new(
                    [(x - w, q1), (x + w, q3)],
                    c.stroke_width(1),
                )))?;
                for seg in [
                    vec![(x - w, med), (x + w, med)],
                    vec![(x, mn), (x, q1)],
                    vec![(x, q3), (x, mx)],
                    vec![(x - w / 2.0, mn), (x + w / 2.0, mn)],
                    vec![(x - w / 2.0, mx), (x + w / 2.0, mx)],
                ] {
                    chart.draw_series(std::iter::once(PathElement::new(seg, c.stroke_width(2))))?;
                }
                chart.draw_series(samples.iter().enumerate().map(|(j, v)| {
                    Circle::new((x + jitter(j) * 0.5, *v), 3, c.mix(0.8).filled())
                }))?;
            }
            Ok(())
        })?;
    let mut caption = String::new();
    for (i, label, samples) in boxes {
        let mut s = samples.clone();
        s.sort_by(f64::total_cmp);
        caption += &format!(
            "#{} {}: median {} ms, IQR {}–{} ms, min–max {}–{} ms, n = {}<br>",
            i + 1,
            esc(label),
            ms(percentile(&s, 0.5)),
            ms(percentile(&s, 0.25)),
            ms(percentile(&s, 0.75)),
            ms(s[0]),
            ms(s[s.len() - 1]),
            s.len()
        );
    }
    let labels: Vec<(usize, String)> = boxes
        .iter()
        .map(|b| (b.0, format!("#{} {}", b.0 + 1, b.1)))
        .collect();
    caption += &legend(&labels);
    Ok(figure(
        &format!("timing-{phase}"),
        &format!("{phase}: time per step"),
        &svg,
        &caption,
    ))
}
