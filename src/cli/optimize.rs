//! `memscope optimize`: flags → the variants of one workload at two sequence lengths → each run
//! in its own worker → the ranking (Markdown on stdout, `--json`, `--markdown`).

use super::args::{resolve_model, DataArgs, EngineArgs, ModelArgs, VariantArgs, Workload};
use super::flags::{JsonOut, Lr, MarkdownOut, MemoryLimit, Quiet, Steps, Timeout, Warmup};
use crate::export::{check_outputs, write_atomic};
use crate::out;
use crate::record::optimize::OptimizeFile;
use crate::report::optimize::markdown;
use crate::spec::{Dtype, Mode};
use crate::sweep::interrupt::EXIT_INTERRUPTED;
use crate::sweep::variant_figures::figures;
use crate::sweep::variants::{candidates, run, Options, Ran};
use anyhow::{bail, Context};
use clap::Args;
use std::process::ExitCode;

#[derive(Args, Debug)]
#[command(mut_arg("memory_limit", |a| a.help(r#"Memory budget per worker (512MiB, 8GiB, …): runs each variant under it, and searches the largest batch each one fits"#)))]
#[command(mut_arg("seq", |a| a.help(r#"Sequence length; the ranking is also measured at --long-seq"#)))]
#[command(mut_arg("warmup", |a| a.help(r#"Unmeasured steps per variant (train: the optimizer state exists from the second step)"#).default_value("2")))]
#[command(mut_arg("steps", |a| a.help(r#"Measured steps per variant (the loss column is the last one's)"#).default_value("5")))]
// One process: --nproc/--parallel are refused by name, not offered.
#[command(mut_arg("nproc", |a| a.hide(true)), mut_arg("parallel", |a| a.hide(true)))]
pub struct OptimizeArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub engine: EngineArgs,
    #[command(flatten)]
    pub shape: super::args::ShapeArgs,
    /// The second sequence length, where attention's quadratic term shows [default: 4 × --seq, at most the model's context]; 0 for one length only
    #[arg(long)]
    pub long_seq: Option<usize>,
    #[command(flatten)]
    pub warmup: Warmup,
    #[command(flatten)]
    pub steps: Steps,
    #[command(flatten)]
    pub run: super::args::RunArgs,
    #[command(flatten)]
    pub lr: Lr,
    #[command(flatten)]
    pub data: DataArgs,
    #[command(flatten)]
    pub memory_limit: MemoryLimit,
    /// Largest batch the --memory-limit search tries
    #[arg(long, default_value_t = 256)]
    pub max_batch: usize,
    #[command(flatten)]
    pub timeout: Timeout,
    #[command(flatten)]
    pub json: JsonOut,
    #[command(flatten)]
    pub markdown: MarkdownOut,
    #[command(flatten)]
    pub quiet: Quiet,
}

