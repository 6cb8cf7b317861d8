//! What to run: model, workload and sizes. Validated once; serialisable, so it is the only thing
//! a worker process needs.

use crate::model::config::{Family, ModelConfig};
use crate::model::store::Purpose;
use crate::model::variant::{Precision, Variant};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
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

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
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

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
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
}

/// Another engine's run recorded into a Record: which engine, on what, and what its memory
/// figures (the Record's `heap_*` fields) measure there.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
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
    #[error("--checkpoint recomputes activations in backward, so it only applies to --mode train")]
    CheckpointNotTrain,
    #[error("--precision mixed keeps f32 master weights and optimizer state for a half-precision run: use it with --mode train and --dtype bf16 or f16 (this run is --mode {mode} --dtype {dtype})")]
    MixedNeedsHalfTrain {
        mode: &'static str,
        dtype: &'static str,
    },
    #[error("spec.config is missing: this Spec comes from the Record of a user's own PyTorch model ({0}), which memscope cannot build or run; run a preset (--model) or a config file (--config)")]
    NoConfig(String),
    #[error("--lr must be a finite positive number (got {0})")]
    BadLr(f64),
    #[error("{flag} {value} is more than memscope runs ({max} at most); a leak verdict needs a few hundred steps, timing statistics a few dozen")]
    TooMany {
        flag: &'static str,
        value: usize,
        max: usize,
    },
}

/// The most measured steps, and the most warm-up steps, one run may ask for (each measured step
/// keeps its samples in buffers allocated before timing starts).
pub const MAX_STEPS: usize = 1_000_000;

impl Spec {
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
        Ok(())
    }

    /// The architecture to build. Every Spec that runs passed [`Spec::validate`], which refuses
    /// one without a config (only a Python-recorded Record's Spec lacks it).
    pub fn arch(&self) -> &ModelConfig {
        self.config
            .as_ref()
            .expect("a validated Spec has a config (Spec::validate refuses one without)")
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
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum BinDtype {
    U16,
    U32,
}

/// What `--data` asks for; lives in the Spec so a sweep worker opens the same file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DataSpec {
    pub path: PathBuf,
    /// `--data-dtype`, only meaningful for `.bin` (u16 when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bin_dtype: Option<BinDtype>,
}
