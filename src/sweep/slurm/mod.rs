//! The Slurm backend: the same sweep as `local.rs` (one isolated worker per configuration, a row
//! per outcome, configurations larger than an OOM skipped), run as ONE Slurm job array.
//!
//! `workdir.rs` the files a sweep keeps on the shared filesystem; `submit.rs` the plan, the batch
//! script and `sbatch`; `query.rs` what `squeue`, `sacct`, `scontrol` and `sstat` say (and
//! `scancel`); `classify.rs` a finished task → status and reason; `task_row.rs` a finished task's
//! files → its row; `follow.rs` the loop that turns the array into rows as tasks end.

pub mod classify;
pub mod follow;
pub mod query;
pub mod submit;
pub mod task_row;
pub mod workdir;
