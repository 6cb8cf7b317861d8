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
use crate::record::estimate::{
    ActivationRow, Categories, Estimate, Flops, Hotspot, Optimizer, PhaseEstimate,
};
use crate::spec::{Dtype, Mode};

pub use step::estimate;

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
            cfg: spec.arch().clone(),
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

/// gemm's per-thread packing slab, L2-sized (read from sysfs; 1 MiB when unknown), on the
/// calling thread and each of the `threads` rayon workers: memscope allocates them all at
/// start-up (`kernels::product`) so that the count does not depend on scheduling.
pub fn runtime_buffers(threads: usize) -> u64 {
    (1 + threads as u64) * l2_bytes().unwrap_or(1 << 20)
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
