//! A pipeline's step played out from its schedule's action list (`analysis::pipeline_time`):
//! the step, each transfer between ranks, and each rank's busy and idle time, ms.

use serde::{Deserialize, Serialize};

/// One rank's share of the played-out step, ms.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RankPlay {
    pub rank: usize,
    /// Its actions' own time.
    pub busy_ms: f64,
    /// When its last action ended.
    pub end_ms: f64,
    /// Its waits before and between its actions (end − busy): its share of the bubble.
    pub idle_ms: f64,
    /// Its end plus what it runs after its schedule.
    pub step_ms: f64,
}

/// The played-out step.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PipelinePlay {
    /// The step: the latest rank's `step_ms`.
    pub step_ms: f64,
    /// Each transfer of hidden states or their gradient between ranks, ms (0 without a link).
    pub transfer_ms: f64,
    /// Transfers between ranks a step.
    pub transfers: usize,
    pub ranks: Vec<RankPlay>,
}
