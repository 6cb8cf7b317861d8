//! The argument groups several commands share — which model (--model / --config / --weights), which
//! workload (mode, sizes, dtype, steps, threads), which output files — and their conversion into a
//! validated Spec, once.

use super::flags::{
    Batch, DtypeFlag, Force, GradAccum, Lr, ModeFlag, NewTokens, PromptLen, Quiet, Seed, Seq,
    Steps, TableFiles, Threads, TraceOut, Warmup,
};
use crate::export::{self, write_if_asked};
use crate::measure::threads::all_cores;
use crate::model::config::ModelConfig;
use crate::model::variant::{Attention, Fusion, Precision, Variant};
use crate::record::Record;
use crate::report::{self, Export};
use crate::spec::{
    parse_device, CheckpointPolicy, Engine, FsdpPrecision, Parallel, ParallelPlan, Reshard,
    SpecError, TorchRun,
};
use crate::spec::{BinDtype, DataSpec};
use crate::spec::{Dtype, Mode, Spec};
use anyhow::bail;
use clap::Args;
use std::path::{Path, PathBuf};

#[derive(Args, Debug, Clone)]
pub struct ModelArgs {
    /// Built-in preset (see `memscope models`)
    #[arg(long, default_value = "gpt2-small", conflicts_with = "config")]
    pub model: String,
    /// Model config JSON: our schema (with `family`) or a Hugging Face config.json
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Load Hugging Face-named weights (a .safetensors file or a model.safetensors.index.json)
    #[arg(long, value_name = "FILE")]
    pub weights: Option<PathBuf>,
}

/// `--mode`, `--batch`, `--seq` (bench, leak, roofline, profile, estimate).
#[derive(Args, Debug, Clone)]
pub struct ShapeArgs {
    #[command(flatten)]
    pub mode: ModeFlag,
    #[command(flatten)]
    pub batch: Batch,
    #[command(flatten)]
    pub seq: Seq,
}

/// `--threads`, `--seed` (bench, leak, roofline, profile, fit, optimize; sweep's --threads
/// defaults to one on Slurm and says so).
#[derive(Args, Debug, Clone)]
pub struct RunArgs {
    #[command(flatten)]
    pub threads: Threads,
    #[command(flatten)]
    pub seed: Seed,
}

#[derive(Args, Debug, Clone)]
#[command(mut_arg("warmup", |a| a.help(r#"Unmeasured steps before the measured ones [default: bench 2, leak 0]"#)))]
#[command(mut_arg("steps", |a| a.help(r#"Measured steps [default: bench 10, leak 300]"#)))]
pub struct WorkloadArgs {
    #[command(flatten)]
    pub shape: ShapeArgs,
    #[command(flatten)]
    pub dtype: DtypeFlag,
    #[command(flatten)]
    pub warmup: Warmup,
    #[command(flatten)]
    pub steps: Steps,
    #[command(flatten)]
    pub run: RunArgs,
    #[command(flatten)]
    pub grad_accum: GradAccum,
    #[command(flatten)]
    pub prompt_len: PromptLen,
    #[command(flatten)]
    pub new_tokens: NewTokens,
    #[command(flatten)]
    pub lr: Lr,
    #[command(flatten)]
    pub force: Force,
    #[command(flatten)]
    pub data: DataArgs,
    #[command(flatten)]
    pub variant: VariantArgs,
}

/// The engine path: each memory-saving technique as a switch (bench, sweep, leak, fit,
/// estimate; `memscope optimize` runs them all).
#[derive(Args, Debug, Clone, Default)]
pub struct VariantArgs {
    /// Attention: fused (memscope's kernel, flash-style) or naive (op by op, keeps the (B, H, T, S) scores and probabilities, as eager PyTorch without SDPA)
    #[arg(long, value_enum, default_value_t = Attention::Fused)]
    pub attention: Attention,
    /// Norms, activations, RoPE, loss and optimizer: full (memscope's fused kernels) or none (candle's op-by-op versions and candle-nn's AdamW, as a plain PyTorch script)
    #[arg(long, value_enum, default_value_t = Fusion::Full)]
    pub fusion: Fusion,
    /// Activation checkpointing: keep only each block's input in forward, recompute the block in backward (train)
    #[arg(long)]
    pub checkpoint: bool,
    /// With --dtype bf16/f16 training: mixed (f32 master weights, gradients and optimizer state; compute in the dtype) or pure (everything in the dtype) [default: mixed for bf16/f16 training, pure otherwise]
    #[arg(long, value_enum)]
    pub precision: Option<Precision>,
    #[command(flatten)]
    pub engine: EngineArgs,
}

