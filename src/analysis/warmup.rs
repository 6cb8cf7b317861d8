//! Where the warm-up ends: the MSER truncation point (for estimation) and the break of a two-segment
//! least-squares fit "growth, then level" (the step reported to the user).
//!
//! Methods:
//! - MSER, White (1997) "An effective truncation heuristic for bias reduction in simulation output",
//!   Simulation 69(6): d* = argmin_d Σ_{i≥d} (x_i − x̄_d)² / (n − d)², searched over d ≤ n/2 (the
//!   statistic is unreliable on short remainders). Ties go to the smallest d.
//! - Two-segment (hinge) fit "growth, then level": for each candidate break τ at a sample step, least
//!   squares of y = c + s₁·min(x − τ, 0) (continuous at τ), O(1) per τ from prefix sums; the τ with the
//!   smallest residual sum of squares wins. The break is accepted as the end of a warm-up only when it
//!   passes the checks in [`check_break`], then moved to where the data enter the level's band
//!   ([`settle`]).
//!
//! Invariants: inputs finite, x strictly increasing; O(n) time.

/// MSER truncation index over `y` (searched over 0..=n/2). Returns 0 for fewer than 4 points.
pub fn mser_cut(y: &[f64]) -> usize {
    let n = y.len();
    if n < 4 {
        return 0;
    }
    // Centre on the median for precision with byte-sized values.
    let c = crate::quantile::upper_median(y).unwrap_or(0.0);
    // Suffix sums from the totals minus a running prefix (no arrays: O(1) extra memory).
    let (tot_s, tot_q) = y.iter().fold((0.0, 0.0), |(s, q), &v| {
        let d = v - c;
        (s + d, q + d * d)
    });
    let (mut pre_s, mut pre_q) = (0.0, 0.0);
    let mut best = (f64::INFINITY, 0);
    for d in 0..=n / 2 {
        let m = (n - d) as f64;
        let (suf_s, suf_q) = (tot_s - pre_s, tot_q - pre_q);
        let ss = (suf_q - suf_s * suf_s / m).max(0.0);
        let stat = ss / (m * m);
        if stat < best.0 * (1.0 - 1e-12) {
            best = (stat, d);
        }
        let v = y[d] - c;
        pre_s += v;
        pre_q += v * v;
    }
    best.1
}

/// A two-segment fit: growth with slope `s1` until `tau`, then level at `level`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Hinge {
    /// Index (into the points) of the break.
    pub idx: usize,
    /// The break, in x units (a sample's step).
    pub tau: f64,
    /// The level after the break.
    pub level: f64,
    /// Slope before the break.
    pub s1: f64,
    /// Least-squares slope of the points after the break (the level segment is flat by construction;
    /// this says how flat the data really are).
    pub s2: f64,
    /// Residual sum of squares of the hinge.
    pub sse: f64,
    /// Residual sum of squares of a single least-squares line (the no-break model).
    pub sse_line: f64,
}

impl Hinge {
    /// Growth from the first point to the break according to the fit.
    pub fn rise(&self, x0: f64) -> f64 {
        self.s1 * (self.tau - x0)
    }
}

/// Best continuous "growth, then level" least-squares fit, y = c + s₁·min(x − τ, 0), with the break at
/// one of the points and at least 3 points on each side. `None` for fewer than 7 points.
pub fn hinge_fit(x: &[f64], y: &[f64]) -> Option<Hinge> {
    let n = x.len().min(y.len());
    if n < 7 {
        return None;
    }
    let (x0, x1) = (x[0], x[n - 1]);
    let span = x1 - x0;
    if span.is_nan() || span <= 0.0 {
        return None;
    }
    let mut ys = y[..n].to_vec();
    ys.sort_unstable_by(f64::total_cmp);
    let yc = crate::quantile::upper_median_sorted(&ys);
    let yscale = (ys[n - 1] - ys[0]).max(1.0);
    let u: Vec<f64> = x[..n].iter().map(|v| (v - x0) / span).collect();
    let v: Vec<f64> = y[..n].iter().map(|w| (w - yc) / yscale).collect();
    let sse_line = line_sse(&u, &v) * yscale * yscale;
    // Prefix sums over the points before the break (the only ones with a non-zero regressor).
    let mut best: Option<(f64, usize, f64, f64)> = None;
    let (sum_v, sum_vv): (f64, f64) = (v.iter().sum(), v.iter().map(|w| w * w).sum());
    let (mut pu, mut puu, mut pv, mut puv) = (0.0, 0.0, 0.0, 0.0);
    for k in 0..n - 3 {
        if k >= 3 {
            let t = u[k];
            let nf = n as f64;
            let kf = k as f64;
            // z_i = u_i − t for i < k, else 0.
            let sz = pu - kf * t;
            let szz = puu - 2.0 * t * pu + kf * t * t;
            let szv = puv - t * pv;
            let det = nf * szz - sz * sz;
            if det.abs() > 1e-15 {
                let c = (szz * sum_v - sz * szv) / det;
                let s = (nf * szv - sz * sum_v) / det;
                let sse = (sum_vv - c * sum_v - s * szv).max(0.0);
                if best.is_none_or(|b| sse < b.0) {
                    best = Some((sse, k, c, s));
                }
            }
        }
        pu += u[k];
        puu += u[k] * u[k];
        pv += v[k];
        puv += u[k] * v[k];
    }
    let (sse, k, c, s) = best?;
    let after = crate::analysis::aggregate::ls_slope(&x[k..n], &y[k..n]);
    let h = Hinge {
        idx: k,
        tau: x[k],
        level: c * yscale + yc,
        s1: s * yscale / span,
        s2: after,
        sse: sse * yscale * yscale,
        sse_line,
    };
    [h.tau, h.level, h.s1, h.s2, h.sse]
        .iter()
        .all(|v| v.is_finite())
        .then_some(h)
}

