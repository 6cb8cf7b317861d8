//! `memscope compare`: two runs figure by figure. Timing: every phase's raw samples, the
//! difference of medians with a seeded bootstrap CI ([`crate::analysis::bootstrap`]). Memory:
//! heap figures per step (samples = measured steps, bootstrapped the same way) and the run's
//! single figures (heap peak, heap live retained by load: exact counts; RSS peak: one reading).
//!
//! Verdict of a figure, where larger is worse for every figure compared:
//! - **regressed**: the change is beyond the threshold (relative to base) and, when there is an
//!   interval, the interval excludes 0 (the change is not resampling noise);
//! - **improved**: the same, downwards;
//! - **no change**: otherwise.

use crate::analysis::bootstrap::{median_diff, BootstrapParams};
use crate::record::sweep_row::{label, Row, Status};
use crate::record::Record;
use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Improved,
    Regressed,
    NoChange,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Improved => "improved",
            Verdict::Regressed => "regressed",
            Verdict::NoChange => "no change",
        }
    }
}

/// What a row's numbers are.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Unit {
    Ms,
    Bytes,
}

/// One compared figure.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Change {
    /// "step time: forward", "heap peak per step", …; with sweeps, prefixed by the configuration.
    pub figure: String,
    pub unit: Unit,
    /// Base and new: the median of the samples, or the single value.
    pub base: f64,
    pub new: f64,
    /// new − base.
    pub diff: f64,
    /// diff / base (0 when base is 0 and diff is 0).
    pub relative: f64,
    /// Bootstrap interval of `diff`; None for single values.
    pub ci: Option<[f64; 2]>,
    /// Samples behind base and new (1 for single values).
    pub n_base: usize,
    pub n_new: usize,
    pub verdict: Verdict,
    /// The relative change this figure must exceed: the threshold, or for a single noisy reading
    /// (RSS peak) the larger of it and the reading's noise.
    #[serde(default)]
    pub tolerance: f64,
    /// Whether a regression of this figure sets exit status 1 (every figure compared does; the
    /// field says so in the JSON).
    #[serde(default = "yes")]
    pub gates: bool,
}

fn yes() -> bool {
    true
}

/// The whole comparison and how it was made.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Comparison {
    pub threshold: f64,
    pub bootstrap: BootstrapParams,
    pub changes: Vec<Change>,
    /// Configurations only in one of two sweeps, or not ok in one of them.
    pub unmatched: Vec<String>,
    /// How the two runs' machines differ (CPU, its vector instructions, threads): their timing
    /// differences include the machine's. Empty when they ran alike.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub machines_differ: Vec<String>,
    /// How the two runs' workloads differ (model, shape, mode, dtype, engine path), when compared
    /// anyway with `--allow-different`. Empty when they ran the same workload.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub workloads_differ: Vec<String>,
}

impl Comparison {
    pub fn regressed(&self) -> bool {
        self.changes
            .iter()
            .any(|c| c.gates && c.verdict == Verdict::Regressed)
    }
}

/// The smallest tolerance of a single RSS reading: back-to-back identical runs differ by a few
/// percent in VmHWM (page faults, allocator arenas, thread start-up), so 5% is noise.
pub const RSS_MIN_TOLERANCE: f64 = 0.05;

/// The noise of a run's RSS, relative: 1.4826 × MAD / median of its per-step RSS readings.
fn rss_noise(r: &Record) -> Option<f64> {
    let v: Vec<f64> = r
        .memory
        .series
        .iter()
        .filter_map(|s| s.rss_bytes.map(|b| b as f64))
        .collect();
    let m = crate::quantile::midpoint_median(&v)?;
    let sigma = crate::quantile::mad_sigma(&v)?;
    (m > 0.0).then(|| sigma / m)
}

