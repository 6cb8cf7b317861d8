//! `memscope optimize`'s ranking: each variant's measured heap peak, saved activations, step
//! time and loss beside the baseline's, biggest memory saving first, with one sentence per
//! variant on what it trades. Pure: figures (`sweep::variant_figures`) in, text out.
//!
//! Heap figures are the counting allocator's (exact); activations = heap bytes the first
//! forward left live; step time = median of the measured steps with its coefficient of
//! variation; the estimate is `memscope estimate`'s predicted heap peak for the same run.

use crate::export::table::{Align, MarkdownStyle, Table};
use crate::record::optimize::Figures;
use crate::units::{bytes, ms};
use std::fmt::Write;

fn signed(p: Option<f64>) -> String {
    match p {
        Some(p) if p.abs() < 0.05 => "±0%".into(),
        Some(p) => format!("{p:+.0}%"),
        None => "—".into(),
    }
}

/// What a variant trades, in one sentence: "checkpointing: −61% activations, −35% heap peak
/// for +31% step time".
pub fn sentence(f: &Figures) -> String {
    if f.status != "ok" {
        return format!(
            "{}: did not finish ({}{})",
            f.name,
            f.status,
            f.reason
                .as_ref()
                .map_or(String::new(), |r| format!(": {r}"))
        );
    }
    if f.baseline {
        return format!(
            "{}: the reference every other row is measured against",
            f.name
        );
    }
    if f.delta_peak_vs.as_deref() == Some("estimated") {
        return format!(
            "{}: {} heap peak against the baseline's estimated {} (the baseline did not run), at {} per step",
            f.name,
            signed(f.delta_peak_pct).replace('-', "−"),
            bytes(f.baseline_estimated_peak_bytes.unwrap_or(0) as f64),
            match (f.step_median_ms, f.step_cv_pct) {
                (Some(m), Some(cv)) => format!("{} ms ±{cv:.1}% (median, CV)", ms(m)),
                (Some(m), None) => format!("{} ms (one measured step)", ms(m)),
                (None, _) => "—".into(),
            }
        );
    }
    let mut saved = Vec::new();
    if let Some(a) = f.delta_activations_pct {
        saved.push(format!("{} activations", signed(Some(a)).replace('-', "−")));
    }
    saved.push(format!(
        "{} heap peak",
        signed(f.delta_peak_pct).replace('-', "−")
    ));
    let cost = f
        .delta_time_pct
        .map_or("an unmeasured step time".into(), |t| {
            format!("{} step time", signed(Some(t)).replace('-', "−"))
        });
    format!("{}: {} for {}", f.name, saved.join(", "), cost)
}

/// The ranking as a Markdown table plus the sentences.
pub fn markdown(title: &str, figs: &[Figures], steps: usize) -> String {
    let mut out = format!("### {title}\n\n");
    let fit = figs.iter().any(|f| f.max_batch.is_some());
    let mut table = Table::new([
        "Variant".to_string(),
        "Heap peak".into(),
        "Δ peak".into(),
        "Activations".into(),
        "Step ms".into(),
        "Δ time".into(),
        format!("Loss at step {steps}"),
        "Estimated peak".into(),
    ]);
    if fit {
        table.header.push("Max batch".into());
    }
    for f in figs {
        let b = |x: Option<u64>| x.map_or("—".into(), |v| bytes(v as f64));
        let step = match (f.step_median_ms, f.step_cv_pct) {
            (Some(m), Some(cv)) => format!("{} ±{cv:.1}%", ms(m)),
            (Some(m), None) => ms(m),
            (None, _) => f.status.clone(),
        };
        let est = match (f.estimated_peak_bytes, f.estimate_error_pct) {
            (Some(e), Some(p)) => format!("{} ({p:+.1}%)", bytes(e as f64)),
            (Some(e), None) => format!("{} (not run)", bytes(e as f64)),
            _ => "not modelled".into(),
        };
        let dpeak = match f.delta_peak_vs.as_deref() {
            Some("estimated") => format!("{} vs est.", signed(f.delta_peak_pct)),
            _ => signed(f.delta_peak_pct),
        };
        let loss = f.loss_last.map_or("—".into(), |l| format!("{l:.4}"));
        let mut row = vec![
            f.name.clone(),
            b(f.heap_peak_bytes),
            dpeak,
            b(f.activations_bytes),
            step,
            signed(f.delta_time_pct),
            loss,
            est,
        ];
        if fit {
            row.push(f.max_batch.map_or("—".into(), |m| m.to_string()));
        }
        table.push(row);
    }
    // Every figure right-aligned, with the short rule `--:`.
    out += &table.markdown(&MarkdownStyle {
        align: &[Align::Left, Align::RightShort],
        ..MarkdownStyle::PLAIN
    });
    out.push('\n');
    for f in figs {
        let _ = writeln!(out, "- {}", sentence(f));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fig(name: &str, peak: Option<f64>, act: Option<f64>, time: Option<f64>) -> Figures {
        Figures {
            name: name.into(),
            baseline: name == "baseline",
            delta_peak_vs: peak.map(|_| "measured".to_string()),
            baseline_estimated_peak_bytes: None,
            flags: String::new(),
            seq: 8,
            status: "ok".into(),
            reason: None,
            heap_peak_bytes: Some(1),
            delta_peak_pct: peak,
            activations_bytes: None,
            delta_activations_pct: act,
            step_median_ms: Some(1.0),
            step_cv_pct: None,
            delta_time_pct: time,
            loss_last: None,
            estimated_peak_bytes: None,
            estimate_error_pct: None,
            max_batch: None,
        }
    }

    #[test]
    fn a_sentence_names_the_saving_and_its_cost() {
        let f = fig("checkpointing", Some(-35.2), Some(-61.0), Some(31.4));
        assert_eq!(
            sentence(&f),
            "checkpointing: −61% activations, −35% heap peak for +31% step time"
        );
        let b = fig("baseline", None, None, None);
        assert!(sentence(&b).contains("reference"));
        // The baseline refused (its estimate over the machine): Δ against its estimate, said so.
        let mut c = fig("checkpointing", Some(-78.7), None, None);
        c.delta_peak_vs = Some("estimated".to_string());
        c.baseline_estimated_peak_bytes = Some(44 << 30);
        let t = sentence(&c);
        assert!(
            t.contains("−79% heap peak against the baseline's estimated 44.00 GiB"),
            "{t}"
        );
    }
}
