//! The stacked memory chart of Records whose steps carry phase marks (`memory.series[].phases`):
//! one column per phase run in order (step 0 forward, backward, optimizer, step 1 forward, …),
//! heap live at the end of that run stacked by category (the phase that allocated it), the
//! column's background coloured by phase, a tick at the run's heap peak, RSS after each step,
//! and the run's highest phase peak labelled with what was alive at a steady step's peak in that
//! phase. Long runs keep the SVG small: only the first and last steps (and the step holding the
//! peak) are drawn, the steps between them left out and counted.

use super::svg::{draw_svg, esc, figure, DrawResult, MIB, RED};
use crate::record::{PeakMoment, Record, StepMemory};
use crate::units::fmt_bytes;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::ops::Range;

/// Runs with more steps than this show their first and last steps only (and the peak's).
pub const DETAIL_STEPS: usize = 12;
/// Steps drawn at each end of a long run (fewer when a step has many phase runs).
const EDGE_STEPS: usize = 4;
/// The most columns one Record's panel draws (beyond it, fewer edge steps).
const MAX_COLUMNS: usize = 120;
/// Width, in columns, of the gap standing for left-out steps.
const GAP: f64 = 2.0;
const PANEL_W: u32 = 1100;
const PANEL_H: u32 = 460;

/// The stacked categories, bottom to top: (key in `heap_live_by_category`, legend label, colour).
/// Keys the Record has beyond these are summed into the last, `other`.
const CATS: [(&str, &str, RGBColor); 8] = [
    (
        "parameters",
        "parameters (allocated in load)",
        RGBColor(0, 114, 178),
    ),
    (
        "optimizer_state",
        "optimizer state (optimizer)",
        RGBColor(204, 121, 167),
    ),
    ("gradients", "gradients (backward)", RGBColor(213, 94, 0)),
    (
        "activations",
        "activations (forward, prefill, decode)",
        RGBColor(0, 158, 115),
    ),
    ("kv_cache", "KV cache", RGBColor(86, 180, 233)),
    (
        "weights_copy",
        "bf16/f16 weight copy (mixed precision)",
        RGBColor(204, 121, 167),
    ),
    (
        "unattributed",
        "unattributed (outside every phase)",
        RGBColor(160, 160, 160),
    ),
    ("other", "other", RGBColor(90, 90, 90)),
];

/// Phase band colours (drawn pale; two shades, alternating step by step).
const PHASES: [(&str, RGBColor); 5] = [
    ("forward", RGBColor(230, 159, 0)),
    ("backward", RGBColor(0, 114, 178)),
    ("optimizer", RGBColor(204, 121, 167)),
    ("prefill", RGBColor(0, 158, 115)),
    ("decode", RGBColor(86, 180, 233)),
];
const BAND: [f64; 2] = [0.13, 0.24];
const RSS_COLOR: RGBColor = RGBColor(40, 40, 40);

fn phase_color(p: &str) -> RGBColor {
    PHASES
        .iter()
        .find(|(n, _)| *n == p)
        .map_or(RGBColor(150, 150, 150), |(_, c)| *c)
}

fn hex(c: RGBColor) -> String {
    format!("#{:02x}{:02x}{:02x}", c.0, c.1, c.2)
}

/// `c` blended into white at `a` (what a pale band looks like, for the HTML legend).
fn pale(c: RGBColor, a: f64) -> RGBColor {
    let m = |v: u8| (255.0 - (255.0 - v as f64) * a).round() as u8;
    RGBColor(m(c.0), m(c.1), m(c.2))
}

/// True when some step of the Record carries phase marks (Records written since they exist).
pub fn has_marks(r: &Record) -> bool {
    r.memory.series.iter().any(|s| !s.phases.is_empty())
}

/// The steps drawn, as ranges of indices into `n` steps of `per_step` columns each: every step
/// when the run is short, else the first and last few and the step `peak`.
pub fn shown_steps(n: usize, per_step: usize, peak: usize) -> Vec<Range<usize>> {
    let per_step = per_step.max(1);
    if n <= DETAIL_STEPS && n * per_step <= MAX_COLUMNS {
        return vec![0..n];
    }
    let k = (MAX_COLUMNS / (2 * per_step + per_step)).clamp(1, EDGE_STEPS);
    if n <= 2 * k + 1 {
        return vec![0..n];
    }
    let mut parts = vec![0..k, n - k..n];
    if peak >= k && peak < n - k {
        parts.insert(1, peak..peak + 1);
    }
    // Merge ranges that touch.
    let mut out: Vec<Range<usize>> = Vec::new();
    for r in parts {
        match out.last_mut() {
            Some(last) if r.start <= last.end => last.end = last.end.max(r.end),
            _ => out.push(r),
        }
    }
    out
}