/// Which engine runs a workload, and where (bench, leak, sweep, fit, optimize, estimate).
#[derive(Args, Debug, Clone, Default)]
pub struct EngineArgs {
    /// Which engine runs the workload: candle (memscope's own) or torch (Hugging Face transformers on PyTorch: `pip install ./python`)
    #[arg(long, value_enum, default_value_t = Engine::Candle)]
    pub engine: Engine,
    /// Where the torch engine runs: cpu, cuda or cuda:N [default: cpu]
    #[arg(long, value_name = "DEVICE")]
    pub device: Option<String>,
    /// Ranks of a data-parallel job (with --parallel and --engine torch): estimate traces one rank under a fake process group; bench, sweep and fit launch them with torchrun (gloo on the CPU, NCCL on CUDA)
    #[arg(long, value_name = "N")]
    pub nproc: Option<usize>,
    /// How the --nproc ranks share the model: ddp (DistributedDataParallel), fsdp (FSDP2, fully_shard on every block and the root), tp:T (tensor parallelism over T ranks, transformers' plan for the model), fsdp+tp:T (FSDP2 over groups of T tensor-parallel ranks) or pp:P (the blocks split into a pipeline of P ranks, run by --pp-schedule over --micro-batches) [--engine torch]
    #[arg(long, value_name = "PLAN")]
    pub parallel: Option<String>,
    /// With --checkpoint: ops (torchtitan's selective policy: keep attention's and every other matrix product's outputs, recompute the rest) or every:N (checkpoint every N-th block, keep the others whole) [--engine torch]
    #[arg(long, value_name = "POLICY")]
    pub checkpoint_policy: Option<String>,
    /// With --parallel fsdp: FSDP2's MixedPrecisionPolicy as PARAM,REDUCE (bf16,f32: parameters gathered in bf16 for compute, gradients reduced in f32, master weights in --dtype) [--engine torch]
    #[arg(long, value_name = "PARAM,REDUCE")]
    pub fsdp_precision: Option<String>,
    /// With --parallel fsdp: FSDP2's reshard_after_forward on every block: true (its default), false (keep each block's gathered parameters from forward to backward: one all-gather fewer, more memory) or N (reshard over N ranks) [--engine torch]
    #[arg(long, value_name = "true|false|N")]
    pub reshard_after_forward: Option<String>,
    /// With --parallel fsdp: FSDP2's CPU offload (CPUOffloadPolicy): sharded parameters, gradients and optimizer state in host memory (pinned on CUDA), the optimizer stepping on the host; estimate gives the host's bytes beside the device's [--engine torch]
    #[arg(long)]
    pub fsdp_offload: bool,
    /// With --parallel pp:P: PyTorch's pipeline schedule, gpipe, 1f1b, interleaved-1f1b[:V], interleaved-zero-bubble[:V] (V stages a rank, 2 if not given) or zbv-zero-bubble (2 stages a rank in a V) [default: 1f1b] [--engine torch]
    #[arg(long, value_name = "SCHEDULE")]
    pub pp_schedule: Option<String>,
    /// With --parallel pp:P: micro-batches the batch is split into (they must divide --batch); `estimate`, `fit` and `sweep` take a comma list (4,8,16) and set the counts side by side [default: the job's stages] [--engine torch]
    #[arg(long, value_name = "M")]
    pub micro_batches: Option<String>,
    /// With --parallel pp:P: the blocks of each stage in order, as 3,1 (they sum to the model's blocks; one number a stage) [default: as even as they divide, the earlier stages one more] [--engine torch]
    #[arg(long, value_name = "B0,B1,…")]
    pub pp_split: Option<String>,
}

