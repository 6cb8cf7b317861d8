//! `memscope sweep`: comma lists and ranges → one Spec per configuration → the local backend (each in
//! its own worker) → rows, the scaling report, CSV and Markdown.

use super::args::{resolve_model, ModelArgs, Workload};
use super::flags::{
    CsvOut, Force, JsonlOut, Lr, MarkdownOut, MemoryLimit, NewTokens, Quiet, Seed, Steps, Threads,
    Timeout, TraceOut,
};
use super::sweep_slurm::{self, SlurmArgs};
use crate::export::JsonlStream;
use crate::export::{check_outputs, write_atomic};
use crate::model::cost;
use crate::spec::{Dtype, Mode, Spec};
use crate::sweep::eta;
use crate::sweep::interrupt::{install_interrupt_handler, EXIT_INTERRUPTED};
use crate::sweep::limits::Enforcement;
use crate::sweep::local::{run_planned, SweepOutcome};
use crate::sweep::plan::{self, Axes, Point};
use crate::sweep::progress::SweepProgress;
use crate::sweep::rows;
use crate::sweep::scratch::Scratch;
use crate::sweep::spawn::RunOptions;
use crate::units::human_duration;
use crate::{out, outln};
use anyhow::{bail, Context};
use clap::{Args, ValueEnum};
use std::io::IsTerminal;
use std::path::Path;
use std::process::ExitCode;
use std::time::Instant;

#[derive(Args, Debug)]
#[command(mut_arg("threads", |a| a.help(r#"CPU threads per worker (default: all cores; with --slurm 1, and each task gets --cpus-per-task THREADS, times the ranks of a CPU --nproc job)"#)))]
#[command(mut_arg("memory_limit", |a| a.help(r#"Memory budget per worker: 512MiB, 8GiB, 2GB, … (cgroup v2 where delegated, else RLIMIT_DATA; plus a PSS watchdog)"#)))]
#[command(mut_arg("timeout", |a| a.help(r#"Time limit per configuration: 90s, 10m, 1h"#)))]
#[command(mut_arg("jsonl", |a| a.help(r#"Append one JSON row per configuration, flushed as each one ends"#)))]
#[command(mut_arg("trace", |a| a.value_name("DIR").help(r#"Write one Chrome trace per configuration that ran into this directory (created if missing): `<index>-b<batch>-s<seq>-<mode>-<dtype>.trace.json`; the row names its file"#)))]
#[command(mut_arg("steps", |a| a.help(r#"Measured steps per configuration"#).default_value("10")))]
#[command(mut_arg("force", |a| a.help(r#"Run configurations whose parameters or estimated peak exceed this machine's memory (without --memory-limit they are error rows)"#)))]
#[command(mut_arg("model", |a| a.help("Presets, comma-separated (see `memscope models`)")))]
#[command(mut_arg("config", |a| a.help("One model config JSON instead of presets")))]
#[command(mut_arg("weights", |a| a.help("Hugging Face-named weights for every configuration")))]
pub struct SweepArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Modes, comma-separated: train, infer, generate
    #[arg(long, default_value = "train")]
    pub mode: String,
    /// Batch sizes: a list (1,2,4) or ranges (1-8, 1-64*2, 0-8+2)
    #[arg(long, default_value = "2")]
    pub batch: String,
    /// Sequence lengths (the prompt length for generate): list or ranges (128-1024*2)
    #[arg(long, default_value = "128")]
    pub seq: String,
    /// dtypes, comma-separated: f32, bf16, f16
    #[arg(long, default_value = "f32")]
    pub dtype: String,
    /// Unmeasured steps before the measured ones: list or ranges (0,1,2,5)
    #[arg(long, default_value = "2")]
    pub warmup: String,
    /// Micro-batches per optimizer step (train): list or ranges
    #[arg(long, default_value = "1")]
    pub grad_accum: String,
    #[command(flatten)]
    pub steps: Steps,
    #[command(flatten)]
    pub threads: Threads,
    #[command(flatten)]
    pub seed: Seed,
    #[command(flatten)]
    pub new_tokens: NewTokens,
    #[command(flatten)]
    pub lr: Lr,
    #[command(flatten)]
    pub force: Force,
    /// Start a sweep of more than 1,000 configurations without asking
    #[arg(long)]
    pub yes: bool,
    #[command(flatten)]
    pub memory_limit: MemoryLimit,
    #[command(flatten)]
    pub timeout: Timeout,
    #[command(flatten)]
    pub jsonl: JsonlOut,
    #[command(flatten)]
    pub csv: CsvOut,
    #[command(flatten)]
    pub markdown: MarkdownOut,
    #[command(flatten)]
    pub trace: TraceOut,
    /// Run configurations larger than one that ran out of memory instead of skipping them
    #[arg(long)]
    pub no_skip: bool,
    #[command(flatten)]
    pub quiet: Quiet,
    #[command(flatten)]
    pub data: super::args::DataArgs,
    #[command(flatten)]
    pub variant: super::args::VariantArgs,
    #[command(flatten)]
    pub cluster: SlurmArgs,
}