/// How two runs' workloads differ: model (and its architecture), mode, dtype, batch, sequence,
/// gradient accumulation, generation lengths, the engine path. Empty when alike.
pub fn workloads_differ(b: &crate::spec::Spec, n: &crate::spec::Spec) -> Vec<String> {
    let mut out = Vec::new();
    let mut diff = |what: &str, bv: String, nv: String| {
        if bv != nv {
            out.push(format!("{what}: base {bv}, new {nv}"));
        }
    };
    diff("engine", engine_of(b), engine_of(n));
    diff("memory figures", memory_of(b), memory_of(n));
    diff("model", b.model.clone(), n.model.clone());
    diff(
        "model architecture",
        if b.model == n.model && b.config != n.config {
            "one config"
        } else {
            ""
        }
        .into(),
        if b.model == n.model && b.config != n.config {
            "another"
        } else {
            ""
        }
        .into(),
    );
    diff("mode", b.mode.name().into(), n.mode.name().into());
    diff("dtype", b.dtype.name().into(), n.dtype.name().into());
    diff("batch", b.batch.to_string(), n.batch.to_string());
    diff("sequence", b.seq.to_string(), n.seq.to_string());
    diff(
        "grad-accum",
        b.grad_accum.to_string(),
        n.grad_accum.to_string(),
    );
    if b.mode == crate::spec::Mode::Generate || n.mode == crate::spec::Mode::Generate {
        diff(
            "prompt-len",
            b.prompt_len.to_string(),
            n.prompt_len.to_string(),
        );
        diff(
            "new-tokens",
            b.new_tokens.to_string(),
            n.new_tokens.to_string(),
        );
    }
    diff("engine variant", b.variant.flags(), n.variant.flags());
    diff("parallel plan", plan_of(b), plan_of(n));
    out
}

/// The engine and device a Record's run had (not its version: a PyTorch upgrade is a change to
/// compare).
fn engine_of(s: &crate::spec::Spec) -> String {
    match &s.engine {
        Some(e) => format!("{} on {}", e.name, e.device),
        None => "memscope's own (candle) on cpu".into(),
    }
}

/// The warning of a Record whose run did not end cleanly (the recorder's loop raised or was
/// stopped; the engine was stopped by a signal), if it has one: its timings are of the steps
/// before that.
pub fn ended_early(r: &Record) -> Option<&str> {
    r.warnings
        .iter()
        .find(|w| w.contains(": the Record holds the ") || w.starts_with("stopped by "))
        .map(String::as_str)
}

/// A run's data-parallel plan as its flags say it, or one process.
fn plan_of(s: &crate::spec::Spec) -> String {
    match s.parallel() {
        Some(p) => format!(
            "--parallel {} over {} rank{}",
            p.flag(),
            p.world,
            if p.world == 1 { "" } else { "s" }
        ),
        None => "one process".into(),
    }
}

/// What a Record's heap figures measure.
fn memory_of(s: &crate::spec::Spec) -> String {
    match &s.engine {
        Some(e) => e.memory.clone(),
        None => "heap (memscope's counting allocator)".into(),
    }
}

fn relative(base: f64, diff: f64) -> f64 {
    if base != 0.0 {
        diff / base.abs()
    } else if diff == 0.0 {
        0.0
    } else {
        diff.signum() * f64::INFINITY
    }
}

fn verdict(rel: f64, ci: Option<[f64; 2]>, threshold: f64) -> Verdict {
    let excludes_zero = ci.is_none_or(|[lo, hi]| lo > 0.0 || hi < 0.0);
    if excludes_zero && rel > threshold {
        Verdict::Regressed
    } else if excludes_zero && rel < -threshold {
        Verdict::Improved
    } else {
        Verdict::NoChange
    }
}

/// A figure with samples on both sides.
fn sampled(
    figure: String,
    unit: Unit,
    base: &[f64],
    new: &[f64],
    t: f64,
    p: &BootstrapParams,
) -> Option<Change> {
    let d = median_diff(base, new, p)?;
    let rel = relative(d.base_median, d.diff);
    let ci = (base.len() > 1 || new.len() > 1).then_some(d.ci);
    Some(Change {
        figure,
        unit,
        base: d.base_median,
        new: d.new_median,
        diff: d.diff,
        relative: rel,
        ci,
        n_base: base.len(),
        n_new: new.len(),
        verdict: verdict(rel, ci, t),
        tolerance: t,
        gates: true,
    })
}

