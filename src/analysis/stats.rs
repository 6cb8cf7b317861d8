//! Summary statistics for benchmark timing samples: pure functions, no I/O.
//!
//! Methods:
//! - Mean and sample standard deviation: the corrected two-pass algorithm (Chan, Golub & LeVeque,
//!   "Algorithms for computing the sample variance", The American Statistician 37(3), 1983):
//!   a compensated (Neumaier) sum gives the mean, then `ss = Σd² − (Σd)²/n` with `d = x − mean`.
//!   The standard deviation uses the n − 1 denominator. Values are first divided by a power of two
//!   near the largest magnitude (exact), so no intermediate overflows even near `f64::MAX`.
//! - Percentiles: linear interpolation between order statistics, Hyndman & Fan (1996) type 7, the
//!   default of numpy and R: `h = (n − 1)·q`, `x[⌊h⌋] + (h − ⌊h⌋)·(x[⌊h⌋+1] − x[⌊h⌋])`.
//!   The median is the type-7 50th percentile (the usual middle value / mean of the two middle values).
//! - MAD: the raw median absolute deviation from the median, `median(|x − median(x)|)`, unscaled
//!   (multiply by 1.4826 for a normal-consistent σ).
//! - Outliers: the modified z-score `0.6745·|x − median| / MAD > 3.5` (Iglewicz & Hoaglin, "How to
//!   Detect and Handle Outliers", ASQC 1993). When MAD = 0 every `x ≠ median` is an outlier.
//!   Outliers are flagged by index, never dropped: every statistic includes them.
//!
//! Invariants:
//! - Inputs: finite values. [`summarize`] rejects NaN/±inf with the index of the first bad sample;
//!   the helpers ([`mean`], [`median`], [`sample_std`], [`mad`]) return `None` for them.
//! - At least 1 sample for a [`Summary`]; the standard deviation needs 2 (`std` is `None` for n = 1).
//! - No NaN is ever produced for finite input. All-identical samples give exactly `mean = x`,
//!   `std = Some(0)`, `mad = 0`, no outliers; `cv_pct` is `None` when the mean is 0 (all zeros),
//!   else `Some(0)`.
//! - `min ≤ mean ≤ max` and `min ≤ median ≤ p90 ≤ p99 ≤ max`.
//! - Only a true spread beyond `f64::MAX` (e.g. samples at ±`f64::MAX`) can give an infinite `std`
//!   or `cv_pct`; timing data never gets there.
//! - Input order does not matter except for `outliers`, which are indices into the input.

use serde::{Deserialize, Serialize};

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

/// The `q`-quantile (`q` in [0, 1]) of an ascending, non-empty slice, by linear interpolation between
/// order statistics (Hyndman–Fan type 7, numpy's default). `q = 0` gives the minimum, `q = 1` the
/// maximum.
///
/// # Panics
/// If `sorted` is empty or `q` is outside [0, 1] (or NaN).
pub fn percentile(sorted: &[f64], q: f64) -> f64 {
    assert!(!sorted.is_empty(), "percentile of an empty sample");
    assert!(
        (0.0..=1.0).contains(&q),
        "percentile: q must lie in [0, 1], got {q}"
    );
    debug_assert!(
        sorted.windows(2).all(|w| w[0] <= w[1]),
        "percentile: input must be sorted ascending"
    );
    let h = (sorted.len() - 1) as f64 * q;
    let lo = h.floor() as usize;
    let frac = h - lo as f64;
    if frac == 0.0 || lo + 1 >= sorted.len() {
        return sorted[lo];
    }
    lerp(sorted[lo], sorted[lo + 1], frac)
}

