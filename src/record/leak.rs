//! A leak report (`leak --json`, `analyze --json`, and inside a watch file) and what it is made
//! from: the input series, the parameters (with their defaults and range checks), the report, and
//! the targets table. The algorithm is in src/analysis/leak.rs.
//!
//! Invariants: a finished report holds no NaN or ∞ (unknown numbers are `None`); bytes are bytes and
//! slopes are bytes per step.

use serde::{Deserialize, Serialize};

use crate::units::Unit;

/// One memory sample per identical step, taken after the step completes.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MemorySeries {
    /// Step numbers, strictly increasing (may be irregular: a log sampled every 10 steps).
    pub steps: Vec<u64>,
    /// Bytes, one per step.
    pub values: Vec<f64>,
    /// Elapsed seconds per sample, if known.
    pub seconds: Option<Vec<f64>>,
    /// What was measured: "heap live", "RSS", "PSS", or "value".
    pub label: String,
    /// The unit the log was written in (reports show figures in it beside binary units).
    pub unit: Option<Unit>,
    /// Values are memory relative to a baseline (deltas, cumulative changes; may be negative).
    pub relative: bool,
}

/// Every parameter of the verdict (reported with it).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LeakParams {
    /// Confidence of the slope CI on the whole tail.
    pub confidence: f64,
    /// Confidence of each half's CI (the halves gates).
    pub halves_confidence: f64,
    /// Smallest plateau margin, total bytes over the tail.
    pub plateau_min_bytes: f64,
    /// Plateau margin relative to the tail median.
    pub plateau_rel: f64,
    /// δ_leak ≥ this many robust σ of the detrended tail.
    pub leak_noise_k: f64,
    /// Second-half slope below this fraction of the first half's: decelerating.
    pub decel_ratio: f64,
    /// Fewer points after the warm-up cut: inconclusive (6 to 100,000).
    pub min_tail_points: usize,
    /// Fewer samples: no rolling-minimum aggregation.
    pub short_series: usize,
    /// Steps per hour (overrides timestamps).
    pub steps_per_hour: Option<f64>,
    /// Memory budget in bytes, for "steps until the budget is exhausted".
    pub budget_bytes: Option<f64>,
    /// The horizon a "no leak" verdict speaks for, in steps: a rate matters when it would grow
    /// memory by more than the plateau margin within this many steps.
    #[serde(default = "default_horizon")]
    pub horizon_steps: f64,
}

fn default_horizon() -> f64 {
    1000.0
}

impl Default for LeakParams {
    fn default() -> Self {
        LeakParams {
            confidence: 0.99,
            halves_confidence: 0.95,
            plateau_min_bytes: 8.0 * 1048576.0,
            plateau_rel: 0.005,
            leak_noise_k: 3.0,
            decel_ratio: 0.5,
            min_tail_points: 12,
            short_series: 60,
            steps_per_hour: None,
            budget_bytes: None,
            horizon_steps: default_horizon(),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Plateau,
    Leak,
    Decelerating,
    Inconclusive,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Plateau => "plateau",
            Verdict::Leak => "leak",
            Verdict::Decelerating => "decelerating",
            Verdict::Inconclusive => "inconclusive",
        }
    }
}

