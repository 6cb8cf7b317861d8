//! Robust trend of a series: Theil–Sen slope, Sen's confidence interval, Mann–Kendall S with the
//! Hamed–Rao variance correction for autocorrelation.
//!
//! Methods:
//! - Theil (1950), Sen (1968) "Estimates of the regression coefficient based on Kendall's tau", JASA 63:
//!   the slope is the median of the pairwise slopes (y_j − y_i)/(x_j − x_i), i < j.
//! - Sen's CI (as in Gilbert 1987, "Statistical Methods for Environmental Pollution Monitoring", §16.5):
//!   C = z_{(1+conf)/2} · √Var(S); the bounds are the ordered pairwise slopes of rank (N − C)/2 and
//!   (N + C)/2 + 1 (linearly interpolated, clamped to the smallest and largest slope).
//! - Var(S) with ties in y: [n(n−1)(2n+5) − Σ t(t−1)(2t+5)] / 18 (Kendall 1975).
//! - Hamed & Rao (1998) "A modified Mann–Kendall trend test for autocorrelated data", J. Hydrology 204:
//!   Var*(S) = Var(S) · n/n*, n/n* = 1 + 2/(n(n−1)(n−2)) Σ_{k=1}^{n−1} (n−k)(n−k−1)(n−k−2) ρ_s(k), where
//!   ρ_s(k) is the lag-k autocorrelation of the ranks of the Theil–Sen-detrended series, summed over the
//!   lags significant at 5% (|ρ| > 1.96/√n). Here the factor is never below 1 (never deflated).
//! - Normal quantile: Wichura (1988) algorithm AS 241 (PPND16), relative accuracy about 1e-16.
//!
//! Invariants: x strictly increasing and finite, y finite; at least 3 points, else `None`. Results are
//! finite. Cost O(n²) time and memory in the number of points (callers keep n to a few thousand).
//! Medians are [`crate::quantile`]'s midpoint medians.

use crate::quantile::{midpoint_median_sorted, order_statistic};

/// A trend estimate with its confidence interval.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Trend {
    /// Theil–Sen slope (y units per x unit).
    pub slope: f64,
    /// Sen's confidence interval for the slope at the requested confidence.
    pub ci: [f64; 2],
    /// Intercept: median of y − slope·x.
    pub intercept: f64,
    /// Mann–Kendall S.
    pub s: f64,
    /// Var(S) after the Hamed–Rao inflation.
    pub var_s: f64,
    /// The Hamed–Rao inflation factor applied (≥ 1).
    pub inflation: f64,
    /// Number of points.
    pub n: usize,
}

/// Theil–Sen slope with Sen's CI at `confidence` (e.g. 0.99), Kendall's variance inflated by Hamed–Rao.
pub fn theil_sen(x: &[f64], y: &[f64], confidence: f64) -> Option<Trend> {
    let n = x.len().min(y.len());
    if n < 3 {
        return None;
    }
    let (x, y) = (&x[..n], &y[..n]);
    let mut slopes = Vec::with_capacity(n * (n - 1) / 2);
    let mut s = 0.0;
    for i in 0..n {
        for j in i + 1..n {
            let dx = x[j] - x[i];
            let dy = y[j] - y[i];
            if dx > 0.0 {
                slopes.push(dy / dx);
            }
            s += sign(dy);
        }
    }
    if slopes.is_empty() {
        return None;
    }
    slopes.sort_unstable_by(f64::total_cmp);
    let slope = midpoint_median_sorted(&slopes);
    let mut resid: Vec<f64> = (0..n).map(|i| y[i] - slope * x[i]).collect();
    let inflation = hamed_rao_factor(&resid);
    resid.sort_unstable_by(f64::total_cmp);
    let intercept = midpoint_median_sorted(&resid);
    let var_s = kendall_var_s(y) * inflation;
    let z = normal_quantile(0.5 + confidence.clamp(0.5, 0.999_999) / 2.0);
    let c = z * var_s.max(0.0).sqrt();
    let nn = slopes.len() as f64;
    // 1-based ranks (N − C)/2 and (N + C)/2 + 1 -> 0-based positions.
    let lo = order_statistic(&slopes, (nn - c) / 2.0 - 1.0);
    let hi = order_statistic(&slopes, (nn + c) / 2.0);
    let ci = [lo.min(slope), hi.max(slope)];
    let t = Trend {
        slope,
        ci,
        intercept,
        s,
        var_s,
        inflation,
        n,
    };
    (t.slope.is_finite() && t.ci.iter().all(|v| v.is_finite()) && t.intercept.is_finite())
        .then_some(t)
}

fn sign(v: f64) -> f64 {
    if v > 0.0 {
        1.0
    } else if v < 0.0 {
        -1.0
    } else {
        0.0
    }
}

