//! `memscope peaks`: this machine's ceilings (matmul GFLOP/s per dtype, memory bandwidth), cached;
//! with `--engine torch`, the device's as PyTorch reaches them (and one small op's fixed cost).

use super::args::{resolve_model, EngineArgs, ModelArgs};
use super::flags::{Batch, JsonOut, Quiet, Seq, Threads};
use crate::export::{check_outputs, save_peaks, write_atomic};
use crate::measure::threads::{all_cores, set_threads};
use crate::out;
use anyhow::{bail, Context};
use clap::Args;
use std::process::ExitCode;

#[derive(Args, Debug)]
#[command(mut_arg("threads", |a| a.help("CPU threads (default: all cores); peaks are cached per thread count")))]
#[command(mut_arg("seq", |a| a.help(None::<&str>)))]
// --nproc sets --collectives' ranks; --parallel is refused by name, not offered.
#[command(mut_arg("nproc", |a| a.help("Ranks --collectives runs under torchrun (default 2; on the CPU at most the cores, on CUDA one GPU each)")))]
#[command(mut_arg("parallel", |a| a.hide(true)))]
// A training step's policies say nothing about a machine's roofs: refused by name, not offered.
#[command(mut_arg("checkpoint_policy", |a| a.hide(true)))]
#[command(mut_arg("fsdp_precision", |a| a.hide(true)))]
#[command(mut_arg("reshard_after_forward", |a| a.hide(true)))]
#[command(mut_arg("fsdp_offload", |a| a.hide(true)))]
#[command(mut_arg("pp_schedule", |a| a.hide(true)))]
#[command(mut_arg("micro_batches", |a| a.hide(true)))]
#[command(mut_arg("pp_split", |a| a.hide(true)))]
pub struct PeaksArgs {
    #[command(flatten)]
    pub threads: Threads,
    /// Measure again even when this machine's peaks are cached
    #[arg(long)]
    pub refresh: bool,
    #[command(flatten)]
    pub json: JsonOut,
    /// Whose linear shapes to time (f32, N = batch × seq rows)
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub batch: Batch,
    #[command(flatten)]
    pub seq: Seq,
    #[command(flatten)]
    pub quiet: Quiet,
    #[command(flatten)]
    pub engine: EngineArgs,
    /// Measure the link between ranks instead: PyTorch's all-reduce under torchrun (gloo on the CPU, NCCL on CUDA), 8 B to 64 MiB, its bandwidth and latency fitted to the ring formula and cached for `estimate --parallel` [--engine torch]
    // The model's shapes and the thread count say nothing about the link: refused, not ignored.
    #[arg(long, conflicts_with_all = ["model", "config", "weights", "batch", "seq", "threads"])]
    pub collectives: bool,
}

pub fn run(a: PeaksArgs) -> anyhow::Result<ExitCode> {
    if a.collectives {
        return link_peaks(&a);
    }
    if let (Some(n), None) = (a.engine.nproc, a.engine.parallel.as_deref()) {
        bail!("--nproc {n}: peaks times one process; --nproc sets the ranks of `peaks --engine torch --collectives`");
    }
    a.engine.refuse_parallel("peaks")?;
    for (flag, v) in [
        ("--checkpoint-policy", &a.engine.checkpoint_policy),
        ("--fsdp-precision", &a.engine.fsdp_precision),
        ("--reshard-after-forward", &a.engine.reshard_after_forward),
        ("--pp-schedule", &a.engine.pp_schedule),
        ("--pp-split", &a.engine.pp_split),
        ("--micro-batches", &a.engine.micro_batches),
    ] {
        if let Some(v) = v {
            bail!("{flag} {v}: peaks measures the machine's roofs, not a training step; give it to bench, estimate, sweep or fit");
        }
    }
    if a.engine.fsdp_offload {
        bail!("--fsdp-offload: peaks measures the machine's roofs, not a training step; give it to bench, estimate, sweep or fit");
    }
    use crate::measure::peaks;
    let threads = a.threads.unwrap_or_else(all_cores);
    if threads == 0 || *a.batch == 0 || *a.seq == 0 {
        bail!("--threads, --batch and --seq must be at least 1");
    }
    check_outputs::<&std::path::Path>(&[("--json", a.json.as_deref())], &[])?;
    // The model is checked first: a cache hit must not hide a bad --model or --config.
    let (_, cfg) = resolve_model(&a.model)?;
    let shapes = peaks::linear_shapes(&cfg);
    let rows = *a.batch * *a.seq;
    if let Some(torch) = a.engine.torch_run()? {
        return torch_peaks(&a, &torch.device, threads, rows, &shapes, &cfg);
    }
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
            let _lock = measure_lock(&peaks::fingerprint(threads))?;
            let p = peaks::measure(threads, rows, &shapes)?;
            let source = save_peaks(&p.fingerprint, &serde_json::to_string_pretty(&p)?);
            (p, source)
        }
    };
    finish(&a, &p, crate::report::peaks::render(&p, &source))
}

