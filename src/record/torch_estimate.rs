//! `estimate --engine torch --json`: the torch estimator's prediction (`src/torch/estimate.rs`),
//! one per dtype asked for.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// What `estimate --engine torch --json` writes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TorchEstimateFile {
    /// `torch-estimate`: how memscope recognises the file.
    pub kind: String,
    pub model: String,
    pub mode: String,
    pub batch: usize,
    pub seq: usize,
    pub by_dtype: BTreeMap<String, TorchEstimate>,
    /// `--fits`: the budget, bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget_bytes: Option<u64>,
    /// `--nproc --parallel`: the job whose rank 0 every figure is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parallel: Option<crate::spec::Parallel>,
    /// `--parallel pp:P`: its schedule and micro-batches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pipeline: Option<crate::spec::Pipeline>,
    /// A model transformers built from its config.json: what it built (class, widths, experts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub built: Option<crate::model::config::BuiltModel>,
}

impl TorchEstimateFile {
    pub const KIND: &'static str = "torch-estimate";

    pub fn to_json(&self) -> serde_json::Result<String> {
        Ok(serde_json::to_string_pretty(self)? + "\n")
    }
}

/// `estimate --parallel A,B,…`: one job's plans side by side (`cli::estimate_plans`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TorchPlansFile {
    /// `torch-plans`: how memscope recognises the file.
    pub kind: String,
    pub model: String,
    pub mode: String,
    /// The batch each plan's Spec runs (a data-parallel group's; a pipeline's whole batch).
    pub batch: usize,
    pub seq: usize,
    /// `--nproc`: the ranks every plan shares.
    pub world: usize,
    pub device: String,
    /// `--fits`: the budget a rank's device total is judged against, bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget_bytes: Option<u64>,
    /// `fit --predict`: the size searched, `batch` or `seq` (each row's `largest`); absent for
    /// a comparison at the given sizes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vary: Option<String>,
    pub rows: Vec<PlanRow>,
}

/// `fit --predict`: the largest size a plan is predicted to fit, found by tracing sizes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LargestFit {
    /// The largest `--batch` (or `--seq`) whose prediction fits; 0: not even the smallest.
    pub size: usize,
    /// The smallest size traced that does not fit; absent when every size up to `--max` fits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_over: Option<usize>,
    /// Sizes traced.
    pub tries: usize,
}

impl TorchPlansFile {
    pub const KIND: &'static str = "torch-plans";

    pub fn to_json(&self) -> serde_json::Result<String> {
        Ok(serde_json::to_string_pretty(self)? + "\n")
    }
}

/// One plan of a comparison: its fullest rank's figures, or why the job cannot take it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PlanRow {
    /// As `--parallel` takes it.
    pub plan: String,
    /// Sequences the whole job runs a step (each data-parallel group its batch; a pipeline one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sequences_per_step: Option<usize>,
    /// The rank the figures are (a pipeline's fullest; 0 where the ranks are alike).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fullest_rank: Option<usize>,
    /// The allocated peak, bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak_bytes: Option<u64>,
    /// CUDA: the caching allocator's reserved peak, bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reserved_peak_bytes: Option<u64>,
    /// What the device must hold: the reserved peak (the allocated one on the CPU) and, on
    /// CUDA, the memory outside PyTorch's allocator.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_total_bytes: Option<u64>,
    /// `--fits`: whether the device total is within the budget.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fits: Option<bool>,
    /// The flags given that this plan does not take, left out of its Spec.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub dropped: String,
    /// Why the job cannot take this plan (the error a single estimate would give).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
    /// A pipeline's idle share with stages of equal time, from its schedule's action lists
    /// (`analysis::pipeline_time::equal_stages_bubble`): what more micro-batches buy beside
    /// the memory they take.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bubble: Option<f64>,
    /// `fit --predict`: the largest size that fits; the figures above are at that size (at
    /// the smallest when none fits).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub largest: Option<LargestFit>,
    /// Wall time of this plan's prediction, seconds.
    pub seconds: f64,
}