/// Var(S) of Mann–Kendall's S under no trend, corrected for ties in `y`.
pub fn kendall_var_s(y: &[f64]) -> f64 {
    let n = y.len() as f64;
    let mut v = y.to_vec();
    v.sort_unstable_by(f64::total_cmp);
    let mut ties = 0.0;
    let mut i = 0;
    while i < v.len() {
        let mut j = i + 1;
        while j < v.len() && v[j] == v[i] {
            j += 1;
        }
        let t = (j - i) as f64;
        ties += t * (t - 1.0) * (2.0 * t + 5.0);
        i = j;
    }
    ((n * (n - 1.0) * (2.0 * n + 5.0) - ties) / 18.0).max(0.0)
}

/// Average ranks (1-based) of `v`, ties sharing their mean rank.
pub fn ranks(v: &[f64]) -> Vec<f64> {
    let mut idx: Vec<usize> = (0..v.len()).collect();
    idx.sort_by(|&a, &b| v[a].total_cmp(&v[b]));
    let mut r = vec![0.0; v.len()];
    let mut i = 0;
    while i < idx.len() {
        let mut j = i + 1;
        while j < idx.len() && v[idx[j]] == v[idx[i]] {
            j += 1;
        }
        let avg = (i + j + 1) as f64 / 2.0; // mean of ranks i+1 ..= j
        for &k in &idx[i..j] {
            r[k] = avg;
        }
        i = j;
    }
    r
}

/// Hamed–Rao n/n* from the ranks of the detrended series, significant lags only, floored at 1.
pub fn hamed_rao_factor(detrended: &[f64]) -> f64 {
    let n = detrended.len();
    if n < 4 {
        return 1.0;
    }
    let r = ranks(detrended);
    let mean = r.iter().sum::<f64>() / n as f64;
    let d: Vec<f64> = r.iter().map(|v| v - mean).collect();
    let denom: f64 = d.iter().map(|v| v * v).sum();
    if denom <= 0.0 {
        return 1.0;
    }
    let nf = n as f64;
    let bound = 1.959_963_984_540_054 / nf.sqrt();
    let mut sum = 0.0;
    for k in 1..n - 2 {
        let rho: f64 = (0..n - k).map(|i| d[i] * d[i + k]).sum::<f64>() / denom;
        if rho.abs() > bound {
            let m = (n - k) as f64;
            sum += m * (m - 1.0) * (m - 2.0) * rho;
        }
    }
    let f = 1.0 + 2.0 / (nf * (nf - 1.0) * (nf - 2.0)) * sum;
    if f.is_finite() {
        f.max(1.0)
    } else {
        1.0
    }
}

// AS 241 coefficients as published (Wichura 1988, Applied Statistics 37(3): 477–484), lowest degree
// first; the denominators' leading 1 is implicit.
#[allow(clippy::excessive_precision)]
const AS241_A: [f64; 8] = [
    3.3871328727963666080e0,
    1.3314166789178437745e2,
    1.9715909503065514427e3,
    1.3731693765509461125e4,
    4.5921953931549871457e4,
    6.7265770927008700853e4,
    3.3430575583588128105e4,
    2.5090809287301226727e3,
];
#[allow(clippy::excessive_precision)]
const AS241_B: [f64; 8] = [
    1.0,
    4.2313330701600911252e1,
    6.8718700749205790830e2,
    5.3941960214247511077e3,
    2.1213794301586595867e4,
    3.9307895800092710610e4,
    2.8729085735721942674e4,
    5.2264952788528545610e3,
];
#[allow(clippy::excessive_precision)]
const AS241_C: [f64; 8] = [
    1.42343711074968357734e0,
    4.63033784615654529590e0,
    5.76949722146069140550e0,
    3.64784832476320460504e0,
    1.27045825245236838258e0,
    2.41780725177450611770e-1,
    2.27238449892691845833e-2,
    7.74545014278341407640e-4,
];
#[allow(clippy::excessive_precision)]
const AS241_D: [f64; 8] = [
    1.0,
    2.05319162663775882187e0,
    1.67638483018380384940e0,
    6.89767334985100004550e-1,
    1.48103976427480074590e-1,
    1.51986665636164571966e-2,
    5.47593808499534494600e-4,
    1.05075007164441684324e-9,
];
#[allow(clippy::excessive_precision)]
const AS241_E: [f64; 8] = [
    6.65790464350110377720e0,
    5.46378491116411436990e0,
    1.78482653991729133580e0,
    2.96560571828504891230e-1,
    2.65321895265761230930e-2,
    1.24266094738807843860e-3,
    2.71155556874348757815e-5,
    2.01033439929228813265e-7,
];
#[allow(clippy::excessive_precision)]
const AS241_F: [f64; 8] = [
    1.0,
    5.99832206555887937690e-1,
    1.36929880922735805310e-1,
    1.48753612908506148525e-2,
    7.86869131145613259100e-4,
    1.84631831751005468180e-5,
    1.42151175831644588870e-7,
    2.04426310338993978564e-15,
];

