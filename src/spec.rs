//! What to run: model, workload and sizes. Validated once; serialisable, so it is the only thing
//! a worker process needs. Over 600 lines because the Spec, its one validation and every
//! refusal's message (each naming its flag) are one idea: what may run.

use crate::model::config::{Family, ModelConfig};
use crate::model::purpose::Purpose;
use crate::model::variant::{Precision, Variant};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// forward + cross-entropy + backward + AdamW step
    Train,
    /// forward only, no autograd graph
    Infer,
    /// prefill a prompt, then decode token by token with a KV cache
    Generate,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Train => "train",
            Mode::Infer => "infer",
            Mode::Generate => "generate",
        }
    }

    /// How this workload's parameters are held (`ParamStore`).
    pub fn purpose(self) -> Purpose {
        match self {
            Mode::Train => Purpose::Train,
            Mode::Infer => Purpose::Forward,
            Mode::Generate => Purpose::Decode,
        }
    }
}

#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Dtype {
    F32,
    Bf16,
    F16,
}

impl Dtype {
    pub fn name(self) -> &'static str {
        match self {
            Dtype::F32 => "f32",
            Dtype::Bf16 => "bf16",
            Dtype::F16 => "f16",
        }
    }

    pub fn size_bytes(self) -> u64 {
        match self {
            Dtype::F32 => 4,
            Dtype::Bf16 | Dtype::F16 => 2,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Spec {
    /// Preset name, or the config's name when `config_path` is set.
    pub model: String,
    /// The resolved architecture (a worker needs no file to rebuild it). Absent only from the
    /// Record of a user's own PyTorch model (`engine` says which): memscope cannot build that.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<ModelConfig>,
    pub config_path: Option<PathBuf>,
    pub weights: Option<PathBuf>,
    pub mode: Mode,
    pub batch: usize,
    /// Sequence length for train and infer; the prompt length for generate.
    pub seq: usize,
    pub dtype: Dtype,
    pub threads: usize,
    pub seed: u64,
    pub warmup: usize,
    pub steps: usize,
    pub grad_accum: usize,
    /// Generate only: prompt tokens prefilled before decoding.
    pub prompt_len: usize,
    /// Generate only: tokens decoded per measured step.
    pub new_tokens: usize,
    pub lr: f64,
    /// `--data`: real token ids instead of random ones (train, infer, generate prompts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<DataSpec>,
    /// The engine path (`--attention`, `--fusion`, `--checkpoint`, `--precision`); absent for
    /// memscope's own.
    #[serde(default, skip_serializing_if = "Variant::is_default")]
    pub variant: Variant,
    /// The engine that ran the workload when it was not memscope's own (a PyTorch training loop
    /// recorded by the Python package, `python/`); absent for memscope's engine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine: Option<EngineInfo>,
    /// `--engine torch`: run the workload through Hugging Face transformers on PyTorch (the
    /// Python package's engine, `python/memscope/_workers/engine.py`) on `device`; absent for memscope's
    /// own engine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub torch: Option<TorchRun>,
}

/// `--engine` (bench, leak, sweep, fit, optimize, estimate).
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    clap::ValueEnum,
    schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Engine {
    /// memscope's own engine (candle + fused CPU kernels), on the CPU
    #[default]
    Candle,
    /// Hugging Face transformers' own model classes on PyTorch (SDPA attention, fused AdamW),
    /// on the CPU or a CUDA GPU; needs the Python package (`pip install ./python`)
    Torch,
}

/// Where and how the torch engine runs a Spec.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TorchRun {
    /// `cpu`, `cuda` or `cuda:N` (`--device`).
    pub device: String,
    /// On CUDA: the card simulated (`--memory-limit` of sweep, fit, optimize), as a cap on
    /// PyTorch's caching allocator (`torch.cuda.set_per_process_memory_fraction`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_memory_limit_bytes: Option<u64>,
    /// The CPU ranks of a parallel run under `--memory-limit` (sweep, fit): each rank's heap
    /// (every byte it mallocs, the interpreter's included) held to this by the counting
    /// allocator, as a device's memory holds a GPU rank.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heap_limit_bytes: Option<u64>,
    /// `--nproc N --parallel PLAN`: the data-parallel job (`estimate` traces one rank under a
    /// fake process group; bench, sweep and fit run every rank under torchrun); absent for one
    /// process.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parallel: Option<Parallel>,
    /// `--checkpoint-policy` (with `--checkpoint`): which activations a checkpointed step keeps,
    /// as PyTorch's selective checkpointing chooses them; absent: every block, nothing kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint_policy: Option<CheckpointPolicy>,
    /// `--fsdp-precision PARAM,REDUCE` (with `--parallel fsdp`): FSDP2's own
    /// `MixedPrecisionPolicy`, the parameters gathered in PARAM for compute and the gradients
    /// reduced in REDUCE, over master weights in `--dtype`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fsdp_precision: Option<FsdpPrecision>,
    /// `--reshard-after-forward` (with `--parallel fsdp`): FSDP2's `reshard_after_forward` on
    /// every block, `true` (its default: each block's gathered parameters freed after its
    /// forward and gathered again in backward), `false` (kept from forward to backward) or N
    /// (kept resharded over N ranks).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reshard_after_forward: Option<Reshard>,
    /// `--fsdp-offload` (with `--parallel fsdp`): FSDP2's `CPUOffloadPolicy` — the sharded
    /// parameters, their gradients and the optimizer's state kept in host memory (pinned on
    /// CUDA), each block's parameters copied to the device for its all-gather, the optimizer
    /// stepping on the host.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub fsdp_offload: bool,
    /// With `--parallel pp:P`: the schedule and its micro-batches (`--pp-schedule`,
    /// `--micro-batches`); absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pipeline: Option<Pipeline>,
}

/// A pipeline-parallel job's schedule: which of PyTorch's schedule classes runs it, over how
/// many micro-batches, with how many stages on each rank.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Pipeline {
    pub schedule: PipelineSchedule,
    /// The batch is split into this many equal micro-batches (`--micro-batches`).
    pub micro_batches: usize,
    /// Stages each rank holds: 1, V of `interleaved-1f1b:V` or `interleaved-zero-bubble:V`
    /// (rank r holds stages r, r + P, …, as PyTorch's interleaved schedules place them), 2 of
    /// `zbv-zero-bubble` (stages r and 2P − 1 − r).
    pub stages_per_rank: usize,
    /// `--pp-split B0,B1,…`: the blocks of each stage in order; absent: as even as they divide
    /// (the earlier stages one more where they do not).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub split: Option<Vec<usize>>,
}

