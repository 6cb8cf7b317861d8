//! The `fit` search: the largest batch (or sequence length) whose worker stays within a memory
//! budget. Size 1 first, then from the estimator's guess gallop until the outcome flips, bisect,
//! and confirm the answer with a second run. Each trial is a real worker under the budget.

use crate::record::sweep_row::{Row, Status};
use crate::spec::Spec;
use crate::sweep::interrupt::{install_interrupt_handler, INTERRUPTED};
use crate::sweep::limits::Enforcement;
use crate::sweep::scratch::Scratch;
use crate::sweep::spawn::{run_worker, RunOptions, WorkerProgress};
use crate::units::bytes as fmt_bytes;
use anyhow::bail;
use clap::ValueEnum;
use std::time::Duration;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Vary {
    Batch,
    Seq,
}

impl Vary {
    pub fn name(self) -> &'static str {
        match self {
            Vary::Batch => "batch",
            Vary::Seq => "seq",
        }
    }
}

/// What to search: `base` with its batch (or seq) varied from 1 up to `cap`.
pub struct FitRequest {
    pub base: Spec,
    pub vary: Vary,
    pub cap: usize,
    pub limit: u64,
    pub timeout: Option<Duration>,
    /// No per-trial lines on stderr.
    pub quiet: bool,
}

/// The outcome of `memscope fit`.
#[derive(Debug, serde::Serialize)]
pub struct FitResult {
    pub vary: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_batch: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_seq: Option<usize>,
    /// The smallest size that did not fit (none when the search hit --max).
    pub first_oom: Option<usize>,
    pub memory_limit_bytes: u64,
    pub enforcement: String,
    /// heap peak and worker VmHWM at the largest size that fits.
    pub heap_peak_bytes: Option<u64>,
    pub rss_peak_bytes: Option<u64>,
    /// --memory-limit − the worker's VmHWM at that size.
    pub headroom_bytes: Option<i64>,
    /// Where the search started: the largest size whose estimated heap peak is within the
    /// limit (`memscope estimate`); none when the model could not be estimated.
    pub estimated_start: Option<usize>,
    pub trials: Vec<Row>,
}

/// How a search ended: its answer, or stopped by SIGINT/SIGTERM with the trials it had run.
pub enum Searched {
    Done(FitResult),
    Interrupted(Vec<Row>),
}

/// Runs the search.
///
/// Size 1 first: it measures what the worker holds beyond its heap (code, libraries, the
/// allocator's retention: the limit applies to all of it). Then start where the estimate puts the
/// heap peak at the limit minus that, gallop away from it until the outcome flips, bisect between
/// the last size that fits and the first that does not, and confirm the answer with a second run.
pub fn search(a: &FitRequest) -> anyhow::Result<Searched> {
    let (base, limit) = (&a.base, a.limit);
    let enforcement = Enforcement::detect(Some(limit));
    let scratch = Scratch::new()?;
    let mut t = Trials {
        a,
        opts: RunOptions {
            memory_limit: Some(limit),
            enforcement: enforcement.clone(),
            timeout: a.timeout,
            scratch: scratch.0.clone(),
            trace_dir: None,
        },
        live: WorkerProgress::default(),
        rows: Vec::new(),
    };
    install_interrupt_handler();
    let vary_name = a.vary.name();
    if !a.quiet {
        eprintln!(
            "memscope fit: largest {vary_name} for {} {} {}; {}",
            base.model,
            base.mode.name(),
            base.dtype.name(),
            crate::sweep::limits::describe_for(&[base], &enforcement, Some(limit))
        );
    }
    match run_search(a, &mut t, &enforcement)? {
        Some(r) => Ok(Searched::Done(r)),
        None => Ok(Searched::Interrupted(std::mem::take(&mut t.rows))),
    }
}

