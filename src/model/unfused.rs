//! The op-by-op candle versions of LayerNorm, RMSNorm and cross-entropy that memscope ran
//! before its fused kernels (`src/kernels/`): the references the kernels are tested against,
//! and what a user comparing engines can run. Differentiable through candle's own rules.
//! Shape vocabulary: N rows, C features, V vocabulary.

use super::ops::in_f32;
use candle_core::{DType, Result, Tensor, D};

/// LayerNorm over the last dim: (…, C) → (…, C).
pub fn layer_norm(x: &Tensor, w: &Tensor, b: &Tensor, eps: f64) -> Result<Tensor> {
    let y = in_f32(x, |x| {
        let mean = x.mean_keepdim(D::Minus1)?; // (…, 1)
        let xc = x.broadcast_sub(&mean)?; // (…, C)
        let var = xc.sqr()?.mean_keepdim(D::Minus1)?; // (…, 1)
        xc.broadcast_div(&(var + eps)?.sqrt()?)
    })?;
    y.broadcast_mul(w)?.broadcast_add(b)
}

/// RMSNorm over the last dim: (…, C) → (…, C).
pub fn rms_norm(x: &Tensor, w: &Tensor, eps: f64) -> Result<Tensor> {
    let y = in_f32(x, |x| {
        let ms = x.sqr()?.mean_keepdim(D::Minus1)?; // (…, 1)
        x.broadcast_div(&(ms + eps)?.sqrt()?)
    })?;
    y.broadcast_mul(w)
}

/// Mean cross-entropy of logits (N, V) against target ids (N,) u32, computed in f32 → scalar.
pub fn cross_entropy(logits: &Tensor, targets: &Tensor) -> Result<Tensor> {
    let logits = logits.to_dtype(DType::F32)?; // (N, V)
    let max = logits.max_keepdim(D::Minus1)?.detach(); // (N, 1)
    let shifted = logits.broadcast_sub(&max)?; // (N, V)
    let lse = shifted.exp()?.sum_keepdim(D::Minus1)?.log()?; // (N, 1)
    let picked = shifted.gather(&targets.unsqueeze(1)?, 1)?; // (N, 1)
    (lse - picked)?.mean_all() // ()
}
