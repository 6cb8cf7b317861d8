//! The leak verdict: does memory keep growing across identical steps, or is an allocator warming up?
//!
//! Method (`docs/analyze.md`, "How the verdict is decided"; deviations from the published methods are
//! marked "Refinement"):
//! 1. Aggregate to the post-GC floor ([`crate::analysis::aggregate`]): rolling minimum, w = max(5, P),
//!    stride 5; series shorter than `short_series` are used as they are. Refinement: so are series
//!    with symmetric noise and no period, where the minimum only discards data.
//! 2. Warm-up: MSER cut over the first half ([`crate::analysis::warmup::mser_cut`]) for estimation;
//!    the warm-up end reported is the break of a two-segment fit "growth, then level", checked
//!    ([`crate::analysis::warmup::check_break`]). Refinements: the break is moved forward to where the
//!    data enter the level's band (a curved warm-up crosses its fitted level before it flattens); the
//!    trend starts there when it lies after the MSER cut (growth before it is warm-up, not leak), or
//!    before the cut with no growth in between (MSER lands late on a slowly falling plateau).
//! 3. Trend on the tail: Theil–Sen slope per STEP (x = step numbers, so irregular sampling is fine),
//!    Sen's CI at `confidence`, Kendall-S variance inflated by Hamed–Rao, never deflated
//!    ([`crate::analysis::trend`]). Each half of the tail gets its own trend at `halves_confidence`.
//! 4. Margins over the tail span L (steps): δ_plateau = max(plateau_min_bytes, plateau_rel × |median|);
//!    δ_leak = leak_noise_k × MAD-σ of the detrended tail (the noise alone); the rate that matters
//!    r* = δ_plateau / horizon_steps (1,000 steps).
//! 5. Verdicts ([`crate::analysis::leak_rules`]): PLATEAU only when the slope's interval excludes
//!    every rate ≥ r* and any significant growth, or when a fitted saturating approach
//!    ([`crate::analysis::approach`]) bounds the growth still to come by δ_plateau; LEAK /
//!    DECELERATING when the tail rises significantly beyond the noise, in both halves (a steady
//!    growth is a leak whatever its size); INCONCLUSIVE otherwise, with the rate memory could
//!    still be growing at, the smallest detectable rate and the steps needed.
//!
//! Invariants: `analyze` never panics and never puts NaN or ∞ in a report (unknown numbers are `None`);
//! n = 0, 1, 2, constant series, unsorted steps and non-finite values give INCONCLUSIVE or a verdict with
//! a sentence saying why. Pure: no I/O.

use crate::analysis::aggregate::{floor_samples, ls_slope, Floor, SKEW_FLOOR};
use crate::analysis::leak_text::{self, Context};
use crate::analysis::trend::{theil_sen, Trend};
use crate::analysis::warmup::{check_break, hinge_fit, mser_cut, settle, Hinge};
use crate::quantile::{mad_sigma, median_without_copy, midpoint_median};

use crate::analysis::leak_rules::{decide, Decision, Inputs};
use crate::record::leak::ApproachFit;
use crate::record::leak::{LeakParams, LeakReport, MemorySeries, Verdict};