/// The verdict and every number behind it. Bytes are bytes, slopes are bytes per step.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LeakReport {
    pub verdict: Verdict,
    /// The verdict in one plain sentence.
    pub sentence: String,
    /// Where growth stopped (break of the checked two-segment fit).
    pub warmup_end_step: Option<u64>,
    /// The MSER truncation step (start of the estimation window before refinement).
    pub mser_cut_step: Option<u64>,
    /// First step of the tail used for the trend.
    pub tail_start_step: Option<u64>,
    /// First and last step of the series.
    pub first_step: Option<u64>,
    pub last_step: Option<u64>,
    /// Growth during the warm-up (plateau floor − starting floor).
    pub warmup_growth_bytes: Option<f64>,
    /// Median, min and max of the raw samples after the warm-up (after the tail start when there was
    /// no warm-up): the post-warm-up level and range, whatever the verdict.
    pub plateau_median_bytes: Option<f64>,
    pub plateau_min_bytes: Option<f64>,
    pub plateau_max_bytes: Option<f64>,
    pub slope_bytes_per_step: Option<f64>,
    /// Sen's CI at `params.confidence`: [low, high].
    pub slope_ci_bytes_per_step: Option<[f64; 2]>,
    pub slope_first_half: Option<f64>,
    pub slope_second_half: Option<f64>,
    pub slope_ci_first_half: Option<[f64; 2]>,
    pub slope_ci_second_half: Option<[f64; 2]>,
    /// Hamed–Rao variance inflation applied to the tail (≥ 1).
    pub variance_inflation: Option<f64>,
    pub margin_plateau_bytes: Option<f64>,
    pub margin_leak_bytes: Option<f64>,
    /// (more steps, predicted bytes) at the measured slope (falling slopes are not extrapolated).
    pub extrapolation: Vec<(u64, f64)>,
    pub steps_per_hour: Option<f64>,
    pub growth_bytes_per_hour: Option<f64>,
    pub steps_to_budget: Option<f64>,
    pub hours_to_budget: Option<f64>,
    /// The smallest leak rate this run could have called LEAK.
    pub min_detectable_bytes_per_step: Option<f64>,
    /// More steps that would likely settle an INCONCLUSIVE verdict.
    pub more_steps_needed: Option<u64>,
    pub notes: Vec<String>,
    pub params: LeakParams,
    /// Rolling-minimum window (samples; 1 = raw samples) and stride.
    pub window: usize,
    pub stride: usize,
    pub n_samples: usize,
    /// Points in the trend tail (after aggregation).
    pub tail_len: usize,
    pub label: String,
    /// The last sample: where memory stands now (compared with the budget).
    #[serde(default)]
    pub current_bytes: Option<f64>,
    /// The unit the input was written in, if it was a log (figures are also shown in it).
    #[serde(default)]
    pub unit: Option<Unit>,
    /// The values were relative to a baseline (deltas, cumulative changes), judged the same way.
    #[serde(default)]
    pub relative: bool,
    /// The smallest growth rate that matters: the plateau margin over `params.horizon_steps`.
    /// PLATEAU requires the slope's interval to exclude it (and no significant growth).
    #[serde(default)]
    pub rate_that_matters_bytes_per_step: Option<f64>,
    /// The fitted saturating approach, when growth decelerates towards a level.
    #[serde(default)]
    pub approach: Option<ApproachFit>,
}

/// A saturating warm-up's fit (the method is in src/analysis/approach.rs).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ApproachFit {
    /// The level memory converges to.
    pub level_bytes: f64,
    /// Its interval at `params.confidence`; the upper end is `None` when the data do not bound it.
    pub level_ci_bytes: [Option<f64>; 2],
    /// Time constant of the approach, in steps.
    pub time_constant_steps: f64,
    /// Where the series already is (the fit at the last sample).
    pub fitted_now_bytes: f64,
    /// The step from which the fit stays within the plateau margin of its level.
    pub settled_step: Option<u64>,
}

impl LeakReport {
    /// An INCONCLUSIVE report with nothing measured yet.
    pub fn empty(label: &str, params: LeakParams) -> LeakReport {
        LeakReport {
            verdict: Verdict::Inconclusive,
            sentence: String::new(),
            warmup_end_step: None,
            mser_cut_step: None,
            tail_start_step: None,
            first_step: None,
            last_step: None,
            warmup_growth_bytes: None,
            plateau_median_bytes: None,
            plateau_min_bytes: None,
            plateau_max_bytes: None,
            slope_bytes_per_step: None,
            slope_ci_bytes_per_step: None,
            slope_first_half: None,
            slope_second_half: None,
            slope_ci_first_half: None,
            slope_ci_second_half: None,
            variance_inflation: None,
            margin_plateau_bytes: None,
            margin_leak_bytes: None,
            extrapolation: Vec::new(),
            steps_per_hour: None,
            growth_bytes_per_hour: None,
            steps_to_budget: None,
            hours_to_budget: None,
            min_detectable_bytes_per_step: None,
            more_steps_needed: None,
            notes: Vec::new(),
            params,
            window: 1,
            stride: 1,
            n_samples: 0,
            tail_len: 0,
            current_bytes: None,
            unit: None,
            relative: false,
            rate_that_matters_bytes_per_step: None,
            approach: None,
            label: if label.trim().is_empty() {
                "value".into()
            } else {
                label.to_string()
            },
        }
    }

