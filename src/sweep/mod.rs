//! Sweeps: many configurations, each in its own worker process, every outcome a row.

pub mod classify;
pub mod eta;
pub mod interrupt;
pub mod largest;
pub mod limits;
pub mod local;
pub mod plan;
pub mod progress;
pub mod rows;
pub mod scratch;
pub mod slurm;
pub mod spawn;
pub mod variant_figures;
pub mod variants;
pub mod worker;
