//! Transformer models on candle: configs and presets, the three families, parameters and
//! checkpoints, and the analytic cost model. Without the `engine` feature (the Python
//! extension's build) only the plain data is compiled: configs, the cost model, the variant and
//! the purpose, which the Spec and the Record name.

#[cfg(feature = "engine")]
pub mod bert;
#[cfg(feature = "engine")]
mod built;
pub mod config;
pub mod cost;
#[cfg(feature = "engine")]
pub mod gpt2;
#[cfg(feature = "engine")]
pub mod kv_cache;
#[cfg(feature = "engine")]
pub mod llama;
#[cfg(feature = "engine")]
pub mod ops;
pub mod purpose;
#[cfg(feature = "engine")]
pub mod rope;
#[cfg(feature = "engine")]
pub mod segments;
#[cfg(feature = "engine")]
pub mod store;
pub mod variant;
#[cfg(feature = "engine")]
pub mod weights;
#[cfg(feature = "engine")]
pub use built::*;
