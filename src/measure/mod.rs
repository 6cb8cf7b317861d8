//! Measurement: the only code that touches the clock and the allocator counters. It never prints
//! and never summarises; it returns raw samples for `analysis` to summarise.

pub mod batches;
pub mod clock;
pub mod peaks;
pub mod phases;
pub mod procfs;
pub mod threads;
pub mod workload;

pub use workload::{measure, measure_with, Measurement};