pub fn run_optimize(a: OptimizeArgs) -> anyhow::Result<ExitCode> {
    a.engine.refuse_parallel("optimize")?;
    check_outputs(
        &[
            ("--json", a.json.as_deref()),
            ("--markdown", a.markdown.as_deref()),
        ],
        &super::args::run_inputs(
            a.model.config.as_deref(),
            a.model.weights.as_deref(),
            a.data.data.as_deref(),
        ),
    )?;
    let limit = a
        .memory_limit
        .as_deref()
        .map(crate::sweep::limits::parse_memory_limit)
        .transpose()?;
    let timeout = a
        .timeout
        .as_deref()
        .map(crate::sweep::limits::parse_timeout)
        .transpose()?;
    if *a.shape.mode == Mode::Generate {
        bail!("--mode generate: optimize ranks training and inference variants; use --mode train or infer");
    }
    if a.max_batch == 0 {
        bail!("--max-batch must be at least 1");
    }
    let (model, config) = resolve_model(&a.model)?;
    let workload = Workload {
        model,
        config,
        config_path: a.model.config.clone(),
        weights: a.model.weights.clone(),
        mode: *a.shape.mode,
        batch: *a.shape.batch,
        seq: *a.shape.seq,
        dtype: Dtype::F32,
        threads: *a.run.threads,
        seed: *a.run.seed,
        warmup: a.warmup.expect("--warmup has a default"),
        steps: a.steps.expect("--steps has a default"),
        grad_accum: 1,
        prompt_len: None,
        new_tokens: 1,
        lr: *a.lr,
        data: a.data.to_spec(),
        variant: VariantArgs {
            engine: a.engine.clone(),
            ..VariantArgs::default()
        },
    };
    let base = workload.clone().runnable()?;
    let context = base.arch().max_seq_len;
    let long = match a.long_seq {
        Some(0) => None,
        Some(l) if l > context => bail!(
            "--long-seq {l} exceeds the model's context of {context} positions (`max_seq_len` of {}); use --long-seq {context} or less, or 0 for one length",
            base.model
        ),
        Some(l) => Some(l),
        None => Some((4 * *a.shape.seq).min(context)),
    }
    .filter(|&l| l != *a.shape.seq);
    let seqs: Vec<usize> = std::iter::once(*a.shape.seq).chain(long).collect();
    if !*a.quiet {
        eprintln!(
            "memscope optimize: {} {} batch {} at seq {}; each variant in its own worker",
            base.model,
            base.mode.name(),
            base.batch,
            seqs.iter()
                .map(|s| s.to_string())
                .collect::<Vec<_>>()
                .join(" and ")
        );
    }
    let opts = Options {
        memory_limit: limit,
        timeout,
        max_batch: a.max_batch,
        quiet: *a.quiet,
    };
    let baseline = match &base.torch {
        None => "Baseline = what a plain PyTorch script runs: naive attention, op-by-op kernels and optimizer, f32, no checkpointing.".to_string(),
        Some(t) => format!("Engine: Hugging Face transformers on PyTorch, {}. Baseline = eager attention, no torch.compile, fused AdamW, f32, no checkpointing.", t.device),
    };
    let mut text = format!(
        "## memscope optimize: {} {}, batch {}\n\n{baseline} Heap peak and activations are the counting allocator's exact bytes (activations: what the first forward left live); step time is the median of {} measured steps ± its coefficient of variation; Δ is against the baseline; the estimate is `memscope estimate`'s heap peak for the same run.\n\n",
        base.model,
        base.mode.name(),
        base.batch,
        a.steps.unwrap_or(0)
    );
    let mut all = Vec::new();
    for &seq in &seqs {
        let spec = Workload {
            seq,
            ..workload.clone()
        }
        .spec()?;
        if let Some(d) = &spec.data {
            crate::input::tokens::Tokens::open(d)?.check_window(seq)?;
        }
        let outcomes = match run(&candidates(&spec), &opts)? {
            Ran::Done(o) => o,
            Ran::Interrupted(done) => {
                // The variants that finished, said rather than lost with the ranking.
                let said: Vec<String> = done
                    .iter()
                    .map(|v| format!("{} {}", v.name, v.row.status.name()))
                    .collect();
                eprintln!(
                    "memscope optimize: interrupted at seq {seq} after {} finished variants ({}); no ranking: run it again to finish",
                    done.len(),
                    if said.is_empty() { "none".into() } else { said.join(", ") }
                );
                return Ok(ExitCode::from(EXIT_INTERRUPTED));
            }
        };
        let figs = figures(&outcomes);
        text += &markdown(
            &format!("seq {seq}"),
            &figs,
            a.steps.unwrap_or(0) + a.warmup.unwrap_or(0),
        );
        text.push('\n');
        all.extend(figs);
    }
    out!("{text}")?;
    if let Some(p) = &*a.markdown {
        write_atomic(p, &text).with_context(|| format!("--markdown {}", p.display()))?;
    }
    if let Some(p) = &*a.json {
        let j = OptimizeFile {
            model: base.model.clone(),
            mode: base.mode.name().to_string(),
            batch: base.batch,
            seqs,
            steps: a.steps.expect("--steps has a default"),
            memory_limit_bytes: limit,
            variants: all,
        };
        write_atomic(p, &j.to_json()?).with_context(|| format!("--json {}", p.display()))?;
    }
    Ok(ExitCode::SUCCESS)
}
