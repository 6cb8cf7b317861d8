//! Memory charts of Records: the timeline (heap live after each step, heap peak during each step,
//! RSS after each step; warm-up steps shaded; the run's heap peak marked with what was alive then)
//! and the breakdown by category, measured beside `memscope estimate`'s prediction.

use super::svg::{color, draw_svg, esc, figure, padded, DrawResult, GREY, MIB};
use crate::record::Record;
use crate::units::fmt_bytes;
use plotters::prelude::*;
use std::collections::BTreeMap;

/// The timeline chart, or nothing when no Record has a per-step series.
pub fn timeline(records: &[(usize, String, &Record)]) -> anyhow::Result<String> {
    let with: Vec<&(usize, String, &Record)> = records
        .iter()
        .filter(|(_, _, r)| !r.memory.series.is_empty())
        .collect();
    if with.is_empty() {
        return Ok(String::new());
    }
    let max_step = with
        .iter()
        .flat_map(|(_, _, r)| r.memory.series.iter().map(|s| s.step))
        .max()
        .unwrap_or(0) as f64;
    let mut hi: f64 = 0.0;
    for (_, _, r) in &with {
        for s in &r.memory.series {
            hi = hi
                .max(s.heap_peak_bytes as f64)
                .max(s.rss_bytes.unwrap_or(0) as f64);
        }
    }
    let y1 = padded(0.0, hi / MIB).1;
    let svg = draw_svg(1100, 420, |root| -> DrawResult {
        let mut chart = ChartBuilder::on(root)
            .caption("Memory per step", ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .build_cartesian_2d(-0.5f64..(max_step + 0.5).max(1.5), 0.0..y1)?;
        chart
            .configure_mesh()
            .x_desc("step (warm-up shaded)")
            .y_desc("MiB (2^20 bytes)")
            .draw()?;
        for (i, _, r) in &with {
            let warm: Vec<u64> = r
                .memory
                .series
                .iter()
                .filter(|s| s.warmup)
                .map(|s| s.step)
                .collect();
            if let (Some(a), Some(b)) = (warm.first(), warm.last()) {
                chart.draw_series(std::iter::once(Rectangle::new(
                    [(*a as f64 - 0.5, 0.0), (*b as f64 + 0.5, y1)],
                    GREY.mix(0.12).filled(),
                )))?;
            }
            let c = color(*i);
            let n = *i + 1;
            let live = r
                .memory
                .series
                .iter()
                .map(|s| (s.step as f64, s.heap_live_bytes as f64 / MIB));
            chart
                .draw_series(LineSeries::new(live, c.stroke_width(2)))?
                .label(format!("#{n} heap live"))
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2))
                });
            let peak: Vec<(f64, f64)> = r
                .memory
                .series
                .iter()
                .map(|s| (s.step as f64, s.heap_peak_bytes as f64 / MIB))
                .collect();
            chart
                .draw_series(DashedLineSeries::new(peak, 6, 4, c.stroke_width(1)))?
                .label(format!("#{n} heap peak in step"))
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(1))
                });
            let rss: Vec<(f64, f64)> = r
                .memory
                .series
                .iter()
                .filter_map(|s| Some((s.step as f64, s.rss_bytes? as f64 / MIB)))
                .collect();
            if !rss.is_empty() {
                chart
                    .draw_series(LineSeries::new(rss, c.mix(0.45).stroke_width(3)))?
                    .label(format!("#{n} RSS"))
                    .legend(move |(x, y)| {
                        PathElement::new(vec![(x, y), (x + 20, y)], c.mix(0.45).stroke_width(3))
                    });
            }
            if let Some(top) = r
                .memory
                .series
                .iter()
                .max_by_key(|s| (s.heap_peak_bytes, std::cmp::Reverse(s.step)))
            {
                chart.draw_series(std::iter::once(TriangleMarker::new(
                    (top.step as f64, top.heap_peak_bytes as f64 / MIB),
                    8,
                    c.filled(),
                )))?;
            }
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::LowerRight)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()?;
        Ok(())
    })?;
    let caption = timeline_caption(&with);
    Ok(figure("memory-timeline", "Memory per step", &svg, &caption))
}