/// `--pp-schedule`: PyTorch's schedule classes by the names torchtitan's configs give them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub enum PipelineSchedule {
    /// `ScheduleGPipe`: every micro-batch's forward, then every backward.
    #[serde(rename = "gpipe")]
    GPipe,
    /// `Schedule1F1B`: after a warm-up of forwards, one forward and one backward in turn.
    #[serde(rename = "1f1b")]
    OneFOneB,
    /// `ScheduleInterleaved1F1B`: 1F1B over several stages a rank (smaller bubble).
    #[serde(rename = "interleaved-1f1b")]
    Interleaved1F1B,
    /// `ScheduleInterleavedZeroBubble` (ZB1P): interleaved 1F1B whose backwards are split into
    /// the input's gradient (`I`) and the weights' (`W`), the weights' filling the bubble.
    #[serde(rename = "interleaved-zero-bubble")]
    InterleavedZeroBubble,
    /// `ScheduleZBVZeroBubble`: two stages a rank placed in a V (rank r holds stages r and
    /// 2P − 1 − r), backwards split as zero-bubble's.
    #[serde(rename = "zbv-zero-bubble")]
    ZbvZeroBubble,
}

impl Pipeline {
    /// Every stage of the job: ranks × stages per rank.
    pub fn stages(&self, world: usize) -> usize {
        world * self.stages_per_rank
    }

    /// Whether its backwards run as two halves, the input's gradient and the weights'.
    pub fn splits_backward(&self) -> bool {
        matches!(
            self.schedule,
            PipelineSchedule::InterleavedZeroBubble | PipelineSchedule::ZbvZeroBubble
        )
    }

    /// As `--pp-schedule` takes it.
    pub fn schedule_flag(&self) -> String {
        match self.schedule {
            PipelineSchedule::GPipe => "gpipe".into(),
            PipelineSchedule::OneFOneB => "1f1b".into(),
            PipelineSchedule::Interleaved1F1B => {
                format!("interleaved-1f1b:{}", self.stages_per_rank)
            }
            PipelineSchedule::InterleavedZeroBubble => {
                format!("interleaved-zero-bubble:{}", self.stages_per_rank)
            }
            PipelineSchedule::ZbvZeroBubble => "zbv-zero-bubble".into(),
        }
    }

    /// `--pp-split 3,1`: the blocks of each stage, every one at least 1.
    pub fn parse_split(text: &str) -> Result<Vec<usize>, SpecError> {
        text.split(',')
            .map(|b| b.trim().parse::<usize>().ok().filter(|&b| b >= 1))
            .collect::<Option<Vec<usize>>>()
            .ok_or_else(|| SpecError::BadPipelineSplit(text.to_string()))
    }

    /// `--pp-schedule gpipe|1f1b|interleaved-1f1b[:V]|interleaved-zero-bubble[:V]|zbv-zero-bubble`
    /// (V stages a rank, 2 if not given): (schedule, stages per rank).
    pub fn parse_schedule(text: &str) -> Result<(PipelineSchedule, usize), SpecError> {
        let bad = || SpecError::BadPipelineSchedule(text.to_string());
        let (name, v) = match text.split_once(':') {
            None => (text, None),
            Some((name, v)) => match v.parse::<usize>() {
                Ok(v) if v >= 2 => (name, Some(v)),
                _ => return Err(bad()),
            },
        };
        match (name, v) {
            ("gpipe", None) => Ok((PipelineSchedule::GPipe, 1)),
            ("1f1b", None) => Ok((PipelineSchedule::OneFOneB, 1)),
            ("zbv-zero-bubble", None) => Ok((PipelineSchedule::ZbvZeroBubble, 2)),
            ("interleaved-1f1b", v) => Ok((PipelineSchedule::Interleaved1F1B, v.unwrap_or(2))),
            ("interleaved-zero-bubble", v) => {
                Ok((PipelineSchedule::InterleavedZeroBubble, v.unwrap_or(2)))
            }
            _ => Err(bad()),
        }
    }
}

/// `--reshard-after-forward`: `true`, `false` or a number of ranks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(untagged)]
pub enum Reshard {
    Always(bool),
    Ranks(usize),
}

impl Reshard {
    pub fn flag(self) -> String {
        match self {
            Reshard::Always(b) => b.to_string(),
            Reshard::Ranks(n) => n.to_string(),
        }
    }

    pub fn parse(text: &str) -> Result<Reshard, SpecError> {
        match text {
            "true" => Ok(Reshard::Always(true)),
            "false" => Ok(Reshard::Always(false)),
            n => match n.parse::<usize>() {
                Ok(n) if n >= 2 => Ok(Reshard::Ranks(n)),
                _ => Err(SpecError::BadReshard(text.to_string())),
            },
        }
    }
}

