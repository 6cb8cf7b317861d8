//! Scaling laws from sweep rows: linear vs quadratic growth of memory with sequence length (or
//! batch), and the warm-up axis. Pure functions, no candle, no I/O.
//!
//! Methods:
//! - Fits: ordinary least squares, see [`crate::analysis::least_squares`] (centred/scaled x, Householder QR).
//! - Linear vs quadratic: the extra-sum-of-squares F-test for nested models (Draper & Smith,
//!   *Applied Regression Analysis*, 3rd ed., §6.2; Seber & Lee, *Linear Regression Analysis*,
//!   §4.3): `F = (RSS_lin − RSS_quad) / (RSS_quad / (n − 3))` on (1, n − 3) degrees of freedom,
//!   p-value from statrs' `FisherSnedecor` survival function; quadratic when `p < α = 0.01`.
//!   The F-test is valid from n = 4 (one residual degree of freedom), which is exactly when the
//!   quadratic fit exists; AICc (Hurvich & Tsai 1989) would need n ≥ 6 for the quadratic
//!   (k = 4 with σ²), so it is never a fallback for small n and is not used. Below 4 points (or
//!   3 distinct x) the quadratic cannot be fitted and the answer is linear, saying so in `method`.
//! - Exact data: a fit's RSS under the rounding floor is exactly 0 (see `fit`). RSS_lin = 0 means
//!   linear (p = 1); RSS_lin > 0 with RSS_quad = 0 means quadratic (p = 0). No division by 0.
//! - Share of the T² term: `c2·T² / ŷ(T)` at the largest x (T), with ŷ the quadratic fit.
//! - Warm-up axis: mean, sample std and CV from [`crate::analysis::stats::summarize`]. The
//!   first-iteration effect: the first measured sample is more than
//!   [`FIRST_STEP_RATIO`] (1.5) × the median of the rest.
//!
//! Invariants:
//! - `choose` returns `None` exactly when no line can be fitted (see `fit_linear`); an exactly
//!   linear series is `Linear`, an exactly quadratic one (c2 ≠ 0) is `Quadratic`.
//! - No NaN in any output for finite input; `p_value`, when present, lies in [0, 1].

use crate::analysis::stats::{self, FIRST_STEP_RATIO};
use serde::{Deserialize, Serialize};
use statrs::distribution::{ContinuousCDF, FisherSnedecor};

pub use crate::analysis::least_squares::{fit_linear, fit_quadratic, Fit};

/// Significance level of the F-test for the quadratic term.
pub const ALPHA: f64 = 0.01;

/// `method` when the F-test decided.
pub const METHOD_F_TEST: &str = "F-test on the T² term (α = 0.01)";
/// `method` when one fit was exact (RSS = 0).
pub const METHOD_EXACT: &str = "exact fit (RSS = 0)";
/// `method` when there are too few points (or distinct x) for a quadratic.
pub const METHOD_TOO_FEW: &str = "linear only: a quadratic needs 4 points and 3 distinct x";

/// How a quantity grows with x.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "pattern", rename_all = "lowercase")]
pub enum Pattern {
    Linear,
    Quadratic {
        /// `c2·T² / ŷ(T)` at `t_max` (0.38 = 38% of the predicted peak).
        t2_share_at_max: f64,
        /// The largest x in the data (T).
        t_max: f64,
    },
}

/// The verdict of [`choose`] with the evidence behind it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Choice {
    pub pattern: Pattern,
    /// The fit of the chosen pattern (a copy of `linear` or of `quadratic`).
    pub chosen: Fit,
    pub linear: Fit,
    pub quadratic: Option<Fit>,
    /// The F-test p-value of the T² term (0 or 1 for exact fits); `None` when no quadratic exists.
    pub p_value: Option<f64>,
    /// Which rule decided: [`METHOD_F_TEST`], [`METHOD_EXACT`] or [`METHOD_TOO_FEW`].
    pub method: &'static str,
}