/// The verdict for one series. Never panics; never NaN (see the module invariants).
pub fn analyze(series: &MemorySeries, params: &LeakParams) -> LeakReport {
    let (p, param_notes) = params.sanitized();
    let mut r = LeakReport::empty(&series.label, p);
    r.notes.extend(param_notes);
    let mut ctx = Context {
        reason: None,
        falling: false,
        settling: false,
    };
    let n = match usable_samples(series, &mut r) {
        Ok(n) => n,
        Err(why) => {
            ctx.reason = Some(why);
            return finish(r, &ctx);
        }
    };
    let steps = &series.steps[..n];
    let values = &series.values[..n];
    let seconds = valid_seconds(series.seconds.as_deref(), n, &mut r.notes);

    // 1. Aggregate to the floor.
    let floor = floor_samples(steps, values, r.params.short_series);
    r.window = floor.window;
    r.stride = floor.stride;
    r.notes.extend(floor_note(&floor));
    // x = steps after the first (exact in f64 even for steps near 2^64).
    let x0 = steps[0];
    let step_at = |k: usize| steps[floor.idx[k]];
    let xs: Vec<f64> = floor.idx.iter().map(|&i| (steps[i] - x0) as f64).collect();
    let ys: Vec<f64> = floor.idx.iter().map(|&i| values[i]).collect();
    let m = xs.len();

    // 2. Warm-up: MSER cut, then the checked break.
    let cut = mser_cut(&ys);
    r.mser_cut_step = Some(steps[floor.idx[cut]]);
    let med_after_cut = midpoint_median(&ys[cut..]).unwrap_or(0.0);
    let dp = r
        .params
        .plateau_min_bytes
        .max(r.params.plateau_rel * med_after_cut.abs());
    r.margin_plateau_bytes = Some(dp);
    let start = warmup_end(&mut r, &xs, &ys, cut, dp, &step_at);
    r.tail_start_step = Some(step_at(start));
    let post_from = r.warmup_end_step.unwrap_or(step_at(start));
    post_warmup_range(&mut r, steps, values, post_from);

    let thinned = thin_tail(&xs[start..], &ys[start..]);
    if let Some((_, _, block)) = &thinned {
        r.notes.push(format!(
            "the trend is measured on the minimum of each block of {block} points ({} points after the warm-up; at most {TAIL_POINTS} are kept so that the trend stays fast)",
            m - start
        ));
    }
    let (tx, ty): (&[f64], &[f64]) = match &thinned {
        Some((x, y, _)) => (x, y),
        None => (&xs[start..], &ys[start..]),
    };
    r.tail_len = tx.len();
    if tx.len() < r.params.min_tail_points {
        ctx.reason = Some(format!(
            "only {} point{} after the warm-up cut at step {} (at least {} needed): the warm-up may not have finished",
            tx.len(),
            if tx.len() == 1 { "" } else { "s" },
            step_at(start),
            r.params.min_tail_points
        ));
        let missing = 2 * (r.params.min_tail_points - tx.len());
        r.more_steps_needed = Some(steps_for_points_xs(&xs, missing));
        return finish(r, &ctx);
    }

    // 3. Trend on the tail and on each half.
    let full = theil_sen(tx, ty, r.params.confidence);
    let h = tx.len() / 2;
    let first = theil_sen(&tx[..h], &ty[..h], r.params.halves_confidence);
    let second = theil_sen(&tx[h..], &ty[h..], r.params.halves_confidence);
    let Some(full) = full else {
        ctx.reason = Some(format!(
            "no slope could be computed from the {} points of steps {}–{} (are the values finite and the steps distinct?)",
            tx.len(),
            step_at(start),
            steps[n - 1]
        ));
        return finish(r, &ctx);
    };
    r.slope_bytes_per_step = Some(full.slope);
    r.slope_ci_bytes_per_step = Some(full.ci);
    r.variance_inflation = Some(full.inflation);
    r.slope_first_half = first.map(|t| t.slope);
    r.slope_second_half = second.map(|t| t.slope);
    r.slope_ci_first_half = first.map(|t| t.ci);
    r.slope_ci_second_half = second.map(|t| t.ci);

    // 4. Margins: δ_leak is the noise alone (growth beyond it is a leak whatever its size); the
    // rate that matters is the plateau margin over the horizon.
    let span = tx[tx.len() - 1] - tx[0];
    let resid: Vec<f64> = tx.iter().zip(ty).map(|(x, y)| y - full.slope * x).collect();
    let noise = mad_sigma(&resid).unwrap_or(0.0);
    let dl = r.params.leak_noise_k * noise;
    r.margin_leak_bytes = Some(dl);
    let rate_matters = dp / r.params.horizon_steps;
    r.rate_that_matters_bytes_per_step = Some(rate_matters);

    // 5. Verdict (the rules: `leak_rules.rs`).
    let d = decide(&Inputs {
        full,
        first,
        second,
        tx,
        ty,
        xs: &xs,
        ys: &ys,
        start,
        cut,
        dp,
        dl,
        rate_matters,
        horizon: r.params.horizon_steps,
        confidence: r.params.confidence,
        decel_ratio: r.params.decel_ratio,
        noise_k: r.params.leak_noise_k,
    });
    r.verdict = d.verdict;
    settle_by_approach(&mut r, &d, dp, &xs, steps, values, &step_at);
    ctx.falling = d.falling;
    ctx.reason = d.reason;
    ctx.settling = d.settling.is_some();

    // 6. Derived numbers.
    let halves = [first, second];
    detection(&mut r, &full, halves, span, dl, rate_matters);
    let i0 = floor.idx[start];
    growth(&mut r, &full, tx[tx.len() - 1], seconds, steps, values, i0);
    finish(r, &ctx)
}

