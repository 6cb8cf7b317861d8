//! Analysis: pure functions from Records (or their raw samples) to results. No candle, no I/O.

pub mod aggregate;
pub mod approach;
pub mod aten_cost;
pub mod bootstrap;
pub mod breakdown;
pub mod compare;
pub mod complete;
pub mod diff;
pub mod leak;
pub mod leak_rules;
pub mod leak_text;
pub mod least_squares;
pub mod op_cost;
pub mod op_profile;
pub mod profile_tree;
pub mod ranks;
pub mod record_series;
pub mod roofline;
pub mod scaling;
pub mod stats;
pub mod targets;
pub mod timing;
pub mod torch_roofline;
pub mod torch_time;
pub mod trend;
pub mod warmup;
