//! Ordinary least-squares polynomial fits (degree 1 and 2) for scaling laws: pure functions, no I/O.
//!
//! Method:
//! - x is centred and scaled to `z = (x − m)/s` with `m` the midrange and `s` the half-range, so
//!   `z ∈ [−1, 1]`; sequence lengths up to 1e5 (x² up to 1e10) then cause no ill-conditioning.
//! - The least-squares problem `min ‖A·a − y‖₂` with `A[i][j] = z_iʲ` is solved by Householder QR
//!   (Golub & Van Loan, *Matrix Computations*, 4th ed., §5.3.3), never by forming `AᵀA`, which
//!   would square the condition number. The coefficients are then converted back to powers of x.
//! - Residuals and RSS are computed from the centred basis, directly as `Σ(y − ŷ)²`.
//! - RSS below the rounding floor `n·(1024·ε·max|y|)²` (ε = f64::EPSILON; ~2e-13 of the largest y
//!   per point, i.e. under a byte at 1e12 bytes) is reported as exactly 0: it is rounding, not
//!   data. This is what lets a model chooser recognise an exact fit without dividing by zero.
//! - `R² = 1 − RSS/TSS` with `TSS = Σ(y − ȳ)²`; R² = 1 when TSS = 0 (constant y is fitted exactly).
//!
//! Invariants:
//! - `None` unless `xs.len() == ys.len()`, every value is finite, `n ≥ params + 1` (at least one
//!   residual degree of freedom: 3 points for a line, 4 for a parabola) and x takes at least
//!   `params` distinct values (so "all x identical" is `None`).
//! - For `Some`: `coefficients.len() == degree + 1` (c0 + c1·x + c2·x²), all finite; `rss ≥ 0`;
//!   `0 ≤ r2 ≤ 1`; exact data gives `rss == 0.0` and `r2 == 1.0` exactly; no NaN.
//! - Input order does not matter.

use serde::{Deserialize, Serialize};

/// Residuals smaller than this many ulps of the largest |y| are rounding.
const RSS_FLOOR_ULPS: f64 = 1024.0;

/// A least-squares polynomial fit `c0 + c1·x (+ c2·x²)`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Fit {
    /// `[c0, c1]` for a line, `[c0, c1, c2]` for a parabola, in powers of the original x.
    pub coefficients: Vec<f64>,
    /// Coefficient of determination, in [0, 1].
    pub r2: f64,
    /// Residual sum of squares (0 exactly for exact data, see the module docs).
    pub rss: f64,
    /// Number of points fitted.
    pub n: usize,
}

impl Fit {
    /// The fitted value at `x` (Horner's rule on the coefficients).
    pub fn predict(&self, x: f64) -> f64 {
        self.coefficients
            .iter()
            .rev()
            .fold(0.0, |acc, &c| acc * x + c)
    }

    /// Number of fitted parameters (the polynomial degree + 1).
    pub fn params(&self) -> usize {
        self.coefficients.len()
    }
}

/// Least-squares line `c0 + c1·x`; `None` for fewer than 3 points, all-identical x, mismatched
/// lengths or a non-finite value.
pub fn fit_linear(xs: &[f64], ys: &[f64]) -> Option<Fit> {
    fit_poly(xs, ys, 1)
}

/// Least-squares parabola `c0 + c1·x + c2·x²`; `None` for fewer than 4 points, fewer than 3
/// distinct x, mismatched lengths or a non-finite value.
pub fn fit_quadratic(xs: &[f64], ys: &[f64]) -> Option<Fit> {
    fit_poly(xs, ys, 2)
}