/// The search over `t`'s trials; `None` when SIGINT/SIGTERM stopped it (its trials so far in
/// `t.rows`).
fn run_search(
    a: &FitRequest,
    t: &mut Trials,
    enforcement: &Enforcement,
) -> anyhow::Result<Option<FitResult>> {
    let (base, cap, limit) = (&a.base, a.cap, a.limit);
    let vary_name = a.vary.name();
    // A CPU job's ranks are each held to the limit: the worker's own VmHWM says nothing of them.
    let ranks = base.cpu_job().is_some();
    let Some(fits1) = t.run(1)? else {
        return Ok(None);
    };
    let beyond_heap = t
        .rows
        .last()
        .and_then(|r| r.summary.as_ref())
        .and_then(|s| Some(s.rss_peak_bytes?.saturating_sub(s.heap_peak_bytes)))
        .filter(|_| !ranks)
        .unwrap_or(0);
    let start = fits1
        .then(|| estimated_start(&|x| spec_at(a, x), cap, limit.saturating_sub(beyond_heap)))
        .flatten();
    if !a.quiet && fits1 {
        match start {
            Some(x) => eprintln!(
                "  the estimate puts the heap peak at the limit minus the {} measured beyond the heap near {vary_name} {x}: continuing there",
                fmt_bytes(beyond_heap as f64)
            ),
            None => eprintln!("  no estimate for this model: doubling from {vary_name} 1"),
        }
    }
    let x0 = start.unwrap_or(1).clamp(1, cap);
    let fits = if x0 == 1 {
        fits1
    } else {
        let Some(f) = t.run(x0)? else {
            return Ok(None);
        };
        f
    };
    let Some((mut lo, mut hi)) = gallop(t, x0, fits)? else {
        return Ok(None);
    };
    if let (Some(l), Some(h)) = (lo, hi) {
        let Some((l, h)) = bisect_and_confirm(t, l, h)? else {
            return Ok(None);
        };
        lo = (l > 0).then_some(l);
        hi = Some(h);
    }
    let best = lo.and_then(|l| {
        t.rows
            .iter()
            .find(|r| r.status == Status::Ok && size_of(&r.spec, a.vary) == l)
    });
    let summary = best.and_then(|r| r.summary.clone());
    let rss = summary
        .as_ref()
        .and_then(|s| s.rss_peak_bytes)
        .filter(|_| !ranks);
    let result = FitResult {
        vary: vary_name,
        max_batch: (a.vary == Vary::Batch).then_some(lo.unwrap_or(0)),
        max_seq: (a.vary == Vary::Seq).then_some(lo.unwrap_or(0)),
        first_oom: hi,
        memory_limit_bytes: limit,
        enforcement: crate::sweep::limits::describe_for(&[base], enforcement, Some(limit)),
        heap_peak_bytes: summary.as_ref().map(|s| s.heap_peak_bytes),
        rss_peak_bytes: rss,
        headroom_bytes: rss.map(|r| limit as i64 - r as i64),
        estimated_start: start,
        trials: std::mem::take(&mut t.rows),
    };
    Ok(Some(result))
}

/// `base` with its batch (or seq and prompt) set to `x`.
fn spec_at(a: &FitRequest, x: usize) -> Spec {
    let mut s = a.base.clone();
    match a.vary {
        Vary::Batch => s.batch = x,
        Vary::Seq => {
            s.seq = x;
            s.prompt_len = x;
        }
    }
    s
}

/// The search's trials: each a real worker under the budget, its row kept in order.
struct Trials<'a> {
    a: &'a FitRequest,
    opts: RunOptions,
    live: WorkerProgress,
    rows: Vec<Row>,
}

impl Trials<'_> {
    /// Runs size `x` → whether it fits; `None` when interrupted. An end other than ok or
    /// out-of-memory stops the search with an error.
    fn run(&mut self, x: usize) -> anyhow::Result<Option<bool>> {
        let (a, vary_name) = (self.a, self.a.vary.name());
        let spec = spec_at(a, x);
        let Some(row) = run_worker(
            &spec,
            self.rows.len(),
            &self.opts,
            &INTERRUPTED,
            &self.live,
            || {},
        )?
        else {
            return Ok(None);
        };
        if !a.quiet {
            eprintln!(
                "  {vary_name} {x}: {}{}",
                row.status.name(),
                row.reason
                    .as_ref()
                    .map_or(String::new(), |r| format!(" — {r}"))
            );
        }
        let fits = match row.status {
            Status::Ok => true,
            Status::Oom => false,
            other => bail!(
                "{vary_name} {x}: the trial ended {} ({}); fix that first (--timeout raises the time limit)",
                other.name(),
                row.reason.clone().unwrap_or_default()
            ),
        };
        self.rows.push(row);
        Ok(Some(fits))
    }
}

/// From `x0` (which `fits` or not), doubling steps away from it until the outcome flips →
/// (the largest size seen to fit, the smallest seen not to); `None` when interrupted.
fn gallop(
    t: &mut Trials,
    x0: usize,
    fits: bool,
) -> anyhow::Result<Option<(Option<usize>, Option<usize>)>> {
    let cap = t.a.cap;
    let (mut lo, mut hi): (Option<usize>, Option<usize>) = (None, None);
    let mut step = 1usize;
    if fits {
        lo = Some(x0);
        let mut l = x0;
        while l < cap {
            let x = l.saturating_add(step).min(cap);
            let Some(fits) = t.run(x)? else {
                return Ok(None);
            };
            if !fits {
                hi = Some(x);
                break;
            }
            l = x;
            lo = Some(x);
            step = step.saturating_mul(2);
        }
    } else {
        hi = Some(x0);
        let mut h = x0;
        while h > 1 {
            let x = h.saturating_sub(step).max(1);
            if x == 1 {
                lo = Some(1); // measured first
                break;
            }
            let Some(fits) = t.run(x)? else {
                return Ok(None);
            };
            if fits {
                lo = Some(x);
                break;
            }
            h = x;
            hi = Some(x);
            step = step.saturating_mul(2);
        }
    }
    Ok(Some((lo, hi)))
}