/// The Spec of one sweep point (not validated: an invalid one becomes an `error` row).
fn spec_for(a: &SweepArgs, p: &Point) -> anyhow::Result<Spec> {
    let (name, config) = resolve_model(&ModelArgs {
        model: p.model.clone(),
        config: a.model.config.clone(),
        weights: a.model.weights.clone(),
    })?;
    let mode = Mode::from_str(&p.mode, true)
        .map_err(|_| anyhow::anyhow!("--mode {}: use train, infer or generate", p.mode))?;
    let dtype = Dtype::from_str(&p.dtype, true)
        .map_err(|_| anyhow::anyhow!("--dtype {}: use f32, bf16 or f16", p.dtype))?;
    Workload {
        model: name,
        config,
        config_path: a.model.config.clone(),
        weights: a.model.weights.clone(),
        mode,
        batch: p.batch,
        seq: p.seq,
        dtype,
        // On Slurm a task gets --cpus-per-task=threads: one unless asked.
        threads: a.threads.or(a.cluster.slurm.then_some(1)),
        seed: *a.seed,
        warmup: p.warmup,
        steps: a.steps.expect("--steps has a default"),
        grad_accum: p.grad_accum,
        prompt_len: None,
        new_tokens: *a.new_tokens,
        lr: *a.lr,
        data: a.data.to_spec(),
        variant: {
            let mut v = a.variant.clone();
            // One plan of `--parallel A,B,…`: its flags, without those only another plan takes.
            if let Some(plan) = &p.plan {
                v.engine = v.engine.for_plan(plan).0;
            }
            // One count of `--micro-batches 2,4,8`.
            if let Some(m) = p.micro_batches {
                v.engine.micro_batches = Some(m.to_string());
            }
            v
        },
    }
    .spec()
}

/// Every point of the sweep, in plan order. Unknown models, modes and dtypes are usage errors
/// (nothing runs); a point whose Spec fails validation is kept for an `error` row.
fn plan_points(a: &SweepArgs) -> anyhow::Result<Vec<Point>> {
    let models = match &a.model.config {
        Some(_) => vec![
            resolve_model(&ModelArgs {
                model: String::new(),
                config: a.model.config.clone(),
                weights: None,
            })?
            .0,
        ],
        None => plan::parse_axis_str("--model", &a.model.model)?,
    };
    let mut sizes = std::collections::HashMap::new();
    for m in &models {
        let (_, cfg) = resolve_model(&ModelArgs {
            model: m.clone(),
            config: a.model.config.clone(),
            weights: None,
        })?;
        sizes.insert(m.clone(), cost::param_count(&cfg).unwrap_or(u64::MAX));
    }
    let modes = plan::parse_axis_str("--mode", &a.mode)?;
    let dtypes = plan::parse_axis_str("--dtype", &a.dtype)?;
    for m in &modes {
        Mode::from_str(m, true)
            .map_err(|_| anyhow::anyhow!("--mode {m}: use train, infer or generate"))?;
    }
    for d in &dtypes {
        Dtype::from_str(d, true)
            .map_err(|_| anyhow::anyhow!("--dtype {d}: use f32, bf16 or f16"))?;
    }
    let axes = Axes {
        models,
        modes,
        dtypes,
        batches: plan::parse_axis_usize("--batch", &a.batch, 1)?,
        seqs: plan::parse_axis_usize("--seq", &a.seq, 1)?,
        warmups: plan::parse_axis_usize("--warmup", &a.warmup, 0)?,
        grad_accums: plan::parse_axis_usize("--grad-accum", &a.grad_accum, 1)?,
        // A comma list of plans is an axis; one plan is every point's, in its flags.
        plans: match a.variant.engine.parallel.as_deref() {
            Some(p) if p.contains(',') => plan::parse_axis_str("--parallel", p)?,
            _ => Vec::new(),
        },
        micro_batches: micro_batch_axis(a)?,
    };
    Ok(plan::plan(&axes, |m| {
        sizes.get(m).copied().unwrap_or(u64::MAX)
    }))
}