/// The median (type-7 50th percentile); `None` when `xs` is empty or holds a non-finite value.
pub fn median(xs: &[f64]) -> Option<f64> {
    validate(xs, 1).ok()?;
    Some(percentile(&sorted_copy(xs), 0.5))
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

/// The raw (unscaled) median absolute deviation from the median; `None` when `xs` is empty or holds
/// a non-finite value.
pub fn mad(xs: &[f64]) -> Option<f64> {
    let m = median(xs)?;
    Some(mad_about(xs, m))
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

fn sorted_copy(xs: &[f64]) -> Vec<f64> {
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    v
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

/// `a + t·(b − a)` for `a ≤ b`, `t` in (0, 1), kept inside [a, b] and free of overflow.
fn lerp(a: f64, b: f64, t: f64) -> f64 {
    let d = b - a;
    let r = if d.is_finite() {
        a + d * t
    } else {
        a * (1.0 - t) + b * t
    };
    r.max(a).min(b)
}

/// Median of |x − m| over a non-empty finite slice.
fn mad_about(xs: &[f64], m: f64) -> f64 {
    let dev: Vec<f64> = xs.iter().map(|&x| (x - m).abs()).collect();
    percentile(&sorted_copy(&dev), 0.5)
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
mod tests {
    use super::*;

    /// Relative-or-absolute closeness for hand-computed values.
    fn close(got: f64, want: f64) -> bool {
        (got - want).abs() <= 1e-12 * want.abs().max(1.0)
    }

    macro_rules! assert_close {
        ($got:expr, $want:expr) => {{
            let (g, w): (f64, f64) = ($got, $want);
            assert!(close(g, w), "{} = {g}, want {w}", stringify!($got));
        }};
    }

    /// No field of the summary is NaN (RELIABILITY case 21).
    fn assert_no_nan(s: &Summary) {
        let fields = [
            s.mean,
            s.std.unwrap_or(0.0),
            s.cv_pct.unwrap_or(0.0),
            s.median,
            s.min,
            s.max,
            s.p90,
            s.p99,
            s.mad,
        ];
        assert!(fields.iter().all(|v| !v.is_nan()), "NaN in {s:?}");
    }

    /// The 10-sample set used below, unsorted; index 8 (30) is the outlier.
    /// sorted: 10 11 11 12 13 14 14 15 16 30
    const TEN: [f64; 10] = [12.0, 15.0, 11.0, 14.0, 10.0, 13.0, 16.0, 11.0, 30.0, 14.0];

    #[test]
    fn n0_is_not_enough_samples() {
        assert_eq!(
            summarize(&[]),
            Err(StatsError::NotEnough { need: 1, got: 0 })
        );
        assert_eq!(
            summarize(&[]).unwrap_err().to_string(),
            "not enough samples: need at least 1, got 0"
        );
        assert_eq!(mean(&[]), None);
        assert_eq!(median(&[]), None);
        assert_eq!(sample_std(&[]), None);
        assert_eq!(mad(&[]), None);
    }

    #[test]
    fn n1_has_no_spread() {
        let s = summarize(&[5.0]).unwrap();
        assert_eq!(
            s,
            Summary {
                n: 1,
                mean: 5.0,
                std: None,
                cv_pct: None,
                median: 5.0,
                min: 5.0,
                max: 5.0,
                p90: 5.0,
                p99: 5.0,
                mad: 0.0,
                outliers: vec![],
            }
        );
        assert_eq!(sample_std(&[5.0]), None);
    }

    #[test]
    fn n2_hand_computed() {
        // mean 2; deviations ±1 → var (1+1)/(2−1) = 2, std √2; cv 100·√2/2.
        // type 7: h = 0.9 → 1 + 0.9·2 = 2.8; h = 0.99 → 2.98. |x−2| = 1, 1 → MAD 1.
        let s = summarize(&[3.0, 1.0]).unwrap();
        assert_eq!(s.n, 2);
        assert_close!(s.mean, 2.0);
        assert_close!(s.std.unwrap(), std::f64::consts::SQRT_2);
        assert_close!(s.cv_pct.unwrap(), 50.0 * std::f64::consts::SQRT_2);
        assert_close!(s.median, 2.0);
        assert_eq!((s.min, s.max), (1.0, 3.0));
        assert_close!(s.p90, 2.8);
        assert_close!(s.p99, 2.98);
        assert_close!(s.mad, 1.0);
        assert!(s.outliers.is_empty());
    }

    #[test]
    fn identical_samples_are_exact_with_zero_spread() {
        // 0.1 is not exact in binary; a naive Σx/n would give 0.10000000000000002 and std ≈ 1e-17.
        let xs = [0.1; 7];
        let s = summarize(&xs).unwrap();
        assert_eq!(s.mean, 0.1);
        assert_eq!(s.std, Some(0.0));
        assert_eq!(s.cv_pct, Some(0.0));
        assert_eq!(
            (s.median, s.min, s.max, s.p90, s.p99),
            (0.1, 0.1, 0.1, 0.1, 0.1)
        );
        assert_eq!(s.mad, 0.0);
        assert!(s.outliers.is_empty());
        assert_eq!(sample_std(&xs), Some(0.0));
    }

    #[test]
    fn all_zeros_give_no_cv_and_no_nan() {
        for xs in [&[0.0, 0.0, 0.0, 0.0][..], &[0.0, -0.0, 0.0][..], &[0.0][..]] {
            let s = summarize(xs).unwrap();
            assert_no_nan(&s);
            assert_eq!(s.mean, 0.0);
            assert_eq!(s.std, (xs.len() >= 2).then_some(0.0));
            assert_eq!(s.cv_pct, None, "mean is 0 for {xs:?}");
            assert_eq!(s.mad, 0.0);
            assert!(s.outliers.is_empty());
        }
    }

    #[test]
    fn ten_samples_hand_computed() {
        // n = 10, Σ = 146 → mean 14.6.
        // deviations from 14.6: −4.6 −3.6 −3.6 −2.6 −1.6 −0.6 −0.6 0.4 1.4 15.4
        // squares sum: 21.16+12.96+12.96+6.76+2.56+0.36+0.36+0.16+1.96+237.16 = 296.4
        // var = 296.4/9 = 32.9333…, std = 5.738757124441958 (python statistics.stdev)
        // median = (13 + 14)/2 = 13.5
        // p90: h = 9·0.9 = 8.1 → 16 + 0.1·(30 − 16) = 17.4
        // p99: h = 9·0.99 = 8.91 → 16 + 0.91·14 = 28.74
        // |x − 13.5| sorted: 0.5 0.5 0.5 1.5 1.5 2.5 2.5 2.5 3.5 16.5 → MAD (1.5 + 2.5)/2 = 2
        // modified z of 30: 0.6745·16.5/2 = 5.565 > 3.5; next largest 0.6745·3.5/2 = 1.18
        let s = summarize(&TEN).unwrap();
        assert_eq!(s.n, 10);
        assert_close!(s.mean, 14.6);
        assert_close!(s.std.unwrap(), (296.4_f64 / 9.0).sqrt());
        assert_close!(s.std.unwrap(), 5.738757124441958);
        assert_close!(s.cv_pct.unwrap(), 100.0 * 5.738757124441958 / 14.6);
        assert_close!(s.median, 13.5);
        assert_eq!((s.min, s.max), (10.0, 30.0));
        assert_close!(s.p90, 17.4);
        assert_close!(s.p99, 28.74);
        assert_close!(s.mad, 2.0);
        assert_eq!(s.outliers, vec![8]);
        // The helpers agree with the summary.
        assert_close!(mean(&TEN).unwrap(), 14.6);
        assert_close!(median(&TEN).unwrap(), 13.5);
        assert_close!(sample_std(&TEN).unwrap(), 5.738757124441958);
        assert_close!(mad(&TEN).unwrap(), 2.0);
    }

    #[test]
    fn unsorted_input_gives_same_statistics_and_input_indices() {
        let mut sorted = TEN;
        sorted.sort_by(f64::total_cmp);
        let mut reversed = sorted;
        reversed.reverse();
        let a = summarize(&TEN).unwrap();
        for xs in [sorted, reversed] {
            let b = summarize(&xs).unwrap();
            assert_close!(b.mean, a.mean);
            assert_close!(b.std.unwrap(), a.std.unwrap());
            assert_eq!(
                (b.median, b.min, b.max, b.p90, b.p99, b.mad),
                (a.median, a.min, a.max, a.p90, a.p99, a.mad)
            );
            // The outlier index points at the 30 wherever it sits in the input.
            assert_eq!(b.outliers.len(), 1);
            assert_eq!(xs[b.outliers[0]], 30.0);
        }
        assert_eq!(summarize(&sorted).unwrap().outliers, vec![9]);
        assert_eq!(summarize(&reversed).unwrap().outliers, vec![0]);
    }

    #[test]
    fn outliers_use_modified_z_score_strictly_above_3_5() {
        // median 10; |x − 10| = 0 1 1 2 2 and the probe → MAD 1 (the probe is the largest).
        // z = 0.6745·d: d = 5.19 → 3.5007 (outlier), d = 5.18 → 3.4939 (not).
        let base = [10.0, 9.0, 11.0, 8.0, 12.0];
        let with = |probe: f64| {
            let mut v = base.to_vec();
            v.push(probe);
            v.push(10.0); // 7 samples; the median stays 10
            v
        };
        let hit = summarize(&with(15.19)).unwrap();
        assert_close!(hit.median, 10.0);
        assert_close!(hit.mad, 1.0);
        assert_eq!(hit.outliers, vec![5]);
        assert!(summarize(&with(15.18)).unwrap().outliers.is_empty());
        // Low outliers count too, and they are flagged, never dropped.
        let low = summarize(&with(4.0)).unwrap();
        assert_eq!(low.outliers, vec![5]);
        assert_eq!((low.n, low.min), (7, 4.0));
    }

    #[test]
    fn mad_zero_flags_every_sample_off_the_median() {
        // median 10; |x − 10| = 0 0 0 0 0 2 1 → MAD 0 → indices 5 and 6.
        let xs = [10.0, 10.0, 10.0, 10.0, 10.0, 12.0, 9.0];
        let s = summarize(&xs).unwrap();
        assert_eq!(s.median, 10.0);
        assert_eq!(s.mad, 0.0);
        assert_eq!(s.outliers, vec![5, 6]);
        assert_no_nan(&s);
        // mean 71/7; kept in the statistics.
        assert_close!(s.mean, 71.0 / 7.0);
    }

    #[test]
    fn non_finite_samples_are_rejected_with_their_index() {
        let err = summarize(&[1.0, 2.0, f64::NAN, f64::INFINITY]).unwrap_err();
        assert!(
            matches!(err, StatsError::NonFinite { index: 2, value } if value.is_nan()),
            "{err:?}"
        );
        assert_eq!(err.to_string(), "sample 2 is not a finite number (NaN)");
        assert_eq!(
            summarize(&[1.0, f64::NEG_INFINITY]),
            Err(StatsError::NonFinite {
                index: 1,
                value: f64::NEG_INFINITY
            })
        );
        assert_eq!(
            summarize(&[f64::INFINITY]).unwrap_err().to_string(),
            "sample 0 is not a finite number (inf)"
        );
        let bad = [1.0, f64::NAN, 3.0];
        assert_eq!(mean(&bad), None);
        assert_eq!(median(&bad), None);
        assert_eq!(sample_std(&bad), None);
        assert_eq!(mad(&bad), None);
    }

    #[test]
    fn variance_is_stable_under_a_large_offset() {
        // [4, 7, 13, 16] + 1e9: mean 1e9 + 10; deviations −6 −3 3 6 → var 90/3 = 30.
        // The naive Σx² − (Σx)²/n formula loses every digit here.
        let xs = [1e9 + 4.0, 1e9 + 7.0, 1e9 + 13.0, 1e9 + 16.0];
        let s = summarize(&xs).unwrap();
        assert_eq!(s.mean, 1e9 + 10.0);
        assert_close!(s.std.unwrap(), 30f64.sqrt());
        assert_close!(s.median, 1e9 + 10.0);
    }

    #[test]
    fn extreme_finite_values_never_give_nan() {
        let tiny = f64::from_bits(1); // smallest subnormal
        let cases: [&[f64]; 6] = [
            &[f64::MAX, f64::MAX, f64::MAX],
            &[f64::MAX, -f64::MAX],
            &[f64::MAX, -f64::MAX, f64::MAX],
            &[tiny, 0.0, tiny, 2.0 * tiny],
            &[f64::MIN_POSITIVE, 1e300, -1e300],
            &[1e-300, 2e-300, 3e-300],
        ];
        for xs in cases {
            let s = summarize(xs).unwrap();
            assert_no_nan(&s);
            assert!(s.min <= s.mean && s.mean <= s.max, "{s:?}");
            assert!(s.min <= s.median && s.median <= s.p90 && s.p90 <= s.p99 && s.p99 <= s.max);
        }
        let s = summarize(&[f64::MAX; 3]).unwrap();
        assert_eq!((s.mean, s.std), (f64::MAX, Some(0.0)));
        // Scaling is exact: tiny values keep their statistics (mean 2e-300, std 1e-300).
        let s = summarize(&[1e-300, 2e-300, 3e-300]).unwrap();
        assert!((s.mean - 2e-300).abs() <= 1e-312);
        assert!((s.std.unwrap() - 1e-300).abs() <= 1e-312);
        // ±MAX: the mean is 0 exactly, the median too; the true std exceeds f64::MAX.
        let s = summarize(&[f64::MAX, -f64::MAX]).unwrap();
        assert_eq!((s.mean, s.median, s.cv_pct), (0.0, 0.0, None));
    }

    #[test]
    fn percentile_is_type_7() {
        let x = [1.0, 2.0, 3.0, 4.0];
        // h = 3q: q = 0.25 → 1.75; 0.5 → 2.5; 0.9 → 3.7 (numpy.percentile defaults).
        assert_eq!(percentile(&x, 0.0), 1.0);
        assert_close!(percentile(&x, 0.25), 1.75);
        assert_close!(percentile(&x, 0.5), 2.5);
        assert_close!(percentile(&x, 0.9), 3.7);
        assert_eq!(percentile(&x, 1.0), 4.0);
        assert_eq!(percentile(&[7.0], 0.37), 7.0);
        // Exact order statistic when h is an integer: n = 5, q = 0.75 → h = 3 → x[3].
        assert_eq!(percentile(&[1.0, 2.0, 3.0, 4.0, 50.0], 0.75), 4.0);
        // Odd and even medians.
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
    }

    #[test]
    #[should_panic(expected = "empty")]
    fn percentile_of_nothing_panics() {
        percentile(&[], 0.5);
    }

    #[test]
    #[should_panic(expected = "q must lie in [0, 1]")]
    fn percentile_rejects_q_above_one() {
        percentile(&[1.0, 2.0], 1.5);
    }

    #[test]
    fn summary_round_trips_through_json() {
        let s = summarize(&TEN).unwrap();
        let json = serde_json::to_string(&s).unwrap();
        let back: Summary = serde_json::from_str(&json).unwrap();
        // serde_json parses floats to within 1 ulp unless its `float_roundtrip` feature is on.
        assert_eq!((back.n, &back.outliers), (s.n, &s.outliers));
        assert_close!(back.p99, s.p99);
        assert_close!(back.std.unwrap(), s.std.unwrap());
        let one = summarize(&[2.0]).unwrap();
        let json = serde_json::to_string(&one).unwrap();
        assert!(json.contains("\"std\":null") && json.contains("\"cv_pct\":null"));
    }

    #[test]
    fn warnings_for_one_sample_say_only_that() {
        let s = summarize(&[9.0]).unwrap();
        assert_eq!(
            noise_warnings(&[9.0], &s, "step"),
            vec!["step: only 1 sample: no spread can be given; use --steps 5 or more"]
        );
    }

    #[test]
    fn quiet_samples_give_no_warnings() {
        // mean 100; deviations 0 1 −1 0 1 −1 → var 4/5 → CV 0.89%; MAD 1, no outliers.
        let xs = [100.0, 101.0, 99.0, 100.0, 101.0, 99.0];
        let s = summarize(&xs).unwrap();
        assert_close!(s.cv_pct.unwrap(), 100.0 * (4.0_f64 / 5.0).sqrt() / 100.0);
        assert!(noise_warnings(&xs, &s, "step").is_empty());
        let zeros = [0.0; 4];
        assert!(noise_warnings(&zeros, &summarize(&zeros).unwrap(), "x").is_empty());
    }

    #[test]
    fn warnings_for_noise_first_step_and_outliers() {
        // TEN: CV 39.3%; first step 12 ≤ 1.5·13.5; outlier at index 8.
        let s = summarize(&TEN).unwrap();
        assert_eq!(
            noise_warnings(&TEN, &s, "train step"),
            vec![
                "train step: CV 39.3% > 5%: the machine was noisy; use more --steps or fewer --threads",
                "train step: 1 outlier(s) by MAD (kept in the statistics): steps 8",
            ]
        );
        // Slow first step: median 10, first 21 → 2.1x; also an outlier (MAD 0.5 → z = 0.6745·11/0.5 = 14.8).
        // mean 11.1, deviations 9.9 −1.1 −1.1 −0.6 −1.6 −1.1 −0.6 −0.6 −1.6 −1.6
        let xs = [21.0, 10.0, 10.0, 10.5, 9.5, 10.0, 10.5, 10.5, 9.5, 9.5];
        let s = summarize(&xs).unwrap();
        assert_close!(s.median, 10.0);
        assert_close!(s.mad, 0.5);
        let w = noise_warnings(&xs, &s, "fwd");
        assert_eq!(w.len(), 3, "{w:?}");
        assert!(
            w[0].starts_with("fwd: CV ")
                && w[0].ends_with(
                    "% > 5%: the machine was noisy; use more --steps or fewer --threads"
                )
        );
        assert_eq!(
            w[1],
            "fwd: the first measured step took 2.1x the median: add --warmup"
        );
        assert_eq!(
            w[2],
            "fwd: 1 outlier(s) by MAD (kept in the statistics): steps 0"
        );
    }

    #[test]
    fn warning_numbers_never_read_as_at_the_threshold() {
        // A CV of 5.04% would print as "5.0% > 5%" with one decimal.
        let mut s = summarize(&[1.0, 2.0]).unwrap();
        s.cv_pct = Some(5.04);
        s.outliers.clear();
        let w = noise_warnings(&[1.5, 1.5], &s, "a");
        assert_eq!(
            w,
            vec!["a: CV 5.04% > 5%: the machine was noisy; use more --steps or fewer --threads"]
        );
        s.cv_pct = Some(250.4);
        assert!(noise_warnings(&[1.5], &s, "a")[0].starts_with("a: CV 250% > 5%"));
        // First step 1.52x the median prints as 1.52x, not 1.5x.
        let xs = [15.2, 10.0, 10.0, 10.0];
        let s = summarize(&xs).unwrap();
        let w = noise_warnings(&xs, &s, "b");
        assert!(
            w.contains(
                &"b: the first measured step took 1.52x the median: add --warmup".to_string()
            ),
            "{w:?}"
        );
    }

    #[test]
    fn warnings_list_many_outliers_briefly() {
        // MAD 0 with 12 samples off the median: 10 listed, then a count.
        let mut xs = vec![1.0; 13];
        xs.extend([2.0; 12]);
        let s = summarize(&xs).unwrap();
        assert_eq!(s.outliers.len(), 12);
        let w = noise_warnings(&xs, &s, "c");
        let last = w.last().unwrap();
        assert_eq!(
            last,
            "c: 12 outlier(s) by MAD (kept in the statistics): steps 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, … and 2 more"
        );
    }
}
