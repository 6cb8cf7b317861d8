//! Renders a leak verdict (and optional CI target rows) as text, Markdown, CSV and JSON.
//!
//! Every renderer states the verdict sentence first, names what was measured ("heap live", "RSS"),
//! prints bytes in binary units (KiB, MiB, GiB) and lists every parameter used. Unknown numbers are
//! written "—" (text, Markdown), empty (CSV) or null (JSON); never NaN. Reports never measure.

use crate::analysis::leak_text::{group, rate_in};
use crate::export::table::{escape, MarkdownStyle, Table};
use crate::record::leak::LeakReport;
use crate::record::leak::TargetRow;
use crate::units::{fmt_bytes, fmt_bytes_in, fmt_range_in};

/// The key facts as (name, value) pairs, shared by text and Markdown. Figures are in binary units,
/// and also in the log's own unit when it was a decimal one (MB, GB).
fn facts(r: &LeakReport) -> Vec<(&'static str, String)> {
    let mut f = level_facts(r);
    f.extend(slope_facts(r));
    f.extend(growth_facts(r));
    f.extend(detection_facts(r));
    f
}

type Facts = Vec<(&'static str, String)>;

fn dash() -> String {
    "—".to_string()
}

/// The verdict, where the warm-up ends, the trend window and the level after the warm-up.
fn level_facts(r: &LeakReport) -> Facts {
    let fmt_bytes = |b: f64| fmt_bytes_in(b, r.unit);
    let fmt_range = |lo: f64, hi: f64| fmt_range_in(lo, hi, r.unit);
    let mut f = Vec::new();
    f.push((
        "Verdict",
        format!(
            "{} ({}{})",
            r.verdict.as_str(),
            r.label,
            if r.relative {
                ", relative to a baseline"
            } else {
                ""
            }
        ),
    ));
    f.push((
        "Warm-up end",
        match r.warmup_end_step {
            Some(w) => format!(
                "step {w}{}",
                r.warmup_growth_bytes.map_or(String::new(), |g| format!(
                    " (grew {} before it)",
                    fmt_bytes(g)
                ))
            ),
            None => "none found".into(),
        },
    ));
    f.push((
        "Trend window",
        match (r.tail_start_step, r.last_step) {
            (Some(a), Some(b)) => format!(
                "steps {a}–{b} ({} points; MSER cut at step {})",
                r.tail_len,
                r.mser_cut_step.map_or(dash(), |m| m.to_string())
            ),
            _ => dash(),
        },
    ));
    f.push((
        "Level after warm-up",
        match (
            r.plateau_median_bytes,
            r.plateau_min_bytes,
            r.plateau_max_bytes,
        ) {
            (Some(m), Some(lo), Some(hi)) => {
                format!(
                    "median {}, range {} (max − min {})",
                    fmt_bytes(m),
                    fmt_range(lo, hi),
                    fmt_bytes(hi - lo)
                )
            }
            _ => dash(),
        },
    ));
    f
}

/// The slope with its interval, per step and per 1,000 steps, and the halves' slopes.
fn slope_facts(r: &LeakReport) -> Facts {
    let fmt_bytes = |b: f64| fmt_bytes_in(b, r.unit);
    let rate = |b: f64| rate_in(b, r.unit);
    let conf = format!("{:.0}%", r.params.confidence * 100.0);
    let slope =
        |show: &dyn Fn(f64) -> String| match (r.slope_bytes_per_step, r.slope_ci_bytes_per_step) {
            (Some(b), Some([lo, hi])) => {
                format!("{} ({conf} CI {} to {})", show(b), show(lo), show(hi))
            }
            (Some(b), None) => show(b),
            _ => dash(),
        };
    vec![
        ("Slope per step", slope(&rate)),
        ("Slope per 1,000 steps", slope(&|b| fmt_bytes(b * 1e3))),
        (
            "Halves of the trend window",
            match (r.slope_first_half, r.slope_second_half) {
                (Some(a), Some(b)) => format!("first {}, second {}", rate(a), rate(b)),
                _ => dash(),
            },
        ),
    ]
}

/// What the growth amounts to: extrapolated, per hour, and until the budget.
fn growth_facts(r: &LeakReport) -> Facts {
    let fmt_bytes = |b: f64| fmt_bytes_in(b, r.unit);
    let mut f = Vec::new();
    f.push((
        "Extrapolation",
        if r.extrapolation.is_empty() {
            dash()
        } else {
            r.extrapolation
                .iter()
                .map(|(k, v)| format!("+{} steps: {}", group(*k), fmt_bytes(*v)))
                .collect::<Vec<_>>()
                .join("; ")
        },
    ));
    f.push((
        "Growth per hour",
        match (r.growth_bytes_per_hour, r.steps_per_hour) {
            (Some(g), Some(s)) => format!("{}/h (at {s:.0} steps/h)", fmt_bytes(g)),
            _ => "unknown (no timestamps; pass --steps-per-hour)".into(),
        },
    ));
    if let Some(b) = r.params.budget_bytes {
        let now = r
            .current_bytes
            .map_or(String::new(), |c| format!(", last sample {}", fmt_bytes(c)));
        let steps = match (r.steps_to_budget, r.slope_bytes_per_step) {
            (Some(s), _) if s <= 0.0 => "already reached: memory is at or above the budget".into(),
            (Some(s), _) => format!(
                "{} steps{}",
                group(s.round() as u64),
                r.hours_to_budget
                    .map_or(String::new(), |h| format!(", {h:.1} h"))
            ),
            (None, Some(sl)) if sl <= 0.0 || r.verdict == crate::record::leak::Verdict::Plateau => {
                "not reached: memory does not grow after the warm-up".into()
            }
            (None, Some(_)) => "not reached at the measured slope".into(),
            (None, None) => format!("unknown: no trend was measured ({})", r.verdict.as_str()),
        };
        f.push((
            "Until the budget",
            format!("{steps} (budget {}{now})", fmt_bytes(b)),
        ));
    }
    f
}

/// What the series could detect, how many more steps it needs, its samples and the parameters.
fn detection_facts(r: &LeakReport) -> Facts {
    let fmt_bytes = |b: f64| fmt_bytes_in(b, r.unit);
    let rate = |b: f64| rate_in(b, r.unit);
    let mut f = Vec::new();
    f.push((
        "Smallest detectable leak",
        r.min_detectable_bytes_per_step.map_or(dash(), |m| {
            format!("{} ({} per 1,000 steps)", rate(m), fmt_bytes(m * 1e3))
        }),
    ));
    if let Some(k) = r.more_steps_needed {
        f.push(("More steps needed", format!("about {}", group(k))));
    }
    f.push((
        "Samples",
        format!(
            "{} ({})",
            r.n_samples,
            if r.window > 1 {
                format!(
                    "trend on the rolling minimum: window {}, stride {}",
                    r.window, r.stride
                )
            } else {
                "trend on every sample".to_string()
            }
        ),
    ));
    f.push(("Parameters", parameters(r)));
    f
}

/// Every parameter of the verdict, in one line.
pub fn parameters(r: &LeakReport) -> String {
    let p = &r.params;
    let opt = |v: Option<String>| v.unwrap_or_else(|| "—".into());
    format!(
        "confidence {}, halves confidence {}, plateau margin max({}, {}% of level){}, horizon {} steps (rate that matters: plateau margin / horizon{}), leak margin {} × robust σ{}, second/first-half slope ratio for a leak ≥ {}, min points after warm-up {}, rolling minimum from {} samples, steps/hour {}, budget {}, Hamed–Rao variance inflation {}",
        p.confidence,
        p.halves_confidence,
        fmt_bytes(p.plateau_min_bytes),
        p.plateau_rel * 100.0,
        r.margin_plateau_bytes.map_or(String::new(), |m| format!(" = {}", fmt_bytes(m))),
        p.horizon_steps,
        r.rate_that_matters_bytes_per_step
            .map_or(String::new(), |m| format!(" = {}/step", fmt_bytes(m))),
        p.leak_noise_k,
        r.margin_leak_bytes.map_or(String::new(), |m| format!(" = {}", fmt_bytes(m))),
        p.decel_ratio,
        p.min_tail_points,
        p.short_series,
        opt(p.steps_per_hour.map(|v| format!("{v}"))),
        opt(p.budget_bytes.map(fmt_bytes)),
        opt(r.variance_inflation.map(|v| format!("×{v:.2}"))),
    )
}

/// Plain text for the terminal: the sentence first.
pub fn to_text(r: &LeakReport, targets: &[TargetRow]) -> String {
    let mut s = format!("{}\n\n", r.sentence);
    let facts = facts(r);
    let w = facts
        .iter()
        .map(|(k, _)| k.chars().count())
        .max()
        .unwrap_or(0);
    for (k, v) in &facts {
        s.push_str(&format!("  {k:<w$}  {v}\n"));
    }
    if !r.notes.is_empty() {
        s.push_str("\nNotes:\n");
        for n in &r.notes {
            s.push_str(&format!("  - {n}\n"));
        }
    }
    if !targets.is_empty() {
        s.push('\n');
        s.push_str(&targets_table(targets));
    }
    s
}

/// Markdown: the sentence in bold, a table of facts, notes, then targets.
pub fn to_markdown(r: &LeakReport, targets: &[TargetRow]) -> String {
    let mut table = Table {
        title: escape(&r.sentence),
        ..Table::new(["Quantity", "Value"])
    };
    for (k, v) in facts(r) {
        table.push([k.to_string(), escape(&v)]);
    }
    let mut s = table.markdown(&MarkdownStyle {
        title: true,
        ..MarkdownStyle::PLAIN
    });
    if !r.notes.is_empty() {
        s.push('\n');
        for n in &r.notes {
            s.push_str(&format!("- {}\n", escape(n)));
        }
    }
    if !targets.is_empty() {
        s.push('\n');
        s.push_str(&targets_table(targets));
    }
    s
}

/// The CI targets table: `| Metric | Target | Achieved | Status |`.
pub fn targets_table(rows: &[TargetRow]) -> String {
    let mut table = Table::new(["Metric", "Target", "Achieved", "Status"]);
    for r in rows {
        table.push([
            escape(&r.metric),
            escape(&r.target),
            escape(&r.achieved),
            if r.pass { "pass" } else { "FAIL" }.to_string(),
        ]);
    }
    table.markdown(&MarkdownStyle::PLAIN)
}

/// One CSV row (with a header line); units are in the column names; unknown numbers are empty.
pub fn to_csv(r: &LeakReport, targets: &[TargetRow]) -> anyhow::Result<String> {
    let num = |v: Option<f64>| {
        v.filter(|x| x.is_finite())
            .map_or(String::new(), |x| format!("{x}"))
    };
    let int = |v: Option<u64>| v.map_or(String::new(), |x| x.to_string());
    let ci = r.slope_ci_bytes_per_step;
    let extra = |k: u64| num(r.extrapolation.iter().find(|e| e.0 == k).map(|e| e.1));
    let cols: Vec<(&str, String)> = vec![
        ("verdict", r.verdict.as_str().to_string()),
        ("label", r.label.clone()),
        ("sentence", r.sentence.clone()),
        ("warmup_end_step", int(r.warmup_end_step)),
        ("mser_cut_step", int(r.mser_cut_step)),
        ("tail_start_step", int(r.tail_start_step)),
        ("last_step", int(r.last_step)),
        ("warmup_growth_bytes", num(r.warmup_growth_bytes)),
        ("plateau_median_bytes", num(r.plateau_median_bytes)),
        ("plateau_min_bytes", num(r.plateau_min_bytes)),
        ("plateau_max_bytes", num(r.plateau_max_bytes)),
        ("slope_bytes_per_step", num(r.slope_bytes_per_step)),
        ("slope_ci_low_bytes_per_step", num(ci.map(|c| c[0]))),
        ("slope_ci_high_bytes_per_step", num(ci.map(|c| c[1]))),
        ("slope_first_half_bytes_per_step", num(r.slope_first_half)),
        ("slope_second_half_bytes_per_step", num(r.slope_second_half)),
        ("bytes_after_100_more_steps", extra(100)),
        ("bytes_after_1000_more_steps", extra(1000)),
        ("bytes_after_10000_more_steps", extra(10000)),
        ("steps_per_hour", num(r.steps_per_hour)),
        ("growth_bytes_per_hour", num(r.growth_bytes_per_hour)),
        ("steps_to_budget", num(r.steps_to_budget)),
        ("hours_to_budget", num(r.hours_to_budget)),
        (
            "min_detectable_bytes_per_step",
            num(r.min_detectable_bytes_per_step),
        ),
        ("more_steps_needed", int(r.more_steps_needed)),
        ("n_samples", r.n_samples.to_string()),
        ("tail_points", r.tail_len.to_string()),
        ("window_samples", r.window.to_string()),
        ("confidence", r.params.confidence.to_string()),
        ("halves_confidence", r.params.halves_confidence.to_string()),
        (
            "plateau_margin_min_bytes",
            num(Some(r.params.plateau_min_bytes)),
        ),
        ("plateau_margin_rel", r.params.plateau_rel.to_string()),
        ("plateau_margin_bytes", num(r.margin_plateau_bytes)),
        ("leak_margin_bytes", num(r.margin_leak_bytes)),
        ("budget_bytes", num(r.params.budget_bytes)),
        (
            "targets",
            if targets.is_empty() {
                String::new()
            } else if targets.iter().all(|t| t.pass) {
                "pass".into()
            } else {
                "fail".into()
            },
        ),
    ];
    let mut table = Table::new(cols.iter().map(|c| c.0));
    table.push(cols.into_iter().map(|c| c.1));
    table.csv()
}

/// JSON: the report's fields (serde), plus `targets` when there are any.
pub fn to_json(r: &LeakReport, targets: &[TargetRow]) -> String {
    let mut v = serde_json::to_value(r).unwrap_or(serde_json::Value::Null);
    if let (Some(obj), false) = (v.as_object_mut(), targets.is_empty()) {
        obj.insert(
            "targets".into(),
            serde_json::to_value(targets).unwrap_or_default(),
        );
    }
    serde_json::to_string_pretty(&v).unwrap_or_default()
}

#[cfg(test)]
#[path = "leak_tests.rs"]
mod tests;
