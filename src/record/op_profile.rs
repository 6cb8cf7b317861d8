//! A Record's `profile`: the ops of the steps a recorder session profiled (`Session(...,
//! profile=range(5, 8))`, `python/memscope/_profile.py`): each ATen op by signature and module,
//! per profiled step, with the profiled and plain step times. Costed and drawn by
//! `report::op_profile`.

use serde::{Deserialize, Serialize};

/// A tensor an op read or wrote: (shape, dtype).
pub type Tensor = (Vec<u64>, String);

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct OpProfile {
    /// The steps profiled (indices from 0, warm-up included), and those the session asked for.
    pub steps: Vec<usize>,
    pub asked: Vec<usize>,
    /// `cpu` or `cuda:N`, and PyTorch's version.
    pub device: String,
    pub torch: String,
    /// Median step time of the profiled steps, ms; of the other measured steps (None when every
    /// measured step was profiled).
    pub profiled_step_ms: f64,
    pub plain_step_ms: Option<f64>,
    pub ops: Vec<ProfiledOp>,
    /// Each module's temporaries in its forward, largest first: the most bytes live after any
    /// of its ops beyond what was live at its entry and at its return (the session's own
    /// counter: counted malloc or CUDA allocated). None where not measured (an RSS session, or
    /// a file written before the field).
    #[serde(default)]
    pub temporaries: Option<Vec<ModuleTemporaries>>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ModuleTemporaries {
    pub module: String,
    pub bytes: u64,
}

/// One op signature in one module and phase.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ProfiledOp {
    pub phase: String,
    /// The module's dotted path in the model; `(model)` the model's own forward; empty outside
    /// every module (in backward: a node no module's forward made).
    pub module: String,
    /// ATen's name with its overload.
    pub op: String,
    pub inputs: Vec<Tensor>,
    pub outputs: Vec<Tensor>,
    /// Its bool arguments in order (SDPA's is_causal).
    pub flags: Vec<bool>,
    /// Calls and seconds per profiled step.
    pub calls: f64,
    pub seconds: f64,
}
