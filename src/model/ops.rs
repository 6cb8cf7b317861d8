//! Differentiable building blocks shared by the model families.
//!
//! candle-nn's fast `layer_norm`, `softmax_last_dim` and `rms_norm` have no backward: gradients
//! silently stop there (DESIGN.md). Everything here is built from ops that candle can
//! differentiate; `tests/models.rs` checks that every parameter receives a gradient.
//! Shape vocabulary: B batch, T query length, S key length, C d_model, H heads, D head dim.

use candle_core::{DType, Device, Result, Tensor, D};

/// `x (N, in) @ w (out, in)ᵀ + b` → (N, out). The PyTorch `nn.Linear` weight layout.
pub fn linear(x: &Tensor, w: &Tensor, b: Option<&Tensor>) -> Result<Tensor> {
    let y = x.matmul(&w.t()?)?; // (N, out)
    match b {
        Some(b) => y.broadcast_add(b),
        None => Ok(y),
    }
}

/// `x (N, in) @ w (in, out) + b` → (N, out). GPT-2's `Conv1D` weight layout.
pub fn conv1d(x: &Tensor, w: &Tensor, b: &Tensor) -> Result<Tensor> {
    x.matmul(w)?.broadcast_add(b) // (N, out)
}

/// Runs `f` in f32 when `x` is a half type, for the reductions that lose precision in bf16/f16.
pub(crate) fn in_f32(x: &Tensor, f: impl FnOnce(&Tensor) -> Result<Tensor>) -> Result<Tensor> {
    let dtype = x.dtype();
    if dtype == DType::F32 || dtype == DType::F64 {
        f(x)
    } else {
        f(&x.to_dtype(DType::F32)?)?.to_dtype(dtype)
    }
}

// LayerNorm, RMSNorm and the loss run as fused kernels (`src/kernels/`); the op-by-op
// versions they are tested against are in `unfused.rs`.
pub use crate::kernels::cross_entropy::cross_entropy;
pub use crate::kernels::layer_norm::layer_norm;
pub use crate::kernels::rms_norm::rms_norm;

/// Softmax over the last dim. The max is detached: softmax does not depend on the shift, so
/// no gradient needs to flow through it.
pub fn softmax_last(x: &Tensor) -> Result<Tensor> {
    let max = x.max_keepdim(D::Minus1)?.detach(); // (…, 1)
    let e = x.broadcast_sub(&max)?.exp()?; // (…, S)
    let sum = e.sum_keepdim(D::Minus1)?; // (…, 1)
    e.broadcast_div(&sum)
}

/// Additive causal mask for `t` queries at positions `offset..offset+t` over `offset+t` keys:
/// 0 where key ≤ query position, -inf after. (T, S), S = offset + T.
pub fn causal_mask(t: usize, offset: usize, dtype: DType, device: &Device) -> Result<Tensor> {
    let s = offset + t;
    let data: Vec<f32> = (0..t)
        .flat_map(|i| {
            (0..s).map(move |j| {
                if j > i + offset {
                    f32::NEG_INFINITY
                } else {
                    0.0
                }
            })
        })
        .collect();
    Tensor::from_vec(data, (t, s), device)?.to_dtype(dtype) // (T, S)
}

/// Scaled dot-product attention. q (B, H, T, D), k and v (B, H, S, D), mask (T, S) or none
/// → (B, H, T, D).
pub fn attention(q: &Tensor, k: &Tensor, v: &Tensor, mask: Option<&Tensor>) -> Result<Tensor> {
    let d = q.dim(D::Minus1)?;
    let scores = (q.matmul(&k.t()?)? * (1.0 / (d as f64).sqrt()))?; // (B, H, T, S)
    let scores = match mask {
        Some(m) => scores.broadcast_add(m)?, // (B, H, T, S)
        None => scores,
    };
    let probs = in_f32(&scores, softmax_last)?; // (B, H, T, S)
    probs.matmul(v) // (B, H, T, D)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn causal_mask_hides_only_the_future() {
        let m = causal_mask(2, 1, DType::F32, &Device::Cpu).unwrap();
        let v: Vec<Vec<f32>> = m.to_vec2().unwrap();
        assert_eq!(v[0], vec![0.0, 0.0, f32::NEG_INFINITY]);
        assert_eq!(v[1], vec![0.0, 0.0, 0.0]);
    }

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

    #[test]
    fn softmax_rows_sum_to_one_and_match_candle() {
        let x = Tensor::new(&[[1f32, 2.0, 3.0], [-1.0, 0.0, 10.0]], &Device::Cpu).unwrap();
        let ours: Vec<Vec<f32>> = softmax_last(&x).unwrap().to_vec2().unwrap();
        let theirs: Vec<Vec<f32>> = candle_nn::ops::softmax_last_dim(&x)
            .unwrap()
            .to_vec2()
            .unwrap();
        for (a, b) in ours.iter().flatten().zip(theirs.iter().flatten()) {
            assert!((a - b).abs() < 1e-6);
        }
    }
}
