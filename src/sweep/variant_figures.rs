//! `memscope optimize`'s figures: each variant's outcome at one sequence length set against the
//! baseline's (Δ heap peak, Δ activations, Δ step time, the estimate's error), ranked by heap peak.
//!
//! Heap figures are the counting allocator's (exact); activations = heap bytes the first
//! forward left live; step time = median of the measured steps with its coefficient of
//! variation; the estimate is `memscope estimate`'s predicted heap peak for the same run.

use crate::record::optimize::Figures;
use crate::record::sweep_row::{Row, RowSummary, Status};
use crate::sweep::variants::{describe, VariantOutcome};

fn pct(new: f64, base: f64) -> Option<f64> {
    (base > 0.0).then(|| (new - base) / base * 100.0)
}

fn ok(r: &Row) -> Option<&RowSummary> {
    (r.status == Status::Ok)
        .then_some(r.summary.as_ref())
        .flatten()
}

/// The outcomes at one sequence length (the baseline first) → figures ranked by heap peak,
/// lowest first; runs that did not finish last.
pub fn figures(outcomes: &[VariantOutcome]) -> Vec<Figures> {
    let base = outcomes.first().and_then(|o| ok(&o.row));
    // When the baseline did not run (refused, out of memory), peaks are set against its estimate.
    let base_est = outcomes
        .first()
        .filter(|_| base.is_none())
        .and_then(|o| o.estimated_peak_bytes);
    let mut v: Vec<Figures> = outcomes
        .iter()
        .enumerate()
        .map(|(i, o)| {
            let s = ok(&o.row);
            // The baseline (first) has no Δ: it is the reference.
            let rel = |f: &dyn Fn(&RowSummary) -> Option<f64>| -> Option<f64> {
                (i > 0).then_some(())?;
                pct(f(s?)?, f(base?)?)
            };
            let peak = |x: &RowSummary| Some(x.heap_peak_bytes as f64);
            let act = |x: &RowSummary| x.activations_bytes.map(|b| b as f64);
            let time = |x: &RowSummary| Some(x.step_median_ms);
            let (delta_peak_pct, delta_peak_vs) = match (rel(&peak), base_est, s) {
                (Some(d), _, _) => (Some(d), Some("measured")),
                (None, Some(e), Some(x)) if i > 0 => {
                    (pct(x.heap_peak_bytes as f64, e as f64), Some("estimated"))
                }
                _ => (None, None),
            };
            Figures {
                name: o.name.to_string(),
                baseline: i == 0,
                flags: describe(&o.row.spec),
                seq: o.row.spec.seq,
                status: o.row.status.name().to_string(),
                reason: o.row.reason.clone(),
                heap_peak_bytes: s.map(|x| x.heap_peak_bytes),
                delta_peak_pct,
                delta_peak_vs: delta_peak_vs.map(str::to_string),
                baseline_estimated_peak_bytes: base_est.filter(|_| delta_peak_vs.is_some()),
                activations_bytes: s.and_then(|x| x.activations_bytes),
                delta_activations_pct: rel(&act),
                step_median_ms: s.map(|x| x.step_median_ms),
                step_cv_pct: s.and_then(|x| x.step_cv_pct),
                delta_time_pct: rel(&time),
                loss_last: s.and_then(|x| x.loss_last),
                estimated_peak_bytes: s
                    .and_then(|x| x.estimated_peak_bytes)
                    .or(o.estimated_peak_bytes),
                estimate_error_pct: s
                    .and_then(|x| pct(x.estimated_peak_bytes? as f64, x.heap_peak_bytes as f64)),
                max_batch: o.max_batch,
            }
        })
        .collect();
    v.sort_by(|a, b| match (a.heap_peak_bytes, b.heap_peak_bytes) {
        (Some(x), Some(y)) => x.cmp(&y),
        (Some(_), None) => std::cmp::Ordering::Less,
        (None, Some(_)) => std::cmp::Ordering::Greater,
        (None, None) => std::cmp::Ordering::Equal,
    });
    v
}