/// `--micro-batches 2,4,8`: a pipeline's counts, each its own points (empty for one count, which
/// stays in every point's flags). A list needs a pipeline among the plans.
fn micro_batch_axis(a: &SweepArgs) -> anyhow::Result<Vec<usize>> {
    let counts = a.variant.engine.micro_batch_counts()?.unwrap_or_default();
    if counts.len() < 2 {
        return Ok(Vec::new());
    }
    let plans = a.variant.engine.parallel.as_deref().unwrap_or_default();
    if !plans.split(',').any(|p| p.trim().starts_with("pp:")) {
        let m = a
            .variant
            .engine
            .micro_batches
            .as_deref()
            .unwrap_or_default();
        anyhow::bail!("--micro-batches {m}: micro-batch counts are a pipeline's; add a pipeline plan (--nproc P --parallel pp:P, or pp:P in a list of plans)");
    }
    // A count the batch cannot split into (0 among them) is the Spec's to refuse: an error row.
    Ok(counts)
}

/// Above this many configurations a sweep starts only with --yes or a "y" at the terminal.
const CONFIRM_ABOVE: usize = 1000;

/// Says how many configurations will run and about how long they take; a large sweep needs
/// --yes (or a "y" typed at the terminal) before anything starts.
fn confirm_size(
    points: &[Point],
    spec_of: &dyn Fn(&Point) -> anyhow::Result<Spec>,
    yes: bool,
    quiet: bool,
) -> anyhow::Result<()> {
    let n = points.len();
    let eta = match eta::estimate(points, spec_of) {
        Some(d) => format!(
            "about {} (the estimator's FLOPs at half this machine's f32 matmul peak, plus 1 s per worker)",
            eta::rough(d)
        ),
        None => "no time estimate: run `memscope peaks` once to cache this machine's ceilings".into(),
    };
    if n <= CONFIRM_ABOVE || yes {
        if !quiet && n > 1 {
            eprintln!("memscope sweep: {n} configurations, {eta}");
        }
        return Ok(());
    }
    if !std::io::stdin().is_terminal() {
        bail!(
            "{n} configurations, {eta}: more than {CONFIRM_ABOVE}; pass --yes to run them all, or narrow --batch / --seq / --model"
        );
    }
    eprint!("memscope sweep: {n} configurations, {eta}. Run them all? [y/N] ");
    let mut answer = String::new();
    std::io::stdin().read_line(&mut answer)?;
    if !matches!(answer.trim(), "y" | "Y" | "yes") {
        bail!("not started ({n} configurations); narrow --batch / --seq / --model, or answer y");
    }
    Ok(())
}