/// The timeline's caption: what each line measures, and each Record's peaks.
fn timeline_caption(with: &[&(usize, String, &Record)]) -> String {
    let mut caption = String::from(
        "heap live: bytes allocated and not freed after each step (each Record's own measure, \
         named below); heap peak in step: the most live at any moment of that step (▲ the run's \
         highest); RSS: \
         resident set of the process after each step (/proc), which includes freed memory the \
         allocator keeps.<br>",
    );
    for (i, label, r) in with.iter().copied() {
        caption += &format!(
            "#{} {} ({}): peak {} (whole run, load included), live at end {}, RSS peak {}.",
            i + 1,
            esc(label),
            crate::report::heap_kind::heap_kind(r).1,
            fmt_bytes(r.memory.heap_peak_bytes as f64),
            fmt_bytes(r.memory.heap_live_end_bytes as f64),
            r.memory
                .rss_peak_bytes
                .map_or("not measured".into(), |b| fmt_bytes(b as f64)),
        );
        if let Some(m) = r
            .memory
            .peak_moments
            .iter()
            .max_by_key(|m| m.heap_peak_bytes)
        {
            let mut alive: Vec<(&String, &u64)> = m.by_phase.iter().collect();
            alive.sort_by(|a, b| b.1.cmp(a.1));
            let parts: Vec<String> = alive
                .iter()
                .filter(|(_, b)| **b > 0)
                .take(4)
                .map(|(p, b)| {
                    let name = crate::report::moment_parts::part_name(p);
                    format!("{} {}", fmt_bytes(**b as f64), esc(&name))
                })
                .collect();
            caption += &format!(
                " Steady-step heap peak {} in {}: {}.",
                fmt_bytes(m.heap_peak_bytes as f64),
                esc(&m.phase),
                parts.join(", ")
            );
        }
        caption += "<br>";
    }
    caption + crate::report::moment_parts::WHY_TWO_FIGURES
}

/// One group of bars: a label and (category → bytes).
pub struct Bars {
    pub index: usize,
    pub label: String,
    pub categories: BTreeMap<String, u64>,
}

/// Horizontal bars per category: every measured and estimated series side by side.
pub fn breakdown(groups: &[Bars]) -> anyhow::Result<String> {
    let groups: Vec<&Bars> = groups.iter().filter(|g| !g.categories.is_empty()).collect();
    if groups.is_empty() {
        return Ok(String::new());
    }
    let mut cats: Vec<String> = groups
        .iter()
        .flat_map(|g| g.categories.keys().cloned())
        .collect();
    cats.sort();
    cats.dedup();
    let hi = groups
        .iter()
        .flat_map(|g| g.categories.values())
        .cloned()
        .max()
        .unwrap_or(1) as f64
        / MIB;
    let nc = cats.len();
    let ng = groups.len();
    let height = (80 + nc * (14 * ng + 16)).max(260) as u32;
    // The names the tables give them.
    let names: Vec<String> = cats
        .iter()
        .map(|c| crate::report::breakdown::category_label(c).to_string())
        .collect();
    let svg = draw_svg(1100, height, |root| -> DrawResult {
        let mut chart = ChartBuilder::on(root)
            .caption("Memory by category", ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(210)
            .build_cartesian_2d(0.0..padded(0.0, hi).1, -0.5f64..(nc as f64 - 0.5))?;
        chart
            .configure_mesh()
            .disable_y_mesh()
            .y_labels(nc.max(2))
            .y_label_formatter(&|y| {
                let i = y.round();
                if (y - i).abs() < 1e-6 && i >= 0.0 && (i as usize) < nc {
                    names[i as usize].clone()
                } else {
                    String::new()
                }
            })
            .x_desc("MiB (2^20 bytes)")
            .draw()?;
        let h = 0.8 / ng as f64;
        for (k, g) in groups.iter().enumerate() {
            let c = color(g.index);
            let style = if g.label.contains("estimated") {
                c.mix(0.35).filled()
            } else {
                c.filled()
            };
            let bars = cats.iter().enumerate().filter_map(|(ci, cat)| {
                let v = *g.categories.get(cat)? as f64 / MIB;
                let y = ci as f64 - 0.4 + k as f64 * h;
                Some(Rectangle::new(
                    [(0.0, y + h * 0.1), (v, y + h * 0.9)],
                    style,
                ))
            });
            chart
                .draw_series(bars)?
                .label(g.label.clone())
                .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 14, y + 5)], style));
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::LowerRight)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()?;
        Ok(())
    })?;
    let mut caption = String::from(
        "Measured: bytes by category as each Record's own measure attributes them (memscope's \
         counting allocator, or a PyTorch Record's; docs/record.md). Estimated: memscope estimate's prediction for the same run.<br>",
    );
    caption += "Each category is its own size at its own moment (activations as a forward \
                ends, gradients as a backward ends, the optimizer's state after its step, \
                temporaries at the peak): they are not all live at once, so their sum is not \
                the heap peak.<br>";
    for g in &groups {
        let sum: u64 = g.categories.values().sum();
        caption += &format!(
            "{}: the categories sum to {}<br>",
            esc(&g.label),
            fmt_bytes(sum as f64)
        );
    }
    Ok(figure(
        "memory-breakdown",
        "Memory by category",
        &svg,
        &caption,
    ))
}