/// `--checkpoint-policy`: selective activation checkpointing on the torch engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "policy", rename_all = "lowercase")]
pub enum CheckpointPolicy {
    /// `ops`: torchtitan's per-op policy inside every checkpointed block: the outputs of
    /// attention (SDPA) and of every other matrix product kept, the rest recomputed.
    Ops,
    /// `every:N`: every N-th block (the first, the N+1-th, …) checkpointed whole, the others'
    /// activations kept (torchtitan's layer policy).
    Every { n: usize },
}

impl CheckpointPolicy {
    /// As `--checkpoint-policy` takes it.
    pub fn flag(self) -> String {
        match self {
            CheckpointPolicy::Ops => "ops".into(),
            CheckpointPolicy::Every { n } => format!("every:{n}"),
        }
    }

    pub fn parse(text: &str) -> Result<CheckpointPolicy, SpecError> {
        match text.split_once(':') {
            None if text == "ops" => Ok(CheckpointPolicy::Ops),
            Some(("every", n)) => match n.parse::<usize>() {
                Ok(n) if n >= 1 => Ok(CheckpointPolicy::Every { n }),
                _ => Err(SpecError::BadCheckpointPolicy(text.to_string())),
            },
            _ => Err(SpecError::BadCheckpointPolicy(text.to_string())),
        }
    }
}

/// `--fsdp-precision PARAM,REDUCE`: FSDP2's `MixedPrecisionPolicy`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct FsdpPrecision {
    /// The dtype parameters are gathered in for forward and backward (`param_dtype`).
    pub param: Dtype,
    /// The dtype gradients are reduce-scattered in (`reduce_dtype`).
    pub reduce: Dtype,
}

impl FsdpPrecision {
    pub fn flag(self) -> String {
        format!("{},{}", self.param.name(), self.reduce.name())
    }

    pub fn parse(text: &str) -> Result<FsdpPrecision, SpecError> {
        // As `--dtype` reads its value.
        let dtype = |t: &str| <Dtype as clap::ValueEnum>::from_str(t.trim(), false).ok();
        match text.split_once(',') {
            Some((p, r)) => match (dtype(p), dtype(r)) {
                (Some(param), Some(reduce)) => Ok(FsdpPrecision { param, reduce }),
                _ => Err(SpecError::BadFsdpPrecision(text.to_string())),
            },
            None => Err(SpecError::BadFsdpPrecision(text.to_string())),
        }
    }
}

/// A data-parallel job: `world` ranks, each running the Spec's batch, under `plan`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Parallel {
    pub plan: ParallelPlan,
    /// Ranks in the job (`--nproc`), at least 1.
    pub world: usize,
    /// Ranks in one tensor-parallel group (`tp:T`, `fsdp+tp:T`); 1 for `ddp` and `fsdp`.
    /// Absent in Records written before tensor parallelism: 1.
    #[serde(default = "one")]
    pub tp: usize,
    /// Nodes the ranks are spread over (`sweep --slurm --nodes M`), `world / nodes` on each;
    /// absent in Records written before jobs across nodes: 1.
    #[serde(default = "one")]
    pub nodes: usize,
}

fn one() -> usize {
    1
}

impl Parallel {
    /// The plan as `--parallel` takes it: `ddp`, `fsdp`, `tp:2`, `fsdp+tp:2`.
    pub fn flag(&self) -> String {
        match self.plan {
            ParallelPlan::Ddp | ParallelPlan::Fsdp => self.plan.name().to_string(),
            ParallelPlan::Pp => format!("pp:{}", self.world),
            _ => format!("{}:{}", self.plan.name(), self.tp),
        }
    }

    /// Ranks on one node: `world / nodes`.
    pub fn per_node(&self) -> usize {
        self.world / self.nodes.max(1)
    }

    /// Ranks that share one batch's work, each a part of its products: the pipeline's `P`
    /// stages, the tensor-parallel group's `T`, else 1.
    pub fn sharing_a_batch(&self) -> usize {
        self.world / self.data_groups().max(1)
    }

    /// Groups of ranks that each run their own batch: every rank under data parallelism,
    /// `world / T` under `tp:T` and `fsdp+tp:T`, one for a pipeline.
    pub fn data_groups(&self) -> usize {
        match self.plan {
            ParallelPlan::Pp => 1,
            _ => self.world / self.tp.max(1),
        }
    }
}

/// How the ranks share the model (`--parallel`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ParallelPlan {
    /// `DistributedDataParallel`: every rank holds the whole model, its gradient buckets
    /// (a second copy of the parameters' bytes) and its optimizer state.
    Ddp,
    /// FSDP2 (`fully_shard` on every transformer block, then on the root): parameters,
    /// gradients and optimizer state split by rows over the ranks, each block's parameters
    /// gathered while it runs and freed after its forward.
    Fsdp,
    /// Tensor parallelism over `tp` ranks as transformers plans it for the model (its
    /// config's `base_model_tp_plan`: attention and MLP projections split by columns, then by
    /// rows), applied with PyTorch's `parallelize_module`; every rank sees the same batch.
    Tp,
    /// FSDP2 over `world / tp` groups of `tp` tensor-parallel ranks (a 2-D device mesh).
    #[serde(rename = "fsdp+tp")]
    FsdpTp,
    /// Pipeline parallelism over `world` ranks (`pp:P`): the model's blocks split into stages
    /// in order (the embedding on the first, the final norm, head and loss on the last), each
    /// rank holding its stages' parameters, gradients and optimizer state, the batch run as
    /// micro-batches through PyTorch's `torch.distributed.pipelining` schedule (`TorchRun`'s
    /// `pipeline`).
    Pp,
}