/// One column: the end of one phase run.
struct Column {
    x: f64,
    phase: String,
    /// Heap live by [`CATS`] index.
    live: [u64; CATS.len()],
    peak: u64,
    /// RSS after the step, on the step's last column.
    rss: Option<u64>,
}

/// What one panel draws.
struct Layout {
    /// Consecutive columns, one group per range of shown steps.
    groups: Vec<Vec<Column>>,
    /// (first x, last x, step, warm-up) of every shown step.
    steps: Vec<(f64, f64, u64, bool)>,
    /// (x of the gap's centre, steps left out).
    gaps: Vec<(f64, usize)>,
    /// x and heap peak of the highest phase run, its phase and step.
    top: Option<(f64, u64, String, u64)>,
    x_end: f64,
    total_steps: usize,
}

fn live_row(s: &crate::record::PhaseMark) -> [u64; CATS.len()] {
    let mut v = [0u64; CATS.len()];
    for (k, b) in &s.heap_live_by_category {
        let i = CATS
            .iter()
            .position(|(n, _, _)| n == k)
            .unwrap_or(CATS.len() - 1);
        v[i] += b;
    }
    v
}

fn layout(r: &Record) -> Layout {
    let steps: Vec<&StepMemory> = r
        .memory
        .series
        .iter()
        .filter(|s| !s.phases.is_empty())
        .collect();
    let per_step = steps.iter().map(|s| s.phases.len()).max().unwrap_or(1);
    // The highest phase-run peak: first step holding it.
    let peak_step = steps
        .iter()
        .enumerate()
        .max_by_key(|(i, s)| {
            let p = s
                .phases
                .iter()
                .map(|m| m.heap_peak_bytes)
                .max()
                .unwrap_or(0);
            (p, std::cmp::Reverse(*i))
        })
        .map_or(0, |(i, _)| i);
    let ranges = shown_steps(steps.len(), per_step, peak_step);
    let mut l = Layout {
        groups: Vec::new(),
        steps: Vec::new(),
        gaps: Vec::new(),
        top: None,
        x_end: 0.0,
        total_steps: steps.len(),
    };
    let mut x = 0.0;
    let mut prev_end = 0;
    for range in ranges {
        if range.start > prev_end {
            l.gaps.push((x - 0.5 + GAP / 2.0, range.start - prev_end));
            x += GAP;
        }
        prev_end = range.end;
        let mut group = Vec::new();
        for s in &steps[range] {
            let x0 = x;
            let n = s.phases.len();
            for (j, m) in s.phases.iter().enumerate() {
                if l.top.as_ref().is_none_or(|t| m.heap_peak_bytes > t.1) {
                    l.top = Some((x, m.heap_peak_bytes, m.phase.clone(), s.step));
                }
                group.push(Column {
                    x,
                    phase: m.phase.clone(),
                    live: live_row(m),
                    peak: m.heap_peak_bytes,
                    rss: if j + 1 == n { s.rss_bytes } else { None },
                });
                x += 1.0;
            }
            l.steps.push((x0, x - 1.0, s.step, s.warmup));
        }
        l.groups.push(group);
    }
    l.x_end = x - 1.0;
    l
}

