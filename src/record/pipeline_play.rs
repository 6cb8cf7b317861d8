//! A pipeline's schedule as its actions (what the torch trace reads from PyTorch's
//! `pipeline_order`), and its step played out from them (`analysis::pipeline_time`): the step,
//! each transfer between ranks, and each rank's busy and idle time, ms.

use serde::{Deserialize, Serialize};

/// What an action runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// A stage's forward of one micro-batch.
    Forward,
    /// A stage's whole backward of one micro-batch.
    Backward,
    /// Its backward for the input's gradient only (zero-bubble schedules).
    Input,
    /// Its backward for the weights' gradients only, after `Input`.
    Weight,
}

impl Kind {
    /// PyTorch's letter for it (`_ComputationType`'s value): F, B, I, W.
    pub fn of_letter(letter: &str) -> Option<Kind> {
        Some(match letter {
            "F" => Kind::Forward,
            "B" => Kind::Backward,
            "I" => Kind::Input,
            "W" => Kind::Weight,
            _ => return None,
        })
    }
}

/// One action of a rank's schedule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Action {
    pub kind: Kind,
    pub stage: usize,
    pub micro: usize,
}

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