/// `peaks --engine torch [--device D]`: PyTorch's roofs on the device, cached per device.
fn torch_peaks(
    a: &PeaksArgs,
    device: &str,
    threads: usize,
    rows: usize,
    shapes: &[(String, usize, usize)],
    cfg: &crate::model::config::ModelConfig,
) -> anyhow::Result<ExitCode> {
    use crate::torch::peaks;
    if a.model.weights.is_some() {
        bail!("--weights: peaks times the model's shapes, not its weights; leave --weights out");
    }
    // The products of a step of batch × seq rows; and under the torch engine, where a
    // sequence's rows are more than one, of one row a sequence too: a decode step's, which read
    // their weights at a rate of their own shape (the forward only).
    let decode_rows = *a.batch;
    let mut shapes: Vec<(String, usize, usize, usize)> = shapes
        .iter()
        .map(|(n, k, o)| (n.clone(), rows, *k, *o))
        .collect();
    if decode_rows < rows {
        let decode: Vec<_> = shapes
            .iter()
            .map(|(n, _, k, o)| (format!("{n}, a row a sequence"), decode_rows, *k, *o))
            .collect();
        shapes.extend(decode);
    }
    // Each shape's forward entry (its backward's products follow it in the file).
    let same_shapes = |p: &peaks::TorchPeaks| {
        p.host_model == cfg.name
            && shapes.iter().all(|(n, m, k, o)| {
                p.model_shapes
                    .iter()
                    .any(|s| &s.name == n && (s.m, s.k, s.n) == (*m, *k, *o))
            })
    };
    let cached = peaks::cached(device, threads).filter(|p| !a.refresh && same_shapes(p));
    let (p, source) = match cached {
        Some(p) => {
            let path = crate::export::cache_path(&p.fingerprint);
            let source = format!(
                "cached in {} (--refresh to measure again, as after changing PyTorch)",
                path.display()
            );
            (p, source)
        }
        None => {
            let _lock = measure_lock(&peaks::fingerprint(device, threads))?;
            let p = peaks::measure(device, threads, &shapes, Some(cfg))?;
            let source = save_peaks(&p.fingerprint, &serde_json::to_string_pretty(&p)?);
            (p, source)
        }
    };
    finish(a, &p, crate::report::peaks::render_torch(&p, &source))
}

/// The measuring lock of `fingerprint`, saying on stderr when another `peaks` holds it.
fn measure_lock(fingerprint: &str) -> anyhow::Result<crate::export::MeasureLock> {
    crate::export::measure_lock(fingerprint, || {
        eprintln!("memscope peaks: another `memscope peaks` is measuring this machine; waiting for it, so the two do not time each other's contention");
    })
}

/// `--collectives`: the link between `--nproc` ranks (default 2), measured or cached.
fn link_peaks(a: &PeaksArgs) -> anyhow::Result<ExitCode> {
    use crate::torch::link;
    if let Some(p) = a.engine.parallel.as_deref() {
        bail!("--parallel {p}: peaks --collectives times one all-reduce between --nproc ranks; leave --parallel out");
    }
    if a.engine.engine != crate::spec::Engine::Torch {
        bail!("--collectives: the link is measured with PyTorch's collectives under torchrun; add --engine torch");
    }
    let device = crate::spec::parse_device(a.engine.device.as_deref().unwrap_or("cpu"))?;
    check_outputs::<&std::path::Path>(&[("--json", a.json.as_deref())], &[])?;
    let world = a.engine.nproc.unwrap_or(2);
    if world < 2 {
        bail!("--nproc {world}: a link needs two ranks at least; use --nproc 2");
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    if !device.starts_with("cuda") && world > cores {
        bail!("--nproc {world}: this machine lets memscope use {cores} cores and a CPU rank needs one; use --nproc {cores} or fewer");
    }
    let cached = link::cached(&device).filter(|p| !a.refresh && p.world == world);
    let (p, source) = match cached {
        Some(p) => {
            let path = crate::export::cache_path(&p.fingerprint);
            let source = format!("cached in {} (--refresh to measure again)", path.display());
            (p, source)
        }
        None => {
            let mut p = link::measure(&device, world)?;
            let fit = crate::analysis::collective_time::Link::of_measured(&p).context(
                "the link measurement: the largest all-reduce took no longer than the smallest; run it again on a quieter machine",
            )?;
            (p.gb_per_s, p.latency_us) = (fit.bytes_per_s / 1e9, fit.latency_s * 1e6);
            let source = save_peaks(&p.fingerprint, &serde_json::to_string_pretty(&p)?);
            (p, source)
        }
    };
    finish(a, &p, crate::report::peaks::render_link(&p, &source))
}

/// Either engine's peaks: `--json`, then the tables.
fn finish(a: &PeaksArgs, p: &impl serde::Serialize, text: String) -> anyhow::Result<ExitCode> {
    if let Some(j) = &*a.json {
        write_atomic(j, &serde_json::to_string_pretty(p)?)
            .with_context(|| format!("--json {}", j.display()))?;
    }
    out!("{text}")?;
    Ok(ExitCode::SUCCESS)
}