impl EngineArgs {
    /// `--engine torch --device D` as the Spec's `torch` field; a CUDA device without the torch
    /// engine is refused here, naming both flags.
    pub fn torch_run(&self) -> anyhow::Result<Option<TorchRun>> {
        let device = parse_device(self.device.as_deref().unwrap_or("cpu"))?;
        match self.engine {
            Engine::Torch => Ok(Some(TorchRun {
                device,
                gpu_memory_limit_bytes: None,
                heap_limit_bytes: None,
                parallel: self.parallel()?,
                checkpoint_policy: self
                    .checkpoint_policy
                    .as_deref()
                    .map(CheckpointPolicy::parse)
                    .transpose()?,
                fsdp_precision: self
                    .fsdp_precision
                    .as_deref()
                    .map(FsdpPrecision::parse)
                    .transpose()?,
                reshard_after_forward: self
                    .reshard_after_forward
                    .as_deref()
                    .map(Reshard::parse)
                    .transpose()?,
                fsdp_offload: self.fsdp_offload,
                pipeline: self.pipeline()?,
            })),
            Engine::Candle if device != "cpu" => Err(SpecError::DeviceNeedsTorch(device).into()),
            Engine::Candle => {
                for (flag, v) in [
                    ("--checkpoint-policy", &self.checkpoint_policy),
                    ("--fsdp-precision", &self.fsdp_precision),
                    ("--reshard-after-forward", &self.reshard_after_forward),
                    ("--pp-schedule", &self.pp_schedule),
                    ("--pp-split", &self.pp_split),
                ] {
                    if let Some(v) = v {
                        bail!("{flag} {v}: it is a PyTorch feature; add --engine torch");
                    }
                }
                if self.fsdp_offload {
                    bail!("--fsdp-offload: it is a PyTorch feature; add --engine torch --nproc N --parallel fsdp");
                }
                if let Some(m) = &self.micro_batches {
                    bail!("--micro-batches {m}: a pipeline's micro-batches are PyTorch's; add --engine torch --nproc P --parallel pp:P");
                }
                if let Some(p) = self.parallel()? {
                    bail!(
                        "--parallel {}: a data-parallel job runs on PyTorch; add --engine torch",
                        p.flag()
                    );
                }
                Ok(None)
            }
        }
    }

    /// `--device cuda` or `cuda:N`.
    pub fn on_cuda(&self) -> bool {
        self.device
            .as_deref()
            .is_some_and(|d| d.starts_with("cuda"))
    }

    /// These flags for one plan of a list (`--parallel A,B,…`): `plan` as its `--parallel`,
    /// and the flags only another plan takes (a pipeline's schedule, FSDP2's policies) left
    /// out, named in the list returned.
    pub fn for_plan(&self, plan: &str) -> (EngineArgs, Vec<&'static str>) {
        let mut e = self.clone();
        e.parallel = Some(plan.to_string());
        let mut dropped = Vec::new();
        if !plan.starts_with("pp:") {
            if e.pp_schedule.take().is_some() {
                dropped.push("--pp-schedule");
            }
            if e.micro_batches.take().is_some() {
                dropped.push("--micro-batches");
            }
            if e.pp_split.take().is_some() {
                dropped.push("--pp-split");
            }
        }
        if !plan.starts_with("fsdp") {
            if e.fsdp_precision.take().is_some() {
                dropped.push("--fsdp-precision");
            }
            if e.reshard_after_forward.take().is_some() {
                dropped.push("--reshard-after-forward");
            }
            if std::mem::take(&mut e.fsdp_offload) {
                dropped.push("--fsdp-offload");
            }
        }
        (e, dropped)
    }

