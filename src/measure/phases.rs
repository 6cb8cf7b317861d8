//! Per-phase heap accounting: wraps one run of a phase, records its heap peak and what it
//! retained, keeps the run-wide peak across the per-phase peak windows, and marks the end of
//! every phase run inside a step (its heap peak, heap live by allocating phase) for the
//! Record's per-step series.

use crate::instrument::alloc::{self, Phase, N_PHASES};
use crate::instrument::scope;
use crate::record::{ModuleBytes, PeakMoment, PhaseMark, PhaseMemory};
use std::collections::BTreeMap;

#[derive(Clone, Copy, Default)]
struct Acc {
    runs: u64,
    peak: u64,
    first_retained: i64,
    last_retained: i64,
    last_allocs: u64,
    last_alloc_bytes: u64,
}

/// The end of one phase run inside a step, as counters (no allocation to keep it).
#[derive(Clone, Copy, Debug)]
struct Mark {
    step: u32,
    phase: Phase,
    heap_peak: u64,
    live: [u64; N_PHASES],
}

impl Mark {
    /// `other`: the category phase "other"'s bytes stand for in this run.
    fn to_record(&self, other: &'static str) -> PhaseMark {
        let mut live: BTreeMap<String, u64> = BTreeMap::new();
        for q in Phase::ALL {
            let b = self.live[q as usize];
            if b > 0 {
                let c = match q {
                    Phase::Other => other,
                    _ => category_of(q),
                };
                *live.entry(c.to_string()).or_default() += b;
            }
        }
        PhaseMark {
            phase: self.phase.name().to_string(),
            heap_peak_bytes: self.heap_peak,
            heap_live_by_category: live,
        }
    }
}

/// The breakdown category (analysis::breakdown's names) that heap live allocated in phase `p`
/// stands for: load → parameters, forward/prefill/decode → activations, backward → gradients,
/// optimizer → optimizer state, other → the KV cache (generate's preallocation; mixed precision's
/// per-step weight copy is named by [`PhaseTracker::other_category`] instead), idle (outside every phase: memscope's own structures, gemm's
/// per-thread buffers) → unattributed.
pub fn category_of(p: Phase) -> &'static str {
    match p {
        Phase::Load => "parameters",
        Phase::Forward | Phase::Prefill | Phase::Decode => "activations",
        Phase::Backward => "gradients",
        Phase::Optimizer => "optimizer_state",
        Phase::Other => "kv_cache",
        Phase::Idle => "unattributed",
    }
}

/// The phases a step is made of (their runs are marked); load and the KV cache's allocation
/// happen once, before the steps.
fn in_step(p: Phase) -> bool {
    matches!(
        p,
        Phase::Forward | Phase::Backward | Phase::Optimizer | Phase::Prefill | Phase::Decode
    )
}

/// Accumulates phase figures without allocating (fixed array indexed by phase).
pub struct PhaseTracker {
    acc: [Acc; N_PHASES],
    run_peak: u64,
    recent_peak: u64,
    /// When set, each phase run keeps the allocator's peak snapshot (the latest per phase).
    pub capture: bool,
    moments: Vec<(Phase, alloc::PeakSnapshot)>,
    /// Ends of the phase runs inside steps. Its capacity is reserved before the first step
    /// ([`PhaseTracker::reserve_marks`]) and never grows: a run beyond it is not marked.
    marks: Vec<Mark>,
    /// The step the next phase runs belong to.
    mark_step: u32,
    /// What phase "other" allocates in this run: `kv_cache` (generate's cache, the default) or
    /// `weights_copy` (mixed precision's per-step cast of the weights).
    pub other_category: &'static str,
}

impl Default for PhaseTracker {
    fn default() -> Self {
        Self::new()
    }
}

impl PhaseTracker {
    pub fn new() -> Self {
        let s = alloc::snapshot();
        Self {
            acc: [Acc::default(); N_PHASES],
            run_peak: s.max_bytes,
            recent_peak: s.curr_bytes,
            capture: false,
            moments: Vec::new(),
            marks: Vec::new(),
            mark_step: 0,
            other_category: "kv_cache",
        }
    }

    /// Reserves room for `n` phase-run marks: every phase run of the whole run (call before the
    /// first step, outside every timed region; 0, the default, marks nothing). Marks are kept
    /// as counters until the run ends, so the Record's per-step entries do not grow heap live
    /// from one step to the next (a growing series would read as a leak).
    pub fn reserve_marks(&mut self, n: usize) {
        self.marks = Vec::with_capacity(n);
        self.mark_step = 0;
    }

    /// Later phase runs belong to the next step.
    pub fn next_step(&mut self) {
        self.mark_step += 1;
    }

