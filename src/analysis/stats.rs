//! Summary statistics for benchmark timing samples: pure functions, no I/O.
//!
//! Methods:
//! - Mean and sample standard deviation: the corrected two-pass algorithm (Chan, Golub & LeVeque,
//!   "Algorithms for computing the sample variance", The American Statistician 37(3), 1983):
//!   a compensated (Neumaier) sum gives the mean, then `ss = Σd² − (Σd)²/n` with `d = x − mean`.
//!   The standard deviation uses the n − 1 denominator. Values are first divided by a power of two
//!   near the largest magnitude (exact), so no intermediate overflows even near `f64::MAX`.
//! - Percentiles, the median and the MAD: [`crate::quantile`]'s type 7 (linear interpolation
//!   between order statistics, numpy's default); the MAD is raw, `median(|x − median(x)|)`, unscaled
//!   (multiply by 1.4826 for a normal-consistent σ).
//! - Outliers: the modified z-score `0.6745·|x − median| / MAD > 3.5` (Iglewicz & Hoaglin, "How to
//!   Detect and Handle Outliers", ASQC 1993). When MAD = 0 every `x ≠ median` is an outlier.
//!   Outliers are flagged by index, never dropped: every statistic includes them.
//!
//! Invariants:
//! - Inputs: finite values. [`summarize`] rejects NaN/±inf with the index of the first bad sample;
//!   the helpers ([`mean`], [`sample_std`], and `quantile`'s `median`, `mad`) return `None` for them.
//! - At least 1 sample for a [`Summary`]; the standard deviation needs 2 (`std` is `None` for n = 1).
//! - No NaN is ever produced for finite input. All-identical samples give exactly `mean = x`,
//!   `std = Some(0)`, `mad = 0`, no outliers; `cv_pct` is `None` when the mean is 0 (all zeros),
//!   else `Some(0)`.
//! - `min ≤ mean ≤ max` and `min ≤ median ≤ p90 ≤ p99 ≤ max`.
//! - Only a true spread beyond `f64::MAX` (e.g. samples at ±`f64::MAX`) can give an infinite `std`
//!   or `cv_pct`; timing data never gets there.
//! - Input order does not matter except for `outliers`, which are indices into the input.

use serde::{Deserialize, Serialize};

use crate::quantile::{mad_about, percentile, sorted_copy};

/// Iglewicz–Hoaglin constant: the 0.75 quantile of the standard normal (makes MAD comparable to σ).
pub const MODIFIED_Z_FACTOR: f64 = 0.6745;
/// A sample whose modified z-score exceeds this is an outlier (Iglewicz & Hoaglin 1993).
pub const OUTLIER_Z: f64 = 3.5;
/// Coefficient of variation (percent) above which [`noise_warnings`] calls the machine noisy.
pub const CV_WARN_PCT: f64 = 5.0;
/// A first measured step slower than this multiple of the median means warm-up was too short.
pub const FIRST_STEP_RATIO: f64 = 1.5;
/// At most this many outlier steps are listed by number in a warning.
const MAX_LISTED_OUTLIERS: usize = 10;

/// Summary statistics of one series of timing samples (see the module docs for the methods).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub n: usize,
    pub mean: f64,
    /// Sample standard deviation (n − 1 denominator); `None` when n < 2.
    pub std: Option<f64>,
    /// `100·std/|mean|`; `None` when `std` is `None` or the mean is 0.
    pub cv_pct: Option<f64>,
    pub median: f64,
    pub min: f64,
    pub max: f64,
    /// 90th percentile, Hyndman–Fan type 7 (numpy's default).
    pub p90: f64,
    /// 99th percentile, Hyndman–Fan type 7 (numpy's default).
    pub p99: f64,
    /// Raw median absolute deviation from the median (unscaled).
    pub mad: f64,
    /// Indices into the input of the samples with modified z-score > 3.5 (all `x ≠ median` when
    /// MAD = 0). Flagged, never dropped.
    pub outliers: Vec<usize>,
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum StatsError {
    #[error("not enough samples: need at least {need}, got {got}")]
    NotEnough { need: usize, got: usize },
    #[error("sample {index} is not a finite number ({value})")]
    NonFinite { index: usize, value: f64 },
}

