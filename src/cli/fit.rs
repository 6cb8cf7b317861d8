//! `memscope fit`: the largest batch (or sequence length) that fits in a memory budget.

use super::args::{resolve_model, ModelArgs, Workload};
use super::flags::{
    Batch, DtypeFlag, GradAccum, JsonOut, Lr, MemoryLimit, ModeFlag, NewTokens, Quiet, Seq, Steps,
    Timeout, Warmup,
};
use crate::export::{check_outputs, write_atomic};
use crate::outln;
use crate::spec::Mode;
use crate::sweep::interrupt::EXIT_INTERRUPTED;
use crate::sweep::largest::{search, FitRequest, Searched, Vary};
use crate::units::bytes as fmt_bytes;
use anyhow::{bail, Context};
use clap::Args;
use std::process::ExitCode;

#[derive(Args, Debug)]
#[command(mut_arg("memory_limit", |a| a.help(r#"The memory budget to fit in: 512MiB, 16GiB, …"#).required(true)))]
#[command(mut_arg("timeout", |a| a.help(r#"Time limit per trial: 90s, 10m, 1h"#)))]
#[command(mut_arg("parallel", |a| a.help(r#"How the --nproc ranks share the model: ddp, fsdp, tp:T, fsdp+tp:T or pp:P (as bench takes them); a comma list searches each plan's largest size in turn (each size run under torchrun, or predicted with --predict) and names the plan that fits the most [--engine torch]"#)))]
#[command(mut_arg("batch", |a| a.help(r#"Batch size (fixed when --vary seq)"#).default_value("1")))]
#[command(mut_arg("seq", |a| a.help(r#"Sequence length (fixed when --vary batch)"#)))]
#[command(mut_arg("warmup", |a| a.help(r#"Unmeasured steps per trial (train: the second step holds optimizer state and activations)"#).default_value("1")))]
#[command(mut_arg("steps", |a| a.help(r#"Measured steps per trial"#).default_value("1")))]
#[command(mut_arg("grad_accum", |a| a.help(None::<&str>)))]
#[command(mut_arg("new_tokens", |a| a.help(None::<&str>)))]
#[command(mut_arg("lr", |a| a.help(None::<&str>)))]
pub struct FitArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub mode: ModeFlag,
    #[command(flatten)]
    pub dtype: DtypeFlag,
    /// Which size to search for
    #[arg(long, value_enum, default_value_t = Vary::Batch)]
    pub vary: Vary,
    #[command(flatten)]
    pub batch: Batch,
    #[command(flatten)]
    pub seq: Seq,
    #[command(flatten)]
    pub warmup: Warmup,
    #[command(flatten)]
    pub steps: Steps,
    #[command(flatten)]
    pub run: super::args::RunArgs,
    #[command(flatten)]
    pub grad_accum: GradAccum,
    #[command(flatten)]
    pub new_tokens: NewTokens,
    #[command(flatten)]
    pub lr: Lr,
    #[command(flatten)]
    pub memory_limit: MemoryLimit,
    #[command(flatten)]
    pub timeout: Timeout,
    /// Largest size tried when nothing runs out of memory (default: 65536 for batch, the model's context for seq)
    #[arg(long)]
    pub max: Option<usize>,
    /// Predict each size instead of running it: the torch estimator's trace at each size tried, judged by what the device must hold (CUDA: reserved peak + CUDA context and NCCL; CPU: allocated peak), one row per plan of --parallel A,B,… [--engine torch]
    #[arg(long)]
    pub predict: bool,
    #[command(flatten)]
    pub json: JsonOut,
    #[command(flatten)]
    pub quiet: Quiet,
    #[command(flatten)]
    pub variant: super::args::VariantArgs,
}