/// The torch estimator's prediction for one Spec.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TorchEstimate {
    /// `cpu`, `cuda:0`, …
    pub device: String,
    pub params: u64,
    /// Bytes by category as a run's Record measures them: parameters, gradients (what the last
    /// backward made), optimizer_state (after the step), activations (what the last forward
    /// left live), kv_cache (generate: what prefill and decode keep), runtime_buffers (the
    /// model's buffers), temporaries (the rest of the peak beyond the categories alive in its
    /// phase); under `--parallel ddp` also gradient_buckets (DDP's reducer's flat buckets,
    /// allocated when the model is wrapped and held). Under `--parallel fsdp` parameters,
    /// gradients and optimizer state are rank 0's shards.
    pub categories: BTreeMap<String, u64>,
    /// The allocated peak: tensor storages' bytes (on CUDA rounded as the caching allocator
    /// counts them, to 512 B).
    pub peak_bytes: u64,
    pub peak_phase: String,
    /// CUDA: the caching allocator's reserved peak (nvidia-smi shows this plus the CUDA
    /// context, which the driver takes once per process, outside PyTorch's figures).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reserved_peak_bytes: Option<u64>,
    /// CUDA with a cap (`--memory-limit`): the replay ran out of memory there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub out_of_memory: Option<String>,
    /// Allocations and frees replayed.
    pub events: usize,
    /// Whose kernels the trace dispatched to: the device, or `cpu` for a CUDA estimate made
    /// without a GPU (the same modules and saved tensors, CPU's SDPA and autocast op lists).
    pub traced_on: String,
    /// PyTorch's version the trace ran on; empty in files written before it was noted.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub torch: String,
    /// The predicted time of one step by phase, and `step`, in ms (`analysis::torch_time`, from
    /// the traced ops and `peaks --engine torch`'s roofs); empty when no roofs were measured.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub predicted_ms: BTreeMap<String, f64>,
    /// CUDA, a `--parallel` job: device memory the rank holds outside PyTorch's allocator (the
    /// CUDA context, NCCL's buffers, kernels loaded on first use), each with its source; a card
    /// must hold them beside the reserved peak (`--fits` judges the sum).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub outside_allocator: Vec<OutsideLine>,
    /// A `--parallel` job: the collectives rank 0 runs in one step (the second, with the
    /// optimizer's state), by kind, from the trace (DDP's from its bucket assignment).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub collectives: crate::record::collectives::StepCollectives,
    /// `--link`: the collectives' time in one step by kind and `total`, ms (ring and tree
    /// formulas, `analysis::collective_time`), over the link `link` names.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub communication_ms: BTreeMap<String, f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link: Option<String>,
    /// FLOPs of one step by phase and `total` (`analysis::aten_cost`, from the traced ops; the
    /// optimizer's included, which memscope's own estimate leaves out).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub flops: BTreeMap<String, u64>,
    /// `--parallel ddp` on CUDA: its second step's peak while NCCL still holds the first step's
    /// buckets (`DdpRebuild`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ddp_rebuild: Option<DdpRebuild>,
    /// `--parallel pp:P`: every rank's own estimate (its stages, parameters and peak), each
    /// traced as that rank; the figures above are the fullest rank's (`rank` names it).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pipeline_ranks: Vec<PipelineRank>,
    /// `--parallel pp:P`: the schedule's own bubble, its action lists played out with every
    /// stage's actions of equal time (`analysis::pipeline_time::equal_stages_bubble`): the most
    /// a rank idles over its busy time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pipeline_bubble: Option<f64>,
    /// `--parallel pp:P` with roofs: every rank's predicted phases played out along its
    /// schedule's action list; `predicted_ms.step` is its step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pipeline_play: Option<crate::record::pipeline_play::PipelinePlay>,
    /// Tokens per second, MFU and `--run-tokens`' hours from the predicted step
    /// (`analysis::throughput`); absent without a predicted step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub throughput: Option<Throughput>,
    /// `--fsdp-offload` on CUDA: the rank's host memory (the figures above are the device's
    /// alone).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<HostMemory>,
}

/// A CUDA rank's host memory under FSDP2's CPU offload (`torch::estimate::offload`): its
/// parameters' shards and its gradients' copies pinned (PyTorch's pinned host allocator rounds
/// each allocation up to a power of two and keeps freed blocks for reuse), the optimizer's
/// state pageable.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HostMemory {
    /// The most the rank holds at once: pinned blocks held (freed ones kept by the allocator)
    /// plus pageable bytes live.
    pub peak_bytes: u64,
    /// Pinned memory the host allocator holds at the end, rounded as it rounds.
    pub pinned_bytes: u64,
    /// Of it, the parameters' shards.
    pub parameters_bytes: u64,
    /// The most the gradients' pinned copies hold at once.
    pub gradients_bytes: u64,
    /// Pageable bytes at their most: the optimizer's state and its step's temporaries.
    pub pageable_peak_bytes: u64,
}