fn fit_poly(xs: &[f64], ys: &[f64], degree: usize) -> Option<Fit> {
    let p = degree + 1;
    let n = xs.len();
    if n != ys.len() || n < p + 1 || !xs.iter().chain(ys).all(|v| v.is_finite()) {
        return None;
    }
    let mut sorted = xs.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted.dedup();
    if sorted.len() < p {
        return None;
    }
    let (lo, hi) = (sorted[0], sorted[sorted.len() - 1]);
    // Midrange and half-range, written to avoid overflow; s > 0 since there are ≥ 2 distinct x.
    let m = lo / 2.0 + hi / 2.0;
    let s = hi / 2.0 - lo / 2.0;
    let z: Vec<f64> = xs.iter().map(|&x| (x - m) / s).collect();

    // Design matrix, column-major: cols[j][i] = z_i^j.
    let mut cols: Vec<Vec<f64>> = (0..p)
        .map(|j| z.iter().map(|&zi| zi.powi(j as i32)).collect())
        .collect();
    let col_scale = cols.iter().map(|c| norm(c)).fold(0.0_f64, f64::max);
    let mut qty = ys.to_vec();
    let mut r_diag = vec![0.0; p];
    // Householder QR: reflect column k below the diagonal onto e_k, applying the same reflection
    // to the later columns and to y.
    for k in 0..p {
        let alpha = {
            let col = &cols[k][k..];
            let nk = norm(col);
            if nk <= 1e-12 * col_scale {
                return None; // rank-deficient (cannot happen with ≥ p distinct x, kept as a guard)
            }
            if col[0] > 0.0 {
                -nk
            } else {
                nk
            }
        };
        let mut v = cols[k][k..].to_vec();
        v[0] -= alpha;
        let vv = dot(&v, &v);
        let reflect = |w: &mut [f64]| {
            let f = 2.0 * dot(&v, w) / vv;
            w.iter_mut().zip(&v).for_each(|(wi, vi)| *wi -= f * vi);
        };
        for col in cols.iter_mut().skip(k + 1) {
            reflect(&mut col[k..]);
        }
        reflect(&mut qty[k..]);
        r_diag[k] = alpha;
    }
    // Back-substitution R·a = (Qᵀy)[..p]; R[i][j] = cols[j][i] for j > i.
    let mut a = vec![0.0; p];
    for i in (0..p).rev() {
        let tail: f64 = (i + 1..p).map(|j| cols[j][i] * a[j]).sum();
        a[i] = (qty[i] - tail) / r_diag[i];
    }

    let rss_raw: f64 = z
        .iter()
        .zip(ys)
        .map(|(&zi, &y)| {
            let fitted = a.iter().rev().fold(0.0, |acc, &c| acc * zi + c);
            (y - fitted).powi(2)
        })
        .sum();
    let y_max = ys.iter().fold(0.0_f64, |acc, y| acc.max(y.abs()));
    let floor = n as f64 * (RSS_FLOOR_ULPS * f64::EPSILON * y_max).powi(2);
    let rss = if rss_raw <= floor { 0.0 } else { rss_raw };

    let y_mean = crate::analysis::stats::mean(ys)?;
    let tss: f64 = ys.iter().map(|&y| (y - y_mean).powi(2)).sum();
    let r2 = if rss == 0.0 || tss == 0.0 {
        1.0
    } else {
        (1.0 - rss / tss).clamp(0.0, 1.0)
    };

    let coefficients = to_powers_of_x(&a, m, s);
    if !coefficients.iter().all(|c| c.is_finite()) {
        return None;
    }
    Some(Fit {
        coefficients,
        r2,
        rss,
        n,
    })
}