impl ParallelPlan {
    pub fn name(self) -> &'static str {
        match self {
            ParallelPlan::Ddp => "ddp",
            ParallelPlan::Fsdp => "fsdp",
            ParallelPlan::Tp => "tp",
            ParallelPlan::FsdpTp => "fsdp+tp",
            ParallelPlan::Pp => "pp",
        }
    }
}

impl TorchRun {
    pub fn is_cuda(&self) -> bool {
        self.device.starts_with("cuda")
    }
}

/// Which engine runs a Spec, with what it needs: the one place the choice is read
/// (`Spec::engine`).
#[derive(Clone, Copy, Debug)]
pub enum EngineRef<'a> {
    /// memscope's own (candle and its fused CPU kernels), in this process.
    Candle,
    /// transformers on PyTorch, in the Python package's processes.
    Torch(&'a TorchRun),
}

/// `--device`: `cpu`, `cuda` or `cuda:N`.
pub fn parse_device(text: &str) -> Result<String, SpecError> {
    let ok = text == "cpu"
        || text == "cuda"
        || text
            .strip_prefix("cuda:")
            .is_some_and(|n| n.parse::<u16>().is_ok_and(|i| i < 1024) && !n.starts_with('+'));
    if ok {
        Ok(text.to_string())
    } else {
        Err(SpecError::BadDevice(text.to_string()))
    }
}

/// Another engine's run recorded into a Record: which engine, on what, and what its memory
/// figures (the Record's `heap_*` fields) measure there.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct EngineInfo {
    /// `pytorch`.
    pub name: String,
    /// The engine's version (`torch.__version__`).
    pub version: String,
    /// `cpu`, `cuda:0`, …
    pub device: String,
    /// The model's class (`GPT2LMHeadModel`, a user's `nn.Module`).
    pub model_class: String,
    /// What the Record's heap figures count on this device: `cuda allocated` (PyTorch's caching
    /// allocator, allocated bytes), `malloc usable` (every malloc of the process, counted by the
    /// preloaded allocator) or `rss` (resident set size: the allocator was not preloaded).
    pub memory: String,
    /// torch.distributed rank and world size, when the run was distributed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rank: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub world_size: Option<u32>,
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum SpecError {
    #[error("{flag} must be at least 1 (got 0)")]
    Zero { flag: &'static str },
    #[error("--seq {seq} exceeds the model's context of {max} positions (`max_seq_len` of {model}); use --seq {max} or less")]
    SeqTooLong {
        seq: usize,
        max: usize,
        model: String,
    },
    #[error("--prompt-len {prompt} + --new-tokens {new} = {total} exceeds the model's context of {max} positions (`max_seq_len` of {model})")]
    GenerateTooLong {
        prompt: usize,
        new: usize,
        total: usize,
        max: usize,
        model: String,
    },
    #[error("--mode generate needs a decoder (gpt2 or llama family); {model} is a bert encoder: use --mode train or infer")]
    EncoderCannotGenerate { model: String },
    #[error("--grad-accum {0} only applies to --mode train")]
    GradAccumNotTrain(usize),
    #[error("--checkpoint-policy {0}: use ops (torchtitan's per-op policy: keep attention's and every other product's outputs) or every:N (checkpoint every N-th block, N ≥ 1)")]
    BadCheckpointPolicy(String),
    #[error("--checkpoint-policy {0}: it chooses what --checkpoint keeps; add --checkpoint")]
    PolicyNeedsCheckpoint(String),
    #[error("--fsdp-precision {0}: give PARAM,REDUCE dtypes (f32, bf16, f16), as in bf16,f32: parameters gathered in bf16, gradients reduced in f32")]
    BadFsdpPrecision(String),
    #[error("--fsdp-precision {0}: FSDP2's mixed-precision policy applies to a sharded job; add --nproc N --parallel fsdp (or fsdp+tp:T)")]
    FsdpPrecisionNeedsFsdp(String),
    #[error("--fsdp-precision {0} with --precision mixed: choose one way to compute in half precision (FSDP2's policy, or autocast)")]
    FsdpPrecisionAndAutocast(String),
    #[error("--fsdp-offload: FSDP2's CPU offload applies to a sharded job; add --nproc N --parallel fsdp (or fsdp+tp:T)")]
    OffloadNeedsFsdp,
    #[error("--reshard-after-forward {0}: use true (FSDP2's default), false (keep each block's gathered parameters from forward to backward) or N ≥ 2 (reshard over N ranks)")]
    BadReshard(String),
    #[error("--pp-schedule {0}: use gpipe, 1f1b, interleaved-1f1b[:V], interleaved-zero-bubble[:V] (V ≥ 2 stages a rank, 2 if not given) or zbv-zero-bubble (2 stages a rank), PyTorch's ScheduleGPipe, Schedule1F1B, ScheduleInterleaved1F1B, ScheduleInterleavedZeroBubble and ScheduleZBVZeroBubble")]
    BadPipelineSchedule(String),
    #[error("--pp-split {0}: give the blocks of each stage in order as whole numbers of at least 1, as 3,1 (the first stage blocks 0–2, the second block 3)")]
    BadPipelineSplit(String),
    #[error("{flag}: {why}")]
    PipelinePlan { flag: String, why: String },
    #[error("--reshard-after-forward {flag}: {why}")]
    ReshardPlan { flag: String, why: String },
    #[error("--checkpoint recomputes activations in backward, so it only applies to --mode train")]
    CheckpointNotTrain,
    #[error("--precision mixed keeps f32 master weights and optimizer state for a half-precision run: use it with --mode train and --dtype bf16 or f16 (this run is --mode {mode} --dtype {dtype})")]
    MixedNeedsHalfTrain {
        mode: &'static str,
        dtype: &'static str,
    },
    #[error("spec.config is missing: this Spec comes from the Record of a user's own PyTorch model ({0}), which memscope cannot build or run; run a preset (--model) or a config file (--config)")]
    NoConfig(String),
    #[error("--config: model_type `{model_type}` is built by Hugging Face transformers, not by memscope's own engine (which builds gpt2, llama, bert and distilbert): add --engine torch (the Python package: pip install ./python)")]
    NeedsTransformers { model_type: String },
    #[error("--device {0}: use cpu, cuda or cuda:N (N: the GPU's index, 0 to 1023)")]
    BadDevice(String),
    #[error("--device {0} needs --engine torch: memscope's own engine runs on the CPU")]
    DeviceNeedsTorch(String),
    #[error("--fusion compile is torch.compile: it needs --engine torch (memscope's own engine has --fusion full or none)")]
    CompileNeedsTorch,
    #[error("--weights {0}: the torch engine builds transformers' model with seeded random weights and does not load memscope's weight files; drop --weights, or run memscope's own engine (--engine candle) on them")]
    WeightsOnTorch(String),
    #[error("--seq 1: {model} predicts each next token, and one position has none to predict (transformers' loss over no targets is NaN); use --seq 2 or more")]
    SeqOneCausal { model: String },
    #[error("--fusion compile with --parallel {plan}: the torch engine compiles one process's model, not the {plan}-wrapped one, so the job would run without {plan}; drop --fusion compile for a data-parallel job")]
    CompileParallel { plan: String },
    #[error("--fusion none is memscope's op-by-op candle path; the torch engine runs PyTorch eager (--fusion full, the default) or torch.compile (--fusion compile)")]
    FusionNoneOnTorch,
    #[error("--parallel {plan}: a data-parallel job trains; use --mode train (its {mode} has no gradients to share)")]
    ParallelNotTrain {
        plan: &'static str,
        mode: &'static str,
    },
    #[error("--parallel {plan}: {model} has {heads} attention heads and {kv_heads} key/value heads, and a tensor-parallel rank holds whole heads; use a degree that divides both ({divides})")]
    TpHeads {
        plan: String,
        model: String,
        heads: usize,
        kv_heads: usize,
        divides: String,
    },
    #[error("--nodes {nodes}: --nproc {world} ranks do not split evenly over {nodes} nodes; use a --nproc that {nodes} divides")]
    NodesSplit { nodes: usize, world: usize },
    #[error("--lr must be a finite positive number (got {0})")]
    BadLr(f64),
    #[error("{flag} {value} is more than memscope runs ({max} at most); a leak verdict needs a few hundred steps, timing statistics a few dozen")]
    TooMany {
        flag: &'static str,
        value: usize,
        max: usize,
    },
    #[error("--grad-accum {grad_accum} × {steps} steps (--warmup + --steps) = {total} micro-batches is more than memscope runs ({max} at most, as for --steps); use a smaller --grad-accum")]
    TooManyMicroBatches {
        grad_accum: usize,
        steps: usize,
        total: String,
        max: usize,
    },
    #[error(
        "--threads {value} is more than memscope runs ({max} at most; this machine has {cores})"
    )]
    TooManyThreads {
        value: usize,
        max: usize,
        cores: usize,
    },
    #[error("--batch {batch} × {tokens_flag} {tokens} × {what} {width} × 4 bytes does not fit one tensor (at most 2^63 bytes); nothing was allocated: use a smaller --batch or {tokens_flag}")]
    TensorTooLarge {
        batch: usize,
        tokens_flag: &'static str,
        tokens: usize,
        what: &'static str,
        width: usize,
    },
}

