//! An optimize file (`optimize --json`): the memory-saving variants ranked per sequence length,
//! each with its figures relative to the baseline's.

use serde::{Deserialize, Serialize};

/// One variant's figures at one sequence length, relative to the baseline's.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Figures {
    pub name: String,
    /// The reference row (what a plain PyTorch script runs).
    pub baseline: bool,
    /// The `memscope bench` flags that run it.
    pub flags: String,
    pub seq: usize,
    /// ok, oom, timeout, crashed, error, skipped.
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    pub heap_peak_bytes: Option<u64>,
    /// (peak − baseline peak) / baseline peak, %: against the baseline's measured peak, or its
    /// estimated one when the baseline did not run (`delta_peak_vs`).
    pub delta_peak_pct: Option<f64>,
    /// `measured` or `estimated`: which baseline peak Δ peak is taken against.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delta_peak_vs: Option<String>,
    /// The baseline's estimated heap peak, when Δ peak is taken against it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline_estimated_peak_bytes: Option<u64>,
    pub activations_bytes: Option<u64>,
    pub delta_activations_pct: Option<f64>,
    pub step_median_ms: Option<f64>,
    pub step_cv_pct: Option<f64>,
    pub delta_time_pct: Option<f64>,
    /// The loss of the last measured step (same data and seed in every variant).
    pub loss_last: Option<f64>,
    pub estimated_peak_bytes: Option<u64>,
    /// (estimate − measured) / measured heap peak, %.
    pub estimate_error_pct: Option<f64>,
    /// With --memory-limit: the largest batch that ran within it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_batch: Option<usize>,
}

/// The whole file: what was run and every variant's figures.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OptimizeFile {
    pub model: String,
    pub mode: String,
    pub batch: usize,
    pub seqs: Vec<usize>,
    pub steps: usize,
    pub memory_limit_bytes: Option<u64>,
    /// Ranked per sequence length, lowest heap peak first.
    pub variants: Vec<Figures>,
}

impl OptimizeFile {
    /// The file's text: pretty JSON in field order.
    pub fn to_json(&self) -> serde_json::Result<String> {
        serde_json::to_string_pretty(self)
    }
}
