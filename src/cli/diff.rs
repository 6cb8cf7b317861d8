//! `memscope diff BASE NEW`: two Records' memory side by side and what moved the peak.

use super::flags::{MarkdownOut, Quiet};
use crate::analysis::diff::diff;
use crate::export::{check_outputs, write_atomic};
use crate::out;
use crate::record::detect::{load, Input};
use crate::report::diff::to_markdown;
use anyhow::{bail, Context};
use clap::Args;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Args, Debug)]
pub struct DiffArgs {
    /// The reference Record (bench --json, leak --record)
    pub base: PathBuf,
    /// The Record to compare with it
    pub new: PathBuf,
    #[command(flatten)]
    pub markdown: MarkdownOut,
    #[command(flatten)]
    pub quiet: Quiet,
}

pub fn run(a: DiffArgs) -> anyhow::Result<ExitCode> {
    check_outputs(
        &[("--markdown", a.markdown.as_deref())],
        &[("BASE", &a.base), ("NEW", &a.new)],
    )?;
    let (b, n) = (load(&a.base)?, load(&a.new)?);
    let (Input::Record(x), Input::Record(y)) = (&b.input, &n.input) else {
        bail!(
            "{} is {} and {} {}: diff takes two Records (bench --json, leak --record)",
            b.name,
            b.input.a_kind(),
            n.name,
            n.input.a_kind()
        );
    };
    for (r, named) in [(x, &b), (y, &n)] {
        if !r.memory.counting {
            bail!(
                "diff needs counted heap figures, and {} has none: {}",
                named.name,
                r.why_not_counted()
            );
        }
    }
    let mut md = to_markdown(&b.name, &n.name, &diff(x, y));
    let unlike = crate::analysis::compare::workloads_differ(&x.spec, &y.spec);
    if !unlike.is_empty() {
        // Said before any figure: rows of unlike runs differ by the runs, not by a change.
        let note = format!(
            "**Unlike runs** ({}): the differences below are the workloads' and engines', not a change's.\n\n",
            unlike.join("; ")
        );
        eprintln!(
            "warning: {} and {} are unlike runs: {}",
            b.name,
            n.name,
            unlike.join("; ")
        );
        md.insert_str(0, &note);
    }
    if let Some(p) = &*a.markdown {
        write_atomic(p, &md).with_context(|| format!("--markdown {}", p.display()))?;
    }
    out!("{md}")?;
    Ok(ExitCode::SUCCESS)
}
