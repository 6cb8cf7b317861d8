//! The op-by-op candle versions of LayerNorm, RMSNorm, RoPE, attention and cross-entropy that memscope ran
//! before its fused kernels (`src/kernels/`): the references the kernels are tested against,
//! and what a user comparing engines can run. Differentiable through candle's own rules.
//! Shape vocabulary: N rows, C features, V vocabulary, B batch, H heads, T query length,
//! S key length, D head dim.

use candle_core::{DType, Device, Result, Tensor, D};

/// Runs `f` in f32 when `x` is a half type, for the reductions that lose precision in bf16/f16.
pub(crate) fn in_f32(x: &Tensor, f: impl FnOnce(&Tensor) -> Result<Tensor>) -> Result<Tensor> {
    let dtype = x.dtype();
    if dtype == DType::F32 || dtype == DType::F64 {
        f(x)
    } else {
        f(&x.to_dtype(DType::F32)?)?.to_dtype(dtype)
    }
}

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

/// RoPE as Hugging Face's `rotate_half` writes it: x·cos + rotate_half(x)·sin, where
/// rotate_half(x) = [-x₂, x₁]. x (B, H, T, D) contiguous, cos and sin (T, D) → (B, H, T, D).
pub fn rope(x: &Tensor, cos: &Tensor, sin: &Tensor) -> Result<Tensor> {
    let half = x.dim(D::Minus1)? / 2;
    let x1 = x.narrow(D::Minus1, 0, half)?; // (B, H, T, D/2)
    let x2 = x.narrow(D::Minus1, half, half)?; // (B, H, T, D/2)
    let rotated = Tensor::cat(&[&x2.neg()?, &x1], D::Minus1)?; // (B, H, T, D)
    x.broadcast_mul(cos)? + rotated.broadcast_mul(sin)?
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