/// Accepts a break as the end of a warm-up when: the fit grows before it (s₁ > 0) by at least
/// `min_rise`; growth has mostly stopped after it (least-squares slope after it ≤ s₁/4); and the
/// break explains the data (it removes at least half of a single line's residual sum of squares).
pub fn check_break(h: &Hinge, x0: f64, min_rise: f64) -> Result<(), String> {
    if h.s1.is_nan() || h.s1 <= 0.0 || h.rise(x0) < min_rise {
        return Err("no growth before the break larger than the plateau margin".into());
    }
    if h.s2 > h.s1 / 4.0 {
        return Err(
            "memory still grows after the break at more than a quarter of the warm-up rate".into(),
        );
    }
    if h.sse > 0.5 * h.sse_line {
        return Err("a single straight line fits almost as well as growth-then-level".into());
    }
    Ok(())
}

/// Where growth has really stopped: the first point at or after the break whose value is within
/// `margin` of `level` or above it. The least-squares break of a curved (exponential) warm-up lies
/// where the growth line meets the level, before the curve has flattened; this moves it to where the
/// data enter the plateau band.
pub fn settle(y: &[f64], from: usize, level: f64, margin: f64) -> usize {
    (from..y.len())
        .find(|&k| y[k] >= level - margin)
        .unwrap_or(from)
}

fn line_sse(u: &[f64], v: &[f64]) -> f64 {
    crate::analysis::aggregate::detrend_ls(u, v)
        .iter()
        .map(|r| r * r)
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mser_hand_computed() {
        // y = 0, 10, 10, 10, 10, 10: d = 1 leaves zero variance -> cut 1.
        assert_eq!(mser_cut(&[0.0, 10.0, 10.0, 10.0, 10.0, 10.0]), 1);
        // Constant: every d gives 0; the smallest wins.
        assert_eq!(mser_cut(&[5.0; 10]), 0);
        // Too short.
        assert_eq!(mser_cut(&[1.0, 2.0, 3.0]), 0);
        // A ramp never settles: the cut runs to the search limit n/2.
        let ramp: Vec<f64> = (0..20).map(|i| i as f64).collect();
        assert_eq!(mser_cut(&ramp), 10);
    }

    #[test]
    fn hinge_recovers_exact_break() {
        let x: Vec<f64> = (0..40).map(|i| (i * 10) as f64).collect();
        let y: Vec<f64> = x
            .iter()
            .map(|&v| if v < 150.0 { 2.0 * v } else { 300.0 })
            .collect();
        let h = hinge_fit(&x, &y).unwrap();
        assert_eq!(h.tau, 150.0);
        assert!((h.s1 - 2.0).abs() < 1e-9 && h.s2.abs() < 1e-9, "{h:?}");
        assert_eq!(settle(&y, 5, 300.0, 20.0), 14); // y(140) = 280 ≥ 300 − 20
        assert_eq!(settle(&y, 20, 300.0, 20.0), 20);
        assert!((h.level - 300.0).abs() < 1e-6);
        assert!(h.sse < 1e-6);
        assert!(check_break(&h, 0.0, 10.0).is_ok());
    }

    #[test]
    fn straight_line_break_rejected() {
        let x: Vec<f64> = (0..40).map(|i| i as f64).collect();
        let y: Vec<f64> = x.iter().map(|&v| 5.0 * v).collect();
        let h = hinge_fit(&x, &y).unwrap();
        assert!(check_break(&h, 0.0, 1.0).is_err());
        assert!(hinge_fit(&x[..6], &y[..6]).is_none());
    }
}
