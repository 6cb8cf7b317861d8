//! Sweeps: many configurations, each in its own worker process, every outcome a row.

pub mod plan;
