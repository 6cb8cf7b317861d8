//! `memscope estimate`: predicted memory by category, peak and FLOPs for a workload, without
//! running it. The prediction replays memscope's own engine (candle 0.11.1, the models in
//! `src/model/`, the workloads in `src/measure/workload.rs`) on shapes only: see [`sim`].
//! Parameters, gradients and optimizer state are exact; activations and the peak follow
//! candle's tensor lifetimes and are checked against measurements in `tests/estimate.rs`.

pub mod backward;
pub mod fits;
pub mod graph;
mod linear_backward;
pub mod models;
pub mod ops;
pub mod sim;
mod step;

use crate::model::config::ModelConfig;
use crate::spec::{Dtype, Mode};
use serde::{Deserialize, Serialize};

pub use step::estimate;

/// The optimizer the estimate assumes. memscope's engine runs AdamW; SGD is for what-if.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Optimizer {
    /// AdamW (two moments per parameter; candle-nn's implementation)
    Adamw,
    /// SGD with momentum (one buffer per parameter)
    Sgd,
}

pub use crate::model::variant::{Attention, Fusion, Precision};

/// What to estimate.
#[derive(Clone, Debug)]
pub struct Request {
    pub cfg: ModelConfig,
    pub mode: Mode,
    pub batch: usize,
    pub seq: usize,
    pub dtype: Dtype,
    pub grad_accum: usize,
    pub optimizer: Optimizer,
    pub prompt_len: usize,
    pub new_tokens: usize,
    /// Activation checkpointing of every transformer block (train).
    pub checkpoint: bool,
    pub attention: Attention,
    /// Op-by-op norms, activations, RoPE, loss and candle-nn's AdamW, or memscope's kernels.
    pub fusion: Fusion,
    /// Mixed precision (train): f32 master weights and state, compute in `dtype`.
    pub precision: Precision,
    /// CPU threads the run uses (gemm keeps one buffer per thread).
    pub threads: usize,
}

impl Request {
    /// The estimate of a run (its engine path included): memscope's engine runs AdamW.
    pub fn for_spec(spec: &crate::spec::Spec) -> Self {
        Self {
            cfg: spec.config.clone(),
            mode: spec.mode,
            batch: spec.batch,
            seq: spec.seq,
            dtype: spec.dtype,
            grad_accum: spec.grad_accum,
            optimizer: Optimizer::Adamw,
            prompt_len: spec.prompt_len,
            new_tokens: spec.new_tokens,
            checkpoint: spec.variant.checkpoint,
            attention: spec.variant.attention,
            fusion: spec.variant.fusion,
            precision: spec.variant.precision,
            threads: spec.threads,
        }
    }
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

/// gemm's per-thread packing slab, L2-sized (read from sysfs; 1 MiB when unknown), on the
/// calling thread and each of the `threads` rayon workers: memscope allocates them all at
/// start-up (`kernels::product`) so that the count does not depend on scheduling.
pub fn runtime_buffers(threads: usize) -> u64 {
    (threads as u64)
        .saturating_add(1)
        .saturating_mul(l2_bytes().unwrap_or(1 << 20))
}

fn l2_bytes() -> Option<u64> {
    let s = std::fs::read_to_string("/sys/devices/system/cpu/cpu0/cache/index2/size").ok()?;
    let s = s.trim();
    let (num, mul) = match s.as_bytes().last()? {
        b'K' => (&s[..s.len() - 1], 1 << 10),
        b'M' => (&s[..s.len() - 1], 1 << 20),
        _ => (s, 1),
    };
    num.parse::<u64>().ok().map(|n| n * mul)
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
