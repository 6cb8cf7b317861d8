//! `memscope worker` (hidden): runs one Spec from stdin for `sweep` and `fit` (see `sweep::worker`).

use crate::sweep::worker::{self, WorkerOptions};
use clap::Args;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Args, Debug)]
pub struct WorkerArgs {
    /// Where the Record goes (written to a temporary file beside it, then renamed)
    #[arg(long, value_name = "FILE")]
    pub out: PathBuf,
    /// Side file: one JSON line per finished step (its memory entry)
    #[arg(long, value_name = "FILE")]
    pub series: Option<PathBuf>,
    /// Position of this configuration in the sweep (for fault injection and messages)
    #[arg(long, default_value_t = 0)]
    pub index: usize,
}

pub fn run(a: WorkerArgs) -> anyhow::Result<ExitCode> {
    worker::run(WorkerOptions {
        out: a.out,
        series: a.series,
        index: a.index,
    })
}
