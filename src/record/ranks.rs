//! A data-parallel run's ranks (`--nproc N --parallel PLAN`): each rank's own figures, kept in
//! the Record beside the worst rank's full figures (`analysis::ranks` picks it).

use serde::{Deserialize, Serialize};

/// One rank of a data-parallel run, as its own recorder measured it. Memory figures measure what
/// the Record's do: heap (the counting allocator) on the CPU, the caching allocator's allocated
/// bytes on CUDA.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RankFigures {
    /// The rank (torchrun's `RANK`).
    pub rank: usize,
    /// Peak over the whole run, bytes.
    pub peak_bytes: u64,
    /// Live after the last step, bytes.
    pub end_bytes: u64,
    /// CUDA: the caching allocator's largest reserved bytes after a step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reserved_bytes: Option<u64>,
    /// The rank's own parameters, bytes (its shards under FSDP; the whole model under DDP).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parameter_bytes: Option<u64>,
    /// Median and spread (cv %) of its measured steps, ms.
    pub step_median_ms: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_cv_pct: Option<f64>,
    /// The collectives it ran in its last step, by kind.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub collectives: Option<super::collectives::StepCollectives>,
    /// The rank whose figures the Record holds: the largest peak (the lowest rank on a tie).
    pub worst: bool,
    /// `--parallel pp:P`: the peak the torch estimator predicted for this rank (its own stages
    /// traced as it), measuring what `peak_bytes` measures.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub predicted_peak_bytes: Option<u64>,
}
