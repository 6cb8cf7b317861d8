//! Analysis: pure functions from Records (or their raw samples) to results. No candle, no I/O.

pub mod fit;
pub mod scaling;
pub mod stats;
pub mod timing;
