//! An estimate file (`estimate --json`): the first dtype's prediction at the top level, every
//! dtype's under `by_dtype`, and `--fits`' answer under `fits`. Keys are written sorted at every
//! level (the file is serialised through a JSON value).

use crate::model::variant::{Attention, Fusion, Precision};
use crate::spec::{Dtype, Mode};
use serde::{Deserialize, Serialize};

/// The optimizer the estimate assumes. memscope's engine runs AdamW; SGD is for what-if.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Optimizer {
    /// AdamW (two moments per parameter; candle-nn's implementation)
    Adamw,
    /// SGD with momentum (one buffer per parameter)
    Sgd,
}

/// Bytes by category. At the peak, `temporaries` is what the peak holds beyond the others.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Categories {
    pub parameters: u64,
    pub gradients: u64,
    pub optimizer_state: u64,
    pub activations: u64,
    pub kv_cache: u64,
    pub temporaries: u64,
    /// Buffers the math library keeps after its first call, not tensors: gemm's packing slab,
    /// one L2-cache-sized buffer per thread that ran a product (the calling thread, plus every
    /// rayon worker once products are split across threads). See [`runtime_buffers`].
    pub runtime_buffers: u64,
}

/// Saved activations of one module, by kind.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ActivationRow {
    pub module: String,
    pub kind: String,
    pub bytes: u64,
}

/// A phase as the counting allocator would measure it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PhaseEstimate {
    pub phase: String,
    /// Heap peak while the phase runs (everything live, not only the phase's own bytes).
    pub peak_bytes: u64,
    /// Bytes the phase allocated that are still live when it ends.
    pub retained_bytes: i64,
}

/// Matrix-multiply FLOPs of one optimizer step (all micro-batches), 2·m·k·n per product.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Flops {
    pub forward: u64,
    pub backward: u64,
    pub total: u64,
}

/// Live bytes by module at a phase's peak.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Hotspot {
    pub module: String,
    pub bytes: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Estimate {
    pub model: String,
    pub mode: Mode,
    pub dtype: Dtype,
    pub batch: usize,
    pub seq: usize,
    pub grad_accum: usize,
    pub optimizer: Optimizer,
    pub checkpoint: bool,
    pub attention: Attention,
    #[serde(default)]
    pub fusion: Fusion,
    #[serde(default)]
    pub precision: Precision,
    pub params: u64,
    pub categories: Categories,
    /// Predicted heap peak of a steady-state step.
    pub peak_bytes: u64,
    /// The phase the peak falls in.
    pub peak_phase: String,
    pub phases: Vec<PhaseEstimate>,
    pub activations: Vec<ActivationRow>,
    pub flops: Flops,
    /// Live bytes by module at the forward and backward peaks (train) or the forward peak.
    pub hotspots_forward: Vec<Hotspot>,
    pub hotspots_backward: Vec<Hotspot>,
    /// What the estimate cannot see, said once.
    pub notes: Vec<String>,
}

/// One what-if: a single change to the request and the peak it predicts.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Change {
    pub change: String,
    pub peak_bytes: u64,
    pub fits: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FitReport {
    pub budget_bytes: u64,
    pub peak_bytes: u64,
    pub fits: bool,
    /// Budget minus peak (negative: over by that much).
    pub headroom_bytes: i64,
    /// Single changes that lower the peak, each tried alone, smallest peak first. Empty when it
    /// already fits.
    pub changes: Vec<Change>,
}

/// The whole file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EstimateFile {
    /// The first dtype's estimate, at the top level.
    #[serde(flatten)]
    pub first: Estimate,
    /// Every dtype asked for, the first included.
    pub by_dtype: Vec<Estimate>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fits: Option<FitReport>,
}

impl EstimateFile {
    /// The file's text: pretty JSON with every object's keys sorted.
    pub fn to_json(&self) -> serde_json::Result<String> {
        serde_json::to_string_pretty(&serde_json::to_value(self)?)
    }
}