/// A figure that is one number on each side.
fn single(figure: String, unit: Unit, base: f64, new: f64, t: f64) -> Change {
    let diff = new - base;
    let rel = relative(base, diff);
    Change {
        figure,
        unit,
        base,
        new,
        diff,
        relative: rel,
        ci: None,
        n_base: 1,
        n_new: 1,
        verdict: verdict(rel, None, t),
        tolerance: t,
        gates: true,
    }
}

/// Per-step heap figures of the measured (non-warm-up) steps.
fn steady(r: &Record, f: impl Fn(&crate::record::StepMemory) -> u64) -> Vec<f64> {
    r.memory
        .series
        .iter()
        .filter(|s| !s.warmup)
        .map(|s| f(s) as f64)
        .collect()
}

/// Two Records: every phase both timed, then memory.
pub fn records(base: &Record, new: &Record, threshold: f64, p: &BootstrapParams) -> Comparison {
    let mut changes = Vec::new();
    let mut unmatched = Vec::new();
    for (phase, bt) in &base.timing {
        match new.timing.get(phase) {
            Some(nt) => changes.extend(sampled(
                format!("step time: {phase}"),
                Unit::Ms,
                &bt.samples_ms,
                &nt.samples_ms,
                threshold,
                p,
            )),
            None => unmatched.push(format!("phase {phase}: only in base")),
        }
    }
    for phase in new.timing.keys().filter(|k| !base.timing.contains_key(*k)) {
        unmatched.push(format!("phase {phase}: only in new"));
    }
    if base.memory.counting && new.memory.counting {
        for (name, f) in [
            (
                "heap peak per step",
                (|s: &crate::record::StepMemory| s.heap_peak_bytes) as fn(&_) -> u64,
            ),
            ("heap live after each step", |s| s.heap_live_bytes),
        ] {
            let (b, n) = (steady(base, f), steady(new, f));
            if !b.is_empty() && !n.is_empty() {
                changes.extend(sampled(name.into(), Unit::Bytes, &b, &n, threshold, p));
            }
        }
        changes.push(single(
            "heap peak (whole run)".into(),
            Unit::Bytes,
            base.memory.heap_peak_bytes as f64,
            new.memory.heap_peak_bytes as f64,
            threshold,
        ));
        changes.push(single(
            "heap live retained by load".into(),
            Unit::Bytes,
            base.memory.load_bytes as f64,
            new.memory.load_bytes as f64,
            threshold,
        ));
    } else {
        let why = [base, new]
            .iter()
            .find(|r| !r.memory.counting)
            .map(|r| r.why_not_counted())
            .unwrap_or_default();
        unmatched.push(format!(
            "heap figures: one run has no counted heap figures ({why})"
        ));
    }
    if let (Some(b), Some(n)) = (base.memory.rss_peak_bytes, new.memory.rss_peak_bytes) {
        // One reading each: judged against its noise (3 × the runs' combined relative RSS
        // spread), never less than RSS_MIN_TOLERANCE or the threshold.
        let noise = match (rss_noise(base), rss_noise(new)) {
            (Some(x), Some(y)) => 3.0 * (x * x + y * y).sqrt(),
            _ => 0.0,
        };
        let tol = threshold.max(RSS_MIN_TOLERANCE).max(noise);
        changes.push(single(
            "RSS peak (VmHWM)".into(),
            Unit::Bytes,
            b as f64,
            n as f64,
            tol,
        ));
    }
    Comparison {
        threshold,
        bootstrap: *p,
        changes,
        unmatched,
        machines_differ: machines_differ(&base.environment, &new.environment),
        workloads_differ: workloads_differ(&base.spec, &new.spec),
    }
}

