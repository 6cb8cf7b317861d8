//! Fused CPU kernels as candle custom ops: one pass over memory where candle's op-by-op graph
//! makes many, and backward rules that keep nothing the gradient does not need.
//!
//! Each kernel computes in f32 (bf16 and f16 inputs are widened per element) and has a
//! reference test against the unfused candle ops it replaces (`src/kernels/unfused.rs`) and a
//! finite-difference gradient check. The estimator mirrors them as `Fused` sim ops
//! (`src/estimate/sim.rs`); `tests/estimate.rs` checks the two agree on memory.
//! Shape vocabulary: N rows, C features, V vocabulary. Without the `engine` feature only
//! `amx_tiles` (the CPU probe the environment reports) is compiled.

#[cfg(feature = "engine")]
pub mod adamw;
#[cfg(feature = "engine")]
pub mod amx_bf16;
pub mod amx_tiles;
#[cfg(feature = "engine")]
pub mod attention;
#[cfg(feature = "engine")]
pub mod cross_entropy;
#[cfg(feature = "engine")]
pub mod dot_bf16;
#[cfg(feature = "engine")]
pub mod elems;
#[cfg(feature = "engine")]
pub mod embedding;
#[cfg(feature = "engine")]
pub mod gelu;
#[cfg(feature = "engine")]
pub mod half_bits;
#[cfg(feature = "engine")]
pub mod layer_norm;
#[cfg(feature = "engine")]
pub mod linear;
#[cfg(feature = "engine")]
pub mod linear_half;
#[cfg(feature = "engine")]
pub mod pairs;
#[cfg(feature = "engine")]
pub mod panels;
#[cfg(feature = "engine")]
pub mod product;
#[cfg(feature = "engine")]
pub mod rms_norm;
#[cfg(feature = "engine")]
pub mod rope;
#[cfg(feature = "engine")]
pub mod sgd;
#[cfg(feature = "engine")]
pub mod simd;
#[cfg(feature = "engine")]
pub mod sink;
#[cfg(feature = "engine")]
pub mod strips;
#[cfg(feature = "engine")]
pub mod swiglu;
#[cfg(feature = "engine")]
pub mod transpose;
#[cfg(feature = "engine")]
pub mod unfused;
#[cfg(feature = "engine")]
pub mod widen;

#[cfg(test)]
#[cfg(feature = "engine")]
pub mod check;
