//! Sweeps: many configurations, each in its own worker process, every outcome a row.

pub mod cli;
pub mod plan;
pub mod rows;
pub mod run;
pub mod worker;