pub fn run(a: SweepArgs) -> anyhow::Result<ExitCode> {
    // --jsonl is appended to (earlier sweeps' rows stay); --csv and --markdown are replaced.
    check_outputs(
        &[
            ("--jsonl", a.jsonl.as_deref()),
            ("--csv", a.csv.as_deref()),
            ("--markdown", a.markdown.as_deref()),
        ],
        &super::args::run_inputs(
            a.model.config.as_deref(),
            a.model.weights.as_deref(),
            a.data.data.as_deref(),
        ),
    )?;
    if let Some(dir) = &a.cluster.attach {
        return attach(&a, dir);
    }
    if let Some(dir) = &*a.trace {
        if a.cluster.slurm {
            bail!("--trace {}: per-configuration traces are written by local sweeps only; drop --trace or --slurm", dir.display());
        }
        std::fs::create_dir_all(dir)
            .with_context(|| format!("--trace {}: cannot create the directory", dir.display()))?;
    }
    // A data-parallel job on the CPU holds each rank's heap to --memory-limit itself (the
    // counting allocator), on Slurm as on this machine.
    let ranks_hold_limit = a.variant.engine.nproc.is_some()
        && a.variant
            .engine
            .device
            .as_deref()
            .is_none_or(|d| d == "cpu");
    sweep_slurm::check_flags(
        &a.cluster,
        a.memory_limit.is_some() && !ranks_hold_limit,
        a.timeout.is_some(),
    )?;
    let points = plan_points(&a)?;
    if points.is_empty() {
        bail!("nothing to run: every axis needs at least one value");
    }
    let memory_limit = a
        .memory_limit
        .as_deref()
        .map(crate::sweep::limits::parse_memory_limit)
        .transpose()?;
    let timeout = a
        .timeout
        .as_deref()
        .map(crate::sweep::limits::parse_timeout)
        .transpose()?;
    if a.cluster.slurm {
        crate::sweep::slurm::submit::find_sbatch()?;
    }
    confirm_size(&points, &|p| spec_for(&a, p), a.yes, *a.quiet)?;
    let planned = points
        .into_iter()
        .map(|p| spec_for(&a, &p).map(|s| (p, s)))
        .collect::<anyhow::Result<Vec<_>>>()?;
    refuse_up_front(&a, &planned)?;
    let mut planned = planned;
    sweep_slurm::spread_over_nodes(&a.cluster, &mut planned)?;
    install_interrupt_handler();
    if a.cluster.slurm {
        let progress = SweepProgress::new(planned.len(), *a.quiet);
        let started = Instant::now();
        // A task runs its job's ranks on each of its nodes under torchrun: their CPUs.
        let cpu_ranks = |s: &Spec| s.cpu_job().map_or(1, |p| p.per_node());
        let threads = planned.first().map_or(1, |(_, s)| s.threads * cpu_ranks(s));
        let planned: Vec<(Point, Spec)> = match memory_limit {
            Some(limit) => planned
                .into_iter()
                .map(|(p, mut s)| {
                    if let Some(t) = s.torch.as_mut() {
                        t.heap_limit_bytes = Some(limit);
                    }
                    (p, s)
                })
                .collect(),
            None => planned,
        };
        let outcome = sweep_slurm::submit_and_follow(
            &a.cluster,
            &planned,
            a.no_skip,
            a.jsonl.as_deref(),
            threads,
            &progress,
            *a.quiet,
        )?;
        progress.done();
        let mut how = slurm_describe(&a.cluster);
        if let Some(limit) = memory_limit {
            how += &format!(
                "; each rank's heap held to --memory-limit {} ({})",
                crate::units::fmt_bytes(limit as f64),
                crate::sweep::limits::RANK_HEAP_CAP
            );
        }
        return finish(&a, outcome, &how, started);
    }
    let jsonl = a.jsonl.as_deref().map(JsonlStream::appending).transpose()?;
    let enforcement = Enforcement::detect(memory_limit);
    let specs: Vec<&crate::spec::Spec> = planned.iter().map(|(_, s)| s).collect();
    let limits = crate::sweep::limits::describe_for(&specs, &enforcement, memory_limit);
    let scratch = Scratch::new()?;
    let opts = RunOptions {
        memory_limit,
        enforcement: enforcement.clone(),
        timeout,
        scratch: scratch.0.clone(),
        trace_dir: a.trace.trace.clone(),
    };
    if !*a.quiet {
        eprintln!(
            "memscope sweep: {} configurations; {}{}",
            planned.len(),
            limits,
            timeout.map_or(String::new(), |t| format!(
                "; timeout {} per configuration",
                human_duration(t)
            ))
        );
    }
    let progress = SweepProgress::new(planned.len(), *a.quiet);
    let started = Instant::now();
    let jsonl = jsonl.map(|w| (w, a.jsonl.as_deref().unwrap_or(Path::new(""))));
    let outcome = run_planned(
        &planned,
        &opts,
        a.no_skip,
        !*a.force && memory_limit.is_none(),
        jsonl,
        &progress,
    )?;
    progress.done();
    finish(&a, outcome, &limits, started)
}

