//! The verdict's rules: from the tail's trend, its halves and the margins to PLATEAU, LEAK,
//! DECELERATING or INCONCLUSIVE (the method is in `docs/analyze.md`, "How the verdict is decided").
//!
//! - The horizon H (`params.horizon_steps`, 1,000 steps) and the plateau margin δ give the rate
//!   that matters, r* = δ / H: growth that would add more than δ within H steps.
//! - PLATEAU ("no leak") when the tail shows no significant growth (the slope's interval starts
//!   at or below 0), the interval's upper end is at or below r*, and the tail's second half does
//!   not itself rise significantly by more than δ. Or, when growth decelerates: a saturating
//!   approach fitted to the series ([`crate::analysis::approach`]) whose level's interval ends
//!   within δ of where the series already is (growth still to come ≤ δ in total), with the
//!   residuals of the tail around the fit free of significant growth.
//! - LEAK when the interval excludes 0, the growth over the tail exceeds `leak_noise_k` robust σ
//!   of the noise, both halves rise significantly and the second half's slope is at least
//!   `decel_ratio` × the first's; DECELERATING the same with a smaller second-half slope. A
//!   steady growth is a leak whatever its size: the rate is stated.
//! - INCONCLUSIVE otherwise, with the rate memory could still be growing at.
//!
//! Pure: no I/O; never panics on finite input.

use crate::analysis::approach::{self, Approach};
use crate::analysis::trend::{theil_sen, Trend};
use crate::record::leak::Verdict;

/// What the rules read.
pub(crate) struct Inputs<'a> {
    pub full: Trend,
    pub first: Option<Trend>,
    pub second: Option<Trend>,
    /// The tail's points (x = steps after the first sample) and the whole floor series.
    pub tx: &'a [f64],
    pub ty: &'a [f64],
    pub xs: &'a [f64],
    pub ys: &'a [f64],
    /// Index into `xs` where the tail starts, and the MSER cut.
    pub start: usize,
    pub cut: usize,
    /// Plateau margin δ, leak margin (noise), rate that matters r*, horizon H.
    pub dp: f64,
    pub dl: f64,
    pub rate_matters: f64,
    pub horizon: f64,
    pub confidence: f64,
    pub decel_ratio: f64,
    pub noise_k: f64,
}

/// The decision and what it rests on.
pub(crate) struct Decision {
    pub verdict: Verdict,
    /// PLATEAU decided by the approach fit.
    pub settling: Option<Approach>,
    /// The approach fit tried (reported even when it did not decide).
    pub approach: Option<Approach>,
    /// The tail falls by more than the plateau margin.
    pub falling: bool,
    /// Why INCONCLUSIVE, when it is.
    pub reason: Option<String>,
}

pub(crate) fn decide(i: &Inputs) -> Decision {
    let full = i.full;
    let n = i.tx.len();
    let span = i.tx[n - 1] - i.tx[0];
    let h = n / 2;
    let pos = |t: Option<Trend>| t.is_some_and(|t| t.ci[0] > 0.0);
    let grows = full.ci[0] > 0.0;
    let rising = grows && full.slope * span > i.dl;
    let halves_rise = pos(i.first) && pos(i.second);
    let (s1, s2) = (
        i.first.map_or(0.0, |t| t.slope),
        i.second.map_or(0.0, |t| t.slope),
    );
    let excluded = full.ci[1] <= i.rate_matters;
    let second_span = i.tx[n - 1] - i.tx[h];
    let late_rise = i
        .second
        .is_some_and(|t| t.ci[0] > 0.0 && t.slope * second_span > i.dp);
    let falling = full.ci[1] <= 0.0 && full.ci[0] * span < -i.dp;
    let mut d = Decision {
        verdict: Verdict::Inconclusive,
        settling: None,
        approach: None,
        falling,
        reason: None,
    };
    if !grows && excluded && !late_rise {
        d.verdict = Verdict::Plateau;
        return d;
    }
    // Growth that decelerates towards a level: fit the approach on the whole series, then from
    // where the growth starts (the last point before the series first rises δ above the lowest
    // point so far: a flat stretch before the warm-up is not part of the approach), then from the
    // MSER cut.
    let mut low = f64::INFINITY;
    let rise = i.ys.iter().position(|&y| {
        low = low.min(y);
        y > low + i.dp
    });
    let rise_start = rise.map_or(0, |k| k.saturating_sub(1));
    for from in [0, rise_start, i.cut] {
        if from > 0
            && (from >= i.start || i.xs.len() - from < 8 || from == rise_start && from == i.cut)
        {
            continue;
        }
        let Some(a) = approach::fit(&i.xs[from..], &i.ys[from..], i.confidence) else {
            continue;
        };
        if d.approach.is_none() {
            d.approach = Some(a);
        }
        if !late_rise && settles(&a, i) {
            d.verdict = Verdict::Plateau;
            d.approach = Some(a);
            d.settling = Some(a);
            return d;
        }
    }
    if rising && halves_rise {
        d.verdict = if s2 >= i.decel_ratio * s1 {
            Verdict::Leak
        } else {
            Verdict::Decelerating
        };
        return d;
    }
    d.reason = Some(reason(i, grows, rising, late_rise, span));
    d
}

/// The approach is a warm-up that rose by more than δ, and it bounds the growth still to come by
/// δ: the level's interval ends within δ of the fitted value now, and the tail's residuals around
/// the fit do not grow by a rate that matters (a growth the approach does not explain, such as a
/// leak on top of the warm-up, rejects it).
fn settles(a: &Approach, i: &Inputs) -> bool {
    let hi = a.level_ci[1];
    // A warm-up: the fit rises by more than δ within the data (a flat series is not judged here).
    if !hi.is_finite() || a.at_end - a.at(a.x0) < i.dp {
        return false;
    }
    let rest = (hi - a.at_end).max(0.0);
    if rest > i.dp {
        return false;
    }
    let resid: Vec<f64> = i.tx.iter().zip(i.ty).map(|(&x, &y)| y - a.at(x)).collect();
    let Some(t) = theil_sen(i.tx, &resid, i.confidence) else {
        return false;
    };
    // No growth beyond the approach, or none that matters: the residuals' interval ends below the
    // rate that matters (in a noise-free series the fit's own shape error is "significant").
    t.ci[0] <= 0.0 || t.ci[1] <= i.rate_matters
}

fn reason(i: &Inputs, grows: bool, rising: bool, late_rise: bool, span: f64) -> String {
    let b = crate::units::fmt_bytes;
    let full = i.full;
    if rising {
        "memory rose after the warm-up, but not steadily: the two halves of the tail do not both rise significantly".into()
    } else if late_rise {
        "memory rose at the end of the run after a flat or falling stretch".into()
    } else if grows {
        format!(
            "memory grew by {} over the {:.0} steps after warm-up, significantly but not beyond the noise of the tail ({}, {} robust σ)",
            b(full.slope * span),
            span,
            b(i.dl),
            i.noise_k
        )
    } else {
        format!(
            "the slope's confidence interval ({} to {} per step) does not rule out growth of {}/step, which adds the plateau margin ({}) within {:.0} steps",
            b(full.ci[0]),
            b(full.ci[1]),
            b(i.rate_matters),
            b(i.dp),
            i.horizon
        )
    }
}
