//! The Record: everything one benchmark run measured, as versioned JSON. It is the one data
//! contract: analysis, reports, compare and diff read only Records. Schema: docs/record.md.

use crate::spec::Spec;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

pub const SCHEMA_VERSION: u32 = 1;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Record {
    pub schema_version: u32,
    pub spec: Spec,
    pub model: ModelInfo,
    /// Phase name → timing of that phase, one sample per measured step.
    pub timing: BTreeMap<String, PhaseTiming>,
    pub throughput: Throughput,
    /// Matmul FLOPs per step and the rate the step reached, against this machine's peak.
    #[serde(default)]
    pub compute: Compute,
    pub memory: MemoryRecord,
    /// Train: loss of each step (warm-up included); infer: mean loss of each batch, no update
    /// (warm-up included; the first entry is the first batch). Not-finite values are the strings
    /// "NaN", "Infinity", "-Infinity" (`nonfinite.rs`).
    #[serde(with = "super::nonfinite::vec")]
    #[schemars(with = "Vec<super::nonfinite::LossValue>")]
    pub loss: Vec<f64>,
    /// The `--data` token file, when the run read one (random ids otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<DataInfo>,
    pub warnings: Vec<String>,
    /// A recorder session's profiled steps (`Session(..., profile=…)`): every ATen op timed
    /// and charged to its module. Absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<super::op_profile::OpProfile>,
    /// A data-parallel run (`--nproc N --parallel PLAN`): every rank's figures; the rest of the
    /// Record is the worst rank's (`worst` marks it). Absent for one process.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ranks: Option<Vec<super::ranks::RankFigures>>,
    /// A data-parallel rank: the collectives it ran in its last step, by kind.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub collectives: Option<super::collectives::StepCollectives>,
    pub environment: Environment,
    /// Unix time the run started, seconds.
    pub started_at: u64,
    pub wall_seconds: f64,
}

impl Record {
    /// The model as a reader knows it: `gpt2-small (gpt2, 12 layers, d_model 768)`; a user's own
    /// PyTorch model whose layers memscope could not read shows its class only.
    pub fn model_label(&self) -> String {
        let m = &self.model;
        if m.n_layers == 0 || m.d_model == 0 {
            let class = self
                .spec
                .engine
                .as_ref()
                .map_or(m.family.as_str(), |e| e.model_class.as_str());
            return format!("{} ({class}, {})", m.name, m.family);
        }
        format!(
            "{} ({}, {} layers, d_model {})",
            m.name, m.family, m.n_layers, m.d_model
        )
    }

    /// `batch 8 × seq 512`; `batch 64` where the sequence length is not known (a user's model
    /// whose input is not token ids).
    pub fn shape_label(&self) -> String {
        let s = &self.spec;
        if s.seq == 0 {
            format!("batch {}", s.batch)
        } else {
            format!("batch {} × seq {}", s.batch, s.seq)
        }
    }

    /// Why this Record has no counted heap figures (`memory.counting` false): the Python
    /// recorder ran without the counting allocator (its figures are RSS), or memscope ran with
    /// MEMSCOPE_NO_COUNT set.
    pub fn why_not_counted(&self) -> String {
        match &self.spec.engine {
            Some(e) if e.memory == "rss" => "recorded by the Python recorder without the counting allocator: its memory figures are RSS (run the script under `python -m memscope run` to count allocations)".into(),
            Some(e) => format!("its memory figures are {}", e.memory),
            None => "memscope ran with MEMSCOPE_NO_COUNT set: heap figures were not measured".into(),
        }
    }
}

/// The token file a run read (`--data`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct DataInfo {
    pub path: std::path::PathBuf,
    /// The file's element type: `u16`, `u32`, `i32`, `i64`, `u64`, or `text`.
    pub dtype: String,
    /// Tokens in the file.
    pub tokens: u64,
}