/// Horner evaluation of a polynomial with coefficients lowest degree first.
fn poly(c: &[f64; 8], x: f64) -> f64 {
    c.iter().rev().fold(0.0, |acc, k| acc * x + k)
}

/// Standard normal quantile Φ⁻¹(p) by Wichura's AS 241 (PPND16). `p` is clamped into (0, 1).
pub fn normal_quantile(p: f64) -> f64 {
    let p = if p.is_nan() {
        0.5
    } else {
        p.clamp(1e-300, 1.0 - 1e-16)
    };
    let q = p - 0.5;
    if q.abs() <= 0.425 {
        let r = 0.180625 - q * q;
        return q * poly(&AS241_A, r) / poly(&AS241_B, r);
    }
    let r = (-(if q < 0.0 { p } else { 1.0 - p }).ln()).sqrt();
    let val = if r <= 5.0 {
        poly(&AS241_C, r - 1.6) / poly(&AS241_D, r - 1.6)
    } else {
        poly(&AS241_E, r - 5.0) / poly(&AS241_F, r - 5.0)
    };
    if q < 0.0 {
        -val
    } else {
        val
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normal_quantile_matches_reference_values() {
        // Reference values: Python 3 statistics.NormalDist().inv_cdf (also AS 241).
        let cases = [
            (0.975, 1.9599639845400536),
            (0.995, 2.5758293035489),
            (0.999999, 4.753424308817089),
            (1e-20, -9.262340089798405),
            (0.6, 0.2533471031357998),
            (0.5, 0.0),
        ];
        for (p, z) in cases {
            assert!(
                (normal_quantile(p) - z).abs() < 1e-12,
                "p={p}: {} vs {z}",
                normal_quantile(p)
            );
        }
    }

    #[test]
    fn theil_sen_hand_computed() {
        // Points (0,0) (1,1) (2,4) (3,3): slopes 1, 2, 1, 3, 1, -1 -> sorted -1,1,1,1,2,3 -> median 1.
        let t = theil_sen(&[0.0, 1.0, 2.0, 3.0], &[0.0, 1.0, 4.0, 3.0], 0.95).unwrap();
        assert_eq!(t.slope, 1.0);
        // Residuals y - x: 0,0,2,0 -> intercept 0. S = +1+1+1+1+1-1 = 4.
        assert_eq!(t.intercept, 0.0);
        assert_eq!(t.s, 4.0);
        // n = 4, no ties: Var(S) = 4·3·13/18 = 8.667 (4 points: Hamed–Rao needs n ≥ 4, lags 1 only).
        assert!((kendall_var_s(&[0.0, 1.0, 4.0, 3.0]) - 26.0 / 3.0).abs() < 1e-12);
        assert!(t.ci[0] <= 1.0 && t.ci[1] >= 1.0);
    }

    #[test]
    fn kendall_variance_tie_correction() {
        // n = 5 with one tie group of 3: (5·4·15 − 3·2·11)/18 = (300 − 66)/18 = 13.
        assert!((kendall_var_s(&[1.0, 2.0, 2.0, 2.0, 3.0]) - 13.0).abs() < 1e-12);
        // All identical: zero variance.
        assert_eq!(kendall_var_s(&[5.0; 6]), 0.0);
    }

    #[test]
    fn ranks_average_ties() {
        assert_eq!(ranks(&[10.0, 30.0, 20.0, 20.0]), vec![1.0, 4.0, 2.5, 2.5]);
    }

    #[test]
    fn exact_line_has_zero_width_ci_and_constant_series_zero_slope() {
        let x: Vec<f64> = (0..20).map(|i| (i * 10) as f64).collect();
        let y: Vec<f64> = x.iter().map(|v| 3.0 * v + 7.0).collect();
        let t = theil_sen(&x, &y, 0.99).unwrap();
        assert_eq!(t.slope, 3.0);
        assert_eq!(t.ci, [3.0, 3.0]);
        assert_eq!(t.intercept, 7.0);
        let c = theil_sen(&x, &[4.0; 20], 0.99).unwrap();
        assert_eq!((c.slope, c.ci), (0.0, [0.0, 0.0]));
        assert!(theil_sen(&[1.0, 2.0], &[1.0, 2.0], 0.99).is_none());
    }

    #[test]
    fn hamed_rao_inflates_for_positive_autocorrelation_and_never_deflates() {
        // A slow sine has strongly autocorrelated ranks.
        let slow: Vec<f64> = (0..60).map(|i| (i as f64 / 6.0).sin()).collect();
        assert!(hamed_rao_factor(&slow) > 2.0);
        // Alternating signs: negative lag-1 autocorrelation would deflate; floored at 1.
        let alt: Vec<f64> = (0..60)
            .map(|i| {
                if i % 2 == 0 {
                    1.0 + i as f64 * 1e-3
                } else {
                    -1.0
                }
            })
            .collect();
        assert_eq!(hamed_rao_factor(&alt), 1.0);
    }
}