/// Summarizes `xs` (any order). Needs at least 1 sample, all finite.
pub fn summarize(xs: &[f64]) -> Result<Summary, StatsError> {
    validate(xs, 1)?;
    let sorted = sorted_copy(xs);
    let (min, max) = (sorted[0], sorted[sorted.len() - 1]);
    let (mean, std) = moments(xs, min, max);
    let median = percentile(&sorted, 0.5);
    let mad = mad_about(xs, median);
    let cv_pct = match std {
        Some(s) if mean != 0.0 => Some(100.0 * (s / mean.abs())),
        _ => None,
    };
    Ok(Summary {
        n: xs.len(),
        mean,
        std,
        cv_pct,
        median,
        min,
        max,
        p90: percentile(&sorted, 0.9),
        p99: percentile(&sorted, 0.99),
        mad,
        outliers: outlier_indices(xs, median, mad),
    })
}

/// The arithmetic mean; `None` when `xs` is empty or holds a non-finite value.
pub fn mean(xs: &[f64]) -> Option<f64> {
    validate(xs, 1).ok()?;
    let (min, max) = min_max(xs);
    Some(moments(xs, min, max).0)
}

/// The sample standard deviation (n − 1 denominator); `None` for n < 2 or a non-finite value.
pub fn sample_std(xs: &[f64]) -> Option<f64> {
    validate(xs, 2).ok()?;
    let (min, max) = min_max(xs);
    moments(xs, min, max).1
}

/// Warnings a careful benchmarker wants to see, as plain sentences, each starting with `label`.
///
/// - fewer than 2 samples: only a "no spread can be given" sentence;
/// - CV above 5%: the machine was noisy;
/// - first measured step above 1.5× the median: warm-up was too short;
/// - outliers by MAD: how many and which steps (step numbers are the indices in `samples`, as in
///   [`Summary::outliers`]).
pub fn noise_warnings(samples: &[f64], s: &Summary, label: &str) -> Vec<String> {
    if s.n < 2 {
        let what = if s.n == 1 {
            "only 1 sample"
        } else {
            "no samples"
        };
        return vec![format!(
            "{label}: {what}: no spread can be given; use --steps 5 or more"
        )];
    }
    let mut warnings = Vec::new();
    if let Some(cv) = s.cv_pct {
        if cv > CV_WARN_PCT {
            warnings.push(format!(
                "{label}: CV {}% > {CV_WARN_PCT}%: the machine was noisy; use more --steps or fewer --threads",
                fmt_above(cv, CV_WARN_PCT)
            ));
        }
    }
    if let Some(&first) = samples.first() {
        // Durations are non-negative; a non-positive median gives no meaningful ratio.
        if s.median > 0.0 && first > FIRST_STEP_RATIO * s.median {
            warnings.push(format!(
                "{label}: the first measured step took {}x the median: add --warmup",
                fmt_above(first / s.median, FIRST_STEP_RATIO)
            ));
        } else if s.median == 0.0 && first > 0.0 {
            warnings.push(format!(
                "{label}: the first measured step took {first} while the median was 0: add --warmup"
            ));
        }
    }
    if !s.outliers.is_empty() {
        let mut steps: Vec<String> = s
            .outliers
            .iter()
            .take(MAX_LISTED_OUTLIERS)
            .map(|i| i.to_string())
            .collect();
        if s.outliers.len() > MAX_LISTED_OUTLIERS {
            steps.push(format!(
                "… and {} more",
                s.outliers.len() - MAX_LISTED_OUTLIERS
            ));
        }
        warnings.push(format!(
            "{label}: {} outlier(s) by MAD (kept in the statistics): steps {}",
            s.outliers.len(),
            steps.join(", ")
        ));
    }
    warnings
}

