//! Differentiable building blocks shared by the model families.
//!
//! candle-nn's fast `layer_norm`, `softmax_last_dim` and `rms_norm` have no backward: gradients
//! silently stop there (DESIGN.md). Everything here is differentiable: memscope's kernels carry
//! their own backward; `tests/models.rs` checks that every parameter receives a gradient.
//! Shape vocabulary: B batch, T query length, S key length, C d_model, H heads, D head dim.

// Linear layers, LayerNorm, RMSNorm, attention and the loss run as fused kernels
// (`src/kernels/`); the op-by-op versions they are tested against are in `unfused.rs`.
pub use crate::kernels::cross_entropy::cross_entropy;
pub use crate::kernels::layer_norm::layer_norm;
pub use crate::kernels::linear::{conv1d, linear};
pub use crate::kernels::rms_norm::rms_norm;

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
