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
    let (rows, warnings) = sweep_row::read_jsonl(&a.file).map_err(|e| {
        // Another memscope file (a Record, an estimate, …): say what it is.
        match crate::record::detect::load(&a.file) {
            Ok(n) if !matches!(n.input, crate::record::detect::Input::Sweep(_)) => anyhow::anyhow!(
                "{} is a {}, not a sweep: scaling reads the rows a sweep writes (sweep --jsonl FILE)",
                a.file.display(),
                n.input.kind()
            ),
            _ => e,
        }
    })?;
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