/// What a predicted step gives a planner: tokens a second for a rank and the job, MFU, hours.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Throughput {
    /// Tokens one rank (one data-parallel replica) processes a step: batch × seq × grad-accum
    /// in training, batch × seq in inference, batch × new tokens in a generation.
    pub tokens_per_step: f64,
    /// Those over the predicted step (a generation's: over its decode), one rank.
    pub tokens_per_s: f64,
    /// The job's: every replica's tokens over the step with the communication it waits for
    /// (`analysis::overlap`); the one rank's figure without `--parallel` or a link.
    pub job_tokens_per_s: f64,
    /// The same with the collectives hidden entirely behind compute, and with none hidden.
    pub job_tokens_per_s_bounds: (f64, f64),
    /// The step's traced FLOPs (recomputation included) over its predicted time and
    /// `peak_gflops`: model FLOPs utilisation against a measured ceiling.
    pub mfu: f64,
    /// The best matmul rate of the step's dtype the roofs hold, GFLOP/s.
    pub peak_gflops: f64,
    /// `--run-tokens`: the run's tokens, and the hours it takes at the job's rate and at its
    /// two bounds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_tokens: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_hours: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_hours_bounds: Option<(f64, f64)>,
}

/// One rank of a pipeline job: which stages and blocks it holds, and its own estimate.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PipelineRank {
    pub rank: usize,
    /// (stage index, first block, end block) of each stage the rank holds.
    pub stages: Vec<(usize, usize, usize)>,
    /// The most micro-batches whose activations it holds at once, over its stages, by the
    /// schedule's action list (PyTorch's `pipeline_order`).
    pub in_flight: usize,
    pub params: u64,
    pub categories: BTreeMap<String, u64>,
    /// The allocated peak and its phase, as `TorchEstimate`'s.
    pub peak_bytes: u64,
    pub peak_phase: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reserved_peak_bytes: Option<u64>,
    /// The collectives and point-to-point transfers it runs a step, by kind.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub collectives: crate::record::collectives::StepCollectives,
}

/// DDP over NCCL rebuilds its gradient buckets at its second step (in the order gradients
/// arrived) while NCCL may still hold the first step's: ProcessGroupNCCL keeps an asynchronous
/// all-reduce's tensors until its watchdog (it polls every 100 ms) has seen the work end and a
/// later collective lets them go. With steps shorter than that the old buckets stay allocated
/// beside the new ones into the second step's backward: measured on one H200 (gpt2-small,
/// 35 ms steps), that step's peak was the steady one plus the first buckets' bytes.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct DdpRebuild {
    /// The first step's buckets (the parameters' bytes).
    pub bucket_bytes: u64,
    /// The steady peak plus those buckets.
    pub peak_bytes: u64,
    /// The reserved peak plus their segments.
    pub reserved_peak_bytes: u64,
}

/// Device memory outside PyTorch's allocator, one kind (`analysis::outside_allocator`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OutsideLine {
    /// `CUDA context`, `NCCL buffers`, `kernels loaded on first use`.
    pub what: String,
    pub bytes: u64,
    /// What the figure is: when it was read.
    pub note: String,
    /// Where the figure comes from.
    pub source: String,
}

impl PipelineRank {
    /// What `--fits` judges of the rank: its reserved peak on CUDA, its allocated one on the
    /// CPU.
    pub fn judged_bytes(&self) -> u64 {
        self.reserved_peak_bytes.unwrap_or(self.peak_bytes)
    }

    /// The fullest of `ranks` (the lowest rank on a tie), by `judged_bytes`.
    pub fn fullest(ranks: &[PipelineRank]) -> Option<&PipelineRank> {
        ranks
            .iter()
            .max_by_key(|r| (r.judged_bytes(), std::cmp::Reverse(r.rank)))
    }
}

impl TorchEstimate {
    /// A pipeline's rank whose figures these are (its fullest); None for any other job.
    pub fn fullest_rank(&self) -> Option<usize> {
        PipelineRank::fullest(&self.pipeline_ranks).map(|r| r.rank)
    }

    /// What the device must hold: the reserved peak (CUDA; the allocated one on the CPU), with
    /// DDP's bucket rebuild, and the memory outside the allocator.
    pub fn device_total_bytes(&self) -> u64 {
        self.judged_reserved_bytes() + self.outside_allocator.iter().map(|l| l.bytes).sum::<u64>()
    }

    /// The reserved peak `--fits` judges (CUDA; the allocated one on the CPU): DDP's second
    /// step's, with the first step's buckets still held, when that is larger.
    pub fn judged_reserved_bytes(&self) -> u64 {
        let steady = self.reserved_peak_bytes.unwrap_or(self.peak_bytes);
        self.ddp_rebuild
            .map_or(steady, |r| steady.max(r.reserved_peak_bytes))
    }
}