/// The samples a verdict can use: the first `n` of both steps and values, checked, with the first
/// figures of the report filled in → `n`, or why no trend can be measured.
fn usable_samples(series: &MemorySeries, r: &mut LeakReport) -> Result<usize, String> {
    let n = series.steps.len().min(series.values.len());
    r.n_samples = n;
    if series.steps.len() != series.values.len() {
        r.notes.push(format!(
            "{} steps but {} values: the extra entries were ignored",
            series.steps.len(),
            series.values.len()
        ));
    }
    validate(&series.steps[..n], &series.values[..n])?;
    if n == 0 {
        return Err("there are no samples".into());
    }
    r.first_step = Some(series.steps[0]);
    r.last_step = Some(series.steps[n - 1]);
    r.current_bytes = Some(series.values[n - 1]);
    r.unit = series.unit;
    r.relative = series.relative || series.values[..n].iter().any(|v| *v < 0.0);
    if r.relative {
        r.notes.push("the values are memory relative to a baseline (deltas or cumulative changes): judged the same way as absolute memory; levels and ranges are changes, not totals".into());
    }
    if n < 3 {
        r.more_steps_needed = Some(steps_for_points(
            &series.steps[..n],
            2 * r.params.min_tail_points - n,
        ));
        return Err(format!(
            "only {n} sample{}; a trend needs at least 3",
            if n == 1 { "" } else { "s" }
        ));
    }
    Ok(n)
}

/// The note that says what the trend is measured on (the rolling minimum, and why; or every sample).
fn floor_note(floor: &Floor) -> Option<String> {
    if floor.window > 1 {
        Some(format!(
            "trend measured on the rolling minimum (window {} samples, stride {}; {})",
            floor.window,
            floor.stride,
            match (floor.period, floor.skewness) {
                (Some(p), _) => format!("a period of {p} samples was found"),
                (None, Some(s)) if s.abs() >= SKEW_FLOOR =>
                    format!("the noise is one-sided, skewness {s:.2}"),
                _ => "long series".to_string(),
            }
        ))
    } else if floor.skewness.is_some() {
        Some("trend measured on every sample (no period, symmetric noise)".into())
    } else {
        None
    }
}

/// Step 2 after the MSER `cut`: the checked break, where the warm-up settles and what it grew →
/// where the trend starts (the cut, or the warm-up's end when growth ends after the cut or the
/// series falls to it).
fn warmup_end(
    r: &mut LeakReport,
    xs: &[f64],
    ys: &[f64],
    cut: usize,
    dp: f64,
    step_at: &dyn Fn(usize) -> u64,
) -> usize {
    let m = xs.len();
    let mut start = cut;
    match find_warmup(xs, ys, dp) {
        Ok((h, p)) => {
            {
                let lo = if cut < p { cut.max(h.idx) } else { h.idx };
                let settled = &ys[lo..p];
                let band = dp.max(3.0 * mad_sigma(settled).unwrap_or(0.0));
                let end = settle(
                    &ys[..p],
                    h.idx,
                    midpoint_median(settled).unwrap_or(h.level),
                    band,
                );
                r.warmup_end_step = Some(step_at(end));
                let before = ys[..=end].iter().cloned().fold(f64::INFINITY, f64::min);
                r.warmup_growth_bytes =
                    midpoint_median(&ys[end..p]).map(|after| (after - before).max(0.0));
                // MSER lands late on a slowly falling plateau (it treats the fall as more warm-up):
                // when nothing grows between the break and the cut, the trend starts at the break.
                let falls_to_cut = end < cut && ls_slope(&xs[end..=cut], &ys[end..=cut]) <= 0.0;
                if (end > cut || falls_to_cut) && m - end >= r.params.min_tail_points {
                    start = end;
                    r.notes.push(format!(
                        "the trend starts where growth ends (step {}), not at the MSER cut (step {})",
                        step_at(end),
                        step_at(cut)
                    ));
                }
            }
        }
        Err(why) => r.notes.push(format!("no warm-up end reported: {why}")),
    }
    start
}

