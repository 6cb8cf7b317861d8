//! `memscope scaling`: the scaling analysis of a sweep's --jsonl file.

use crate::out;
use crate::record::sweep_row;
use anyhow::bail;
use clap::Args;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Args, Debug)]
pub struct ScalingArgs {
    /// A sweep's --jsonl file
    #[arg(value_name = "RESULTS.jsonl")]
    pub file: PathBuf,
}

pub fn run(a: ScalingArgs) -> anyhow::Result<ExitCode> {
    let (rows, warnings) = sweep_row::read_jsonl(&a.file)?;
    for w in warnings {
        eprintln!("warning: {w}");
    }
    if rows.is_empty() {
        bail!(
            "{}: no rows (was it written by sweep --jsonl?)",
            a.file.display()
        );
    }
    out!("{}", crate::report::scaling::render(&rows))?;
    Ok(ExitCode::SUCCESS)
}
