//! memscope: benchmark and memory-profile transformer models (training and inference) on candle,
//! with exact heap accounting. See ARCHITECTURE.md for the code map.

pub mod analysis;
pub mod capped;
pub mod cli;
pub mod environment;
pub mod estimate;
pub mod input;
pub mod instrument;
pub mod kernels;
pub mod measure;
pub mod model;
pub mod output;
pub mod progress;
pub mod quantile;
pub mod record;
pub mod report;
pub mod runner;
pub mod signals;
pub mod spec;
pub mod sweep;
pub mod torch;
pub mod units;
pub mod watch;