/// The most measured steps, and the most warm-up steps, one run may ask for (each measured step
/// keeps its samples in buffers allocated before timing starts).
pub const MAX_STEPS: usize = 1_000_000;

/// The most CPU threads one run may ask for (each gets a stack and a gemm packing buffer).
pub const MAX_THREADS: usize = 4096;

impl Spec {
    /// The engine that runs this Spec.
    pub fn engine(&self) -> EngineRef<'_> {
        match &self.torch {
            Some(t) => EngineRef::Torch(t),
            None => EngineRef::Candle,
        }
    }

    /// The processes this machine runs for the Spec: a torch job's ranks on one node, else 1.
    pub fn ranks_here(&self) -> u64 {
        match self.engine() {
            EngineRef::Torch(TorchRun {
                parallel: Some(p), ..
            }) => (p.world / p.nodes.max(1)).max(1) as u64,
            _ => 1,
        }
    }

    /// The torch job's plan (`--nproc N --parallel PLAN`); None for one process or the candle engine.
    pub fn parallel(&self) -> Option<Parallel> {
        self.torch.as_ref().and_then(|t| t.parallel)
    }

    /// The torch job's plan to change (a sweep's or Slurm's world size).
    pub fn parallel_mut(&mut self) -> Option<&mut Parallel> {
        self.torch.as_mut().and_then(|t| t.parallel.as_mut())
    }

    /// Where the workload runs: the torch engine's `--device`, else `cpu` (memscope's own engine).
    pub fn device(&self) -> &str {
        self.torch.as_ref().map_or("cpu", |t| t.device.as_str())
    }

    /// A multi-rank job on the CPU (its ranks share this machine's memory); None otherwise.
    pub fn cpu_job(&self) -> Option<Parallel> {
        self.parallel().filter(|_| !self.is_cuda())
    }

    /// The workload runs on a CUDA GPU (`--engine torch --device cuda`).
    pub fn is_cuda(&self) -> bool {
        self.torch.as_ref().is_some_and(TorchRun::is_cuda)
    }

    pub fn validate(&self) -> Result<(), SpecError> {
        // For generate, --seq is the prompt length: name the flag the user gave.
        if self.mode == Mode::Generate && self.prompt_len == 0 {
            return Err(SpecError::Zero {
                flag: "--prompt-len",
            });
        }
        let nonzero = [
            ("--batch", self.batch),
            ("--seq", self.seq),
            ("--steps", self.steps),
            ("--threads", self.threads),
            ("--grad-accum", self.grad_accum),
        ];
        if let Some((flag, _)) = nonzero.iter().find(|(_, v)| *v == 0) {
            return Err(SpecError::Zero { flag });
        }
        for (flag, value) in [("--steps", self.steps), ("--warmup", self.warmup)] {
            if value > MAX_STEPS {
                return Err(SpecError::TooMany {
                    flag,
                    value,
                    max: MAX_STEPS,
                });
            }
        }
        let Some(config) = &self.config else {
            return Err(SpecError::NoConfig(self.model.clone()));
        };
        if let (None, Some(t)) = (&self.torch, &config.transformers) {
            return Err(SpecError::NeedsTransformers {
                model_type: t.model_type.clone(),
            });
        }
        if let Some(p) = self.torch.as_ref().and_then(|t| t.parallel) {
            if self.mode != Mode::Train {
                return Err(SpecError::ParallelNotTrain {
                    plan: p.plan.name(),
                    mode: self.mode.name(),
                });
            }
            if p.nodes == 0 || p.world % p.nodes != 0 {
                return Err(SpecError::NodesSplit {
                    nodes: p.nodes,
                    world: p.world,
                });
            }
            if config.n_heads % p.tp != 0 || config.n_kv_heads % p.tp != 0 {
                let divides = (1..=config.n_kv_heads.min(config.n_heads))
                    .filter(|d| config.n_heads % d == 0 && config.n_kv_heads % d == 0)
                    .map(|d| d.to_string())
                    .collect::<Vec<_>>()
                    .join(", ");
                return Err(SpecError::TpHeads {
                    plan: p.flag(),
                    model: self.model.clone(),
                    heads: config.n_heads,
                    kv_heads: config.n_kv_heads,
                    divides,
                });
            }
        }
        // Micro-batches keep their samples like steps do: the same bound, on their number.
        let runs = self.warmup.saturating_add(self.steps);
        let micro = runs.checked_mul(self.grad_accum);
        if self.grad_accum > 1 && micro.is_none_or(|m| m > MAX_STEPS) {
            return Err(SpecError::TooManyMicroBatches {
                grad_accum: self.grad_accum,
                steps: runs,
                total: micro.map_or_else(|| "more than 2^64".into(), |m| m.to_string()),
                max: MAX_STEPS,
            });
        }
        if self.threads > MAX_THREADS {
            return Err(SpecError::TooManyThreads {
                value: self.threads,
                max: MAX_THREADS,
                cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            });
        }
        let max = config.max_seq_len;
        match self.mode {
            Mode::Generate => {
                if config.family == Family::Bert {
                    return Err(SpecError::EncoderCannotGenerate {
                        model: self.model.clone(),
                    });
                }
                if self.new_tokens == 0 {
                    return Err(SpecError::Zero {
                        flag: "--new-tokens",
                    });
                }
                let total = self.prompt_len.saturating_add(self.new_tokens);
                if total > max {
                    return Err(SpecError::GenerateTooLong {
                        prompt: self.prompt_len,
                        new: self.new_tokens,
                        total,
                        max,
                        model: self.model.clone(),
                    });
                }
            }
            Mode::Train | Mode::Infer => {
                if self.seq > max {
                    return Err(SpecError::SeqTooLong {
                        seq: self.seq,
                        max,
                        model: self.model.clone(),
                    });
                }
            }
        }
        self.check_tensor_size()?;
        if self.grad_accum > 1 && self.mode != Mode::Train {
            return Err(SpecError::GradAccumNotTrain(self.grad_accum));
        }
        if self.variant.checkpoint && self.mode != Mode::Train {
            return Err(SpecError::CheckpointNotTrain);
        }
        if self.variant.precision == Precision::Mixed
            && (self.mode != Mode::Train || self.dtype == Dtype::F32)
        {
            return Err(SpecError::MixedNeedsHalfTrain {
                mode: self.mode.name(),
                dtype: self.dtype.name(),
            });
        }
        if !(self.lr.is_finite() && self.lr > 0.0) {
            return Err(SpecError::BadLr(self.lr));
        }
        match &self.torch {
            Some(t) => self.validate_torch(t, config),
            None if self.variant.fusion == crate::model::variant::Fusion::Compile => {
                Err(SpecError::CompileNeedsTorch)
            }
            None => Ok(()),
        }
    }

    /// A pipeline job's schedule against its model, batch and mode (and a schedule without
    /// one refused), each naming the flag that fixes it.
    fn validate_pipeline(&self, t: &TorchRun, config: &ModelConfig) -> Result<(), SpecError> {
        let err = |flag: String, why: String| Err(SpecError::PipelinePlan { flag, why });
        let world = t
            .parallel
            .filter(|p| p.plan == ParallelPlan::Pp)
            .map(|p| p.world);
        let (pipe, world) = match (&t.pipeline, world) {
            (None, None) => return Ok(()),
            (Some(p), None) => {
                return err(
                    format!("--pp-schedule {}", p.schedule_flag()),
                    "a schedule runs a pipeline-parallel job; add --nproc P --parallel pp:P".into(),
                )
            }
            (None, Some(w)) => {
                return err(
                    format!("--parallel pp:{w}"),
                    "internal: a pipeline job without its schedule".into(),
                )
            }
            (Some(p), Some(w)) => (p, w),
        };
        let plan = format!("--parallel pp:{world}");
        if self.mode != Mode::Train {
            return err(plan, format!("memscope runs a pipeline's training schedule; --mode {} runs one process's forward (use --mode train, or --parallel ddp|fsdp|tp:T)", self.mode.name()));
        }
        if self.grad_accum > 1 {
            return err(
                format!("--grad-accum {}", self.grad_accum),
                "a pipeline's schedule accumulates over its own micro-batches; give them with --micro-batches M".into(),
            );
        }
        let m = pipe.micro_batches;
        if m == 0 || self.batch % m != 0 {
            return err(
                format!("--micro-batches {m}"),
                format!(
                    "the batch of {} splits into micro-batches of equal size (without --micro-batches, one a stage); use a number that divides --batch {}",
                    self.batch, self.batch
                ),
            );
        }
        let stages = pipe.stages(world);
        if let Some(split) = &pipe.split {
            let flag = format!(
                "--pp-split {}",
                split
                    .iter()
                    .map(|b| b.to_string())
                    .collect::<Vec<_>>()
                    .join(",")
            );
            if split.len() != stages {
                return err(
                    flag,
                    format!(
                        "{} stages given; the job has {stages} ({world} ranks × {} a rank): give one number a stage",
                        split.len(),
                        pipe.stages_per_rank
                    ),
                );
            }
            if split.contains(&0) {
                return err(
                    flag,
                    "a stage holds at least one block: give numbers of at least 1".into(),
                );
            }
            let sum: usize = split.iter().sum();
            if sum != config.n_layers {
                return err(
                    flag,
                    format!(
                        "the stages hold {sum} blocks; {} has {}: give numbers that sum to {}",
                        config.name, config.n_layers, config.n_layers
                    ),
                );
            }
        }
        if stages > config.n_layers {
            return err(
                plan,
                format!(
                    "{stages} stages ({world} ranks × {} a rank) for {} blocks; a stage holds at least one block: use fewer ranks or stages a rank",
                    pipe.stages_per_rank, config.n_layers
                ),
            );
        }
        if pipe.splits_backward() && t.checkpoint_policy == Some(CheckpointPolicy::Ops) {
            return err(
                format!("--pp-schedule {}", pipe.schedule_flag()),
                "a zero-bubble schedule runs each backward in two halves, and PyTorch's selective checkpointing (--checkpoint-policy ops) allows one backward over a checkpointed region; use --checkpoint alone or --checkpoint-policy every:N, or --pp-schedule 1f1b|interleaved-1f1b".into(),
            );
        }
        // PyTorch's interleaved schedules run the micro-batches in max(1, M / P) equal rounds.
        let rounds = (m / world).max(1);
        let interleaved = match pipe.schedule {
            PipelineSchedule::Interleaved1F1B => Some("interleaved 1F1B"),
            PipelineSchedule::InterleavedZeroBubble => Some("interleaved zero-bubble schedule"),
            _ => None,
        };
        if let (Some(name), true) = (interleaved, m % rounds != 0) {
            return err(
                format!("--micro-batches {m}"),
                format!("PyTorch's {name} runs its micro-batches in {rounds} equal rounds (one per {world} ranks' worth); use a multiple of {world}, or fewer than {}", 2 * world),
            );
        }
        Ok(())
    }

    /// What only the torch engine refuses.
    fn validate_torch(&self, t: &TorchRun, config: &ModelConfig) -> Result<(), SpecError> {
        parse_device(&t.device)?;
        if let Some(w) = &self.weights {
            return Err(SpecError::WeightsOnTorch(w.display().to_string()));
        }
        if self.variant.fusion == crate::model::variant::Fusion::None {
            return Err(SpecError::FusionNoneOnTorch);
        }
        if let Some(p) = t.parallel {
            if self.variant.fusion == crate::model::variant::Fusion::Compile {
                return Err(SpecError::CompileParallel { plan: p.flag() });
            }
        }
        if let (Some(p), false) = (t.checkpoint_policy, self.variant.checkpoint) {
            return Err(SpecError::PolicyNeedsCheckpoint(p.flag()));
        }
        if let Some(fp) = t.fsdp_precision {
            let sharded = t
                .parallel
                .is_some_and(|p| matches!(p.plan, ParallelPlan::Fsdp | ParallelPlan::FsdpTp));
            if !sharded {
                return Err(SpecError::FsdpPrecisionNeedsFsdp(fp.flag()));
            }
            if self.variant.precision == Precision::Mixed {
                return Err(SpecError::FsdpPrecisionAndAutocast(fp.flag()));
            }
        }
        if t.fsdp_offload {
            let sharded = t
                .parallel
                .is_some_and(|p| matches!(p.plan, ParallelPlan::Fsdp | ParallelPlan::FsdpTp));
            if !sharded {
                return Err(SpecError::OffloadNeedsFsdp);
            }
        }
        if let Some(r) = t.reshard_after_forward {
            let why = match t.parallel {
                Some(p) if matches!(p.plan, ParallelPlan::Fsdp | ParallelPlan::FsdpTp) => {
                    let shard = p.world / p.tp.max(1);
                    match r {
                        Reshard::Ranks(n) if n >= shard || shard % n != 0 => Some(format!(
                            "{n} ranks must divide the {shard} FSDP2 shards over and be fewer"
                        )),
                        _ => None,
                    }
                }
                _ => Some("FSDP2's choice; add --nproc N --parallel fsdp (or fsdp+tp:T)".into()),
            };
            if let Some(why) = why {
                return Err(SpecError::ReshardPlan {
                    flag: r.flag(),
                    why,
                });
            }
        }
        self.validate_pipeline(t, config)?;
        if self.seq == 1 && self.mode != Mode::Generate && config.family != Family::Bert {
            return Err(SpecError::SeqOneCausal {
                model: self.model.clone(),
            });
        }
        Ok(())
    }

    /// The architecture to build. Every Spec that runs passed [`Spec::validate`], which refuses
    /// one without a config (only a Python-recorded Record's Spec lacks it).
    pub fn arch(&self) -> &ModelConfig {
        self.config
            .as_ref()
            .expect("a validated Spec has a config (Spec::validate refuses one without)")
    }

    /// Refuses sizes whose largest tensor could not be allocated at all (its byte size beyond
    /// 2^63, where a `Vec` panics with "capacity overflow" or the allocator aborts): the widest
    /// per-token tensor (logits, MLP, fused QKV, naive attention's scores) × batch × tokens in
    /// f32. `estimate`, `bench`, `sweep` and every run command share this check, before anything
    /// is allocated.
    fn check_tensor_size(&self) -> Result<(), SpecError> {
        let (tokens_flag, tokens) = match self.mode {
            Mode::Generate => (
                "--prompt-len + --new-tokens",
                self.prompt_len.saturating_add(self.new_tokens),
            ),
            _ => ("--seq", self.seq),
        };
        let Some(c) = &self.config else {
            return Ok(()); // no architecture: validate refuses the Spec before this matters
        };
        let mut widths = vec![
            ("vocab", c.vocab_size),
            ("d_ff", c.d_ff),
            ("3 × d_model", c.d_model.saturating_mul(3)),
        ];
        if self.variant.attention == crate::model::variant::Attention::Naive {
            widths.push(("n_heads × seq", c.n_heads.saturating_mul(tokens)));
        }
        let (what, width) = widths
            .into_iter()
            .max_by_key(|&(_, w)| w)
            .expect("three widths");
        let bytes = (self.batch as u128)
            .checked_mul(tokens as u128)
            .and_then(|x| x.checked_mul(width as u128))
            .and_then(|x| x.checked_mul(4));
        if bytes.is_none_or(|b| b > i64::MAX as u128) {
            return Err(SpecError::TensorTooLarge {
                batch: self.batch,
                tokens_flag,
                tokens,
                what,
                width,
            });
        }
        Ok(())
    }

    /// Positions one sequence holds: --seq, or the prompt plus the decoded tokens (generate).
    pub fn tokens_per_sequence(&self) -> usize {
        match self.mode {
            Mode::Generate => self.prompt_len.saturating_add(self.new_tokens),
            _ => self.seq,
        }
    }

    /// Tokens processed by one measured step (prompt + decoded tokens for generate).
    pub fn tokens_per_step(&self) -> u64 {
        let per_seq = match self.mode {
            Mode::Generate => self.prompt_len.saturating_add(self.new_tokens),
            _ => self.seq.saturating_mul(self.grad_accum),
        } as u64;
        (self.batch as u64).saturating_mul(per_seq)
    }
}