/// The figure for every Record with marks (one panel each, one SVG), or nothing.
pub fn section(records: &[(usize, String, &Record)]) -> anyhow::Result<String> {
    let with: Vec<&(usize, String, &Record)> =
        records.iter().filter(|(_, _, r)| has_marks(r)).collect();
    if with.is_empty() {
        return Ok(String::new());
    }
    let layouts: Vec<Layout> = with.iter().map(|(_, _, r)| layout(r)).collect();
    let title = "Heap live by category at the end of every phase run";
    let svg = draw_svg(PANEL_W, PANEL_H * with.len() as u32, |root| -> DrawResult {
        let panels = root.split_evenly((with.len(), 1));
        for ((p, (i, label, r)), l) in panels.iter().zip(&with).zip(&layouts) {
            panel(p, &format!("#{} {label}", i + 1), r, l)?;
        }
        Ok(())
    })?;
    let used_cats: Vec<usize> = (0..CATS.len())
        .filter(|c| {
            layouts
                .iter()
                .flat_map(|l| l.groups.iter().flatten())
                .any(|col| col.live[*c] > 0)
        })
        .collect();
    let mut used_phases: Vec<&str> = Vec::new();
    for col in layouts.iter().flat_map(|l| l.groups.iter().flatten()) {
        if !used_phases.contains(&col.phase.as_str()) {
            used_phases.push(&col.phase);
        }
    }
    let mut legend = String::from("<div class=\"muted\">");
    for c in &used_cats {
        legend += &key(&hex(CATS[*c].2), CATS[*c].1, 12);
    }
    legend += "<br>";
    for p in &used_phases {
        legend += &key(
            &hex(pale(phase_color(p), BAND[1])),
            &format!("{p} (column background)"),
            12,
        );
    }
    legend += &key("#000000", "heap peak during the phase run (tick)", 2);
    legend += &key(&hex(RSS_COLOR), "RSS after the step (●)", 3);
    legend += &key(&hex(RED), "▲ the highest phase-run heap peak", 12);
    legend += "</div>\n";
    let mut caption = String::from(
        "Each column is the end of one phase run, in order (train: forward, backward, optimizer \
         per step; with --grad-accum N, N forward/backward pairs before the optimizer; infer: \
         forward; generate: prefill, decode). Stacked: heap live at that moment (counting \
         allocator), grouped by the phase that allocated it and named after the category those \
         bytes stand for; what a phase allocated and freed before its end (temporaries) shows \
         only in its peak tick. Shades alternate from step to step. RSS (/proc) includes freed \
         memory the allocator keeps. ",
    );
    caption += crate::report::moment_parts::WHY_TWO_FIGURES;
    caption += " ";
    caption += &format!(
        "Runs of more than {DETAIL_STEPS} steps show their first and last steps and the step \
         holding the highest peak; ⋯ N ⋯ marks N steps left out (the Record holds them all).<br>"
    );
    for ((i, label, r), l) in with.iter().zip(&layouts) {
        if let Some((rss, heap)) = rss_flattens(l) {
            caption += &format!(
                "#{} {}: RSS (up to {}) is not drawn: it is {:.0}× the heap's highest figure \
                 ({}), mostly the interpreter and its libraries, and would flatten the heap to \
                 the axis.<br>",
                i + 1,
                esc(label),
                fmt_bytes(rss as f64),
                rss as f64 / heap.max(1) as f64,
                fmt_bytes(heap as f64),
            );
        }
        let shown = l.steps.len();
        caption += &format!(
            "#{} {}: {} of {} steps drawn; heap peak {} (whole run, load included), heap live \
             at end {}, RSS peak {}.<br>",
            i + 1,
            esc(label),
            shown,
            l.total_steps,
            fmt_bytes(r.memory.heap_peak_bytes as f64),
            fmt_bytes(r.memory.heap_live_end_bytes as f64),
            r.memory
                .rss_peak_bytes
                .map_or("not measured".into(), |b| fmt_bytes(b as f64)),
        );
    }
    Ok(figure(
        "memory-stacked",
        title,
        &svg,
        &format!("{legend}{caption}"),
    ))
}

/// A legend key: a swatch `h` pixels high (lines are thin swatches).
fn key(color: &str, label: &str, h: u32) -> String {
    format!(
        "<span class=\"key\"><span class=\"sw\" style=\"background:{color};height:{h}px\"></span>{}</span>",
        esc(label)
    )
}

/// Readable name of an allocating phase in the peak label.
fn alloc_phase(p: &str) -> &str {
    match p {
        "idle" => "outside phases",
        "other" => "other (KV cache)",
        "temporaries" => crate::report::moment_parts::FREED,
        // A PyTorch Record's peak moments split by category: the tables' names.
        _ => crate::report::breakdown::category_label(p),
    }
}

