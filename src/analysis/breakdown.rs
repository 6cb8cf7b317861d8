//! Where the bytes went: measured categories from the counting allocator's phase attribution,
//! the estimate beside each, and the heap peak reconciled with what was alive at that moment.
//!
//! Measured, per docs/design.md: forward's retained bytes (last run) are the activations; backward's
//! are the gradients; the first optimizer run's are the optimizer state; load's are the
//! parameters. What the first forward retained beyond later ones is the math libraries' own
//! buffers (gemm packing), with what was live before load: `unattributed`. Temporaries are
//! what the peak holds beyond the categories alive at that moment — the same definition the
//! estimator uses.

use crate::record::{BreakdownEntry, MemoryRecord};
use crate::spec::Mode;
use std::collections::BTreeMap;

/// The heap peak split into the categories alive at that moment.
#[derive(Clone, Debug, PartialEq)]
pub struct Reconciliation {
    pub peak_phase: String,
    pub peak_bytes: u64,
    /// (category, bytes), summing to `peak_bytes`.
    pub parts: Vec<(String, u64)>,
}

fn retained(m: &MemoryRecord, phase: &str, last: bool) -> u64 {
    m.phases
        .get(phase)
        .map(|p| {
            if last {
                p.retained_bytes_last
            } else {
                p.retained_bytes
            }
        })
        .unwrap_or(0)
        .max(0) as u64
}

/// A category the recorder read at the last mark of `phase` (any phase: `None`); 0 when it
/// never read it.
fn at_last_mark(m: &MemoryRecord, phase: Option<&str>, category: &str) -> u64 {
    m.series
        .iter()
        .rev()
        .flat_map(|s| s.phases.iter().rev())
        .find(|p| phase.is_none_or(|ph| p.phase == ph))
        .and_then(|p| p.heap_live_by_category.get(category).copied())
        .unwrap_or(0)
}

/// FSDP2's gathered parameters as the last forward ended (the root's, kept gathered to its
/// backward), from the recorder's categories at that mark; 0 for a model FSDP2 does not shard.
fn gathered_after_forward(m: &MemoryRecord) -> u64 {
    at_last_mark(m, Some("forward"), "gathered_parameters")
}

/// DDP's gradient buckets (its reducer's flat buckets, alive from the wrap on), as the
/// recorder read them; 0 without DDP.
fn gradient_buckets(m: &MemoryRecord) -> u64 {
    at_last_mark(m, None, "gradient_buckets")
}

/// What was live before load (gemm's per-thread slabs, allocated at start-up), library
/// buffers kept after the first forward (first run's retained minus the last run's), and what
/// load kept beyond the parameters (containers) and DDP's buckets (made as the model was
/// wrapped, after its parameters).
pub fn unattributed(m: &MemoryRecord) -> u64 {
    let fwd = retained(m, "forward", false).saturating_sub(retained(m, "forward", true))
        + retained(m, "prefill", false).saturating_sub(retained(m, "prefill", true));
    m.start_bytes
        + fwd
        + m.load_bytes
            .saturating_sub(m.param_bytes + gradient_buckets(m))
}

/// The phase whose window holds the run's heap peak.
pub fn peak_phase(m: &MemoryRecord) -> Option<(String, u64)> {
    m.phases
        .iter()
        .filter(|(n, _)| n.as_str() != "load")
        .map(|(n, p)| (n.clone(), p.peak_bytes))
        .max_by_key(|(_, b)| *b)
}

/// The categories alive at a peak in `phase` (temporaries excluded), from the measured record.
fn alive_at(m: &MemoryRecord, mode: Mode, phase: &str) -> Vec<(String, u64)> {
    let mut v = vec![("parameters".to_string(), m.param_bytes)];
    if mode == Mode::Train {
        let opt = retained(m, "optimizer", false);
        match phase {
            "optimizer" => {
                v.push(("optimizer state".into(), opt));
                v.push(("gradients".into(), retained(m, "backward", true)));
            }
            _ => {
                // The first step's forward/backward run before the optimizer state exists; a
                // run's peak in a later step has it.
                if m.series.len() > 1 {
                    v.push(("optimizer state".into(), opt));
                }
                // The recorder's activations leave FSDP2's gathered parameters out (a category
                // of their own), though autograd saved them too.
                v.push(("activations".into(), retained(m, "forward", true)));
                let gathered = gathered_after_forward(m);
                if gathered > 0 {
                    v.push(("gathered parameters (FSDP2's root)".into(), gathered));
                }
            }
        }
    }
    if let Some(kv) = m.kv_cache_bytes {
        v.push(("KV cache".into(), kv));
    }
    let buckets = gradient_buckets(m);
    if buckets > 0 {
        v.push(("gradient buckets (DDP)".into(), buckets));
    }
    v.push(("unattributed (library buffers)".into(), unattributed(m)));
    v
}

/// Splits the heap peak: the categories alive in its phase, the rest temporaries.
pub fn reconcile(m: &MemoryRecord, mode: Mode) -> Option<Reconciliation> {
    let (phase, peak) = peak_phase(m)?;
    let mut parts = alive_at(m, mode, &phase);
    let named: u64 = parts.iter().map(|(_, b)| b).sum();
    parts.push(("temporaries".into(), peak.saturating_sub(named)));
    Some(Reconciliation {
        peak_phase: phase,
        peak_bytes: peak,
        parts,
    })
}