    /// `--parallel PLAN --nproc N` as the job; every combination memscope cannot run refused,
    /// naming the flag.
    pub(super) fn parallel(&self) -> anyhow::Result<Option<Parallel>> {
        let (plan, world) = match (self.parallel.as_deref(), self.nproc) {
            (None, None) => return Ok(None),
            (None, Some(n)) => bail!(
                "--nproc {n}: say how the ranks share the model: --parallel ddp, fsdp, tp:T, fsdp+tp:T or pp:P"
            ),
            (Some(p), None) => {
                bail!("--parallel {p}: give the job's number of ranks with --nproc N")
            }
            (Some(p), Some(n)) => (p, n),
        };
        if world == 0 {
            bail!("--nproc 0: a job has at least 1 rank");
        }
        if world > MAX_WORLD {
            bail!("--nproc {world}: at most {MAX_WORLD} ranks (the largest published training jobs, Llama 3's 16,384 GPUs); PyTorch's mesh set-up under the fake process group grows with the ranks (4,000 take about 30 s on 2 cores), so a larger job would trace for many minutes");
        }
        // Said once, however often the flags are read.
        static SAID: std::sync::Once = std::sync::Once::new();
        if world > 1024 {
            SAID.call_once(|| eprintln!("note: --nproc {world}: setting up a {world}-rank mesh takes PyTorch a while (4,000 ranks about 30 s on 2 cores) before the step is traced"));
        }
        let (plan, tp) = match plan.split_once(':') {
            None if plan == "ddp" => (ParallelPlan::Ddp, 1),
            None if plan == "fsdp" => (ParallelPlan::Fsdp, 1),
            Some(("tp", t)) => (ParallelPlan::Tp, tp_degree(plan, t)?),
            Some(("fsdp+tp", t)) => (ParallelPlan::FsdpTp, tp_degree(plan, t)?),
            Some(("pp", p)) => (ParallelPlan::Pp, tp_degree(plan, p)?),
            _ => bail!("--parallel {plan}: use ddp, fsdp, tp:T (tensor parallelism over T ranks), fsdp+tp:T (FSDP2 over groups of T tensor-parallel ranks) or pp:P (a pipeline of P ranks)"),
        };
        match plan {
            ParallelPlan::Tp if tp != world => bail!(
                "--parallel {plan_text}: tensor parallelism alone puts every rank in one group; use --nproc {tp}, or --parallel fsdp+tp:{tp} to shard {world} ranks as groups of {tp}",
                plan_text = self.parallel.as_deref().unwrap_or_default()
            ),
            ParallelPlan::Pp if tp != world => bail!(
                "--parallel pp:{tp}: the pipeline's {tp} ranks are the whole job (pipelines combined with data or tensor parallelism are not built); use --nproc {tp}"
            ),
            ParallelPlan::FsdpTp if world % tp != 0 => bail!(
                "--parallel fsdp+tp:{tp}: --nproc {world} ranks do not split into groups of {tp}; use a --nproc that {tp} divides"
            ),
            _ => {}
        }
        Ok(Some(Parallel {
            plan,
            world,
            // A pipeline's degree is the job's ranks; no rank shares a tensor-parallel group.
            tp: if plan == ParallelPlan::Pp { 1 } else { tp },
            nodes: 1,
        }))
    }
}

/// The most ranks `--nproc` takes.
pub const MAX_WORLD: usize = 16_384;

/// `T` of `--parallel tp:T` / `fsdp+tp:T` (`P` of `pp:P`): a whole number of ranks, at least 1.
fn tp_degree(plan: &str, t: &str) -> anyhow::Result<usize> {
    match t.parse::<usize>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => bail!("--parallel {plan}: the degree after ':' is a whole number of ranks, at least 1 (as in tp:2 or pp:2)"),
    }
}

impl EngineArgs {
    /// Refuses --nproc/--parallel in a command that does not run a data-parallel job.
    pub fn refuse_parallel(&self, command: &str) -> anyhow::Result<()> {
        if let Some(p) = self.parallel.as_deref() {
            bail!("--parallel {p}: {command} runs one process; a data-parallel job runs under bench, sweep, fit or estimate");
        }
        if let Some(n) = self.nproc {
            bail!("--nproc {n}: {command} runs one process; a data-parallel job runs under bench, sweep, fit or estimate");
        }
        Ok(())
    }
}

impl VariantArgs {
    /// The variant of a run in `mode` and `dtype`: mixed precision unless asked otherwise when
    /// training in a half type (what `torch.autocast` users run), pure otherwise.
    pub fn to_variant(&self, mode: Mode, dtype: Dtype) -> Variant {
        let half_train = mode == Mode::Train && dtype != Dtype::F32;
        Variant {
            attention: self.attention,
            fusion: self.fusion,
            checkpoint: self.checkpoint,
            precision: self.precision.unwrap_or(if half_train {
                Precision::Mixed
            } else {
                Precision::Pure
            }),
        }
    }
}