/// Σ a_j·((x − m)/s)^j rewritten as Σ c_k·x^k.
fn to_powers_of_x(a: &[f64], m: f64, s: f64) -> Vec<f64> {
    let mut c = vec![0.0; a.len()];
    // basis = ((x − m)/s)^j as coefficients of x^k, starting at j = 0.
    let mut basis = vec![1.0];
    for &aj in a {
        for (ck, bk) in c.iter_mut().zip(&basis) {
            *ck += aj * bk;
        }
        // basis ← basis · (x/s − m/s)
        let mut next = vec![0.0; basis.len() + 1];
        for (k, &bk) in basis.iter().enumerate() {
            next[k] -= bk * m / s;
            next[k + 1] += bk / s;
        }
        basis = next;
    }
    c
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// Euclidean norm, scaled so squaring cannot overflow.
fn norm(v: &[f64]) -> f64 {
    let big = v.iter().fold(0.0_f64, |acc, x| acc.max(x.abs()));
    if big == 0.0 {
        return 0.0;
    }
    big * v.iter().map(|x| (x / big).powi(2)).sum::<f64>().sqrt()
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

    #[test]
    fn line_through_four_points_hand_computed() {
        // x̄ = 2.5, ȳ = 4.75; Sxy = 9.5, Sxx = 5 → slope 1.9, intercept 0.
        // residuals 0.1 0.2 −0.7 0.4 → RSS 0.70; TSS 18.75 → R² = 1 − 0.7/18.75.
        let f = fit_linear(&[1.0, 2.0, 3.0, 4.0], &[2.0, 4.0, 5.0, 8.0]).unwrap();
        assert_eq!(f.n, 4);
        assert_eq!(f.params(), 2);
        assert!(f.coefficients[0].abs() < 1e-14, "{:?}", f.coefficients);
        assert_rel!(f.coefficients[1], 1.9, 1e-14);
        assert_rel!(f.rss, 0.7, 1e-13);
        assert_rel!(f.r2, 1.0 - 0.7 / 18.75, 1e-14);
        assert_rel!(f.predict(10.0), 19.0, 1e-13);
    }

    #[test]
    fn parabola_hand_computed_with_orthogonal_polynomials() {
        // x = 1..5 (centre 3). y = P2 + P4/2 with P2 = (x−3)² − 2 = [2 −1 −2 −1 2] and
        // P4 = [1 −4 6 −4 1] (orthogonal to 1, x, x² on these points): y = [2.5 −3 1 −3 2.5].
        // Line: ȳ = 0 and Σ(x−3)y = 0 → c = [0, 0], RSS = Σy² = 31.5 = TSS → R² = 0.
        // Parabola: P2 exactly (coefficient Σ P2·y / Σ P2² = 14/14 = 1): y = x² − 6x + 7;
        // RSS = 0.25·Σ P4² = 17.5; R² = 1 − 17.5/31.5 = 4/9.
        let xs = [1.0, 2.0, 3.0, 4.0, 5.0];
        let ys = [2.5, -3.0, 1.0, -3.0, 2.5];
        let l = fit_linear(&xs, &ys).unwrap();
        assert!(l.coefficients.iter().all(|c| c.abs() < 1e-14), "{l:?}");
        assert_rel!(l.rss, 31.5, 1e-14);
        assert_eq!(l.r2, 0.0);
        let q = fit_quadratic(&xs, &ys).unwrap();
        assert_rel!(q.coefficients[0], 7.0, 1e-14);
        assert_rel!(q.coefficients[1], -6.0, 1e-14);
        assert_rel!(q.coefficients[2], 1.0, 1e-14);
        assert_rel!(q.rss, 17.5, 1e-14);
        assert_rel!(q.r2, 4.0 / 9.0, 1e-14);
    }

    #[test]
    fn exactly_linear_bytes_fit_exactly() {
        // y = 1e9 + 3e6·b: the fixed cost and the bytes per sample.
        let xs = [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0];
        let ys: Vec<f64> = xs.iter().map(|b| 1e9 + 3e6 * b).collect();
        let f = fit_linear(&xs, &ys).unwrap();
        assert_rel!(f.coefficients[0], 1e9, 1e-12);
        assert_rel!(f.coefficients[1], 3e6, 1e-12);
        assert_eq!((f.rss, f.r2), (0.0, 1.0));
        // The parabola through a line finds no curvature.
        let q = fit_quadratic(&xs, &ys).unwrap();
        assert_eq!(q.rss, 0.0);
        assert!(q.coefficients[2].abs() < 1e-6, "{q:?}");
    }

    #[test]
    fn large_x_and_large_y_stay_accurate() {
        // x up to 1e5, y up to ~1e12 bytes: y = 1e9 + 5e5·x + 90·x².
        let xs: Vec<f64> = (1..=10).map(|i| 1e4 * i as f64).collect();
        let ys: Vec<f64> = xs.iter().map(|x| 1e9 + 5e5 * x + 90.0 * x * x).collect();
        assert!(ys[9] > 9e11);
        let q = fit_quadratic(&xs, &ys).unwrap();
        assert_rel!(q.coefficients[0], 1e9, 1e-8);
        assert_rel!(q.coefficients[1], 5e5, 1e-9);
        assert_rel!(q.coefficients[2], 90.0, 1e-11);
        assert_eq!((q.rss, q.r2), (0.0, 1.0));
        assert_rel!(q.predict(1e5), ys[9], 1e-13);
        // Far from the origin (x = 100000..100009): the centred basis keeps the fit exact.
        let xs: Vec<f64> = (0..10).map(|i| 1e5 + i as f64).collect();
        let ys: Vec<f64> = xs.iter().map(|x| 7e6 * x + 3e11).collect();
        let l = fit_linear(&xs, &ys).unwrap();
        assert_rel!(l.coefficients[1], 7e6, 1e-9);
        assert_eq!(l.rss, 0.0);
    }

    #[test]
    fn too_few_points_or_identical_x_give_none() {
        let xs = [1.0, 2.0, 3.0, 4.0];
        let ys = [1.0, 3.0, 2.0, 5.0];
        for n in 0..=2 {
            assert_eq!(fit_linear(&xs[..n], &ys[..n]), None, "n = {n}");
        }
        for n in 0..=3 {
            assert_eq!(fit_quadratic(&xs[..n], &ys[..n]), None, "n = {n}");
        }
        assert!(fit_linear(&xs[..3], &ys[..3]).is_some());
        assert!(fit_quadratic(&xs, &ys).is_some());
        // All x identical: no slope can be fitted.
        assert_eq!(fit_linear(&[4.0; 5], &[1.0, 2.0, 3.0, 4.0, 5.0]), None);
        assert_eq!(fit_quadratic(&[4.0; 5], &[1.0, 2.0, 3.0, 4.0, 5.0]), None);
        // Two distinct x cannot fix a parabola, however many points.
        let xs2 = [1.0, 1.0, 2.0, 2.0, 2.0];
        assert!(fit_linear(
            &xs2,
            &ys[..4].iter().chain(&[9.0]).copied().collect::<Vec<_>>()
        )
        .is_some());
        assert_eq!(fit_quadratic(&xs2, &[1.0, 2.0, 3.0, 4.0, 5.0]), None);
    }

    #[test]
    fn mismatched_lengths_and_non_finite_values_give_none() {
        assert_eq!(fit_linear(&[1.0, 2.0, 3.0], &[1.0, 2.0]), None);
        assert_eq!(fit_linear(&[1.0, 2.0, f64::NAN], &[1.0, 2.0, 3.0]), None);
        assert_eq!(
            fit_linear(&[1.0, 2.0, 3.0], &[1.0, f64::INFINITY, 3.0]),
            None
        );
    }

    #[test]
    fn constant_y_is_an_exact_flat_line() {
        let f = fit_linear(&[1.0, 2.0, 3.0], &[5e8; 3]).unwrap();
        assert_eq!((f.rss, f.r2), (0.0, 1.0));
        assert_rel!(f.coefficients[0], 5e8, 1e-14);
        assert!(f.coefficients[1].abs() < 1e-6);
    }

    #[test]
    fn input_order_does_not_matter() {
        let xs = [1.0, 2.0, 3.0, 4.0, 5.0];
        let ys = [2.5, -3.0, 1.0, -3.0, 2.5];
        let a = fit_quadratic(&xs, &ys).unwrap();
        let b = fit_quadratic(&[5.0, 3.0, 1.0, 4.0, 2.0], &[2.5, 1.0, 2.5, -3.0, -3.0]).unwrap();
        for (x, y) in a.coefficients.iter().zip(&b.coefficients) {
            assert_rel!(*x, *y, 1e-13);
        }
        assert_rel!(a.rss, b.rss, 1e-13);
    }
}