/// Category → measured bytes, with the estimate's figure where it has one.
pub fn breakdown(m: &MemoryRecord, mode: Mode) -> BTreeMap<String, BreakdownEntry> {
    let rec = reconcile(m, mode);
    let temporaries = rec
        .as_ref()
        .and_then(|r| r.parts.iter().find(|(n, _)| n == "temporaries"))
        .map_or(0, |(_, b)| *b);
    let train = mode == Mode::Train;
    let measured: [(&str, u64); 10] = [
        ("parameters", m.param_bytes),
        (
            "gradients",
            if train {
                retained(m, "backward", true)
            } else {
                0
            },
        ),
        (
            "optimizer_state",
            if train {
                retained(m, "optimizer", false)
            } else {
                0
            },
        ),
        (
            "activations",
            if train {
                retained(m, "forward", true)
            } else {
                0
            },
        ),
        ("kv_cache", m.kv_cache_bytes.unwrap_or(0)),
        ("temporaries", temporaries),
        ("unattributed", unattributed(m)),
        ("gradient_buckets", gradient_buckets(m)),
        ("gathered_parameters", gathered_after_forward(m)),
        // Not measured on its own: FSDP2's all-gather and reduce-scatter buffers are
        // temporaries of the phase that holds them.
        ("collective_buffers", 0),
    ];
    let est = m.estimate.as_ref();
    // A job's own categories are listed where the run or its estimate has them.
    let job_only = [
        "gradient_buckets",
        "gathered_parameters",
        "collective_buffers",
    ];
    measured
        .iter()
        .filter(|(name, bytes)| {
            !job_only.contains(name)
                || *bytes > 0
                || est
                    .and_then(|e| e.categories.get(*name))
                    .is_some_and(|b| *b > 0)
        })
        .map(|(name, bytes)| {
            // What a run holds from before its first step beyond the parameters is
            // `unattributed`: the model's buffers and, for a user's own workload, its batch.
            let keys: &[&str] = if *name == "unattributed" {
                &["runtime_buffers", "inputs"]
            } else {
                std::slice::from_ref(name)
            };
            let estimated = est.and_then(|e| {
                let found: Vec<u64> = keys
                    .iter()
                    .filter_map(|k| e.categories.get(*k).copied())
                    .collect();
                (!found.is_empty()).then(|| found.iter().sum())
            });
            (
                name.to_string(),
                BreakdownEntry {
                    measured_bytes: *bytes,
                    estimated_bytes: estimated,
                },
            )
        })
        .collect()
}

/// Relative difference of the estimate from the measurement, in percent (None when either is
/// missing or the measurement is 0).
pub fn diff_pct(e: &BreakdownEntry) -> Option<f64> {
    let est = e.estimated_bytes?;
    if e.measured_bytes == 0 {
        return None;
    }
    Some(100.0 * (est as f64 - e.measured_bytes as f64) / e.measured_bytes as f64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{PhaseMemory, StepMemory};

    fn phase(peak: u64, first: i64, last: i64) -> PhaseMemory {
        PhaseMemory {
            peak_bytes: peak,
            retained_bytes: first,
            retained_bytes_last: last,
            ..Default::default()
        }
    }

    fn train_record() -> MemoryRecord {
        let mut m = MemoryRecord {
            param_bytes: 100,
            start_bytes: 20,
            load_bytes: 110,
            series: vec![StepMemory::default(), StepMemory::default()],
            ..Default::default()
        };
        m.phases.insert("forward".into(), phase(700, 405, 400));
        m.phases.insert("backward".into(), phase(1000, 100, 100));
        m.phases.insert("optimizer".into(), phase(600, 200, 0));
        m
    }

    #[test]
    fn peak_in_backward_is_parameters_state_activations_and_temporaries() {
        let r = reconcile(&train_record(), Mode::Train).unwrap();
        assert_eq!(r.peak_phase, "backward");
        assert_eq!(r.peak_bytes, 1000);
        let get = |n: &str| r.parts.iter().find(|(k, _)| k == n).unwrap().1;
        assert_eq!(get("parameters"), 100);
        assert_eq!(get("optimizer state"), 200);
        assert_eq!(get("activations"), 400);
        // 20 live before load + 5 from the first forward's extra + 10 of load beyond the
        // parameters.
        assert_eq!(get("unattributed (library buffers)"), 35);
        assert_eq!(get("temporaries"), 1000 - 100 - 200 - 400 - 35);
        assert_eq!(r.parts.iter().map(|p| p.1).sum::<u64>(), 1000);
    }

    #[test]
    fn breakdown_pairs_measured_with_estimate_and_diff() {
        let mut m = train_record();
        m.estimate = Some(crate::record::EstimatedMemory {
            categories: [("activations".to_string(), 440u64)].into_iter().collect(),
            peak_bytes: 990,
            peak_phase: "backward".into(),
            single_micro_batch_peak_bytes: None,
            reserved_peak_bytes: None,
            predicted_ms: Default::default(),
            ddp_rebuild: None,
        });
        let b = breakdown(&m, Mode::Train);
        assert_eq!(b["gradients"].measured_bytes, 100);
        assert_eq!(b["optimizer_state"].measured_bytes, 200);
        assert_eq!(b["activations"].estimated_bytes, Some(440));
        assert!((diff_pct(&b["activations"]).unwrap() - 10.0).abs() < 1e-9);
        assert_eq!(diff_pct(&b["gradients"]), None);
    }

    #[test]
    fn a_single_step_has_no_optimizer_state_at_its_backward_peak() {
        let mut m = train_record();
        m.series.truncate(1);
        let r = reconcile(&m, Mode::Train).unwrap();
        assert!(r.parts.iter().all(|(n, _)| n != "optimizer state"));
    }
}