pub fn run(a: FitArgs) -> anyhow::Result<ExitCode> {
    check_outputs(
        &[("--json", a.json.as_deref())],
        &super::args::run_inputs(a.model.config.as_deref(), a.model.weights.as_deref(), None),
    )?;
    let text = a
        .memory_limit
        .as_deref()
        .expect("clap requires fit's --memory-limit");
    // A run's limit holds a process; a prediction's budget is the device's or the heap's.
    let limit = if a.predict {
        crate::units::parse_bytes("--memory-limit", text)?
    } else {
        crate::sweep::limits::parse_memory_limit(text)?
    };
    let timeout = a
        .timeout
        .as_deref()
        .map(crate::sweep::limits::parse_timeout)
        .transpose()?;
    let (name, config) = resolve_model(&a.model)?;
    let context_len = config.max_seq_len;
    // fit has no --prompt-len: for generate, --seq is the prompt; name the flag it has.
    let workload = Workload {
        model: name,
        config,
        config_path: a.model.config.clone(),
        weights: a.model.weights.clone(),
        mode: *a.mode,
        batch: *a.batch,
        seq: *a.seq,
        dtype: *a.dtype,
        threads: *a.run.threads,
        seed: *a.run.seed,
        warmup: a.warmup.expect("--warmup has a default"),
        steps: a.steps.expect("--steps has a default"),
        grad_accum: *a.grad_accum,
        prompt_len: None,
        new_tokens: *a.new_tokens,
        lr: *a.lr,
        data: None,
        variant: a.variant.clone(),
    };
    // The longest sequence the model takes (generate: leaving room for --new-tokens).
    let context = match *a.mode {
        Mode::Generate => context_len.saturating_sub(*a.new_tokens),
        _ => context_len,
    };
    let cap = match a.vary {
        Vary::Batch => a.max.unwrap_or(65_536),
        Vary::Seq => a.max.unwrap_or(context).min(context),
    };
    if cap == 0 {
        bail!("--max must be at least 1");
    }
    if let Some(code) = predicted(&a, &workload, cap, limit)? {
        return Ok(code);
    }
    if let Some(code) = measured_plans(&a, &workload, cap, limit, timeout)? {
        return Ok(code);
    }
    let base = workload.validated().map_err(|e| {
        anyhow::anyhow!(
            "{}",
            e.to_string()
                .replace("--prompt-len", "--seq (the prompt length)")
        )
    })?;
    // Said only when the search stopped at the context, not at a smaller --max.
    let context_cap = a.vary == Vary::Seq && cap == context;
    if let Some(total) = crate::measure::procfs::mem_total_bytes().filter(|&t| limit > t) {
        eprintln!(
            "warning: --memory-limit {} is more than this machine's {} of memory (MemTotal): \
             the machine, not the limit, decides what fits",
            fmt_bytes(limit as f64),
            fmt_bytes(total as f64)
        );
    }
    let result = match search(&FitRequest {
        base,
        vary: a.vary,
        cap,
        limit,
        timeout,
        quiet: *a.quiet,
    })? {
        Searched::Done(r) => r,
        Searched::Interrupted(trials) => return interrupted(&a, &trials),
    };
    let vary_name = result.vary;
    let lo = result.max_batch.or(result.max_seq).filter(|&l| l > 0);
    let hi = result.first_oom;
    match lo {
        None => outln!(
            "{vary_name} 1 does not fit in {}: max_{vary_name} = 0",
            fmt_bytes(limit as f64)
        )?,
        Some(l) => {
            outln!("max_{vary_name} = {l}")?;
            let ranks = result.trials.iter().any(|r| r.spec.parallel().is_some());
            if let Some(heap) = result.heap_peak_bytes {
                match result.rss_peak_bytes {
                    Some(rss) => outln!(
                        "peak at {vary_name} {l}: heap peak {}, worker VmHWM {}",
                        fmt_bytes(heap as f64),
                        fmt_bytes(rss as f64)
                    )?,
                    None if !ranks => outln!(
                        "peak at {vary_name} {l}: heap peak {}, worker VmHWM unavailable",
                        fmt_bytes(heap as f64)
                    )?,
                    // A data-parallel job: the worst rank's, counted from before its model.
                    None => outln!(
                        "peak at {vary_name} {l}: heap peak {} (the worst rank's, from just before the model was built)",
                        fmt_bytes(heap as f64)
                    )?,
                }
            }
            if let Some(h) = result.headroom_bytes {
                outln!(
                    "headroom: {} of --memory-limit {} (limit − VmHWM)",
                    fmt_bytes(h as f64),
                    fmt_bytes(limit as f64)
                )?;
            }
            match hi {
                Some(h) => outln!("{vary_name} {h} ran out of memory")?,
                None => {
                    if context_cap {
                        outln!("no size up to {cap} ran out of memory: {cap} is the longest sequence the model takes (its context, max_seq_len)")?
                    } else {
                        outln!(
                            "no size up to {cap} ran out of memory (raise --max to search further)"
                        )?
                    }
                }
            }
        }
    }
    outln!("{}.", result.enforcement)?;
    if let Some(p) = &*a.json {
        write_atomic(p, &serde_json::to_string_pretty(&result)?)
            .with_context(|| format!("--json {}", p.display()))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// `--predict`: every plan's largest size by prediction (the exit code); None: the sizes are
/// run. A run's `--timeout` is refused with it.
fn predicted(
    a: &FitArgs,
    workload: &Workload,
    cap: usize,
    limit: u64,
) -> anyhow::Result<Option<ExitCode>> {
    if let (true, Some(t)) = (a.predict, a.timeout.as_deref()) {
        bail!("--timeout {t}: --predict runs nothing (each size is traced, not run); drop --timeout, or drop --predict to run each size");
    }
    if !a.predict {
        return Ok(None);
    }
    super::fit_plans::run(
        workload,
        &super::fit_plans::Predict {
            vary: a.vary,
            cap,
            limit,
            json: a.json.as_deref(),
        },
    )
    .map(Some)
}

/// `--parallel A,B,…` without `--predict`: each plan's sizes run (`fit_plans_run.rs`), the
/// exit code; None for one plan or none.
fn measured_plans(
    a: &FitArgs,
    workload: &Workload,
    cap: usize,
    limit: u64,
    timeout: Option<std::time::Duration>,
) -> anyhow::Result<Option<ExitCode>> {
    match a.variant.engine.parallel.as_deref() {
        Some(p) if p.contains(',') && a.variant.engine.engine != crate::spec::Engine::Torch => {
            bail!("--parallel {p}: a job's plans run on PyTorch under torchrun; add --engine torch")
        }
        Some(p) if p.contains(',') => super::fit_plans_run::run(
            workload,
            &super::fit_plans_run::Measure {
                vary: a.vary,
                cap,
                limit,
                timeout,
                quiet: *a.quiet,
                json: a.json.as_deref(),
            },
        )
        .map(Some),
        _ => Ok(None),
    }
}

/// Stopped by SIGINT/SIGTERM: the trials that finished, said on stderr and written to `--json`
/// (`"interrupted": true`), so a long search's measurements are not lost; exit 130.
fn interrupted(a: &FitArgs, trials: &[crate::record::sweep_row::Row]) -> anyhow::Result<ExitCode> {
    let done: Vec<String> = trials
        .iter()
        .map(|r| {
            let size = match a.vary {
                Vary::Batch => r.spec.batch,
                Vary::Seq => r.spec.seq,
            };
            format!("{} {size} {}", a.vary.name(), r.status.name())
        })
        .collect();
    eprintln!(
        "memscope fit: interrupted after {} finished trials ({}); no answer{}",
        trials.len(),
        if done.is_empty() {
            "none".into()
        } else {
            done.join(", ")
        },
        if a.json.is_some() {
            "; the trials are in --json"
        } else {
            ""
        }
    );
    if let Some(p) = &*a.json {
        let v = serde_json::json!({"interrupted": true, "vary": a.vary.name(), "trials": trials});
        write_atomic(p, &serde_json::to_string_pretty(&v)?)
            .with_context(|| format!("--json {}", p.display()))?;
    }
    Ok(ExitCode::from(EXIT_INTERRUPTED))
}
