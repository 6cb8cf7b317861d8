//! `memscope diff`: two Records' memory side by side — measured bytes per category, each phase's
//! heap peak and retained bytes, and what was alive at the steady-step peak by allocating phase
//! and by model module — and which of those moved the peak most.

use crate::record::Record;
use std::collections::{BTreeMap, BTreeSet};

/// One figure in both runs (bytes; None where a run does not have it).
#[derive(Clone, Debug, PartialEq)]
pub struct Pair {
    pub name: String,
    pub base: Option<i64>,
    pub new: Option<i64>,
}

impl Pair {
    pub fn diff(&self) -> i64 {
        self.new.unwrap_or(0) - self.base.unwrap_or(0)
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct MemoryDiff {
    /// heap peak over the whole run.
    pub heap_peak: Pair,
    /// The phase whose heap peak is highest, in each run.
    pub peak_phase: (Option<String>, Option<String>),
    /// memory.breakdown measured bytes.
    pub categories: Vec<Pair>,
    /// memory.phases: heap peak while each phase ran.
    pub phase_peaks: Vec<Pair>,
    /// memory.phases: bytes the phase's first run allocated and left alive.
    pub phase_retained: Vec<Pair>,
    /// Alive at the steady step's highest peak, by the phase that allocated it.
    pub peak_by_phase: Vec<Pair>,
    /// Alive at that moment by model module (the modules either run lists).
    pub peak_by_module: Vec<Pair>,
    /// The entry of `peak_by_phase` (or, failing that, `categories`) that changed most, and
    /// which of the two lists it is from ("allocated in" or "category").
    pub moved_by: Option<(&'static str, Pair)>,
}

fn pairs(
    base: impl IntoIterator<Item = (String, i64)>,
    new: impl IntoIterator<Item = (String, i64)>,
) -> Vec<Pair> {
    let b: BTreeMap<String, i64> = base.into_iter().collect();
    let n: BTreeMap<String, i64> = new.into_iter().collect();
    let keys: BTreeSet<&String> = b.keys().chain(n.keys()).collect();
    keys.into_iter()
        .map(|k| Pair {
            name: k.clone(),
            base: b.get(k).copied(),
            new: n.get(k).copied(),
        })
        .collect()
}

/// A PyTorch Record's peak moment splits the bytes by category; memscope's own by the phase that
/// allocated them. Set beside each other, a category-split moment is read by the phase that
/// allocates each category (parameters and DDP's buckets at load, activations in forward,
/// gradients in backward, the optimizer's state in its step, the KV cache as `other`, what the
/// libraries hold outside every phase as `idle`; what the moment's own phase allocated, freed or
/// gathered, in that phase), so the two runs' rows pair.
fn by_allocating_phase(m: &crate::record::PeakMoment) -> Vec<(String, i64)> {
    let mut out: BTreeMap<String, i64> = BTreeMap::new();
    for (k, v) in &m.by_phase {
        let phase = match k.as_str() {
            "parameters" | "gradient_buckets" => "load",
            "activations" => "forward",
            "gradients" => "backward",
            "optimizer_state" => "optimizer",
            "kv_cache" => "other",
            "unattributed" => "idle",
            _ => m.phase.as_str(), // temporaries, gathered parameters
        };
        *out.entry(phase.to_string()).or_insert(0) += *v as i64;
    }
    out.into_iter().collect()
}

/// Whether a moment splits its bytes by category (a PyTorch Record's).
fn by_category(m: &crate::record::PeakMoment) -> bool {
    ["parameters", "activations", "gradients", "optimizer_state"]
        .iter()
        .any(|k| m.by_phase.contains_key(*k))
}

fn top_moment(r: &Record) -> Option<&crate::record::PeakMoment> {
    r.memory
        .peak_moments
        .iter()
        .max_by_key(|m| m.heap_peak_bytes)
}

fn peak_phase(r: &Record) -> Option<String> {
    r.memory
        .phases
        .iter()
        .max_by_key(|(_, p)| p.peak_bytes)
        .map(|(k, _)| k.clone())
}

pub fn diff(base: &Record, new: &Record) -> MemoryDiff {
    let cat = |r: &Record| {
        r.memory
            .breakdown
            .iter()
            .map(|(k, v)| (k.clone(), v.measured_bytes as i64))
            .collect::<Vec<_>>()
    };
    let ph = |r: &Record, f: fn(&crate::record::PhaseMemory) -> i64| {
        r.memory
            .phases
            .iter()
            .map(|(k, v)| (k.clone(), f(v)))
            .collect::<Vec<_>>()
    };
    let at_peak = |r: &Record| {
        top_moment(r)
            .map(|m| {
                m.by_phase
                    .iter()
                    .map(|(k, v)| (k.clone(), *v as i64))
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default()
    };
    let modules = |r: &Record| {
        top_moment(r)
            .map(|m| {
                m.by_module
                    .iter()
                    .map(|x| (x.module.clone(), x.bytes as i64))
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default()
    };
    let categories = pairs(cat(base), cat(new));
    // One run's moment by category and the other's by allocating phase: both by phase.
    let mixed = match (top_moment(base), top_moment(new)) {
        (Some(a), Some(b)) => by_category(a) != by_category(b),
        _ => false,
    };
    let peak_by_phase = if mixed {
        let phases = |r: &Record| match top_moment(r) {
            Some(m) if by_category(m) => by_allocating_phase(m),
            _ => at_peak(r),
        };
        pairs(phases(base), phases(new))
    } else {
        pairs(at_peak(base), at_peak(new))
    };
    let mut peak_by_module = pairs(modules(base), modules(new));
    peak_by_module.sort_by_key(|p| std::cmp::Reverse(p.diff().abs()));
    let pick = |v: &[Pair]| {
        v.iter()
            .filter(|p| p.diff() != 0)
            .max_by_key(|p| p.diff().abs())
            .cloned()
    };
    let moved_by = pick(&peak_by_phase)
        .map(|p| ("bytes allocated in", p))
        .or_else(|| pick(&categories).map(|p| ("category", p)));
    MemoryDiff {
        heap_peak: Pair {
            name: "heap peak (whole run)".into(),
            base: Some(base.memory.heap_peak_bytes as i64),
            new: Some(new.memory.heap_peak_bytes as i64),
        },
        peak_phase: (peak_phase(base), peak_phase(new)),
        categories,
        phase_peaks: pairs(
            ph(base, |p| p.peak_bytes as i64),
            ph(new, |p| p.peak_bytes as i64),
        ),
        phase_retained: pairs(
            ph(base, |p| p.retained_bytes),
            ph(new, |p| p.retained_bytes),
        ),
        peak_by_phase,
        peak_by_module,
        moved_by,
    }
}