/// The peak label's lines: the peak, then what was alive at a steady step's peak in its phase.
fn peak_lines(top: &(f64, u64, String, u64), moments: &[PeakMoment]) -> Vec<String> {
    let (_, bytes, phase, step) = top;
    let mut lines = vec![format!(
        "▲ highest heap peak in a phase run: {} ({phase}, step {step})",
        fmt_bytes(*bytes as f64)
    )];
    if let Some(m) = moments.iter().find(|m| &m.phase == phase) {
        lines.push(format!(
            "alive at a steady step's {phase} peak ({}), by allocating phase:",
            fmt_bytes(m.heap_peak_bytes as f64)
        ));
        let mut by: Vec<(&String, &u64)> = m.by_phase.iter().filter(|(_, b)| **b > 0).collect();
        by.sort_by(|a, b| b.1.cmp(a.1));
        let parts: Vec<String> = by
            .iter()
            .take(5)
            .map(|(p, b)| format!("{} {}", alloc_phase(p), fmt_bytes(**b as f64)))
            .collect();
        lines.push(parts.join(" · "));
        let mods: Vec<String> = m
            .by_module
            .iter()
            .take(2)
            .map(|mb| format!("{} {}", mb.module, fmt_bytes(mb.bytes as f64)))
            .collect();
        if !mods.is_empty() {
            lines.push(format!("largest modules then: {}", mods.join(" · ")));
        }
    }
    lines
}

/// (RSS's highest, the heap's highest) when RSS is more than 3× the heap: drawn on one axis, the
/// heap would be a sliver (a PyTorch Record: the interpreter and its libraries are in RSS).
fn rss_flattens(l: &Layout) -> Option<(u64, u64)> {
    let cols = || l.groups.iter().flatten();
    let heap = cols()
        .map(|c| c.live.iter().sum::<u64>().max(c.peak))
        .max()?;
    let rss = cols().filter_map(|c| c.rss).max()?;
    (rss > 3 * heap).then_some((rss, heap))
}

fn panel(
    area: &DrawingArea<SVGBackend, plotters::coord::Shift>,
    title: &str,
    r: &Record,
    l: &Layout,
) -> DrawResult {
    let cols = || l.groups.iter().flatten();
    let draw_rss = rss_flattens(l).is_none();
    let hi = cols()
        .map(|c| {
            let stack: u64 = c.live.iter().sum();
            let rss = if draw_rss { c.rss.unwrap_or(0) } else { 0 };
            stack.max(c.peak).max(rss)
        })
        .max()
        .unwrap_or(1)
        .max(1) as f64
        / MIB;
    // Headroom above the data for the peak label.
    let y1 = hi * 1.42;
    let x0 = -0.5;
    let x1 = l.x_end + 0.5;
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 17))
        .margin(12)
        .x_label_area_size(44)
        .y_label_area_size(70)
        .build_cartesian_2d(x0..x1, 0.0..y1)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .light_line_style(TRANSPARENT)
        .x_labels(0) // step labels are drawn below
        .x_desc("phase runs, step by step (labels: step number; w = warm-up)")
        .y_desc("MiB (2^20 bytes)")
        .draw()?;
    // Phase bands, alternating shades step by step.
    for (k, (a, b, _, _)) in l.steps.iter().enumerate() {
        let shade = BAND[k % 2];
        let bands = cols().filter(|c| c.x >= *a && c.x <= *b).map(|c| {
            Rectangle::new(
                [(c.x - 0.5, 0.0), (c.x + 0.5, y1)],
                phase_color(&c.phase).mix(shade).filled(),
            )
        });
        chart.draw_series(bands)?;
    }
    for (x, _) in &l.gaps {
        chart.draw_series(std::iter::once(Rectangle::new(
            [(x - GAP / 2.0, 0.0), (x + GAP / 2.0, y1)],
            RGBColor(235, 235, 235).filled(),
        )))?;
    }
    // The stack, held across each column (the value is the one at the run's end).
    for g in &l.groups {
        let mut below = vec![0u64; g.len()];
        for (ci, (_, _, color)) in CATS.iter().enumerate() {
            if g.iter().all(|c| c.live[ci] == 0) {
                continue;
            }
            let top: Vec<u64> = g.iter().zip(&below).map(|(c, b)| b + c.live[ci]).collect();
            let mut pts: Vec<(f64, f64)> = Vec::with_capacity(4 * g.len());
            for (c, t) in g.iter().zip(&top) {
                pts.push((c.x - 0.5, *t as f64 / MIB));
                pts.push((c.x + 0.5, *t as f64 / MIB));
            }
            for (c, b) in g.iter().zip(&below).rev() {
                pts.push((c.x + 0.5, *b as f64 / MIB));
                pts.push((c.x - 0.5, *b as f64 / MIB));
            }
            chart.draw_series(std::iter::once(Polygon::new(pts, color.filled())))?;
            below = top;
        }
    }
    // Heap peak ticks.
    chart.draw_series(cols().map(|c| {
        let y = c.peak as f64 / MIB;
        PathElement::new(
            vec![(c.x - 0.42, y), (c.x + 0.42, y)],
            BLACK.stroke_width(2),
        )
    }))?;
    // RSS after each step, a line per group (unless it would flatten the heap: see the caption).
    for g in l.groups.iter().filter(|_| draw_rss) {
        let rss: Vec<(f64, f64)> = g
            .iter()
            .filter_map(|c| Some((c.x, c.rss? as f64 / MIB)))
            .collect();
        chart.draw_series(LineSeries::new(rss.clone(), RSS_COLOR.stroke_width(2)))?;
        chart.draw_series(rss.iter().map(|p| Circle::new(*p, 3, RSS_COLOR.filled())))?;
    }
    // Labels under the axis: step numbers, gaps.
    let (bx, by) = area.get_base_pixel();
    // plotters writes a font of size s as s / 1.24 px: 14 → 11.3 px.
    let font = ("sans-serif", 14).into_font().color(&BLACK);
    let axis_px = |x: f64| {
        let (px, py) = chart.backend_coord(&(x, 0.0));
        (px - bx, py - by + 6)
    };
    let width = |a: f64, b: f64| axis_px(b + 0.5).0 - axis_px(a - 0.5).0;
    let label_style = font.pos(Pos::new(HPos::Center, VPos::Top));
    for (a, b, step, warm) in &l.steps {
        let w = width(*a, *b);
        let text = match (w >= 70, *warm) {
            (true, true) => format!("warm-up {step}"),
            (true, false) => format!("step {step}"),
            (false, true) => format!("w{step}"),
            (false, false) => format!("{step}"),
        };
        if w >= 14 {
            let (px, py) = axis_px((a + b) / 2.0);
            area.draw(&Text::new(text, (px, py), label_style.clone()))?;
        }
        // A tick at each step's start.
        let (px, py) = axis_px(a - 0.5);
        area.draw(&PathElement::new(
            vec![(px, py - 6), (px, py)],
            BLACK.stroke_width(1),
        ))?;
    }
    for (x, n) in &l.gaps {
        let (px, py) = axis_px(*x);
        area.draw(&Text::new(
            format!("⋯ {n} ⋯"),
            (px, py),
            label_style.clone(),
        ))?;
    }
    // The highest phase peak and what was alive then.
    if let Some(top) = &l.top {
        peak_box(area, &mut chart, top, r, (x0, x1, y1))?;
    }
    Ok(())
}

