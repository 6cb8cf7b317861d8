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

/// Runs the search; `None` when SIGINT/SIGTERM stopped it.
pub fn search(a: &FitRequest) -> anyhow::Result<Option<FitResult>> {
    let (base, cap, limit, timeout) = (&a.base, a.cap, a.limit, a.timeout);
    let with = |x: usize| {
        let mut s = base.clone();
        match a.vary {
            Vary::Batch => s.batch = x,
            Vary::Seq => {
                s.seq = x;
                s.prompt_len = x;
            }
        }
        s
    };
    let enforcement = Enforcement::detect(Some(limit));
    let scratch = Scratch::new()?;
    let opts = RunOptions {
        memory_limit: Some(limit),
        enforcement: enforcement.clone(),
        timeout,
        scratch: scratch.0.clone(),
        trace_dir: None,
    };
    install_interrupt_handler();
    let vary_name = a.vary.name();
    if !a.quiet {
        eprintln!(
            "memscope fit: largest {vary_name} for {} {} {}; {}",
            base.model,
            base.mode.name(),
            base.dtype.name(),
            enforcement.describe(Some(limit))
        );
    }
    let live = WorkerProgress::default();
    let mut trials: Vec<Row> = Vec::new();
    let trial = |x: usize, trials: &mut Vec<Row>| -> anyhow::Result<Option<bool>> {
        let spec = with(x);
        let Some(row) = run_worker(&spec, trials.len(), &opts, &INTERRUPTED, &live, || {})? else {
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
        trials.push(row);
        Ok(Some(fits))
    };
    // Size 1 first: it measures what the worker holds beyond its heap (code, libraries, the
    // allocator's retention: the limit applies to all of it). Then start where the estimate puts
    // the heap peak at the limit minus that, gallop away from it until the outcome flips,
    // bisect between the last size that fits and the first that does not, and confirm the
    // answer with a second run.
    let (mut lo, mut hi): (Option<usize>, Option<usize>) = (None, None);
    let Some(fits1) = trial(1, &mut trials)? else {
        return Ok(None);
    };
    let beyond_heap = trials
        .last()
        .and_then(|r| r.summary.as_ref())
        .and_then(|s| Some(s.rss_peak_bytes?.saturating_sub(s.heap_peak_bytes)))
        .unwrap_or(0);
    let start = fits1
        .then(|| estimated_start(&with, cap, limit.saturating_sub(beyond_heap)))
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
        let Some(f) = trial(x0, &mut trials)? else {
            return Ok(None);
        };
        f
    };
    let mut step = 1usize;
    if fits {
        lo = Some(x0);
        let mut l = x0;
        while l < cap {
            let x = l.saturating_add(step).min(cap);
            let Some(fits) = trial(x, &mut trials)? else {
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
            let Some(fits) = trial(x, &mut trials)? else {
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
    if let (Some(mut l), Some(mut h)) = (lo, hi) {
        while h - l > 1 {
            let mid = l + (h - l) / 2;
            let Some(fits) = trial(mid, &mut trials)? else {
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
            let Some(fits) = trial(l, &mut trials)? else {
                return Ok(None);
            };
            if fits {
                break;
            }
            h = l;
            l -= 1;
            if l == 0 {
                break;
            }
        }
        lo = (l > 0).then_some(l);
        hi = Some(h);
    }
    let best = lo.and_then(|l| {
        trials
            .iter()
            .find(|r| r.status == Status::Ok && size_of(&r.spec, a.vary) == l)
    });
    let summary = best.and_then(|r| r.summary.clone());
    let rss = summary.as_ref().and_then(|s| s.rss_peak_bytes);
    let result = FitResult {
        vary: vary_name,
        max_batch: (a.vary == Vary::Batch).then_some(lo.unwrap_or(0)),
        max_seq: (a.vary == Vary::Seq).then_some(lo.unwrap_or(0)),
        first_oom: hi,
        memory_limit_bytes: limit,
        enforcement: enforcement.describe(Some(limit)),
        heap_peak_bytes: summary.as_ref().map(|s| s.heap_peak_bytes),
        rss_peak_bytes: rss,
        headroom_bytes: rss.map(|r| limit as i64 - r as i64),
        estimated_start: start,
        trials,
    };
    Ok(Some(result))
}

/// The largest size up to `cap` whose estimated heap peak is within `limit` (1 when even size
/// 1 is over), by bisection on the estimate; `None` when the model cannot be estimated.
fn estimated_start(with: &dyn Fn(usize) -> Spec, cap: usize, limit: u64) -> Option<usize> {
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

fn size_of(s: &Spec, vary: Vary) -> usize {
    match vary {
        Vary::Batch => s.batch,
        Vary::Seq => s.seq,
    }
}
