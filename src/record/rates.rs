//! Rates measured over repetitions, as the peaks files (`memscope peaks`, with either engine)
//! hold them: the best (a ceiling) and the upper-middle median (a rate one run reached).

use serde::{Deserialize, Serialize};

/// A rate measured over several repetitions: the best (the ceiling) and the median.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Rate {
    pub best: f64,
    pub median: f64,
    pub reps: usize,
}

impl Rate {
    /// `work` units per run over each run's seconds → best and median rate.
    pub fn from_secs(work: f64, secs: &[f64]) -> Rate {
        let mut r: Vec<f64> = secs.iter().map(|s| work / s.max(1e-12)).collect();
        r.sort_by(f64::total_cmp);
        Rate {
            best: *r.last().unwrap_or(&0.0),
            median: crate::quantile::upper_median_sorted(&r),
            reps: r.len(),
        }
    }

    /// Best finite, from 10⁻⁶ to 10¹² (GFLOP/s, GB/s or calls/s: beyond any machine either
    /// way; a hand-edited 1e-300 or 1e308 is not a roof), median finite and not negative (a
    /// cache worth reading).
    pub fn plausible(&self) -> bool {
        self.best.is_finite()
            && (1e-6..=1e12).contains(&self.best)
            && self.median.is_finite()
            && self.median >= 0.0
    }
}

/// One matmul shape (m, k) @ (k, n) and its rate.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ShapeRate {
    pub name: String,
    pub m: usize,
    pub k: usize,
    pub n: usize,
    pub gflops: Rate,
}

impl ShapeRate {
    /// GFLOP/s of a product's runs (2·m·k·n FLOPs each).
    pub fn from_secs(name: &str, m: usize, k: usize, n: usize, secs: &[f64]) -> ShapeRate {
        let flops = 2.0 * m as f64 * k as f64 * n as f64;
        ShapeRate {
            name: name.to_string(),
            m,
            k,
            n,
            gflops: Rate::from_secs(flops / 1e9, secs),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn best_and_upper_median_of_the_runs() {
        let r = Rate::from_secs(10.0, &[1.0, 2.0, 0.5, 4.0]);
        assert_eq!((r.best, r.median, r.reps), (20.0, 10.0, 4));
        let s = ShapeRate::from_secs("x", 1000, 1000, 1000, &[1.0]);
        assert_eq!(s.gflops.best, 2.0);
    }
}