/// Real token ids instead of random ones (bench, sweep, leak).
#[derive(Args, Debug, Clone, Default)]
pub struct DataArgs {
    /// Token file: .bin (little-endian u16, nanoGPT/CS336), .npy (integer ids) or .txt (whitespace-separated ids); batches are windows of seq+1 tokens at seeded offsets
    #[arg(long, value_name = "FILE")]
    pub data: Option<PathBuf>,
    /// Element type of a .bin --data file
    #[arg(long, value_enum, value_name = "DTYPE", requires = "data")]
    pub data_dtype: Option<BinDtype>,
}

impl DataArgs {
    pub fn to_spec(&self) -> Option<DataSpec> {
        self.data.as_ref().map(|path| DataSpec {
            path: path.clone(),
            bin_dtype: self.data_dtype,
        })
    }
}

/// bench's outputs: the Record and its export formats.
#[derive(Args, Debug, Clone)]
pub struct OutputArgs {
    #[command(flatten)]
    pub files: TableFiles,
    #[command(flatten)]
    pub trace: TraceOut,
    #[command(flatten)]
    pub quiet: Quiet,
}

pub const BENCH_WARMUP: usize = 2;
pub const BENCH_STEPS: usize = 10;

/// Resolves --model / --config into a name and a validated config (`ModelConfig::resolve`).
pub fn resolve_model(m: &ModelArgs) -> anyhow::Result<(String, ModelConfig)> {
    let cfg = ModelConfig::resolve(&m.model, m.config.as_deref())?;
    Ok((cfg.name.clone(), cfg))
}

/// One workload's values once a command has read its flags and applied its own defaults (which
/// differ: bench's steps, fit's batch, sweep's points, estimate's constants). [`Workload::spec`] is
/// the one place they become a Spec: every rule shared by all commands is applied there, once.
#[derive(Clone, Debug)]
pub struct Workload {
    /// The preset's name, or the config's (`resolve_model`).
    pub model: String,
    pub config: ModelConfig,
    /// --config, --weights.
    pub config_path: Option<PathBuf>,
    pub weights: Option<PathBuf>,
    pub mode: Mode,
    pub batch: usize,
    /// --seq: the sequence length (train, infer); generate's prompt length unless `prompt_len`.
    pub seq: usize,
    pub dtype: Dtype,
    /// --threads; `None`: all cores.
    pub threads: Option<usize>,
    pub seed: u64,
    pub warmup: usize,
    pub steps: usize,
    pub grad_accum: usize,
    /// --prompt-len (generate); `None`: --seq.
    pub prompt_len: Option<usize>,
    pub new_tokens: usize,
    pub lr: f64,
    pub data: Option<DataSpec>,
    /// --attention, --fusion, --checkpoint, --precision, --engine, --device.
    pub variant: VariantArgs,
}

impl Workload {
    /// The Spec, not validated (a sweep keeps an invalid point for an `error` row): generate's
    /// `seq` is its prompt (--prompt-len, else --seq), threads default to all cores, the variant's
    /// precision follows mode and dtype, `--engine torch --device D` becomes `torch`.
    pub fn spec(self) -> anyhow::Result<Spec> {
        let torch = self.variant.engine.torch_run()?;
        // A config transformers builds: what it builds, once, before anything reads its sizes.
        let config = match &torch {
            Some(_) => {
                let origin = self
                    .config_path
                    .as_deref()
                    .map_or_else(|| self.model.clone(), |p| p.display().to_string());
                crate::torch::describe::built(&self.config, &origin)?
            }
            None => self.config,
        };
        // A CPU job's ranks share the cores: each its share unless --threads says otherwise.
        let ranks = torch
            .as_ref()
            .filter(|t| !t.is_cuda())
            .and_then(|t| t.parallel)
            .map_or(1, |p| p.world);
        let threads = self
            .threads
            .unwrap_or_else(|| (all_cores() / ranks.max(1)).max(1));
        let prompt_len = self.prompt_len.unwrap_or(self.seq);
        let seq = match self.mode {
            Mode::Generate => prompt_len,
            Mode::Train | Mode::Infer => self.seq,
        };
        Ok(Spec {
            model: self.model,
            config: Some(config),
            config_path: self.config_path,
            weights: self.weights,
            mode: self.mode,
            batch: self.batch,
            seq,
            dtype: self.dtype,
            threads,
            seed: self.seed,
            warmup: self.warmup,
            steps: self.steps,
            grad_accum: self.grad_accum,
            prompt_len,
            new_tokens: self.new_tokens,
            lr: self.lr,
            data: self.data,
            variant: self.variant.to_variant(self.mode, self.dtype),
            engine: None,
            torch,
        })
    }