/// Chooses between a linear and a quadratic law for `ys` against `xs` (see the module docs).
/// `None` when no line can be fitted (fewer than 3 points, all x identical, a non-finite value).
pub fn choose(xs: &[f64], ys: &[f64]) -> Option<Choice> {
    let linear = fit_linear(xs, ys)?;
    let Some(quadratic) = fit_quadratic(xs, ys) else {
        return Some(Choice {
            pattern: Pattern::Linear,
            chosen: linear.clone(),
            linear,
            quadratic: None,
            p_value: None,
            method: METHOD_TOO_FEW,
        });
    };
    let (p_value, method) = if linear.rss == 0.0 {
        (1.0, METHOD_EXACT)
    } else if quadratic.rss == 0.0 {
        (0.0, METHOD_EXACT)
    } else {
        (f_test_p(&linear, &quadratic), METHOD_F_TEST)
    };
    let (pattern, chosen) = if p_value < ALPHA {
        let t_max = xs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let y_abs_max = ys.iter().fold(0.0_f64, |acc, y| acc.max(y.abs()));
        let share = t2_share(&quadratic, t_max, y_abs_max);
        (
            Pattern::Quadratic {
                t2_share_at_max: share,
                t_max,
            },
            quadratic.clone(),
        )
    } else {
        (Pattern::Linear, linear.clone())
    };
    Some(Choice {
        pattern,
        chosen,
        linear,
        quadratic: Some(quadratic),
        p_value: Some(p_value),
        method,
    })
}

/// p-value of the extra-sum-of-squares F statistic on (1, n − 3) degrees of freedom; both RSS > 0.
fn f_test_p(linear: &Fit, quadratic: &Fit) -> f64 {
    let df2 = (quadratic.n - quadratic.params()) as f64; // ≥ 1 whenever the quadratic exists
                                                         // The nested model cannot fit worse; clamp rounding so F ≥ 0.
    let extra = (linear.rss - quadratic.rss).max(0.0);
    let f = extra / (quadratic.rss / df2);
    let dist = FisherSnedecor::new(1.0, df2).expect("df are positive and finite");
    dist.sf(f).clamp(0.0, 1.0)
}

/// `c2·T² / ŷ(T)`; when the fitted peak is not positive (never for memory), relative to the
/// largest |y| instead so the share stays finite.
fn t2_share(q: &Fit, t: f64, y_abs_max: f64) -> f64 {
    let term = q.coefficients[2] * t * t;
    let peak = q.predict(t);
    let denom = if peak > 0.0 { peak } else { y_abs_max };
    if denom > 0.0 {
        term / denom
    } else {
        0.0
    }
}

/// A one-line description: `linear`, or `quadratic: the T² term is 38% of peak at T=1024`.
pub fn describe(pattern: &Pattern) -> String {
    match *pattern {
        Pattern::Linear => "linear".to_string(),
        Pattern::Quadratic {
            t2_share_at_max,
            t_max,
        } => {
            let pct = 100.0 * t2_share_at_max;
            let prec = if pct.abs() < 9.95 { 1 } else { 0 };
            format!("quadratic: the T² term is {pct:.prec$}% of peak at T={t_max}")
        }
    }
}

/// Timing statistics of one measured set on the warm-up axis.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WarmupStats {
    /// Warm-up steps run before the measured set.
    pub warmup: usize,
    /// Measured samples.
    pub n: usize,
    pub mean: f64,
    /// Sample standard deviation (n − 1); `None` for n < 2.
    pub std: Option<f64>,
    /// `100·std/mean`; `None` when `std` is `None` or the mean is 0.
    pub cv_pct: Option<f64>,
    /// First measured sample / median of the others; `None` for n < 2 or a non-positive median.
    pub first_over_median: Option<f64>,
    /// The first measured sample is more than 1.5× the median of the others.
    pub first_iteration_effect: bool,
}