    /// Replaces every non-finite number by `None` (or drops it from the extrapolation).
    pub(crate) fn drop_non_finite(&mut self) {
        let fin = |v: &mut Option<f64>| {
            if v.is_some_and(|x| !x.is_finite()) {
                *v = None;
            }
        };
        for v in [
            &mut self.warmup_growth_bytes,
            &mut self.plateau_median_bytes,
            &mut self.plateau_min_bytes,
            &mut self.plateau_max_bytes,
            &mut self.slope_bytes_per_step,
            &mut self.slope_first_half,
            &mut self.slope_second_half,
            &mut self.variance_inflation,
            &mut self.margin_plateau_bytes,
            &mut self.margin_leak_bytes,
            &mut self.steps_per_hour,
            &mut self.growth_bytes_per_hour,
            &mut self.steps_to_budget,
            &mut self.hours_to_budget,
            &mut self.min_detectable_bytes_per_step,
            &mut self.current_bytes,
            &mut self.rate_that_matters_bytes_per_step,
        ] {
            fin(v);
        }
        if let Some(a) = &mut self.approach {
            for v in &mut a.level_ci_bytes {
                fin(v);
            }
            if ![a.level_bytes, a.time_constant_steps, a.fitted_now_bytes]
                .iter()
                .all(|v| v.is_finite())
            {
                self.approach = None;
            }
        }
        for ci in [
            &mut self.slope_ci_bytes_per_step,
            &mut self.slope_ci_first_half,
            &mut self.slope_ci_second_half,
        ] {
            if ci.is_some_and(|c| !c.iter().all(|v| v.is_finite())) {
                *ci = None;
            }
        }
        self.extrapolation.retain(|(_, v)| v.is_finite());
    }
}

impl LeakParams {
    /// These parameters with out-of-range values replaced by their defaults, with a note for each.
    pub fn sanitized(&self) -> (LeakParams, Vec<String>) {
        let p = self;
        let d = LeakParams::default();
        let mut q = p.clone();
        let mut notes = Vec::new();
        let mut bad = |name: &str, value: String| {
            notes.push(format!(
                "parameter {name} = {value} is out of range; the default is used"
            ))
        };
        if !(p.confidence > 0.5 && p.confidence < 1.0) {
            bad("confidence", p.confidence.to_string());
            q.confidence = d.confidence;
        }
        if !(p.halves_confidence > 0.5 && p.halves_confidence < 1.0) {
            bad("halves_confidence", p.halves_confidence.to_string());
            q.halves_confidence = d.halves_confidence;
        }
        if !(p.plateau_min_bytes.is_finite() && p.plateau_min_bytes >= 0.0) {
            bad("plateau_min_bytes", p.plateau_min_bytes.to_string());
            q.plateau_min_bytes = d.plateau_min_bytes;
        }
        if !(p.plateau_rel.is_finite() && p.plateau_rel >= 0.0) {
            bad("plateau_rel", p.plateau_rel.to_string());
            q.plateau_rel = d.plateau_rel;
        }
        if !(p.leak_noise_k.is_finite() && p.leak_noise_k >= 0.0) {
            bad("leak_noise_k", p.leak_noise_k.to_string());
            q.leak_noise_k = d.leak_noise_k;
        }
        if !(p.decel_ratio.is_finite() && p.decel_ratio >= 0.0) {
            bad("decel_ratio", p.decel_ratio.to_string());
            q.decel_ratio = d.decel_ratio;
        }
        if !(6..=100_000).contains(&p.min_tail_points) {
            bad("min_tail_points", p.min_tail_points.to_string());
            q.min_tail_points = d.min_tail_points;
        }
        if !p.steps_per_hour.is_none_or(|v| v.is_finite() && v > 0.0) {
            bad("steps_per_hour", format!("{:?}", p.steps_per_hour));
            q.steps_per_hour = None;
        }
        if !(p.horizon_steps.is_finite() && p.horizon_steps >= 1.0) {
            bad("horizon_steps", p.horizon_steps.to_string());
            q.horizon_steps = d.horizon_steps;
        }
        if !p.budget_bytes.is_none_or(|v| v.is_finite() && v >= 0.0) {
            bad("budget_bytes", format!("{:?}", p.budget_bytes));
            q.budget_bytes = None;
        }
        (q, notes)
    }
}

/// One line of the targets table.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TargetRow {
    pub metric: String,
    pub target: String,
    pub achieved: String,
    pub pass: bool,
    /// The limit in bytes (per hour / per step for growth).
    pub limit: f64,
    /// The achieved number, when known.
    pub value: Option<f64>,
}