    /// The Spec, validated ([`Spec::validate`]): what `fit` and `estimate` check.
    pub fn validated(self) -> anyhow::Result<Spec> {
        let spec = self.spec()?;
        spec.validate()?;
        Ok(spec)
    }

    /// The Spec of a run in this process (bench, leak, roofline, profile) or optimize's baseline:
    /// validated, its sizes allocatable, its --data file readable and long enough for one window.
    pub fn runnable(self) -> anyhow::Result<Spec> {
        let spec = self.validated()?;
        crate::runner::refuse_unallocatable(&spec)?;
        if let Some(d) = &spec.data {
            // Refused before anything is measured: unreadable, empty, too short for one window.
            crate::input::tokens::Tokens::open(d)?.check_window(spec.seq)?;
        }
        Ok(spec)
    }
}

impl WorkloadArgs {
    /// These flags' values, with bench's warm-up and steps where not given (leak, roofline and
    /// profile set theirs first).
    pub fn workload(&self, m: &ModelArgs) -> anyhow::Result<Workload> {
        let (model, config) = resolve_model(m)?;
        Ok(Workload {
            model,
            config,
            config_path: m.config.clone(),
            weights: m.weights.clone(),
            mode: *self.shape.mode,
            batch: *self.shape.batch,
            seq: *self.shape.seq,
            dtype: *self.dtype,
            threads: *self.run.threads,
            seed: *self.run.seed,
            warmup: self.warmup.unwrap_or(BENCH_WARMUP),
            steps: self.steps.unwrap_or(BENCH_STEPS),
            grad_accum: *self.grad_accum,
            prompt_len: *self.prompt_len,
            new_tokens: *self.new_tokens,
            lr: *self.lr,
            data: self.data.to_spec(),
            variant: self.variant.clone(),
        })
    }
}

/// The runnable Spec of `--model/--config/--weights` and the workload flags.
pub fn build_spec(m: &ModelArgs, w: &WorkloadArgs) -> anyhow::Result<Spec> {
    w.workload(m)?.runnable()
}

/// The files a run reads, by flag: --config, --weights (a sharded index's shards too), --data.
/// Outputs are checked against them (`export::check_outputs`).
pub fn run_inputs(
    config: Option<&Path>,
    weights: Option<&Path>,
    data: Option<&Path>,
) -> Vec<(&'static str, PathBuf)> {
    let mut v = Vec::new();
    if let Some(c) = config {
        v.push(("--config", c.to_path_buf()));
    }
    if let Some(w) = weights {
        v.extend(
            crate::model::weights::files_of(w)
                .into_iter()
                .map(|p| ("--weights", p)),
        );
    }
    if let Some(d) = data {
        v.push(("--data", d.to_path_buf()));
    }
    v
}

/// Fails before measuring when an output cannot be written or names an input (see
/// `export::check_outputs`).
pub fn check_outputs(o: &OutputArgs, m: &ModelArgs, d: &DataArgs) -> anyhow::Result<()> {
    export::check_outputs(
        &[
            o.files.flags().as_slice(),
            &[("--trace", o.trace.as_deref())],
        ]
        .concat(),
        &run_inputs(m.config.as_deref(), m.weights.as_deref(), d.data.as_deref()),
    )
}

pub fn write_outputs(o: &OutputArgs, records: &[Record]) -> anyhow::Result<()> {
    o.files.write(
        || report::json::Json.render(records),
        || report::csv::Csv.render(records),
        || report::markdown::Markdown.render(records),
    )?;
    if let [r] = records {
        write_if_asked("--trace", o.trace.as_deref(), || report::trace::to_json(r))?;
    }
    Ok(())
}