    /// The marks of the current step as the Record's entries (allocates: call it between
    /// steps, before [`PhaseTracker::next_step`]).
    pub fn current_marks(&self) -> Vec<PhaseMark> {
        let n = self
            .marks
            .iter()
            .rev()
            .take_while(|m| m.step == self.mark_step)
            .count();
        self.marks[self.marks.len() - n..]
            .iter()
            .map(|m| m.to_record(self.other_category))
            .collect()
    }

    /// Every mark, grouped by step (`steps` groups, in order), as the Record's entries; the
    /// buffer is released.
    pub fn take_marks(&mut self, steps: usize) -> Vec<Vec<PhaseMark>> {
        let mut out: Vec<Vec<PhaseMark>> = vec![Vec::new(); steps];
        for m in std::mem::take(&mut self.marks) {
            if let Some(slot) = out.get_mut(m.step as usize) {
                slot.push(m.to_record(self.other_category));
            }
        }
        out
    }

    /// Runs `f` as one run of phase `p`. The heap peak window is reset at its start.
    pub fn run<T>(&mut self, p: Phase, f: impl FnOnce() -> T) -> T {
        let before = alloc::snapshot();
        self.run_peak = self.run_peak.max(before.max_bytes);
        self.recent_peak = self.recent_peak.max(before.max_bytes);
        alloc::reset_peak();
        alloc::arm_peak_snapshot(self.capture);
        let prev = alloc::set_phase(p);
        let out = f();
        alloc::set_phase(prev);
        alloc::arm_peak_snapshot(false);
        let after = alloc::snapshot();
        if in_step(p) && self.marks.len() < self.marks.capacity() {
            // Within the reserved capacity: no allocation.
            self.marks.push(Mark {
                step: self.mark_step,
                phase: p,
                heap_peak: after.max_bytes,
                live: after.phase_curr,
            });
        }
        if self.capture {
            let snap = alloc::peak_snapshot();
            self.moments.retain(|(q, _)| *q != p);
            self.moments.push((p, snap));
        }
        let i = p as usize;
        let retained = after.phase_curr[i] as i64 - before.phase_curr[i] as i64;
        let a = &mut self.acc[i];
        if a.runs == 0 {
            a.first_retained = retained;
        }
        a.runs += 1;
        a.peak = a.peak.max(after.max_bytes);
        a.last_retained = retained;
        a.last_allocs = after.phase_total_blocks[i] - before.phase_total_blocks[i];
        a.last_alloc_bytes = after.phase_total_bytes[i] - before.phase_total_bytes[i];
        self.run_peak = self.run_peak.max(after.max_bytes);
        self.recent_peak = self.recent_peak.max(after.max_bytes);
        out
    }

    /// Heap peak since the previous call (across phase windows), then starts a new window.
    pub fn take_recent_peak(&mut self) -> u64 {
        let now = alloc::snapshot();
        let peak = self.recent_peak.max(now.max_bytes);
        self.run_peak = self.run_peak.max(peak);
        alloc::reset_peak();
        self.recent_peak = now.curr_bytes;
        peak
    }

    /// Heap peak over everything seen so far (all phase windows and the time between them).
    pub fn run_peak(&self) -> u64 {
        self.run_peak.max(alloc::snapshot().max_bytes)
    }

    pub fn peak_of(&self, p: Phase) -> u64 {
        self.acc[p as usize].peak
    }

    pub fn retained_first(&self, p: Phase) -> i64 {
        self.acc[p as usize].first_retained
    }

    /// The captured peak moments, with module ids named.
    pub fn moments(&self) -> Vec<PeakMoment> {
        self.moments
            .iter()
            .filter(|(_, s)| s.bytes > 0)
            .map(|(p, s)| {
                let mut by_module: Vec<ModuleBytes> = s
                    .by_module
                    .iter()
                    .map(|&(m, b)| ModuleBytes {
                        module: scope::name(m),
                        bytes: b,
                    })
                    .collect();
                by_module.sort_by(|a, b| b.bytes.cmp(&a.bytes));
                PeakMoment {
                    phase: p.name().to_string(),
                    heap_peak_bytes: s.bytes,
                    by_phase: Phase::ALL
                        .iter()
                        .filter(|q| s.by_phase[**q as usize] > 0)
                        .map(|q| (q.name().to_string(), s.by_phase[*q as usize]))
                        .collect(),
                    by_module,
                }
            })
            .collect()
    }

    /// Figures of every phase that ran at least once, by phase name.
    pub fn to_record(&self) -> BTreeMap<String, PhaseMemory> {
        Phase::ALL
            .iter()
            .filter(|p| self.acc[**p as usize].runs > 0)
            .map(|p| {
                let a = self.acc[*p as usize];
                (
                    p.name().to_string(),
                    PhaseMemory {
                        peak_bytes: a.peak,
                        retained_bytes: a.first_retained,
                        retained_bytes_last: a.last_retained,
                        allocations_last: a.last_allocs,
                        allocated_bytes_last: a.last_alloc_bytes,
                    },
                )
            })
            .collect()
    }
}
