//! The memory of processes `memscope watch` followed: the tree's summed RSS (solid) and PSS
//! (dashed) over wall time, and GPU memory when NVML answered (device used, dotted; the watched
//! processes' own, thick), one colour per input so that two watches share one axis.

use super::svg::{color, draw_svg, esc, figure, padded, DrawResult, MIB};
use crate::record::watch::WatchFile;
use plotters::prelude::*;

/// The section's chart, or nothing without watch inputs that hold samples.
pub fn section(inputs: &[(usize, &WatchFile)]) -> anyhow::Result<String> {
    let with: Vec<&(usize, &WatchFile)> = inputs
        .iter()
        .filter(|(_, w)| !w.series.is_empty())
        .collect();
    if with.is_empty() {
        return Ok(String::new());
    }
    let t1 = with
        .iter()
        .flat_map(|(_, w)| w.series.iter().map(|p| p.time_s))
        .fold(0.0f64, f64::max);
    let hi = with
        .iter()
        .flat_map(|(_, w)| {
            w.series.iter().map(|p| {
                let g = p.gpu.as_ref().map_or(0, |g| g.device_used_bytes);
                p.total.rss_bytes.max(p.total.pss_bytes).max(g)
            })
        })
        .max()
        .unwrap_or(0) as f64;
    let y1 = padded(0.0, hi / MIB).1;
    let svg = draw_svg(1100, 420, |root| -> DrawResult {
        let mut chart = ChartBuilder::on(root)
            .caption("Watched process tree: memory over time", ("sans-serif", 20))
            .margin(12)
            .x_label_area_size(45)
            .y_label_area_size(75)
            .build_cartesian_2d(0.0..t1.max(1e-3) * 1.02, 0.0..y1)?;
        chart
            .configure_mesh()
            .x_desc("seconds since the watch started")
            .y_desc("MiB (2^20 bytes)")
            .label_style(("sans-serif", 15))
            .axis_desc_style(("sans-serif", 16))
            .draw()?;
        for (i, w) in &with {
            let (c, n) = (color(*i), *i + 1);
            let line = |f: &dyn Fn(&crate::record::watch::TreeSample) -> Option<u64>| {
                w.series
                    .iter()
                    .filter_map(|p| Some((p.time_s, f(p)? as f64 / MIB)))
                    .collect::<Vec<_>>()
            };
            chart
                .draw_series(LineSeries::new(
                    line(&|p| Some(p.total.rss_bytes)),
                    c.stroke_width(2),
                ))?
                .label(format!("#{n} RSS (summed)"))
                .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], c.stroke_width(2)));
            chart
                .draw_series(DashedLineSeries::new(
                    line(&|p| Some(p.total.pss_bytes)),
                    6,
                    4,
                    c.stroke_width(2),
                ))?
                .label(format!("#{n} PSS (summed)"))
                .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], c.stroke_width(1)));
            let dev = line(&|p| p.gpu.as_ref().map(|g| g.device_used_bytes));
            if !dev.is_empty() {
                chart
                    .draw_series(DashedLineSeries::new(dev, 2, 4, c.stroke_width(2)))?
                    .label(format!("#{n} GPU device used"))
                    .legend(move |(x, y)| {
                        PathElement::new([(x, y), (x + 20, y)], c.mix(0.6).stroke_width(2))
                    });
            }
            let own = line(&|p| p.gpu.as_ref().and_then(|g| g.process_bytes));
            if !own.is_empty() {
                chart
                    .draw_series(LineSeries::new(own, c.mix(0.5).stroke_width(5)))?
                    .label(format!("#{n} GPU, watched processes"))
                    .legend(move |(x, y)| {
                        PathElement::new([(x, y), (x + 20, y)], c.mix(0.5).stroke_width(5))
                    });
            }
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .label_font(("sans-serif", 14))
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()?;
        Ok(())
    })?;
    let mut caption = String::from("RSS and PSS summed over the watched tree at every sample.");
    for (i, w) in &with {
        caption += &format!(
            " #{}: <code>{}</code>, {} samples, {} step markers; {}.",
            i + 1,
            esc(&w.command.join(" ")),
            w.series.len(),
            w.step_markers.len(),
            if w.series.iter().any(|p| p.gpu.is_some()) {
                "GPU memory from NVML"
            } else {
                "no GPU figures (no NVIDIA driver answered)"
            }
        );
    }
    Ok(figure(
        "watch-memory",
        "memory of the watched processes",
        &svg,
        &caption,
    ))
}