/// `NotEnough` below `need` samples, else `NonFinite` for the first NaN/±inf.
fn validate(xs: &[f64], need: usize) -> Result<(), StatsError> {
    if xs.len() < need {
        return Err(StatsError::NotEnough {
            need,
            got: xs.len(),
        });
    }
    match xs.iter().position(|x| !x.is_finite()) {
        Some(index) => Err(StatsError::NonFinite {
            index,
            value: xs[index],
        }),
        None => Ok(()),
    }
}

/// (min, max) of a non-empty finite slice.
fn min_max(xs: &[f64]) -> (f64, f64) {
    xs.iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &x| {
            (lo.min(x), hi.max(x))
        })
}

/// (mean, sample std) of a non-empty finite slice with known min and max: corrected two-pass
/// (Chan, Golub & LeVeque 1983) on values scaled by an exact power of two.
fn moments(xs: &[f64], min: f64, max: f64) -> (f64, Option<f64>) {
    let n = xs.len();
    let std_if_defined = |s: f64| (n >= 2).then_some(s);
    if min == max {
        // All identical (including all zeros): exact answers, no rounding.
        return (min, std_if_defined(0.0));
    }
    let scale = pow2_scale(min.abs().max(max.abs()));
    let nf = n as f64;
    // Pass 1: Neumaier-compensated sum of the scaled values (each in (-2, 2), so no overflow).
    let (mut sum, mut comp) = (0.0_f64, 0.0_f64);
    for &x in xs {
        let y = x / scale;
        let t = sum + y;
        comp += if sum.abs() >= y.abs() {
            (sum - t) + y
        } else {
            (y - t) + sum
        };
        sum = t;
    }
    let m = (sum + comp) / nf;
    // Pass 2: deviations; Σd corrects the rounding left in m.
    let (mut s1, mut s2) = (0.0_f64, 0.0_f64);
    for &x in xs {
        let d = x / scale - m;
        s1 += d;
        s2 += d * d;
    }
    let mean = ((m + s1 / nf) * scale).clamp(min, max);
    // Σd² ≥ (Σd)²/n mathematically; clamp the rounding so sqrt never sees a negative.
    let ss = (s2 - s1 * s1 / nf).max(0.0);
    let std = ((ss / (nf - 1.0)).sqrt()) * scale;
    (mean, std_if_defined(std))
}

/// The power of two with the same binary exponent as `a` (> 0, finite); 1 for subnormals. Dividing
/// by it is exact and brings every value of magnitude ≤ `a` into (-2, 2).
fn pow2_scale(a: f64) -> f64 {
    let exponent_bits = a.to_bits() & (0x7ff_u64 << 52);
    if exponent_bits == 0 {
        1.0
    } else {
        f64::from_bits(exponent_bits)
    }
}

/// Indices whose modified z-score `0.6745·|x − median| / MAD` exceeds 3.5; all `x ≠ median` when
/// MAD = 0.
fn outlier_indices(xs: &[f64], median: f64, mad: f64) -> Vec<usize> {
    xs.iter()
        .enumerate()
        .filter(|&(_, &x)| {
            if mad == 0.0 {
                x != median
            } else {
                MODIFIED_Z_FACTOR * (x - median).abs() / mad > OUTLIER_Z
            }
        })
        .map(|(i, _)| i)
        .collect()
}

/// `value` with one decimal (none from 100 up), more decimals if rounding would make it read as
/// not above `threshold` (5.04 → "5.04", not "5.0").
fn fmt_above(value: f64, threshold: f64) -> String {
    let mut prec = if value.abs() >= 100.0 { 0 } else { 1 };
    loop {
        let s = format!("{value:.prec$}");
        if prec >= 6 || s.parse::<f64>().map_or(true, |v| v > threshold) {
            return s;
        }
        prec += 1;
    }
}

#[cfg(test)]
#[path = "stats_tests.rs"]
mod tests;