/// Bisects between `l` (fits) and `h` (does not), then confirms the answer with a second run,
/// stepping down until one confirms → (the answer, 0 when none confirmed; the first size that did
/// not fit); `None` when interrupted.
fn bisect_and_confirm(
    t: &mut Trials,
    mut l: usize,
    mut h: usize,
) -> anyhow::Result<Option<(usize, usize)>> {
    while h - l > 1 {
        let mid = l + (h - l) / 2;
        let Some(fits) = t.run(mid)? else {
            return Ok(None);
        };
        if fits {
            l = mid;
        } else {
            h = mid;
        }
    }
    // Near the limit an outcome can vary by a size (allocator and thread timing): confirm the
    // answer with a second run, stepping down until one confirms.
    loop {
        let vary = t.a.vary;
        let seen_ok = t
            .rows
            .iter()
            .any(|r| r.status == Status::Ok && size_of(&r.spec, vary) == l);
        let Some(fits) = t.run(l)? else {
            return Ok(None);
        };
        if fits {
            break;
        }
        if seen_ok && !t.a.quiet {
            eprintln!(
                "  {} {l} fitted once and not on its second run: too near the limit to count on; the answer is below it",
                t.a.vary.name()
            );
        }
        h = l;
        l -= 1;
        if l == 0 {
            break;
        }
    }
    Ok(Some((l, h)))
}

/// The largest size up to `cap` whose estimated heap peak is within `limit` (1 when even size
/// 1 is over), by bisection on the estimate; `None` when the model cannot be estimated.
fn estimated_start(with: &dyn Fn(usize) -> Spec, cap: usize, limit: u64) -> Option<usize> {
    if let crate::spec::EngineRef::Torch(_) = with(1).engine() {
        return torch_start(with, cap, limit);
    }
    let peak = |x: usize| -> Option<u64> {
        let req = crate::estimate::Request::for_spec(&with(x));
        crate::estimate::estimate(&req).ok().map(|e| e.peak_bytes)
    };
    if peak(1)? > limit {
        return Some(1);
    }
    // A size too large to estimate (its tensors overflow) is over any limit.
    let within = |x: usize| peak(x).is_some_and(|p| p <= limit);
    let (mut l, mut h) = (1usize, cap);
    if within(h) {
        return Some(h);
    }
    while h - l > 1 {
        let mid = l + (h - l) / 2;
        if within(mid) {
            l = mid;
        } else {
            h = mid;
        }
    }
    Some(l)
}

/// The torch engine's start: its own estimate (the trace of transformers' model, not memscope's
/// engine's, which put tiny-gpt2's start at batch 48 for an answer of 14). A trace takes seconds,
/// so not a bisection: sizes 1 and 2 traced, the line through them (a step's peak grows about
/// linearly with the batch, and with the sequence under SDPA) read at the limit, and that size
/// traced and scaled down while it is over. On CUDA the limit holds the reserved bytes.
fn torch_start(with: &dyn Fn(usize) -> Spec, cap: usize, limit: u64) -> Option<usize> {
    let peak = |x: usize| -> Option<u64> {
        let e = crate::torch::estimate::estimate(&with(x)).ok()?;
        Some(e.reserved_peak_bytes.unwrap_or(e.peak_bytes))
    };
    let p1 = peak(1)?;
    if p1 > limit || cap == 1 {
        return Some(1);
    }
    let per = peak(2)?.saturating_sub(p1).max(1);
    let mut x = (1 + (limit - p1) / per).min(cap as u64) as usize;
    for _ in 0..4 {
        match peak(x) {
            Some(p) if p > limit && x > 1 => {
                let scaled = (x as u128 * limit as u128 / p as u128) as usize;
                x = scaled.clamp(1, x - 1);
            }
            _ => break,
        }
    }
    Some(x)
}

fn size_of(s: &Spec, vary: Vary) -> usize {
    match vary {
        Vary::Batch => s.batch,
        Vary::Seq => s.seq,
    }
}