/// What a step computes and how fast, against the machine's ceiling.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Compute {
    /// Matrix-multiply FLOPs of one step (2·m·k·n per product, as `memscope estimate` counts
    /// them; generate: the prefill plus every decoded token). A job's: one rank's share (a
    /// pipeline's stages and a tensor-parallel group split one batch's products).
    pub matmul_flops_per_step: u64,
    /// Those FLOPs over the median step time.
    pub achieved_gflops: Option<f64>,
    /// Over the slowest and the fastest step: the spread of the rate.
    pub achieved_gflops_range: Option<[f64; 2]>,
    /// This machine's best matmul rate for the run's dtype and thread count, from
    /// `memscope peaks` (cached); none until that has been run once.
    pub matmul_peak_gflops: Option<f64>,
    /// achieved / peak.
    pub fraction_of_peak: Option<f64>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ModelInfo {
    pub name: String,
    pub family: String,
    /// Exact parameter count of the built model.
    pub params: u64,
    /// Exact bytes of the parameters in the run's dtype (params × dtype size).
    pub param_bytes: u64,
    pub n_layers: usize,
    pub d_model: usize,
    pub n_heads: usize,
    pub vocab_size: usize,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PhaseTiming {
    pub samples_ms: Vec<f64>,
    pub n: usize,
    pub mean_ms: f64,
    /// Sample standard deviation; null with fewer than 2 samples.
    pub std_ms: Option<f64>,
    /// 100 × std / mean; null when std is null or the mean is 0.
    pub cv_pct: Option<f64>,
    pub median_ms: f64,
    pub min_ms: f64,
    pub max_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    /// Median absolute deviation from the median (unscaled).
    pub mad_ms: f64,
    /// Indices of samples flagged as outliers by MAD (kept in every statistic).
    pub outliers: Vec<usize>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Throughput {
    /// Tokens per second over the median step (prompt + generated for generate).
    pub tokens_per_s: Option<f64>,
    /// Sequences per second over the median step.
    pub samples_per_s: Option<f64>,
    /// Generate only: decoded tokens per second (batch / median per-token latency).
    pub decode_tokens_per_s: Option<f64>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct MemoryRecord {
    /// False when counting was switched off (MEMSCOPE_NO_COUNT=1): heap figures are then not measured.
    pub counting: bool,
    /// heap live before model load: memscope's own structures and the math library's
    /// per-thread buffers (gemm's packing slabs, allocated at start-up).
    #[serde(default)]
    pub start_bytes: u64,
    /// heap live retained by model load (parameters + their containers).
    pub load_bytes: u64,
    pub load_seconds: f64,
    /// heap peak during load.
    pub load_peak_bytes: u64,
    /// Exact parameter bytes (params × dtype size).
    pub param_bytes: u64,
    /// heap peak over the whole run (load included).
    pub heap_peak_bytes: u64,
    /// heap live after the last step.
    pub heap_live_end_bytes: u64,
    /// RSS peak of this process (VmHWM from /proc/self/status).
    pub rss_peak_bytes: Option<u64>,
    /// RSS after the last step (/proc/self/statm).
    pub rss_end_bytes: Option<u64>,
    /// Generate only: bytes of the preallocated KV cache.
    pub kv_cache_bytes: Option<u64>,
    /// Phase name → heap figures of that phase.
    pub phases: BTreeMap<String, PhaseMemory>,
    /// One entry per step, warm-up included (flagged).
    pub series: Vec<StepMemory>,
    /// Train with --grad-accum > 1: one entry per micro-step.
    pub micro_steps: Vec<MicroStepMemory>,
    /// One steady step's heap peak in each phase (the last warm-up step when there is a steady
    /// one, else the last step), with what was live at that moment by allocating
    /// phase and by model module (the counting allocator's peak snapshot).
    #[serde(default)]
    pub peak_moments: Vec<PeakMoment>,
    /// memscope estimate's prediction for the same Spec (categories and peak), for the breakdown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub estimate: Option<EstimatedMemory>,
    /// Category → measured and estimated bytes (see docs/record.md for how each is measured).
    #[serde(default)]
    pub breakdown: BTreeMap<String, BreakdownEntry>,
}

/// Live heap at one phase's peak.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PeakMoment {
    pub phase: String,
    /// heap peak of this phase's window in the last step.
    pub heap_peak_bytes: u64,
    /// heap live at that moment, by the phase that allocated it (load = parameters).
    pub by_phase: BTreeMap<String, u64>,
    /// heap live at that moment by model module, largest first.
    pub by_module: Vec<ModuleBytes>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ModuleBytes {
    pub module: String,
    pub bytes: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct EstimatedMemory {
    /// Category name → predicted bytes.
    pub categories: BTreeMap<String, u64>,
    pub peak_bytes: u64,
    pub peak_phase: String,
    /// With --grad-accum > 1: the predicted peak of one step on a single micro-batch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub single_micro_batch_peak_bytes: Option<u64>,
    /// The torch engine on CUDA: the caching allocator's predicted reserved peak (heap figures
    /// are allocated bytes there).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reserved_peak_bytes: Option<u64>,
    /// The torch engine, when `peaks --engine torch` had measured the device's roofs: the step
    /// time predicted from the traced ops, ms per phase (one run of it: one decode step) and
    /// `step`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub predicted_ms: BTreeMap<String, f64>,
    /// `--parallel ddp` on CUDA: the second step's peak while NCCL may still hold the first
    /// step's buckets (`torch_estimate::DdpRebuild`); the measured steps before it is let go
    /// reach this one, the later ones `peak_bytes`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ddp_rebuild: Option<crate::record::torch_estimate::DdpRebuild>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct BreakdownEntry {
    pub measured_bytes: u64,
    pub estimated_bytes: Option<u64>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PhaseMemory {
    /// heap peak while this phase ran (maximum over all its runs).
    pub peak_bytes: u64,
    /// heap bytes allocated during the phase's first run and still live at its end
    /// (forward: saved activations; backward: gradients; first optimizer step: optimizer state).
    pub retained_bytes: i64,
    /// The same for the phase's last run (steady state).
    pub retained_bytes_last: i64,
    /// Allocations made during the phase's last run.
    pub allocations_last: u64,
    /// Bytes allocated during the phase's last run (live or freed).
    pub allocated_bytes_last: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct StepMemory {
    pub step: u64,
    pub warmup: bool,
    /// heap live after the step.
    pub heap_live_bytes: u64,
    /// live allocations after the step.
    pub live_allocations: u64,
    /// heap peak during the step.
    pub heap_peak_bytes: u64,
    /// RSS after the step.
    pub rss_bytes: Option<u64>,
    /// PSS after the step (/proc/self/smaps_rollup).
    pub pss_bytes: Option<u64>,
    /// CUDA runs recorded from PyTorch: the caching allocator's reserved bytes after the step
    /// (heap figures are its allocated bytes there). Absent elsewhere.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reserved_bytes: Option<u64>,
    /// The end of every phase run in the step, in order (train: forward, backward, optimizer —
    /// with --grad-accum N, N forward/backward pairs before the optimizer; infer: forward;
    /// generate: prefill, decode). Absent from Records written before it existed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub phases: Vec<PhaseMark>,
}

/// The end of one phase run inside a step.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PhaseMark {
    /// `forward`, `backward`, `optimizer`, `prefill` or `decode`.
    pub phase: String,
    /// heap peak during this run of the phase.
    pub heap_peak_bytes: u64,
    /// heap live at the end of the run, grouped by the phase that allocated it and named by the
    /// breakdown category that phase's bytes stand for: load → `parameters`, forward / prefill /
    /// decode → `activations`, backward → `gradients`, optimizer → `optimizer_state`, other →
    /// `kv_cache`, outside every phase → `unattributed`. Zero entries are left out.
    pub heap_live_by_category: BTreeMap<String, u64>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct MicroStepMemory {
    pub step: u64,
    pub micro_step: u64,
    /// heap live after the micro-step's backward (gradients accumulated so far included).
    pub heap_live_bytes: u64,
    /// heap peak during the micro-step.
    pub heap_peak_bytes: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Environment {
    pub cpu_model: String,
    /// The widest vector instructions the CPU offers the kernels (`avx512 + avx512_bf16`,
    /// `avx2`, `sse2`); empty in Records written before it was recorded.
    #[serde(default)]
    pub isa: String,
    pub cores: usize,
    pub threads: usize,
    pub os: String,
    pub memscope_version: String,
    pub git_commit: String,
    pub candle_version: String,
    pub allocator: String,
}

impl Record {
    /// The file's text (`bench --json`, `leak --record`): pretty JSON in field order, a final newline.
    pub fn to_json(&self) -> serde_json::Result<String> {
        Ok(serde_json::to_string_pretty(self)? + "\n")
    }
}
