//! Differentiable building blocks shared by the model families, on the engine path a run's
//! [`Variant`] picks: memscope's fused kernels (`src/kernels/`) or candle's op-by-op versions
//! (`src/kernels/unfused.rs`), fused or naive attention.
//!
//! candle-nn's fast `layer_norm`, `softmax_last_dim` and `rms_norm` have no backward: gradients
//! silently stop there (docs/design.md). Everything here is differentiable: memscope's kernels carry
//! their own backward; `tests/models.rs` checks that every parameter receives a gradient.
//! Shape vocabulary: B batch, T query length, S key length, C d_model, H heads, KV key/value
//! heads, D head dim, N rows.

use crate::instrument::op_timer::timed;
use crate::kernels::attention as kernel;
use crate::kernels::unfused;
use crate::model::variant::{Attention, Fusion, Variant};
use candle_core::{DType, Device, Result, Tensor};

// Linear layers and embeddings are kernels on every path (a matmul is a matmul).
pub use crate::kernels::cross_entropy::cross_entropy;
pub use crate::kernels::linear::{conv1d, linear};

/// The ops of one engine path; the families call these.
#[derive(Clone, Copy, Debug, Default)]
pub struct Ops {
    pub attention: Attention,
    pub fusion: Fusion,
}

impl Ops {
    pub fn new(v: &Variant) -> Self {
        Self {
            attention: v.attention,
            fusion: v.fusion,
        }
    }

    fn fused(&self) -> bool {
        self.fusion == Fusion::Full
    }

    /// LayerNorm over the last dim: (…, C) → (…, C).
    pub fn layer_norm(&self, x: &Tensor, w: &Tensor, b: &Tensor, eps: f64) -> Result<Tensor> {
        if self.fused() {
            return crate::kernels::layer_norm::layer_norm(x, w, b, eps);
        }
        timed("layer norm", || unfused::layer_norm(x, w, b, eps))
    }

    /// RMSNorm over the last dim: (…, C) → (…, C).
    pub fn rms_norm(&self, x: &Tensor, w: &Tensor, eps: f64) -> Result<Tensor> {
        if self.fused() {
            return crate::kernels::rms_norm::rms_norm(x, w, eps);
        }
        timed("rms norm", || unfused::rms_norm(x, w, eps))
    }

    /// GELU, tanh approximation (GPT-2's): any shape.
    pub fn gelu(&self, x: &Tensor) -> Result<Tensor> {
        if self.fused() {
            return crate::kernels::gelu::gelu(x);
        }
        timed("gelu", || x.gelu())
    }

    /// silu(gate) · up: (N, F), (N, F) → (N, F).
    pub fn swiglu(&self, gate: &Tensor, up: &Tensor) -> Result<Tensor> {
        if self.fused() {
            return crate::kernels::swiglu::swiglu(gate, up);
        }
        timed("swiglu", || gate.silu()? * up)
    }

    /// Mean cross-entropy of logits (…, V) against target ids (…) → f32 scalar. The kernel reads
    /// the logits as they are; candle's version flattens them to (N, V) first, as a script does.
    pub fn cross_entropy(&self, logits: &Tensor, targets: &Tensor) -> Result<Tensor> {
        if self.fused() {
            return cross_entropy(logits, targets);
        }
        timed("cross-entropy", || {
            let v = logits.dim(candle_core::D::Minus1)?;
            unfused::cross_entropy(&logits.reshape(((), v))?, &targets.flatten_all()?)
        })
    }

    /// RoPE on a projection's heads: x (B, T, n, D) → rotated (B, n, T, D). The fused kernel
    /// (one pass, no copies; bf16 and f16 rotated in f32 and rounded once) with fusion;
    /// otherwise candle's ops on a transposed copy, as Hugging Face's `rotate_half`.
    pub fn rope(&self, x: &Tensor, cos: &Tensor, sin: &Tensor) -> Result<Tensor> {
        if self.fused() {
            return crate::kernels::rope::rope(x, cos, sin);
        }
        timed("rope", || {
            unfused::rope(&x.transpose(1, 2)?.contiguous()?, cos, sin)
        }) // (B, n, T, D)
    }

    /// The additive causal mask (T, S) naive attention adds to its scores (S = offset + T);
    /// none for the kernel, for a single query, or when not causal.
    pub fn causal_mask(
        &self,
        t: usize,
        offset: usize,
        dtype: DType,
        dev: &Device,
    ) -> Result<Option<Tensor>> {
        if self.attention == Attention::Fused || t == 1 {
            return Ok(None);
        }
        unfused::causal_mask(t, offset, dtype, dev).map(Some)
    }

    /// Causal attention over a packed projection `qkv` (B, T, 3C) of `heads` heads → (B, T, C).
    pub fn attention_packed(
        &self,
        qkv: &Tensor,
        heads: usize,
        mask: Option<&Tensor>,
    ) -> Result<Tensor> {
        let (b, t, c3) = qkv.dims3()?;
        let c = c3 / 3;
        if self.attention == Attention::Fused {
            return kernel::packed(qkv, heads, true); // (B, T, C)
        }
        let r = qkv
            .reshape((b, t, 3, heads, c / heads))?
            .permute((2, 0, 3, 1, 4))?; // (3, B, H, T, D) view
        self.attention_split(&r.get(0)?, &r.get(1)?, &r.get(2)?, true, mask)
    }

    /// Attention over q (B, H, T, D), k and v (B, KV, S, D), any strides with a contiguous head
    /// dim → (B, T, H·D). Naive: contiguous copies, K/V heads repeated for grouped-query
    /// attention (Hugging Face's `repeat_kv`), scores and probabilities (B, H, T, S) kept.
    pub fn attention_split(
        &self,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        causal: bool,
        mask: Option<&Tensor>,
    ) -> Result<Tensor> {
        let (b, h, t, d) = q.dims4()?;
        if self.attention == Attention::Fused {
            return kernel::split(q, k, v, causal); // (B, T, H·D)
        }
        timed("attention", || {
            let rep = h / k.dim(1)?;
            let (q, k, v) = (q.contiguous()?, k.contiguous()?, v.contiguous()?);
            let (k, v) = (repeat_kv(&k, rep)?, repeat_kv(&v, rep)?); // (B, H, S, D)
            let y = unfused::attention(&q, &k, &v, mask)?; // (B, H, T, D)
            y.transpose(1, 2)?.reshape((b, t, h * d)) // (B, T, H·D), a copy
        })
    }
}

/// (B, KV, S, D) → (B, KV·rep, S, D), each K/V head repeated for the `rep` query heads that
/// share it.
fn repeat_kv(x: &Tensor, rep: usize) -> Result<Tensor> {
    if rep == 1 {
        return Ok(x.clone());
    }
    let (b, kv, s, d) = x.dims4()?;
    x.unsqueeze(2)?
        .broadcast_as((b, kv, rep, s, d))?
        .reshape((b, kv * rep, s, d)) // a copy
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{DType, Device, Tensor};

    #[test]
    fn cross_entropy_of_uniform_logits_is_ln_vocab() {
        let logits = Tensor::zeros((3, 10), DType::F32, &Device::Cpu).unwrap();
        let targets = Tensor::new(&[1u32, 5, 9], &Device::Cpu).unwrap();
        let l = cross_entropy(&logits, &targets)
            .unwrap()
            .to_scalar::<f32>()
            .unwrap();
        assert!((l - (10f32).ln()).abs() < 1e-6);
    }
}
