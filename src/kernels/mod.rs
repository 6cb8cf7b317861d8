//! Fused CPU kernels as candle custom ops: one pass over memory where candle's op-by-op graph
//! makes many, and backward rules that keep nothing the gradient does not need.
//!
//! Each kernel computes in f32 (bf16 and f16 inputs are widened per element) and has a
//! reference test against the unfused candle ops it replaces (`src/kernels/unfused.rs`) and a
//! finite-difference gradient check. The estimator mirrors them as `Fused` sim ops
//! (`src/estimate/sim.rs`); `tests/estimate.rs` checks the two agree on memory.
//! Shape vocabulary: N rows, C features, V vocabulary.

pub mod adamw;
pub mod amx_bf16;
pub mod amx_tiles;
pub mod attention;
pub mod cross_entropy;
pub mod dot_bf16;
pub mod elems;
pub mod embedding;
pub mod gelu;
pub mod half_bits;
pub mod layer_norm;
pub mod linear;
pub mod linear_half;
pub mod pairs;
pub mod panels;
pub mod product;
pub mod rms_norm;
pub mod rope;
pub mod sgd;
pub mod simd;
pub mod sink;
pub mod strips;
pub mod swiglu;
pub mod transpose;
pub mod unfused;
pub mod widen;

#[cfg(test)]
pub mod check;
