//! `memscope estimate`: flags → [`Request`]s (one per dtype) → report, JSON, `--fits`.

use super::args::{resolve_model, ModelArgs, Workload};
use super::flags::{Force, GradAccum, JsonOut, NewTokens, PromptLen, Quiet, Threads};
use crate::estimate::fits::fits;
use crate::estimate::{estimate, Request};
use crate::export::{check_outputs, write_atomic};
use crate::out;
use crate::record::estimate::EstimateFile;
use crate::record::estimate::Optimizer;
use crate::report;
use crate::spec::{Dtype, Parallel};
use anyhow::{bail, Context};
use clap::{Args, ValueEnum};
use std::process::ExitCode;

#[derive(Args, Debug)]
#[command(mut_arg("threads", |a| a.help(r#"CPU threads the run would use (gemm keeps a buffer per thread; with --engine torch, the count whose `peaks --engine torch` the predicted step time reads; default: all cores)"#)))]
#[command(mut_arg("prompt_len", |a| a.help(r#"Prompt tokens (generate; default: --seq)"#)))]
#[command(mut_arg("new_tokens", |a| a.help(r#"Tokens decoded (generate)"#)))]
#[command(mut_arg("parallel", |a| a.help(r#"How the --nproc ranks share the model: ddp (DistributedDataParallel), fsdp (FSDP2, fully_shard on every block and the root), tp:T (tensor parallelism over T ranks, transformers' plan for the model), fsdp+tp:T (FSDP2 over groups of T tensor-parallel ranks) or pp:P (the blocks split into a pipeline of P ranks, run by --pp-schedule over --micro-batches); a comma list compares the plans side by side against --fits [--engine torch]"#)))]
#[command(mut_arg("force", |a| a.help(r#"Estimate a model deeper than 10,000 layers anyway (the replay takes time and memory per layer)"#)))]
pub struct EstimateArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub shape: super::args::ShapeArgs,
    /// One dtype or a comma list (one column each): f32,bf16,f16
    #[arg(long, default_value = "f32")]
    pub dtype: String,
    #[command(flatten)]
    pub grad_accum: GradAccum,
    #[arg(long, value_enum, default_value_t = Optimizer::Adamw)]
    pub optimizer: Optimizer,
    #[command(flatten)]
    pub prompt_len: PromptLen,
    #[command(flatten)]
    pub new_tokens: NewTokens,
    #[command(flatten)]
    pub variant: super::args::VariantArgs,
    #[command(flatten)]
    pub threads: Threads,
    /// A memory budget (16GiB, 512MB, …): does the peak fit, and which single change makes it fit
    #[arg(long, value_name = "BYTES", allow_hyphen_values = true)]
    pub fits: Option<String>,
    /// With --parallel: the link between ranks as bandwidth and latency, GB/s,µs (100,5): the collectives' time per step by the ring and tree formulas [--engine torch]
    #[arg(long, value_name = "GB/s,µs")]
    pub link: Option<String>,
    /// The device's roofs for the predicted step time: a file `peaks --engine torch --json FILE` wrote (on that device), or a profile memscope ships, by name; default: the roofs `peaks --engine torch` cached on this machine [--engine torch]
    #[arg(long, value_name = "FILE|NAME")]
    pub profile: Option<String>,
    /// Tokens the whole run trains on (300B, 15T, 2.5e9): the hours it takes at the predicted rate [--engine torch]
    #[arg(long, value_name = "TOKENS")]
    pub run_tokens: Option<String>,
    /// Rows in the hotspot tables
    #[arg(long, default_value_t = 10)]
    pub top: usize,
    #[command(flatten)]
    pub json: JsonOut,
    #[command(flatten)]
    pub force: Force,
    #[command(flatten)]
    pub quiet: Quiet,
}

/// Deeper models are refused without `--force`: the estimate replays every op of every layer,
/// about 0.5 ms and 80 KiB per layer (d_model 768 on an EPYC: 10,000 layers in 5.2 s, 0.8 GB RSS).
const MAX_LAYERS: usize = 10_000;