/// Step 5's saturating fit, when there is one: its level, and where it settles; a warm-up still
/// settling with no break found ends there.
fn settle_by_approach(
    r: &mut LeakReport,
    d: &Decision,
    dp: f64,
    xs: &[f64],
    steps: &[u64],
    values: &[f64],
    step_at: &dyn Fn(usize) -> u64,
) {
    let (m, n) = (xs.len(), steps.len());
    r.approach = d.approach.map(|a| {
        let settled = a.within(dp);
        let k = xs.partition_point(|&x| x < settled).min(m - 1);
        ApproachFit {
            level_bytes: a.level,
            level_ci_bytes: [Some(a.level_ci[0]), Some(a.level_ci[1])],
            time_constant_steps: a.tau,
            fitted_now_bytes: a.at_end,
            settled_step: (settled <= xs[m - 1]).then(|| step_at(k)),
        }
    });
    if let (Some(a), Some(fit), None) = (d.settling, &r.approach, r.warmup_end_step) {
        // A warm-up still settling, with no break found: it ends where the fit comes within δ of
        // its level.
        if let Some(w) = fit.settled_step {
            let k = steps.partition_point(|&s| s < w);
            let before = values[..=k.min(n - 1)]
                .iter()
                .cloned()
                .fold(f64::INFINITY, f64::min);
            r.warmup_end_step = Some(w);
            r.warmup_growth_bytes = Some((a.level - before).max(0.0));
            post_warmup_range(r, steps, values, w);
        }
    }
}

/// Step 6's smallest detectable leak (the widest of the intervals' half-widths and δ_leak over
/// the span), and for an inconclusive verdict the steps still needed.
fn detection(
    r: &mut LeakReport,
    full: &Trend,
    [first, second]: [Option<Trend>; 2],
    span: f64,
    dl: f64,
    rate_matters: f64,
) {
    let hw = |t: Option<Trend>| t.map_or(f64::INFINITY, |t| (t.ci[1] - t.ci[0]) / 2.0);
    let hw_full = (full.ci[1] - full.ci[0]) / 2.0;
    let hw_halves = hw(first).max(hw(second));
    let min_det = hw_full
        .max(hw_halves)
        .max(if span > 0.0 { dl / span } else { f64::INFINITY });
    r.min_detectable_bytes_per_step = min_det.is_finite().then_some(min_det);
    if r.verdict == Verdict::Inconclusive {
        r.more_steps_needed = more_steps(full, hw_full, hw_halves, span, rate_matters, dl);
    }
}

/// Step 6's growth: the extrapolation from the trend's level at `last_x`, steps per hour (given,
/// or from the timestamps since sample `i0`), growth per hour and the time to the budget.
fn growth(
    r: &mut LeakReport,
    full: &Trend,
    last_x: f64,
    seconds: Option<&[f64]>,
    steps: &[u64],
    values: &[f64],
    i0: usize,
) {
    let n = steps.len();
    let level_last = full.intercept + full.slope * last_x;
    let grow = full.slope.max(0.0);
    r.extrapolation = [100u64, 1000, 10000]
        .iter()
        .map(|&k| (k, level_last + grow * k as f64))
        .collect();
    r.steps_per_hour = r.params.steps_per_hour.or_else(|| {
        let s = seconds?;
        let i1 = n - 1;
        let dt = s[i1] - s[i0];
        (dt > 0.0).then(|| (steps[i1] - steps[i0]) as f64 / dt * 3600.0)
    });
    r.growth_bytes_per_hour = r.steps_per_hour.map(|sph| full.slope * sph);
    if let Some(budget) = r.params.budget_bytes {
        let current = level_last.max(values[n - 1]);
        if current >= budget {
            r.steps_to_budget = Some(0.0);
            r.notes
                .push("memory is already at or above the budget".into());
        } else if full.slope > 0.0 && r.verdict != Verdict::Plateau {
            r.steps_to_budget = Some((budget - current) / full.slope);
        } else if r.verdict == Verdict::Plateau {
            r.notes.push(
                "memory does not grow after the warm-up (plateau): the budget is not reached"
                    .into(),
            );
        } else {
            r.notes.push(
                "memory does not grow at the measured slope: the budget is never reached".into(),
            );
        }
        r.hours_to_budget = r
            .steps_to_budget
            .zip(r.steps_per_hour)
            .map(|(s, sph)| s / sph);
    }
}