/// What would fail every configuration, or crash a worker, is refused before any starts: sizes
/// no machine can allocate (the check `estimate` and `bench` make), too many micro-batches or
/// threads, and weights that cannot be read or do not fit the model.
fn refuse_up_front(a: &SweepArgs, planned: &[(Point, Spec)]) -> anyhow::Result<()> {
    use crate::spec::SpecError;
    for (_, s) in planned {
        if let Err(
            e @ (SpecError::TensorTooLarge { .. }
            | SpecError::TooManyMicroBatches { .. }
            | SpecError::TooManyThreads { .. }),
        ) = s.validate()
        {
            bail!("{e} (nothing was run)");
        }
        crate::runner::refuse_unallocatable(s)?;
    }
    if let Some(w) = &a.model.weights {
        let set = crate::model::weights::WeightSet::open(w)
            .with_context(|| format!("--weights {}", w.display()))?;
        let mut checked = std::collections::HashSet::new();
        for (_, s) in planned {
            if checked.insert(s.model.clone()) {
                crate::model::store::ParamStore::check_weights(
                    &crate::model::param_specs(s.arch()),
                    &set,
                )
                .with_context(|| format!("model {}: nothing was run", s.model))?;
            }
        }
    }
    Ok(())
}

/// How a Slurm sweep's tasks are limited, for the report's first line.
fn slurm_describe(s: &SlurmArgs) -> String {
    // sbatch's --mem is per node: a task across nodes has it on each.
    let (nodes, per) = match s.nodes {
        Some(m) if m > 1 => (
            format!(", each task across {m} nodes (srun, one torchrun a node)"),
            "node",
        ),
        _ => (String::new(), "task"),
    };
    format!(
        "Slurm job array{nodes}: memory per {per} {}, time per task {}",
        s.mem
            .as_deref()
            .map_or("the partition's default (--mem)".to_string(), |m| format!(
                "--mem {m}"
            )),
        s.time
            .as_deref()
            .map_or("the partition's default (--time)".to_string(), |t| format!(
                "--time {t}"
            )),
    )
}

/// `--attach DIR`: follow a submitted Slurm sweep again.
fn attach(a: &SweepArgs, dir: &Path) -> anyhow::Result<ExitCode> {
    let (n, jsonl) = sweep_slurm::attach_target(dir, a.jsonl.as_deref())?;
    check_outputs::<&Path>(&[("--jsonl", jsonl.as_deref())], &[])?;
    install_interrupt_handler();
    let progress = SweepProgress::new(n, *a.quiet);
    let started = Instant::now();
    let outcome = sweep_slurm::attach(
        dir,
        jsonl.as_deref(),
        a.cluster.cancel_on_interrupt,
        &progress,
    )?;
    progress.done();
    finish(a, outcome, "Slurm job array (re-attached)", started)
}

/// The end of every sweep: CSV, Markdown, the scaling report, the wall time, the exit code.
fn finish(
    a: &SweepArgs,
    outcome: SweepOutcome,
    how: &str,
    started: Instant,
) -> anyhow::Result<ExitCode> {
    let SweepOutcome { rows, interrupted } = outcome;
    let wall = started.elapsed().as_secs_f64();
    if let Some(p) = &*a.csv {
        write_atomic(p, &rows::to_csv(&rows)?).with_context(|| format!("--csv {}", p.display()))?;
    }
    let text = crate::report::scaling::render(&rows);
    if let Some(p) = &*a.markdown {
        let md = format!("# memscope sweep\n\n{how}.\n\n{text}");
        write_atomic(p, &md).with_context(|| format!("--markdown {}", p.display()))?;
    }
    outln!("{how}.")?;
    out!("{text}")?;
    let measured: f64 = rows
        .iter()
        .filter_map(|r| r.summary.as_ref())
        .map(|s| s.step_samples_ms.iter().sum::<f64>() / 1e3)
        // fold from +0: an empty f64 sum is -0.0, printed "-0.0 s" when no row was measured.
        .fold(0.0, |a, b| a + b);
    outln!(
        "\nSweep wall time {wall:.1} s; measured steps {measured:.1} s ({:.0}% of the wall time; the rest is process start, model build, warm-up and analysis).",
        if wall > 0.0 { 100.0 * measured / wall } else { 0.0 }
    )?;
    if interrupted {
        eprintln!(
            "memscope sweep: interrupted; {} finished configurations kept",
            rows.len()
        );
        return Ok(ExitCode::from(EXIT_INTERRUPTED));
    }
    Ok(ExitCode::SUCCESS)
}