fn dtypes(list: &str) -> anyhow::Result<Vec<Dtype>> {
    let mut out = Vec::new();
    for d in list.split(',').map(str::trim) {
        let dt = Dtype::from_str(d, true).map_err(|_| {
            anyhow::anyhow!("--dtype {list}: unknown dtype \"{d}\"; use f32, bf16 or f16 (a comma list is allowed)")
        })?;
        if !out.contains(&dt) {
            out.push(dt);
        }
    }
    Ok(out)
}

pub fn run(a: EstimateArgs) -> anyhow::Result<ExitCode> {
    check_outputs(
        &[("--json", a.json.as_deref())],
        &super::args::run_inputs(a.model.config.as_deref(), a.model.weights.as_deref(), None),
    )?;
    if a.model.weights.is_some() {
        bail!(
            "--weights: estimate needs only the architecture, which {} already gives; drop --weights",
            match &a.model.config {
                Some(c) => format!("--config {}", c.display()),
                None => format!("--model {}", a.model.model),
            }
        );
    }
    let (_, cfg) = resolve_model(&a.model)?;
    if cfg.n_layers > MAX_LAYERS && !*a.force {
        let n = cfg.n_layers as f64;
        bail!(
            "{}: {} layers; the estimate replays every op of every layer (about 0.5 ms and 80 KiB each), so this would take ~{:.0} s and ~{}; nothing was run: check n_layers, or pass --force to estimate it anyway",
            cfg.name,
            cfg.n_layers,
            n * 0.5e-3,
            crate::units::fmt_bytes(n * 80.0 * 1024.0),
        );
    }
    let dts = dtypes(&a.dtype)?;
    let budget = a
        .fits
        .as_deref()
        .map(|f| crate::units::parse_bytes("--fits", f))
        .transpose()?;
    // The same checks as a run's Spec, so an estimate is never given for a run memscope rejects.
    let workload = Workload {
        model: cfg.name.clone(),
        config: cfg,
        config_path: a.model.config.clone(),
        weights: None,
        mode: *a.shape.mode,
        batch: *a.shape.batch,
        seq: *a.shape.seq,
        dtype: dts[0],
        threads: *a.threads,
        seed: 0,
        warmup: 0,
        steps: 1,
        grad_accum: *a.grad_accum,
        prompt_len: *a.prompt_len,
        new_tokens: *a.new_tokens,
        lr: 1e-3,
        data: None,
        variant: a.variant.clone(),
    };
    let micro_list = a
        .variant
        .engine
        .micro_batches
        .as_deref()
        .is_some_and(|m| m.contains(','));
    if let Some(list) = a
        .variant
        .engine
        .parallel
        .as_deref()
        .filter(|p| p.contains(',') || micro_list)
    {
        // Plans side by side: one dtype, the same job.
        if a.variant.engine.engine != crate::spec::Engine::Torch {
            bail!("--parallel {list}: a job's plans are compared on PyTorch; add --engine torch");
        }
        if dts.len() > 1 {
            bail!(
                "--dtype {}: plans are compared in one dtype; give one with --parallel {list}",
                a.dtype
            );
        }
        for (flag, given) in [
            ("--link", &a.link),
            ("--profile", &a.profile),
            ("--run-tokens", &a.run_tokens),
        ] {
            if let Some(v) = given {
                bail!("{flag} {v}: a comparison of plans judges memory; give {flag} to one plan's estimate");
            }
        }
        return super::estimate_plans::run(&workload, list, budget, a.json.as_deref());
    }
    let spec = workload.clone().validated()?;
    if let crate::spec::EngineRef::Torch(t) = spec.engine() {
        let parallel = t.parallel;
        return torch_estimate(&a, &workload, &dts, budget, parallel);
    }
    for (flag, given) in [("--profile", &a.profile), ("--run-tokens", &a.run_tokens)] {
        if let Some(v) = given {
            bail!("{flag} {v}: the predicted step time is the torch engine's; add --engine torch");
        }
    }
    let reqs: Vec<Request> = dts
        .iter()
        .map(|&dtype| {
            let v = a.variant.to_variant(*a.shape.mode, dtype);
            Request {
                dtype,
                optimizer: a.optimizer,
                precision: v.precision,
                ..Request::for_spec(&spec)
            }
        })
        .collect();
    let ests = reqs
        .iter()
        .map(estimate)
        .collect::<anyhow::Result<Vec<_>>>()?;
    out!("{}", report::estimate::render(&ests, a.top))?;
    let fit = match budget {
        Some(b) => {
            let f = fits(&reqs[0], b)?;
            out!("{}", report::estimate::render_fits(&f))?;
            Some(f)
        }
        None => None,
    };
    if let Some(path) = &*a.json {
        let file = EstimateFile {
            first: ests[0].clone(),
            by_dtype: ests.clone(),
            fits: fit.clone(),
        };
        let text = file.to_json()?;
        write_atomic(path, &text).with_context(|| format!("--json {}", path.display()))?;
    }
    Ok(match &fit {
        Some(f) if !f.fits => ExitCode::from(1),
        _ => ExitCode::SUCCESS,
    })
}