/// Median, min and max of the raw samples from step `from` on.
fn post_warmup_range(r: &mut LeakReport, steps: &[u64], values: &[f64], from: u64) {
    let post = &values[steps.partition_point(|&s| s < from)..];
    r.plateau_min_bytes = post.iter().cloned().reduce(f64::min);
    r.plateau_max_bytes = post.iter().cloned().reduce(f64::max);
    r.plateau_median_bytes = median_without_copy(post);
}

/// Largest magnitude analysed: 2^80 bytes (1 YiB). Beyond it differences of two values overflow
/// nothing yet, but no memory is that large: the unit is wrong.
pub const MAX_ABS_BYTES: f64 = 1_208_925_819_614_629_174_706_176.0;

fn validate(steps: &[u64], values: &[f64]) -> Result<(), String> {
    if let Some(i) = values.iter().position(|v| !v.is_finite()) {
        return Err(format!(
            "the value at step {} is not a finite number",
            steps[i]
        ));
    }
    if let Some(i) = values.iter().position(|v| v.abs() > MAX_ABS_BYTES) {
        return Err(format!(
            "the value at step {} is {:e} bytes, more than any memory (2^80 bytes = 1 YiB): check the unit (--unit)",
            steps[i], values[i]
        ));
    }
    if let Some(i) = steps.windows(2).position(|w| w[1] <= w[0]) {
        return Err(format!(
            "steps must increase, but step {} is followed by step {}",
            steps[i],
            steps[i + 1]
        ));
    }
    Ok(())
}

fn valid_seconds<'a>(s: Option<&'a [f64]>, n: usize, notes: &mut Vec<String>) -> Option<&'a [f64]> {
    let s = s?;
    let ok = s.len() >= n
        && s[..n].iter().all(|v| v.is_finite())
        && s[..n].windows(2).all(|w| w[1] >= w[0]);
    if !ok {
        notes.push("timestamps ignored: not one finite, non-decreasing time per sample".into());
    }
    ok.then_some(&s[..n])
}

/// Steps until a verdict is likely, assuming the CI half-widths shrink like L^(-3/2) (slope precision
/// for a growing span at a fixed sampling rate). A tail that rises significantly needs the leak gates
/// to pass at the measured slope; otherwise, if memory is in fact flat, the CI's upper end must fall
/// to the rate that matters r*: hw·f^(-3/2) ≤ r*, f = (hw/r*)^(2/3).
fn more_steps(full: &Trend, hw: f64, hw_halves: f64, span: f64, rate: f64, dl: f64) -> Option<u64> {
    if span.is_nan() || span <= 0.0 {
        return None;
    }
    let f = if full.ci[0] > 0.0 {
        let b = full.slope;
        let mut f: f64 = 1.0;
        loop {
            f *= 1.02;
            if f > 1000.0 {
                return None;
            }
            let shrink = f.powf(-1.5);
            if b - hw * shrink > 0.0 && b - hw_halves * shrink > 0.0 && b * span * f > dl {
                break f;
            }
        }
    } else {
        if rate <= 0.0 {
            return None;
        }
        (hw / rate).powf(2.0 / 3.0).max(1.0)
    };
    let more = ((f - 1.0) * span).ceil();
    (more.is_finite() && more >= 1.0 && more < 1e15).then_some(more as u64)
}

