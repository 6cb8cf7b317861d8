//! Bootstrap confidence interval of the difference of medians (new − base), percentile method
//! (Efron & Tibshirani 1993, ch. 13): each resample draws `base.len()` values from `base` and
//! `new.len()` from `new` with replacement and takes the difference of their medians; the CI is
//! the (α/2, 1 − α/2) percentiles of those differences.
//!
//! Seeded and deterministic: the generator is SplitMix64 (written here so that a rand upgrade
//! never changes a reported interval). Invariants: both samples non-empty and finite, at least
//! 1 resample, confidence in (0, 1).

use crate::analysis::stats::{median, percentile};
use serde::{Deserialize, Serialize};

/// The resampling settings, reported with every interval.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct BootstrapParams {
    pub resamples: usize,
    pub seed: u64,
    pub confidence: f64,
}

impl Default for BootstrapParams {
    fn default() -> Self {
        BootstrapParams {
            resamples: 10_000,
            seed: 0,
            confidence: 0.95,
        }
    }
}

/// The point difference of medians and its interval.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct MedianDiff {
    pub base_median: f64,
    pub new_median: f64,
    /// new median − base median.
    pub diff: f64,
    /// Bootstrap percentile interval of `diff`.
    pub ci: [f64; 2],
}

/// SplitMix64 (Steele, Lea & Flood 2014): 64 bits of state, passes BigCrush.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in 0..n (Lemire's multiply-shift; the bias is below 2^-32 for these n).
    fn below(&mut self, n: usize) -> usize {
        ((self.next() >> 32) * n as u64 >> 32) as usize
    }
}

fn resampled_median(xs: &[f64], rng: &mut SplitMix64, buf: &mut Vec<f64>) -> f64 {
    buf.clear();
    buf.extend((0..xs.len()).map(|_| xs[rng.below(xs.len())]));
    buf.sort_by(f64::total_cmp);
    percentile(buf, 0.5)
}

/// `None` when either sample is empty or holds a non-finite value.
pub fn median_diff(base: &[f64], new: &[f64], p: &BootstrapParams) -> Option<MedianDiff> {
    if base.is_empty() || new.is_empty() || !base.iter().chain(new).all(|x| x.is_finite()) {
        return None;
    }
    let (bm, nm) = (median(base)?, median(new)?);
    let mut rng = SplitMix64(p.seed);
    let (mut b, mut n) = (
        Vec::with_capacity(base.len()),
        Vec::with_capacity(new.len()),
    );
    let mut diffs: Vec<f64> = (0..p.resamples.max(1))
        .map(|_| resampled_median(new, &mut rng, &mut n) - resampled_median(base, &mut rng, &mut b))
        .collect();
    diffs.sort_by(f64::total_cmp);
    let a = (1.0 - p.confidence) / 2.0;
    Some(MedianDiff {
        base_median: bm,
        new_median: nm,
        diff: nm - bm,
        ci: [percentile(&diffs, a), percentile(&diffs, 1.0 - a)],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identical_samples_give_zero_and_an_interval_around_it() {
        let xs = [10.0, 11.0, 9.5, 10.2, 10.8, 9.9];
        let d = median_diff(&xs, &xs, &BootstrapParams::default()).unwrap();
        assert_eq!(d.diff, 0.0);
        assert!(d.ci[0] <= 0.0 && d.ci[1] >= 0.0, "{d:?}");
    }

    #[test]
    fn a_shift_is_found_and_seeded() {
        let base: Vec<f64> = (0..20).map(|i| 10.0 + (i % 5) as f64 * 0.1).collect();
        let new: Vec<f64> = base.iter().map(|x| x * 1.5).collect();
        let p = BootstrapParams::default();
        let d = median_diff(&base, &new, &p).unwrap();
        assert!((d.diff - 5.1).abs() < 1e-9, "{d:?}");
        assert!(d.ci[0] > 4.0 && d.ci[1] < 6.0, "{d:?}");
        assert_eq!(d, median_diff(&base, &new, &p).unwrap());
    }

    #[test]
    fn empty_or_nan_has_no_interval() {
        let p = BootstrapParams::default();
        assert!(median_diff(&[], &[1.0], &p).is_none());
        assert!(median_diff(&[f64::NAN], &[1.0], &p).is_none());
    }
}
