//! A saturating warm-up: memory that rises ever more slowly towards a level. Fits the approach
//! y = L − B·e^(−(x − x₀)/τ) and gives the level L it converges to, with an interval that
//! includes the uncertainty of the time constant τ.
//!
//! Method: for a fixed τ the model is linear in (L, B), so each τ of a geometric grid (span/100
//! to 20 × span, 96 values) is an ordinary least-squares fit, O(n) each; the τ with the smallest
//! residual sum of squares wins. The interval of L is the union, over every τ whose residual sum
//! of squares is within the profile bound SSE ≤ SSE_min·(1 + z²/(n − 3)) (the likelihood-ratio
//! set of τ at the requested confidence), of L(τ) ± z·se(L(τ)); se uses the robust σ of the best
//! fit's residuals (1.4826 × MAD; for other τ scaled by their residual sum of squares over the best's),
//! inflated by (1 + ρ₁)/(1 − ρ₁) for the lag-1 autocorrelation of the second half's residuals. A τ at the top of the grid
//! in that set means the data cannot tell the approach from a straight line: the upper end of
//! the interval is then unbounded (+∞), and no level is claimed.
//!
//! Invariants: x strictly increasing and finite, y finite; fewer than 8 points, a zero span or
//! no rising fit give `None`. O(n × grid) time, O(n) memory.

use crate::analysis::trend::normal_quantile;

/// The fitted approach. `level_ci[1]` may be +∞ (level not bounded by the data).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Approach {
    /// The level the series converges to (L).
    pub level: f64,
    /// Interval of L at the requested confidence.
    pub level_ci: [f64; 2],
    /// Time constant τ, in x units (steps).
    pub tau: f64,
    /// Growth still to come at x₀ (B), bytes.
    pub amplitude: f64,
    /// The x the amplitude refers to (the first point).
    pub x0: f64,
    /// The fitted value at the last point: where the series already is.
    pub at_end: f64,
}

impl Approach {
    /// The fitted value at `x`.
    pub fn at(&self, x: f64) -> f64 {
        self.level - self.amplitude * (-(x - self.x0) / self.tau).exp()
    }

    /// Where the fitted curve comes within `margin` of its level (x units).
    pub fn within(&self, margin: f64) -> f64 {
        if margin <= 0.0 || self.amplitude <= margin {
            self.x0
        } else {
            self.x0 + self.tau * (self.amplitude / margin).ln()
        }
    }
}

/// Points of the τ grid.
const GRID: usize = 96;

struct Lin {
    level: f64,
    amp: f64,
    sse: f64,
    var_coef: f64,
}

/// Least squares of y on [1, z] with z = e^(−(x − x₀)/τ); y already centred and scaled.
fn lin(x: &[f64], v: &[f64], tau: f64) -> Option<Lin> {
    let n = x.len() as f64;
    let z: Vec<f64> = x.iter().map(|&xi| (-(xi - x[0]) / tau).exp()).collect();
    let zm = z.iter().sum::<f64>() / n;
    let vm = v.iter().sum::<f64>() / n;
    let (mut szz, mut szv, mut svv) = (0.0, 0.0, 0.0);
    for (zi, vi) in z.iter().zip(v) {
        szz += (zi - zm) * (zi - zm);
        szv += (zi - zm) * (vi - vm);
        svv += (vi - vm) * (vi - vm);
    }
    if !(szz > 1e-300) {
        return None;
    }
    let b = szv / szz;
    let a = vm - b * zm;
    Some(Lin {
        level: a,
        amp: -b,
        sse: (svv - b * szv).max(0.0),
        var_coef: 1.0 / n + zm * zm / szz,
    })
}