/// Element type of a `.bin` token file.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum BinDtype {
    U16,
    U32,
}

/// What `--data` asks for; lives in the Spec so a sweep worker opens the same file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct DataSpec {
    pub path: PathBuf,
    /// `--data-dtype`, only meaningful for `.bin` (u16 when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bin_dtype: Option<BinDtype>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devices_are_cpu_cuda_or_cuda_with_an_index() {
        for ok in ["cpu", "cuda", "cuda:0", "cuda:12"] {
            assert_eq!(parse_device(ok).unwrap(), ok);
        }
        for bad in ["", "gpu", "cuda:", "cuda:x", "CUDA", "cuda:0:1", "mps"] {
            assert_eq!(
                parse_device(bad).unwrap_err(),
                SpecError::BadDevice(bad.to_string())
            );
        }
        assert!(TorchRun {
            device: "cuda:1".into(),
            gpu_memory_limit_bytes: None,
            heap_limit_bytes: None,
            parallel: None,
            checkpoint_policy: None,
            fsdp_precision: None,
            reshard_after_forward: None,
            fsdp_offload: false,
            pipeline: None,
        }
        .is_cuda());
    }

    #[test]
    fn compile_needs_the_torch_engine_and_a_torch_spec_round_trips() {
        let mut s: Spec = serde_json::from_value(serde_json::json!({
            "model": "tiny-gpt2",
            "config": crate::model::config::ModelConfig::preset("tiny-gpt2").unwrap(),
            "config_path": null, "weights": null, "mode": "train", "batch": 1, "seq": 8,
            "dtype": "f32", "threads": 1, "seed": 0, "warmup": 0, "steps": 1,
            "grad_accum": 1, "prompt_len": 8, "new_tokens": 1, "lr": 0.001,
            "variant": {"fusion": "compile"}
        }))
        .unwrap();
        assert_eq!(s.validate(), Err(SpecError::CompileNeedsTorch));
        s.torch = Some(TorchRun {
            device: "cuda".into(),
            gpu_memory_limit_bytes: Some(16 << 30),
            heap_limit_bytes: None,
            parallel: None,
            checkpoint_policy: None,
            fsdp_precision: None,
            reshard_after_forward: None,
            fsdp_offload: false,
            pipeline: None,
        });
        assert_eq!(s.validate(), Ok(()));
        let back: Spec = serde_json::from_str(&serde_json::to_string(&s).unwrap()).unwrap();
        assert_eq!(back, s);
        // A candle Spec has no `torch` key: its files stay as they were.
        s.torch = None;
        assert!(!serde_json::to_string(&s).unwrap().contains("torch"));
    }
}