/// The ways two runs' environments differ that move timings: CPU model, vector instructions
/// (an AVX2-only and an AVX-512 CPU run different kernels), threads. A field a Record predates
/// (empty) is not compared.
fn machines_differ(b: &crate::record::Environment, n: &crate::record::Environment) -> Vec<String> {
    let mut out = Vec::new();
    for (what, bv, nv) in [
        ("CPU", &b.cpu_model, &n.cpu_model),
        ("vector instructions", &b.isa, &n.isa),
    ] {
        if !bv.is_empty() && !nv.is_empty() && bv != nv {
            out.push(format!("{what}: base {bv}, new {nv}"));
        }
    }
    if b.threads != n.threads && b.threads > 0 && n.threads > 0 {
        out.push(format!("threads: base {}, new {}", b.threads, n.threads));
    }
    out
}

/// Two sweeps, configurations matched by their label (model, mode, dtype, batch, seq, warm-up,
/// grad-accum; not threads or seed, so sweeps from two machines pair up): step time and heap peak of each pair.
pub fn sweeps(base: &[Row], new: &[Row], threshold: f64, p: &BootstrapParams) -> Comparison {
    let mut changes = Vec::new();
    let mut unmatched = Vec::new();
    for b in base {
        let key = label(&b.spec);
        let Some(n) = new.iter().find(|n| label(&n.spec) == key) else {
            unmatched.push(format!("{key}: only in base"));
            continue;
        };
        match (&b.summary, &n.summary, b.status, n.status) {
            (Some(bs), Some(ns), Status::Ok, Status::Ok) => {
                changes.extend(sampled(
                    format!("{key} step time"),
                    Unit::Ms,
                    &bs.step_samples_ms,
                    &ns.step_samples_ms,
                    threshold,
                    p,
                ));
                changes.push(single(
                    format!("{key} heap peak"),
                    Unit::Bytes,
                    bs.heap_peak_bytes as f64,
                    ns.heap_peak_bytes as f64,
                    threshold,
                ));
            }
            _ => unmatched.push(format!(
                "{key}: base {}, new {}",
                b.status.name(),
                n.status.name()
            )),
        }
    }
    for n in new
        .iter()
        .filter(|n| !base.iter().any(|b| label(&b.spec) == label(&n.spec)))
    {
        unmatched.push(format!("{}: only in new", label(&n.spec)));
    }
    Comparison {
        threshold,
        bootstrap: *p,
        changes,
        unmatched,
        machines_differ: Vec::new(),
        workloads_differ: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdict_needs_both_threshold_and_an_interval_off_zero() {
        assert_eq!(verdict(0.5, Some([1.0, 2.0]), 0.02), Verdict::Regressed);
        assert_eq!(verdict(0.5, Some([-1.0, 2.0]), 0.02), Verdict::NoChange);
        assert_eq!(verdict(0.01, Some([0.1, 0.2]), 0.02), Verdict::NoChange);
        assert_eq!(verdict(-0.3, Some([-2.0, -1.0]), 0.02), Verdict::Improved);
        assert_eq!(verdict(0.03, None, 0.02), Verdict::Regressed);
    }

    #[test]
    fn runs_on_different_vector_instructions_or_threads_are_flagged() {
        use crate::record::Environment;
        let env = |cpu: &str, isa: &str, threads| Environment {
            cpu_model: cpu.into(),
            isa: isa.into(),
            threads,
            ..Environment::default()
        };
        let epyc = "AMD EPYC 9R14";
        assert!(machines_differ(&env(epyc, "avx2", 2), &env(epyc, "avx2", 2)).is_empty());
        assert_eq!(
            machines_differ(&env(epyc, "avx2", 2), &env(epyc, "avx512", 4)),
            [
                "vector instructions: base avx2, new avx512",
                "threads: base 2, new 4"
            ]
        );
        // A Record written before `isa` was recorded leaves it out of the comparison.
        assert!(machines_differ(&env(epyc, "", 2), &env(epyc, "avx512", 2)).is_empty());
        assert_eq!(
            machines_differ(&env(epyc, "avx2", 2), &env("Intel Xeon", "avx2", 2)),
            ["CPU: base AMD EPYC 9R14, new Intel Xeon"]
        );
    }
}
