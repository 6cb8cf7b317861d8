//! `memscope report FILE… -o report.html`: reads Records, leak verdicts, estimates, sweeps and
//! rooflines (recognised by content) and writes one self-contained HTML page of charts.

use super::flags::Quiet;
use crate::export::{check_outputs, write_atomic};
use crate::outln;
use crate::record::detect::load;
use crate::report::html;
use crate::units::fmt_bytes;
use anyhow::Context;
use clap::Args;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Args, Debug)]
pub struct ReportArgs {
    /// Records (bench --json, leak --record), leak verdicts (leak/analyze --json), estimates
    /// (estimate --json), sweeps (sweep --jsonl), rooflines (roofline --json); several of one
    /// kind share a chart
    #[arg(value_name = "FILE", required = true)]
    pub files: Vec<PathBuf>,
    /// The HTML file to write (self-contained: inline SVG and CSS, no script, no network)
    #[arg(long, short = 'o', value_name = "FILE")]
    pub output: PathBuf,
    #[command(flatten)]
    pub quiet: Quiet,
}

pub fn run(a: ReportArgs) -> anyhow::Result<ExitCode> {
    let inputs: Vec<(&str, &std::path::Path)> =
        a.files.iter().map(|f| ("FILE", f.as_path())).collect();
    check_outputs(&[("--output", Some(a.output.as_path()))], &inputs)?;
    let inputs = a
        .files
        .iter()
        .map(|f| load(f))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let page = html::render(&inputs)?;
    write_atomic(&a.output, &page).with_context(|| format!("--output {}", a.output.display()))?;
    let charts = html::chart_ids(&page);
    outln!(
        "{}: {} ({} bytes), {} chart(s): {}",
        a.output.display(),
        fmt_bytes(page.len() as f64),
        page.len(),
        charts.len(),
        charts.join(", ")
    )?;
    Ok(ExitCode::SUCCESS)
}