/// Fits the approach to (x, y) at `confidence` (e.g. 0.99). `None` when it does not apply.
pub fn fit(x: &[f64], y: &[f64], confidence: f64) -> Option<Approach> {
    let n = x.len().min(y.len());
    if n < 8 {
        return None;
    }
    let (x, y) = (&x[..n], &y[..n]);
    let span = x[n - 1] - x[0];
    if !(span > 0.0) || !span.is_finite() {
        return None;
    }
    let lo = y.iter().cloned().fold(f64::INFINITY, f64::min);
    let hi = y.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let scale = (hi - lo).max(1.0);
    let v: Vec<f64> = y.iter().map(|w| (w - lo) / scale).collect();
    let (t_min, t_max) = (span / 100.0, 20.0 * span);
    let ratio = (t_max / t_min).powf(1.0 / (GRID - 1) as f64);
    let fits: Vec<(f64, Lin)> = (0..GRID)
        .filter_map(|k| {
            let tau = t_min * ratio.powi(k as i32);
            lin(x, &v, tau).filter(|l| l.amp > 0.0).map(|l| (tau, l))
        })
        .collect();
    let (best_i, best) = fits
        .iter()
        .enumerate()
        .min_by(|a, b| a.1 .1.sse.total_cmp(&b.1 .1.sse))?;
    let (tau, b) = (best.0, &best.1);
    // Lag-1 autocorrelation of the best fit's residuals.
    let resid: Vec<f64> = x
        .iter()
        .zip(&v)
        .map(|(&xi, vi)| vi - (b.level - b.amp * (-(xi - x[0]) / tau).exp()))
        .collect();
    // The noise: robust σ of the residuals (a misfit at the start of the warm-up, such as a flat
    // stretch before it, does not widen the level's interval) and the lag-1 autocorrelation of the
    // residuals of the second half (where the series has settled).
    let sigma = crate::quantile::mad_sigma(&resid).unwrap_or(0.0);
    let (num, den) = resid[n / 2..].windows(2).fold((0.0, 0.0), |(nu, de), w| {
        (nu + w[0] * w[1], de + w[0] * w[0])
    });
    let rho = if den > 0.0 {
        (num / den).clamp(0.0, 0.96)
    } else {
        0.0
    };
    let inflation = (1.0 + rho) / (1.0 - rho);
    let z = normal_quantile(0.5 + confidence.clamp(0.5, 0.999_999) / 2.0);
    let dof = (n - 3) as f64;
    let bound = b.sse * (1.0 + z * z / dof) + 1e-24;
    let (mut l_lo, mut l_hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for (i, (t, l)) in fits.iter().enumerate() {
        if l.sse > bound && i != best_i {
            continue;
        }
        if *t >= t_max * (1.0 - 1e-9) {
            l_hi = f64::INFINITY;
        }
        let s2 = sigma * sigma * (l.sse / b.sse.max(1e-300)).max(1.0);
        let se = (s2 * inflation * l.var_coef).sqrt();
        l_lo = l_lo.min(l.level - z * se);
        l_hi = l_hi.max(l.level + z * se);
    }
    let back = |u: f64| lo + u * scale;
    let a = Approach {
        level: back(b.level),
        level_ci: [
            back(l_lo),
            if l_hi.is_finite() {
                back(l_hi)
            } else {
                f64::INFINITY
            },
        ],
        tau,
        amplitude: b.amp * scale,
        x0: x[0],
        at_end: back(b.level - b.amp * (-(span) / tau).exp()),
    };
    (a.level.is_finite() && a.level_ci[0].is_finite() && a.at_end.is_finite()).then_some(a)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recovers_an_exact_approach() {
        let x: Vec<f64> = (0..200).map(|i| i as f64).collect();
        let tau_true = 10.0 * 1.2f64.powi(9); // on the grid (span 199 → no: checked loosely)
        let y: Vec<f64> = x
            .iter()
            .map(|&t| 1000.0 - 400.0 * (-t / tau_true).exp())
            .collect();
        let a = fit(&x, &y, 0.99).unwrap();
        assert!((a.level - 1000.0).abs() < 5.0, "{a:?}");
        assert!(a.level_ci[0] <= a.level && a.level <= a.level_ci[1]);
        assert!((a.tau / tau_true - 1.0).abs() < 0.1, "{a:?}");
        assert!((a.at(199.0) - y[199]).abs() < 5.0);
        // Within 1 of the level: τ·ln(400/1).
        let w = a.within(1.0);
        assert!((w - tau_true * 400f64.ln()).abs() < 0.15 * w, "{w}");
    }

    #[test]
    fn a_straight_line_has_no_bounded_level() {
        let x: Vec<f64> = (0..100).map(|i| i as f64).collect();
        let y: Vec<f64> = x
            .iter()
            .enumerate()
            .map(|(i, &t)| 5.0 * t + if i % 2 == 0 { 1.0 } else { -1.0 })
            .collect();
        // Either no rising fit, or a level interval without an upper end.
        if let Some(a) = fit(&x, &y, 0.99) {
            assert!(
                a.level_ci[1] == f64::INFINITY || a.level_ci[1] > 5.0 * 99.0 + 100.0,
                "{a:?}"
            );
        }
    }

    #[test]
    fn falling_or_short_series_give_none() {
        let x: Vec<f64> = (0..50).map(|i| i as f64).collect();
        let y: Vec<f64> = x.iter().map(|&t| 100.0 * (-t / 10.0).exp()).collect();
        assert!(fit(&x, &y, 0.99).is_none());
        assert!(fit(&x[..7], &y[..7], 0.99).is_none());
        assert!(fit(&[0.0; 10], &[1.0; 10], 0.99).is_none());
    }
}