/// The statistics of each measured set (`(warmup, step times in ms)`), in ascending warm-up order
/// (rows with the same warm-up keep their input order). Sets that `summarize` rejects (empty, or
/// holding a non-finite sample) have no statistics and are left out.
pub fn warmup_axis(rows: &[(usize, Vec<f64>)]) -> Vec<WarmupStats> {
    let mut out: Vec<WarmupStats> = rows
        .iter()
        .filter_map(|(warmup, samples)| {
            let s = stats::summarize(samples).ok()?;
            let rest_median = crate::quantile::median(&samples[1..]);
            let first = samples[0];
            let (first_over_median, first_iteration_effect) = match rest_median {
                Some(m) if m > 0.0 => (Some(first / m), first > FIRST_STEP_RATIO * m),
                // The others took no time at all: any positive first sample stands out.
                Some(m) => (None, m == 0.0 && first > 0.0),
                None => (None, false),
            };
            Some(WarmupStats {
                warmup: *warmup,
                n: s.n,
                mean: s.mean,
                std: s.std,
                cv_pct: s.cv_pct,
                first_over_median,
                first_iteration_effect,
            })
        })
        .collect();
    out.sort_by_key(|w| w.warmup);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rel_close(got: f64, want: f64, tol: f64) -> bool {
        (got - want).abs() <= tol * want.abs().max(1.0)
    }

    macro_rules! assert_rel {
        ($got:expr, $want:expr, $tol:expr) => {{
            let (g, w): (f64, f64) = ($got, $want);
            assert!(
                rel_close(g, w, $tol),
                "{} = {g}, want {w}",
                stringify!($got)
            );
        }};
    }

    /// Seeded normal noise: SplitMix64 (Steele, Lea & Flood 2014) + Box–Muller.
    struct Noise(u64);

    impl Noise {
        fn uniform(&mut self) -> f64 {
            self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^= z >> 31;
            ((z >> 11) as f64 + 0.5) / (1u64 << 53) as f64 // in (0, 1)
        }

        fn normal(&mut self, sigma: f64) -> f64 {
            let (u1, u2) = (self.uniform(), self.uniform());
            sigma * (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
        }
    }

    const BATCHES: [f64; 6] = [1.0, 2.0, 4.0, 8.0, 16.0, 32.0];
    const SEQS: [f64; 4] = [128.0, 256.0, 512.0, 1024.0];

    fn quad(t: f64) -> f64 {
        5e8 + 2e5 * t + 300.0 * t * t
    }

    #[test]
    fn exactly_linear_series_is_linear() {
        let ys: Vec<f64> = BATCHES.iter().map(|b| 1e9 + 3e6 * b).collect();
        let c = choose(&BATCHES, &ys).unwrap();
        assert_eq!(c.pattern, Pattern::Linear);
        assert_eq!((c.method, c.p_value), (METHOD_EXACT, Some(1.0)));
        assert_eq!(c.chosen, c.linear);
        assert_rel!(c.linear.coefficients[0], 1e9, 1e-12); // fixed cost
        assert_rel!(c.linear.coefficients[1], 3e6, 1e-12); // bytes per sample
        assert_eq!((c.linear.rss, c.linear.r2), (0.0, 1.0));
        assert_eq!(describe(&c.pattern), "linear");
    }

    #[test]
    fn exactly_quadratic_series_is_quadratic_with_the_t2_share() {
        // At T = 1024: c2·T² = 300·1048576 = 314 572 800;
        // ŷ = 5e8 + 2e5·1024 + 314 572 800 = 1 019 372 800 → share 0.308594… → "31%".
        let ys: Vec<f64> = SEQS.iter().map(|&t| quad(t)).collect();
        let c = choose(&SEQS, &ys).unwrap();
        assert_eq!((c.method, c.p_value), (METHOD_EXACT, Some(0.0)));
        let q = c.quadratic.as_ref().unwrap();
        assert_eq!(&c.chosen, q);
        assert_eq!(q.rss, 0.0);
        assert!(c.linear.rss > 0.0);
        assert_rel!(q.coefficients[0], 5e8, 1e-9);
        assert_rel!(q.coefficients[1], 2e5, 1e-10);
        assert_rel!(q.coefficients[2], 300.0, 1e-11);
        let Pattern::Quadratic {
            t2_share_at_max,
            t_max,
        } = c.pattern
        else {
            panic!("{:?}", c.pattern)
        };
        assert_eq!(t_max, 1024.0);
        assert_rel!(t2_share_at_max, 314_572_800.0 / 1_019_372_800.0, 1e-12);
        assert_eq!(
            describe(&c.pattern),
            "quadratic: the T² term is 31% of peak at T=1024"
        );
    }

    #[test]
    fn describe_matches_the_issue_wording_and_keeps_small_shares_visible() {
        let p = Pattern::Quadratic {
            t2_share_at_max: 0.38,
            t_max: 1024.0,
        };
        assert_eq!(
            describe(&p),
            "quadratic: the T² term is 38% of peak at T=1024"
        );
        let p = Pattern::Quadratic {
            t2_share_at_max: 0.004,
            t_max: 128.0,
        };
        assert_eq!(
            describe(&p),
            "quadratic: the T² term is 0.4% of peak at T=128"
        );
    }

    #[test]
    fn noisy_linear_series_is_linear() {
        // 8 batch sizes, noise σ = 2 MB on ~1e9 bytes; seed fixed, so the result is reproducible.
        let xs: Vec<f64> = (1..=8).map(|b| b as f64).collect();
        let mut noise = Noise(42);
        let ys: Vec<f64> = xs
            .iter()
            .map(|b| 1e9 + 3e6 * b + noise.normal(2e6))
            .collect();
        let c = choose(&xs, &ys).unwrap();
        assert_eq!(c.pattern, Pattern::Linear);
        assert_eq!(c.method, METHOD_F_TEST);
        let p = c.p_value.unwrap();
        assert!((ALPHA..=1.0).contains(&p), "p = {p}");
        assert_rel!(c.linear.coefficients[1], 3e6, 0.5);
        assert!(c.linear.r2 > 0.5 && c.linear.r2 < 1.0, "{}", c.linear.r2);
    }

    #[test]
    fn noisy_quadratic_series_is_quadratic() {
        // T = 128..4096 ×2, noise σ = 5 MB on 5e8..5.9e9 bytes.
        let xs: Vec<f64> = (0..6).map(|i| 128.0 * 2f64.powi(i)).collect();
        let mut noise = Noise(7);
        let ys: Vec<f64> = xs.iter().map(|&t| quad(t) + noise.normal(5e6)).collect();
        let c = choose(&xs, &ys).unwrap();
        assert_eq!(c.method, METHOD_F_TEST);
        assert!(c.p_value.unwrap() < ALPHA, "{:?}", c.p_value);
        let Pattern::Quadratic {
            t2_share_at_max,
            t_max,
        } = c.pattern
        else {
            panic!("{:?}", c.pattern)
        };
        assert_eq!(t_max, 4096.0);
        // Truth at 4096: 300·4096² / (5e8 + 2e5·4096 + 300·4096²) = 0.8866…
        assert_rel!(
            t2_share_at_max,
            300.0 * 4096.0 * 4096.0 / quad(4096.0),
            1e-2
        );
        assert_rel!(c.chosen.coefficients[2], 300.0, 5e-2);
    }

    #[test]
    fn f_test_p_value_hand_computed() {
        // Data of fit.rs's orthogonal-polynomial test: RSS_lin = 31.5, RSS_quad = 17.5, n = 5.
        // F = 14 / (17.5/2) = 1.6 on (1, 2) df. F(1, 2) = t² with 2 df, whose two-sided tail is
        // 1 − t/√(t² + 2): p = 1 − √(1.6/3.6) = 1 − 2/3 = 1/3 → linear.
        let c = choose(&[1.0, 2.0, 3.0, 4.0, 5.0], &[2.5, -3.0, 1.0, -3.0, 2.5]).unwrap();
        assert_eq!(c.method, METHOD_F_TEST);
        assert_rel!(c.p_value.unwrap(), 1.0 / 3.0, 1e-9);
        assert_eq!(c.pattern, Pattern::Linear);
    }

    #[test]
    fn n0_to_n3() {
        assert_eq!(choose(&[], &[]), None);
        assert_eq!(choose(&[1.0], &[5.0]), None);
        assert_eq!(choose(&[1.0, 2.0], &[5.0, 7.0]), None);
        // n = 3: a line, but no quadratic: linear, and the method says why.
        let c = choose(&[1.0, 2.0, 4.0], &[1.0, 4.0, 16.0]).unwrap();
        assert_eq!(c.pattern, Pattern::Linear);
        assert_eq!(
            (c.method, c.p_value, c.quadratic),
            (METHOD_TOO_FEW, None, None)
        );
        assert_eq!(c.linear.n, 3);
        // n = 4 is the smallest F-test (1, 1).
        let c = choose(&SEQS, &[1.0, 2.5, 2.0, 4.0]).unwrap();
        assert_eq!(c.method, METHOD_F_TEST);
        assert!(c.quadratic.is_some());
    }

    #[test]
    fn identical_x_gives_no_fit() {
        assert_eq!(choose(&[512.0; 4], &[1.0, 2.0, 3.0, 4.0]), None);
        // Only two distinct x: a line, but no quadratic.
        let c = choose(&[1.0, 1.0, 2.0, 2.0], &[1.0, 1.2, 2.0, 2.1]).unwrap();
        assert_eq!((c.pattern, c.method), (Pattern::Linear, METHOD_TOO_FEW));
    }

    #[test]
    fn choice_serialises_with_a_tagged_pattern() {
        let ys: Vec<f64> = SEQS.iter().map(|&t| quad(t)).collect();
        let json = serde_json::to_string(&choose(&SEQS, &ys).unwrap()).unwrap();
        assert!(
            json.contains("\"pattern\":{\"pattern\":\"quadratic\",\"t2_share_at_max\":"),
            "{json}"
        );
        assert!(
            json.contains("\"method\":\"exact fit (RSS = 0)\""),
            "{json}"
        );
    }

    #[test]
    fn warmup_axis_hand_computed() {
        // warm-up 0: [30, 10, 12, 11] → mean 15.75; median of rest (10, 11, 12) = 11;
        //   30/11 = 2.727 > 1.5 → first-iteration effect.
        //   deviations 14.25 −5.75 −3.75 −4.75 → Σd² = 203.0625+33.0625+14.0625+22.5625 = 272.75
        //   std = √(272.75/3), cv = 100·std/15.75.
        // warm-up 2: [10.5, 10, 11, 10] → median of rest 10 → 1.05: no effect;
        //   mean 10.375, deviations 0.125 −0.375 0.625 −0.375 → Σd² = 0.6875 → std √(0.6875/3).
        // warm-up 5: one sample → no std, no ratio.
        let rows = vec![
            (2, vec![10.5, 10.0, 11.0, 10.0]),
            (0, vec![30.0, 10.0, 12.0, 11.0]),
            (5, vec![9.0]),
        ];
        let w = warmup_axis(&rows);
        assert_eq!(
            w.iter().map(|s| s.warmup).collect::<Vec<_>>(),
            vec![0, 2, 5]
        );

        assert_eq!(w[0].n, 4);
        assert_rel!(w[0].mean, 15.75, 1e-14);
        assert_rel!(w[0].std.unwrap(), (272.75_f64 / 3.0).sqrt(), 1e-13);
        assert_rel!(
            w[0].cv_pct.unwrap(),
            100.0 * (272.75_f64 / 3.0).sqrt() / 15.75,
            1e-13
        );
        assert_rel!(w[0].first_over_median.unwrap(), 30.0 / 11.0, 1e-14);
        assert!(w[0].first_iteration_effect);

        assert_rel!(w[1].mean, 10.375, 1e-14);
        assert_rel!(w[1].std.unwrap(), (0.6875_f64 / 3.0).sqrt(), 1e-13);
        assert_rel!(w[1].first_over_median.unwrap(), 1.05, 1e-14);
        assert!(!w[1].first_iteration_effect);

        assert_eq!(
            w[2],
            WarmupStats {
                warmup: 5,
                n: 1,
                mean: 9.0,
                std: None,
                cv_pct: None,
                first_over_median: None,
                first_iteration_effect: false,
            }
        );
    }

    #[test]
    fn warmup_flag_is_strictly_above_one_and_a_half() {
        // Exactly 1.5× the median of the rest is not flagged; just above is.
        let w = warmup_axis(&[(1, vec![15.0, 10.0, 10.0]), (1, vec![15.01, 10.0, 10.0])]);
        assert!(!w[0].first_iteration_effect);
        assert!(w[1].first_iteration_effect);
        // Same warm-up: input order kept.
        assert_eq!(w[0].first_over_median, Some(1.5));
    }

    #[test]
    fn warmup_edge_cases_give_no_nan() {
        let w = warmup_axis(&[
            (0, vec![]),              // no samples: left out
            (1, vec![1.0, f64::NAN]), // rejected by summarize: left out
            (2, vec![3.0, 0.0, 0.0]), // the rest took 0: flagged, no ratio
            (3, vec![0.0, 0.0, 0.0]), // all zero: no CV, no effect
        ]);
        assert_eq!(w.len(), 2);
        assert_eq!(
            (
                w[0].warmup,
                w[0].first_over_median,
                w[0].first_iteration_effect
            ),
            (2, None, true)
        );
        assert_eq!(
            (w[1].warmup, w[1].cv_pct, w[1].first_iteration_effect),
            (3, None, false)
        );
        assert_eq!(w[1].std, Some(0.0));
    }
}
