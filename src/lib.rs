//! memscope: benchmark and memory-profile transformer models (training and inference) on candle,
//! with exact heap accounting. See ARCHITECTURE.md for the code map. Without the `engine`
//! feature (what the Python extension links) only the Spec, the Record, the analysis, the
//! environment, the output rules and the torch engine's messages are compiled: no candle.

pub mod analysis;
pub mod capped;
#[cfg(feature = "engine")]
pub mod cli;
pub mod contract;
pub mod environment;
#[cfg(feature = "engine")]
pub mod estimate;
pub mod export;
pub mod input;
#[cfg(feature = "engine")]
pub mod instrument;
pub mod kernels;
#[cfg(feature = "engine")]
pub mod measure;
pub mod model;
pub mod process_tree;
#[cfg(feature = "engine")]
pub mod progress;
pub mod quantile;
pub mod record;
#[cfg(feature = "engine")]
pub mod report;
#[cfg(feature = "engine")]
pub mod runner;
pub mod signals;
pub mod spec;
pub mod stop;
#[cfg(feature = "engine")]
pub mod sweep;
pub mod torch;
pub mod units;
#[cfg(feature = "engine")]
pub mod watch;