/// The red marker on the highest phase peak and the box in the headroom above it saying what was
/// alive then.
fn peak_box(
    area: &DrawingArea<SVGBackend, plotters::coord::Shift>,
    chart: &mut ChartContext<
        SVGBackend,
        Cartesian2d<plotters::coord::types::RangedCoordf64, plotters::coord::types::RangedCoordf64>,
    >,
    top: &(f64, u64, String, u64),
    r: &Record,
    (x0, x1, y1): (f64, f64, f64),
) -> DrawResult {
    let (bx, by) = area.get_base_pixel();
    let (x, bytes, _, _) = top;
    let y = *bytes as f64 / MIB;
    chart.draw_series(std::iter::once(TriangleMarker::new(
        (*x, y),
        8,
        RED.filled(),
    )))?;
    let lines = peak_lines(top, &r.memory.peak_moments);
    let chars = lines.iter().map(|s| s.chars().count()).max().unwrap_or(0);
    // 12 px text (font 15): about 6 px a character, 17 px a line.
    let (bw, bh) = (
        (chars as f64 * 6.0) as i32 + 16,
        17 * lines.len() as i32 + 10,
    );
    let (left, _) = chart.backend_coord(&(x0, y1));
    let (right, top_px) = chart.backend_coord(&(x1, y1));
    let (mx, my) = chart.backend_coord(&(*x, y));
    // The box in the headroom above the peak, kept inside the plot.
    let box_x = (mx - bw / 2).min(right - bw - 8).max(left + 8);
    let box_y = top_px + 6;
    let (ox, oy) = (box_x - bx, box_y - by);
    let anchor = (ox + bw / 2, oy + bh);
    area.draw(&PathElement::new(
        vec![anchor, (mx - bx, my - by - 8)],
        RED.stroke_width(1),
    ))?;
    area.draw(&Rectangle::new(
        [(ox, oy), (ox + bw, oy + bh)],
        WHITE.mix(0.93).filled(),
    ))?;
    area.draw(&Rectangle::new(
        [(ox, oy), (ox + bw, oy + bh)],
        RED.stroke_width(1),
    ))?;
    for (k, line) in lines.iter().enumerate() {
        area.draw(&Text::new(
            line.clone(),
            (ox + 8, oy + 6 + 17 * k as i32),
            ("sans-serif", 15).into_font().color(&BLACK),
        ))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::PhaseMark;

    #[test]
    fn short_runs_show_every_step() {
        assert_eq!(shown_steps(5, 3, 2), vec![0..5]);
        assert_eq!(shown_steps(12, 3, 11), vec![0..12]);
    }

    #[test]
    fn long_runs_show_both_ends_and_the_peak() {
        assert_eq!(shown_steps(300, 3, 150), vec![0..4, 150..151, 296..300]);
        // A peak at an end is not repeated; ranges that touch merge.
        assert_eq!(shown_steps(300, 3, 2), vec![0..4, 296..300]);
        assert_eq!(shown_steps(22, 3, 4), vec![0..5, 18..22]);
    }

    #[test]
    fn many_phase_runs_per_step_shrink_the_ends() {
        // --grad-accum 32: 65 columns a step → one step at each end.
        assert_eq!(shown_steps(10, 65, 5), vec![0..1, 5..6, 9..10]);
    }

    fn mark(phase: &str, peak: u64, cats: &[(&str, u64)]) -> PhaseMark {
        PhaseMark {
            phase: phase.into(),
            heap_peak_bytes: peak,
            heap_live_by_category: cats.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
        }
    }

    fn train_record(steps: u64) -> Record {
        let mut r: Record = serde_json::from_str(include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/leak-record.json"
        )))
        .unwrap();
        r.memory.series = (0..steps)
            .map(|s| StepMemory {
                step: s,
                warmup: s < 2,
                rss_bytes: Some(80 << 20),
                phases: vec![
                    mark(
                        "forward",
                        (20 << 20) + s * 1000,
                        &[("parameters", 4 << 20), ("activations", 8 << 20)],
                    ),
                    mark(
                        "backward",
                        30 << 20,
                        &[("parameters", 4 << 20), ("gradients", 4 << 20)],
                    ),
                    mark(
                        "optimizer",
                        18 << 20,
                        &[
                            ("parameters", 4 << 20),
                            ("gradients", 4 << 20),
                            ("optimizer_state", 8 << 20),
                            ("something new", 1 << 20),
                        ],
                    ),
                ],
                ..Default::default()
            })
            .collect();
        r
    }

    #[test]
    fn unknown_categories_are_summed_into_other() {
        let m = mark("forward", 1, &[("x", 3), ("y", 4), ("gradients", 5)]);
        let v = live_row(&m);
        assert_eq!(v[CATS.len() - 1], 7);
        assert_eq!(v[2], 5);
    }

    #[test]
    fn the_peak_is_the_first_highest_phase_run_and_its_step_is_drawn() {
        let r = train_record(300);
        let l = layout(&r);
        // Backward peaks at 30 MiB in every step: the first one.
        let (_, bytes, phase, step) = l.top.clone().unwrap();
        assert_eq!((bytes, phase.as_str(), step), (30 << 20, "backward", 0));
        assert_eq!(l.steps.len(), 8);
        assert_eq!(l.gaps.len(), 1);
        assert_eq!(l.gaps[0].1, 292);
    }

    #[test]
    fn a_long_run_draws_a_small_svg_with_its_id() {
        let r = train_record(300);
        let html = section(&[(0, "tiny".into(), &r)]).unwrap();
        assert!(html.contains("data-chart=\"memory-stacked\""), "{html}");
        assert!(html.contains("8 of 300 steps drawn"), "{html}");
        assert!(html.contains("⋯ 292 ⋯"));
        assert!(html.len() < 60_000, "{} bytes", html.len());
    }

    #[test]
    fn records_without_marks_draw_nothing() {
        let mut r = train_record(3);
        for s in &mut r.memory.series {
            s.phases.clear();
        }
        assert!(!has_marks(&r));
        assert_eq!(section(&[(0, "old".into(), &r)]).unwrap(), "");
    }
}