/// `estimate --engine torch`: one trace per dtype (`torch::estimate`), the report, `--json`.
fn torch_estimate(
    a: &EstimateArgs,
    workload: &Workload,
    dts: &[Dtype],
    budget: Option<u64>,
    parallel: Option<Parallel>,
) -> anyhow::Result<ExitCode> {
    use crate::record::torch_estimate::TorchEstimateFile;
    // Flags the trace cannot honour are refused, never ignored.
    if a.optimizer != Optimizer::Adamw {
        bail!("--optimizer {}: the torch engine trains with PyTorch's fused AdamW, so its estimate traces AdamW; drop --optimizer, or estimate memscope's own engine (--engine candle) with it",
            a.optimizer.to_possible_value().map_or("?".into(), |v| v.get_name().to_string()));
    }
    if a.top != 10 {
        bail!(
            "--top {}: the torch estimate prints categories, not hotspot tables; drop --top",
            a.top
        );
    }
    // A CUDA rank of a job holds memory outside PyTorch's allocator: lines of their own, and
    // the replay capped at what the budget leaves beside them.
    let cuda = workload.variant.engine.on_cuda();
    let outside = match parallel {
        Some(p) if cuda => crate::analysis::outside_allocator::cuda_rank(&p),
        _ => Vec::new(),
    };
    let outside_bytes: u64 = outside.iter().map(|l| l.bytes).sum();
    if let (Some(b), Some(ctx)) = (budget, outside.first()) {
        if b <= ctx.bytes {
            bail!(
                "--fits {}: smaller than the CUDA context alone ({} {}, {}); a CUDA rank needs more than that before PyTorch allocates anything",
                crate::units::fmt_bytes(b as f64),
                crate::units::fmt_bytes(ctx.bytes as f64),
                ctx.note,
                ctx.source
            );
        }
    }
    let given = a
        .link
        .as_deref()
        .map(crate::analysis::collective_time::Link::parse)
        .transpose()?;
    if let (Some(text), None) = (a.link.as_deref(), parallel) {
        bail!("--link {text}: the link carries a data-parallel job's collectives; add --nproc N --parallel ddp|fsdp|tp:T|fsdp+tp:T");
    }
    // No --link: the link `peaks --collectives` measured on this machine, when it has.
    let measured = match (given, parallel) {
        (None, Some(_)) => {
            let device = workload.variant.engine.device.as_deref().unwrap_or("cpu");
            crate::torch::link::cached(device)
        }
        _ => None,
    };
    let link = given
        .map(crate::analysis::collective_time::Links::uniform)
        .or(measured
            .as_ref()
            .and_then(crate::analysis::collective_time::Links::of_measured));
    let link_text = match &measured {
        Some(m) => Some(format!(
            "the link {}{}",
            m.describe(),
            link.map(|l| l.others()).unwrap_or_default()
        )),
        None => a.link.as_ref().map(|t| format!("--link {t}")),
    };
    let profile = a
        .profile
        .as_deref()
        .map(crate::torch::profile::load)
        .transpose()?;
    let run_tokens = a
        .run_tokens
        .as_deref()
        .map(|t| crate::units::parse_count("--run-tokens", t))
        .transpose()?;
    let mut by_dtype = std::collections::BTreeMap::new();
    let mut spec = None;
    let mut times = Vec::new();
    for &dtype in dts {
        let mut s = Workload {
            dtype,
            ..workload.clone()
        }
        .validated()?;
        if let Some(t) = s.torch.as_mut() {
            if t.is_cuda() {
                t.gpu_memory_limit_bytes = budget.map(|b| b.saturating_sub(outside_bytes));
            }
        }
        let crate::torch::estimate::Traced {
            estimate: mut e,
            ops,
            pipeline,
        } = crate::torch::estimate::estimate_with_ops(&s)?;
        e.outside_allocator = outside.clone();
        e.flops = crate::analysis::aten_cost::flops_by_phase(&ops);
        let said = time_lines(
            &mut e,
            &ops,
            &pipeline,
            &s,
            &Timing {
                profile: profile.as_ref(),
                threads: *a.threads,
                parallel,
                link,
                link_text: link_text.as_deref(),
                run_tokens,
            },
        )?;
        times.push(said);
        by_dtype.insert(dtype.name().to_string(), e);
        spec.get_or_insert(s);
    }
    let spec = spec.expect("at least one dtype (`dtypes` never returns an empty list)");
    let file = TorchEstimateFile {
        kind: TorchEstimateFile::KIND.into(),
        model: spec.model.clone(),
        mode: spec.mode.name().into(),
        batch: spec.batch,
        seq: spec.seq,
        by_dtype,
        budget_bytes: budget,
        parallel,
        pipeline: spec.torch.as_ref().and_then(|t| t.pipeline.clone()),
        built: spec.arch().built().cloned(),
    };
    out!("{}", report::torch_estimate::render(&file))?;
    if spec.variant.fusion == crate::model::variant::Fusion::Compile {
        out!("\n--fusion compile: the figures above are the eager step's. The trace dispatches each ATen op as eager PyTorch does; torch.compile's fused kernels keep fewer intermediates and run fewer ops, so the compiled step's peak and time differ from these, usually downward, by an amount only a run shows: `memscope bench --engine torch --fusion compile` measures it.\n")?;
    }
    for t in times {
        out!("\n{t}")?;
    }
    if let Some(path) = &*a.json {
        write_atomic(path, &file.to_json()?)
            .with_context(|| format!("--json {}", path.display()))?;
    }
    Ok(if report::torch_estimate::all_fit(&file) {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// What the predicted time of one estimate reads beside its trace.
struct Timing<'a> {
    profile: Option<&'a crate::torch::profile::Profile>,
    threads: Option<usize>,
    parallel: Option<Parallel>,
    link: Option<crate::analysis::collective_time::Links>,
    link_text: Option<&'a str>,
    run_tokens: Option<f64>,
}

/// One dtype's predicted step (or why there is none), its collectives' time over the link, and
/// the throughput both give: the report's text; the figures go into `e`.
fn time_lines(
    e: &mut crate::record::torch_estimate::TorchEstimate,
    ops: &[crate::torch::estimate::TracedOp],
    pipeline: &[crate::torch::estimate::RankWork],
    s: &crate::spec::Spec,
    t: &Timing,
) -> anyhow::Result<String> {
    let dtype = s.dtype.name();
    if !pipeline.is_empty() {
        let actions: Vec<_> = pipeline.iter().map(|w| w.actions.clone()).collect();
        e.pipeline_bubble = crate::analysis::pipeline_time::equal_stages_bubble(&actions).ok();
    }
    let peaks = roofs(t.profile, &e.device, t.threads, dtype)?;
    let mut said = match &peaks {
        Ok(p) => predicted_time(e, ops, p, t.profile, t.threads, dtype),
        Err(why) => why.clone(),
    };
    if let (Ok(p), false) = (&peaks, pipeline.is_empty()) {
        let transfer_ms = crate::analysis::pipeline_time::transfer_ms(s, t.link.as_ref());
        match crate::analysis::pipeline_time::predict(pipeline, p, transfer_ms) {
            Ok(play) => {
                e.predicted_ms.insert("step".into(), play.step_ms);
                e.pipeline_play = Some(play);
            }
            // The memory estimate stands; the step's time is said to be the fullest rank's.
            Err(why) => {
                said += &format!("\nNo played-out step ({why:#}): the predicted step above is the fullest rank's own ops, without the pipeline's bubble.\n");
            }
        }
    }
    if let Some(p) = t.parallel {
        // CPU ranks whose threads (all cores each unless --threads says) fill this machine.
        let cores = crate::measure::threads::all_cores();
        let per_rank = t.threads.unwrap_or(cores);
        let cores_full = e.device == "cpu" && p.world / p.nodes.max(1) * per_rank >= cores;
        said += &report::torch_estimate::communication(e, p, t.link, t.link_text, cores_full);
    }
    if let Ok(p) = &peaks {
        let job = crate::analysis::throughput::Job {
            mode: s.mode,
            batch: s.batch,
            seq: s.seq,
            grad_accum: s.grad_accum,
            new_tokens: s.new_tokens,
            parallel: t.parallel,
        };
        let ms = |k: &str| e.communication_ms.get(k).copied().unwrap_or(0.0);
        let comm = crate::analysis::throughput::Communication {
            total_ms: ms("total"),
            exposed_ms: ms("exposed"),
        };
        e.throughput = crate::analysis::throughput::throughput(
            &job,
            &e.predicted_ms,
            &e.flops,
            comm,
            crate::analysis::torch_time::peak_gflops(p, dtype),
            t.run_tokens,
        );
        if let Some(th) = &e.throughput {
            said += &report::torch_time::render_throughput(th, &job, comm.total_ms > 0.0);
        }
    }
    Ok(said)
}

/// The roofs the predicted step time reads: `--profile`'s (refused for another device kind or
/// without the dtype's products), else the ones `peaks --engine torch` cached for this device
/// and thread count (`--threads`, default all cores); `Ok(Err(text))` says why there are none.
fn roofs(
    profile: Option<&crate::torch::profile::Profile>,
    device: &str,
    threads: Option<usize>,
    dtype: &str,
) -> anyhow::Result<Result<crate::torch::peaks::TorchPeaks, String>> {
    if let Some(p) = profile {
        p.check_for(device, dtype)?;
        return Ok(Ok(p.peaks.clone()));
    }
    let given = threads;
    let threads = threads.unwrap_or_else(crate::measure::threads::all_cores);
    // A GPU's roofs are the card's: the thread count only keys the cache, named where given.
    let cpu = !device.starts_with("cuda");
    let flag = match (cpu, given) {
        (true, _) => format!(" --threads {threads}"),
        (false, Some(t)) => format!(" --threads {t}"),
        (false, None) => String::new(),
    };
    let at = if cpu {
        format!(" at {threads} threads")
    } else {
        " on this machine".into()
    };
    Ok(match crate::torch::peaks::cached(device, threads) {
        Some(p) => Ok(p),
        None => Err(match crate::torch::peaks::cache_problem(device, threads) {
            Some(why) => format!(
                "No predicted step time: {why}; `memscope peaks --engine torch --device {device}{flag} --refresh` measures them again.",
            ),
            None if cpu => format!(
                "No predicted step time: no roofs measured for {device}{at}; `memscope peaks --engine torch --device {device}{flag}` measures them once (seconds), then this estimate predicts the step's time (or give a device's profile with --profile).",
            ),
            None => format!(
                "No predicted step time: no roofs measured for {device}{at}; give a card's profile with --profile FILE (`memscope peaks --engine torch --device cuda --json FILE` writes one on the machine with the card), or run that peaks command here if this machine has the GPU.",
            ),
        }),
    })
}

/// The step time predicted from the traced ops and `peaks`' roofs: the report's text, and the
/// phases' ms in the estimate; a profile's differences from this estimate stated first.
fn predicted_time(
    e: &mut crate::record::torch_estimate::TorchEstimate,
    ops: &[crate::torch::estimate::TracedOp],
    peaks: &crate::torch::peaks::TorchPeaks,
    profile: Option<&crate::torch::profile::Profile>,
    threads: Option<usize>,
    dtype: &str,
) -> String {
    let p = crate::analysis::torch_time::predict(ops, peaks);
    e.predicted_ms = p.ms_by_phase();
    let mut out = String::new();
    if let Some(prof) = profile {
        let threads = threads.unwrap_or(prof.peaks.threads);
        for d in prof.differences(&e.torch, threads) {
            out += &format!("Profile {}: {d}.\n", prof.source);
        }
    }
    out + &report::torch_time::render(&p, peaks, dtype)
}
