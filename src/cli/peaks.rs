//! `memscope peaks`: this machine's ceilings (matmul GFLOP/s per dtype, memory bandwidth), cached.

use super::args::{resolve_model, ModelArgs};
use crate::measure::threads::{all_cores, set_threads};
use crate::out;
use crate::output::{check_outputs, write_atomic};
use anyhow::{bail, Context};
use clap::Args;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Args, Debug)]
pub struct PeaksArgs {
    /// CPU threads (default: all cores); peaks are cached per thread count
    #[arg(long)]
    pub threads: Option<usize>,
    /// Measure again even when this machine's peaks are cached
    #[arg(long)]
    pub refresh: bool,
    #[arg(long, value_name = "FILE", help = super::args::HELP_JSON)]
    pub json: Option<PathBuf>,
    /// Whose linear shapes to time (f32, N = batch × seq rows)
    #[command(flatten)]
    pub model: ModelArgs,
    #[arg(long, default_value_t = 2)]
    pub batch: usize,
    #[arg(long, default_value_t = 128)]
    pub seq: usize,
    #[arg(long, short, help = super::args::HELP_QUIET)]
    pub quiet: bool,
}

pub fn run(a: PeaksArgs) -> anyhow::Result<ExitCode> {
    use crate::measure::peaks;
    let threads = a.threads.unwrap_or_else(all_cores);
    if threads == 0 || a.batch == 0 || a.seq == 0 {
        bail!("--threads, --batch and --seq must be at least 1");
    }
    check_outputs::<&std::path::Path>(&[("--json", a.json.as_deref())], &[])?;
    // The model is checked first: a cache hit must not hide a bad --model or --config.
    let (_, cfg) = resolve_model(&a.model)?;
    let shapes = peaks::linear_shapes(&cfg);
    let rows = a.batch * a.seq;
    set_threads(threads);
    let path = peaks::cache_path(&peaks::fingerprint(threads));
    // The cache holds this machine's ceilings and the shapes last timed: other shapes are timed now.
    let same_shapes = |p: &peaks::Peaks| {
        p.model_shapes.len() == shapes.len()
            && p.model_shapes
                .iter()
                .zip(&shapes)
                .all(|(s, (n, k, o))| &s.name == n && s.m == rows && s.k == *k && s.n == *o)
    };
    let cached = peaks::cached(threads).filter(|p| !a.refresh && same_shapes(p));
    let (p, source) = match cached {
        Some(p) => (
            p,
            format!("cached in {} (--refresh to measure again)", path.display()),
        ),
        None => {
            let p = peaks::measure(threads, rows, &shapes)?;
            let text = serde_json::to_string_pretty(&p)?;
            let saved = std::fs::create_dir_all(peaks::cache_dir())
                .map_err(anyhow::Error::from)
                .and_then(|()| write_atomic(&path, &text));
            let source = match saved {
                Ok(()) => format!("measured now, cached in {}", path.display()),
                Err(e) => format!("measured now; not cached ({e:#}; set MEMSCOPE_CACHE_DIR)"),
            };
            (p, source)
        }
    };
    if let Some(j) = &a.json {
        write_atomic(j, &serde_json::to_string_pretty(&p)?)
            .with_context(|| format!("--json {}", j.display()))?;
    }
    out!("{}", crate::report::peaks::render(&p, &source))?;
    Ok(ExitCode::SUCCESS)
}
