//! `memscope worker` (hidden): runs one Spec for `sweep` and `fit` (see `sweep::worker`): from
//! stdin, or as a Slurm array task from a sweep's work directory (`--plan DIR --index I`).

use crate::sweep::slurm::workdir::WorkDir;
use crate::sweep::worker::{self, WorkerOptions};
use anyhow::bail;
use clap::Args;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Args, Debug)]
pub struct WorkerArgs {
    /// Where the Record goes (written to a temporary file beside it, then renamed)
    #[arg(long, value_name = "FILE", required_unless_present = "plan")]
    pub out: Option<PathBuf>,
    /// Side file: one JSON line per finished step (its memory entry)
    #[arg(long, value_name = "FILE")]
    pub series: Option<PathBuf>,
    /// Position of this configuration in the sweep (for fault injection and messages)
    #[arg(long, default_value_t = 0)]
    pub index: usize,
    /// A Slurm sweep's work directory: run DIR/specs/<INDEX>.json, write DIR/results/<INDEX>.json
    #[arg(long, value_name = "DIR", conflicts_with_all = ["out", "series"])]
    pub plan: Option<PathBuf>,
}

pub fn run(a: WorkerArgs) -> anyhow::Result<ExitCode> {
    let opts = match (&a.plan, a.out) {
        (Some(dir), _) => {
            let d = WorkDir::new(dir);
            if !d.spec(a.index).is_file() {
                bail!(
                    "--plan {} --index {}: no {}",
                    dir.display(),
                    a.index,
                    d.spec(a.index).display()
                );
            }
            WorkerOptions {
                out: d.record(a.index),
                series: Some(d.series(a.index)),
                index: a.index,
                spec_file: Some(d.spec(a.index)),
                start_file: Some(d.start(a.index)),
            }
        }
        (None, Some(out)) => WorkerOptions {
            out,
            series: a.series,
            index: a.index,
            spec_file: None,
            start_file: None,
        },
        (None, None) => bail!("--out FILE or --plan DIR is needed"),
    };
    worker::run(opts)
}
