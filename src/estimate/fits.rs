//! `--fits BUDGET`: does the predicted peak fit, with how much headroom, and which single
//! change makes it fit when it does not.

use super::{estimate, Attention, Optimizer, Precision, Request};
use crate::record::estimate::{Change, FitReport};
use crate::spec::{Dtype, Mode};

/// Checks `req` against `budget` bytes and, when it does not fit, tries each single change.
pub fn fits(req: &Request, budget: u64) -> anyhow::Result<FitReport> {
    let base = estimate(req)?;
    let fits = base.peak_bytes <= budget;
    let mut changes = Vec::new();
    if !fits {
        for (label, alt) in alternatives(req) {
            let e = estimate(&alt)?;
            if e.peak_bytes >= base.peak_bytes {
                continue; // does not help (e.g. checkpointing when the optimizer step is the peak)
            }
            changes.push(Change {
                change: label,
                peak_bytes: e.peak_bytes,
                fits: e.peak_bytes <= budget,
            });
        }
        changes.sort_by_key(|c| c.peak_bytes);
    }
    Ok(FitReport {
        budget_bytes: budget,
        peak_bytes: base.peak_bytes,
        fits,
        headroom_bytes: budget as i64 - base.peak_bytes as i64,
        changes,
    })
}

fn alternatives(req: &Request) -> Vec<(String, Request)> {
    let mut v = Vec::new();
    if req.batch > 1 {
        let mut r = req.clone();
        r.batch = req.batch.div_ceil(2);
        v.push((format!("halve the batch (--batch {})", r.batch), r));
    }
    if req.dtype == Dtype::F32 {
        let mut r = req.clone();
        r.dtype = Dtype::Bf16;
        if req.mode == Mode::Train {
            // What `--dtype bf16` trains with: f32 master weights and state; and all in bf16.
            r.precision = Precision::Mixed;
            v.push((
                "bf16 compute, mixed precision (--dtype bf16)".into(),
                r.clone(),
            ));
            r.precision = Precision::Pure;
            v.push((
                "everything in bf16 (--dtype bf16 --precision pure)".into(),
                r,
            ));
        } else {
            v.push(("bf16 instead of f32 (--dtype bf16)".into(), r));
        }
    }
    if req.mode == Mode::Train && req.optimizer == Optimizer::Adamw {
        let mut r = req.clone();
        r.optimizer = Optimizer::Sgd;
        v.push((
            "SGD with momentum instead of AdamW (--optimizer sgd)".into(),
            r,
        ));
    }
    if req.mode == Mode::Train && !req.checkpoint {
        let mut r = req.clone();
        r.checkpoint = true;
        v.push(("activation checkpointing (--checkpoint)".into(), r));
    }
    if req.attention == Attention::Naive {
        let mut r = req.clone();
        r.attention = Attention::Fused;
        v.push(("fused attention (--attention fused)".into(), r));
    }
    if req.mode == Mode::Train && req.batch > 1 {
        let mut r = req.clone();
        r.batch = req.batch.div_ceil(2);
        r.grad_accum = req.grad_accum * 2;
        v.push((
            format!(
                "half the batch, twice the accumulation (--batch {} --grad-accum {}): same tokens per step",
                r.batch, r.grad_accum
            ),
            r,
        ));
    }
    v
}
