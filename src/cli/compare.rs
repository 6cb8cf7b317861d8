//! `memscope compare BASE NEW`: two Records (or two sweeps' JSONL) figure by figure, with a
//! bootstrap interval on each difference of medians; exit 1 when anything regressed beyond the
//! threshold (for CI).

use super::flags::{JsonOut, MarkdownOut, Quiet, Seed};
use crate::analysis::bootstrap::BootstrapParams;
use crate::analysis::compare::{records, sweeps};
use crate::export::{check_outputs, write_atomic};
use crate::out;
use crate::record::detect::{load, Input};
use crate::report::compare::{to_json, to_markdown};
use anyhow::{bail, Context};
use clap::Args;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Args, Debug)]
#[command(mut_arg("seed", |a| a.help(r#"Seed of the bootstrap (the same inputs and seed give the same intervals)"#)))]
pub struct CompareArgs {
    /// The reference: a Record (bench --json, leak --record) or a sweep's --jsonl
    pub base: PathBuf,
    /// The run to judge, of the same kind as BASE
    pub new: PathBuf,
    /// Noise threshold: smaller changes are "no change" (a percentage, e.g. 2%)
    #[arg(long, default_value = "2%", value_name = "PERCENT")]
    pub threshold: String,
    /// Bootstrap resamples for each interval
    #[arg(long, default_value_t = 10_000)]
    pub resamples: usize,
    #[command(flatten)]
    pub seed: Seed,
    /// Confidence of the intervals, in (0, 1)
    #[arg(long, default_value_t = 0.95)]
    pub confidence: f64,
    #[command(flatten)]
    pub json: JsonOut,
    #[command(flatten)]
    pub markdown: MarkdownOut,
    /// Compare two Records of different workloads (model, shape, mode, dtype, engine path)
    /// anyway; the report then says so first. Without it they are refused
    #[arg(long)]
    pub allow_different: bool,
    #[command(flatten)]
    pub quiet: Quiet,
}

/// "2%" → 0.02.
pub fn parse_threshold(s: &str) -> anyhow::Result<f64> {
    let Some(num) = s.trim().strip_suffix('%') else {
        bail!("--threshold {s}: write a percentage with its sign, e.g. --threshold 2%");
    };
    let v: f64 = num
        .trim()
        .parse()
        .map_err(|_| anyhow::anyhow!("--threshold {s}: not a number before the %"))?;
    if !v.is_finite() || v < 0.0 {
        bail!("--threshold {s}: must be 0% or more");
    }
    Ok(v / 100.0)
}

pub fn run(a: CompareArgs) -> anyhow::Result<ExitCode> {
    let threshold = parse_threshold(&a.threshold)?;
    if a.resamples == 0 || a.resamples > 10_000_000 {
        bail!(
            "--resamples must be between 1 and 10,000,000 (got {})",
            a.resamples
        );
    }
    if !(a.confidence > 0.0 && a.confidence < 1.0) {
        bail!(
            "--confidence must lie strictly between 0 and 1 (got {})",
            a.confidence
        );
    }
    check_outputs(
        &[
            ("--json", a.json.as_deref()),
            ("--markdown", a.markdown.as_deref()),
        ],
        &[("BASE", &a.base), ("NEW", &a.new)],
    )?;
    let p = BootstrapParams {
        resamples: a.resamples,
        seed: *a.seed,
        confidence: a.confidence,
    };
    let (b, n) = (load(&a.base)?, load(&a.new)?);
    let c = match (&b.input, &n.input) {
        (Input::Record(x), Input::Record(y)) => records(x, y, threshold, &p),
        (Input::Sweep(x), Input::Sweep(y)) => sweeps(x, y, threshold, &p),
        (x, y) => bail!(
            "{} is {} and {} {}: compare takes two Records or two sweep JSONL files",
            b.name,
            x.a_kind(),
            n.name,
            y.a_kind()
        ),
    };
    if !c.workloads_differ.is_empty() && !a.allow_different {
        bail!(
            "{} and {} ran different workloads ({}): their differences are the workloads', not the code's. Compare runs of one workload, or pass --allow-different to compare them anyway",
            b.name,
            n.name,
            c.workloads_differ.join("; ")
        );
    }
    let largest = c.changes.iter().map(|x| x.n_base.max(x.n_new)).max();
    let note = crate::analysis::bootstrap::subsample_note(largest.unwrap_or(0));
    let mut md = to_markdown(&b.name, &n.name, &c);
    if let Some(note) = note {
        md.push_str(&format!("\nNote: {note}.\n"));
    }
    for named in [&b, &n] {
        if let Input::Record(r) = &named.input {
            if let Some(w) = crate::analysis::compare::ended_early(r) {
                md.push_str(&format!(
                    "\nNote: {} did not run to its end ({w}); its figures are of the steps before that.\n",
                    named.name
                ));
            }
        }
    }
    if let Some(path) = &*a.json {
        write_atomic(path, &to_json(&b.name, &n.name, &c)?)
            .with_context(|| format!("--json {}", path.display()))?;
    }
    if let Some(path) = &*a.markdown {
        write_atomic(path, &md).with_context(|| format!("--markdown {}", path.display()))?;
    }
    out!("{md}")?;
    Ok(if c.regressed() {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}