/// Points kept for the trend when a tail is longer than [`crate::analysis::aggregate::MAX_POINTS`]
/// (Theil–Sen holds every pairwise slope: 1,000 points are 0.5 million slopes, 4 MB).
pub const TAIL_POINTS: usize = 1000;

/// A tail longer than `MAX_POINTS` thinned to at most [`TAIL_POINTS`] points: the minimum of each
/// block of consecutive points (the floor, as in aggregation), with its own x. `None`: keep it all.
fn thin_tail(x: &[f64], y: &[f64]) -> Option<(Vec<f64>, Vec<f64>, usize)> {
    let n = x.len().min(y.len());
    if n <= crate::analysis::aggregate::MAX_POINTS {
        return None;
    }
    let block = n.div_ceil(TAIL_POINTS);
    let (mut tx, mut ty) = (Vec::new(), Vec::new());
    for start in (0..n).step_by(block) {
        let end = (start + block).min(n);
        let k = (start..end)
            .min_by(|&a, &b| y[a].total_cmp(&y[b]))
            .unwrap_or(start);
        tx.push(x[k]);
        ty.push(y[k]);
    }
    Some((tx, ty, block))
}

/// The warm-up break, found on a prefix that doubles from [`WARMUP_PREFIX`] points until the break
/// passes its checks in the first half of the prefix (or the prefix is everything): the answer
/// depends on the start of the series, not on how long it ran. Returns the break and the prefix.
fn find_warmup(xs: &[f64], ys: &[f64], dp: f64) -> Result<(Hinge, usize), String> {
    let m = xs.len().min(ys.len());
    let mut p = m.min(WARMUP_PREFIX);
    loop {
        let res = match hinge_fit(&xs[..p], &ys[..p]) {
            Some(h) => check_break(&h, xs[0], dp).map(|()| h),
            None => Err("too few points for a two-segment fit".to_string()),
        };
        match res {
            Ok(h) if p == m || h.idx <= p / 2 => return Ok((h, p)),
            Err(e) if p == m => return Err(e),
            _ => p = (p * 2).min(m),
        }
    }
}

/// Points of the first prefix searched for the warm-up (see [`find_warmup`]).
pub const WARMUP_PREFIX: usize = 1024;

/// Steps covered by `points` more samples at the series' mean spacing.
fn steps_for_points(steps: &[u64], points: usize) -> u64 {
    let n = steps.len();
    let spacing = if n >= 2 {
        (steps[n - 1] - steps[0]) as f64 / (n - 1) as f64
    } else {
        1.0
    };
    (spacing.max(1.0) * points as f64).ceil() as u64
}

/// Steps covered by `points` more trend points at the points' mean spacing.
fn steps_for_points_xs(xs: &[f64], points: usize) -> u64 {
    let n = xs.len();
    let per_point = if n >= 2 {
        (xs[n - 1] - xs[0]) / (n - 1) as f64
    } else {
        1.0
    };
    (per_point.max(1.0) * points as f64).ceil() as u64
}

/// Phrases the sentence after removing any non-finite number (defensive: the report never holds NaN).
fn finish(mut r: LeakReport, ctx: &Context) -> LeakReport {
    r.drop_non_finite();
    // Without a trend there is no time to the budget, but memory may already be past it.
    if let (Some(budget), None, Some(now)) =
        (r.params.budget_bytes, r.steps_to_budget, r.current_bytes)
    {
        if now >= budget && !r.notes.iter().any(|n| n.contains("above the budget")) {
            r.steps_to_budget = Some(0.0);
            r.notes
                .push("memory is already at or above the budget".into());
        }
    }
    r.sentence = leak_text::sentence(&r, ctx);
    r
}

/// RSS vs heap cross-check: "allocator retention, not a leak" when RSS grows but heap live is flat;
/// when both grow, which grows faster. `None` when there is nothing to add.
pub fn cross_check(heap: &LeakReport, rss: &LeakReport) -> Option<String> {
    leak_text::cross_check(heap, rss)
}

#[cfg(test)]
#[path = "leak_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "leak_calibration_tests.rs"]
mod calibration;
