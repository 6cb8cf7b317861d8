//! `estimate --engine torch`: the workload traced under PyTorch's FakeTensorMode by the Python
//! package (`python/memscope/_workers/trace.py`: every op dispatched as on the device, nothing allocated
//! or computed), its sequence of allocations and frees replayed here — the allocated peak by
//! category on the CPU and CUDA, and on CUDA the reserved peak through the caching allocator's
//! rules (`caching_allocator.rs`).

use super::caching_allocator::{round_size, segment_size, CachingAllocator};
use super::oneshot::answer;
use super::python::Request;
use crate::record::torch_estimate::{DdpRebuild, PipelineRank, TorchEstimate};
use crate::spec::Spec;
use anyhow::{bail, Context};
use serde::Deserialize;
use std::collections::BTreeMap;

mod offload;

/// What the trace prints.
#[derive(Clone, Debug, Deserialize, schemars::JsonSchema)]
#[schemars(rename = "TraceAnswer")]
pub(crate) struct Trace {
    /// The device whose kernels the trace dispatched to: the asked one, or `cpu` for a CUDA
    /// estimate on a machine without a GPU.
    traced_on: String,
    /// PyTorch's version the trace ran on (absent from traces written before it was given).
    #[serde(default)]
    torch: String,
    /// The GPU's compute capability when one was there to ask (sets cuBLAS's workspace size).
    #[serde(default)]
    cuda_capability: Option<(u32, u32)>,
    params: u64,
    /// Each parameter's storage as the rank holds it (under FSDP its shard).
    param_sizes: Vec<u64>,
    buffer_sizes: Vec<u64>,
    /// `--parallel ddp`: the reducer's flat gradient buckets (DDP's own bucket assignment),
    /// allocated when the model is wrapped and held from then on.
    #[serde(default)]
    bucket_sizes: Vec<u64>,
    /// `--parallel`: the collectives of the last traced step, by kind.
    #[serde(default)]
    collectives: crate::record::collectives::StepCollectives,
    /// `n ≥ 0` allocates n bytes as the next block id; `-(id + 1)` frees block `id`.
    events: Vec<i64>,
    /// (block id, stream) of each block made on a stream other than the compute stream
    /// (FSDP2's reduce-scatter and all-gather streams), numbered as the trace met them.
    #[serde(default)]
    side_streams: Vec<(usize, u32)>,
    /// `--fsdp-offload` on CUDA: the parameters' shards are in host memory (pinned), and these
    /// blocks too: (block id, pinned) — the optimizer's state, pageable (`offload.rs`).
    #[serde(default)]
    params_on_host: bool,
    #[serde(default)]
    host_blocks: Vec<(usize, bool)>,
    /// (block id, bytes of each host copy) of each device block copied to pinned host memory
    /// as it is made (FSDP2's reduce-scatter output: the gradients' shards), then freed.
    #[serde(default)]
    copied_to_host: Vec<(usize, Vec<u64>)>,
    peak: TracePeak,
    /// Each phase run's end, in order.
    #[serde(default)]
    ends: Vec<TracePeak>,
    /// The steps the ops were counted over.
    #[serde(default = "one")]
    steps: u64,
    #[serde(default)]
    ops: Vec<(String, String, Vec<Tensor>, Vec<Tensor>, Vec<bool>, u64)>,
    /// `--parallel pp:P`: (stage index, first block, end block) of each stage this rank holds.
    #[serde(default)]
    pipeline_stages: Vec<(usize, usize, usize)>,
    /// `--parallel pp:P`: the most micro-batches this rank holds activations for at once, over
    /// its stages, by the schedule's own action list.
    #[serde(default)]
    pipeline_in_flight: usize,
    /// `--parallel pp:P`: this rank's schedule, PyTorch's `pipeline_order[rank]`, as (kind: F,
    /// B, I, W; stage; micro-batch).
    #[serde(default)]
    pipeline_actions: Vec<(String, usize, usize)>,
}

/// What the trace prints for a pipeline job: every rank's trace, rank by rank.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[schemars(rename = "PipelineTraceAnswer")]
pub(crate) struct PipelineTrace {
    ranks: Vec<Trace>,
}

fn one() -> u64 {
    1
}

/// A tensor an op read or wrote: (shape, dtype), as a Record's profile holds it.
pub use crate::record::op_profile::Tensor;

/// One dispatched op of the traced steps, by signature, with its calls per step.
#[derive(Clone, Debug, PartialEq)]
pub struct TracedOp {
    pub phase: String,
    /// ATen's name with its overload (`mm.default`, `_fused_adamw_.default`).
    pub op: String,
    /// (shape, dtype: f32, bf16, f16, i64, …) of each tensor it read (tensor lists flattened).
    pub inputs: Vec<Tensor>,
    pub outputs: Vec<Tensor>,
    /// Its bool arguments in order (SDPA's `is_causal`).
    pub flags: Vec<bool>,
    /// Calls in one step (the traced calls over the traced steps).
    pub calls: f64,
}

/// The live bytes when the traced peak was reached, or when a phase run ended.
#[derive(Clone, Debug, Default, Deserialize, schemars::JsonSchema)]
pub(crate) struct TracePeak {
    #[serde(default)]
    phase: String,
    /// Bytes the steps allocated still live (parameters and buffers not included).
    #[serde(default)]
    live: u64,
    /// The same by the phase that allocated them.
    #[serde(default)]
    by_phase: BTreeMap<String, u64>,
    /// Of those, the parameters' gradients.
    #[serde(default)]
    gradients: u64,
    /// The KV cache's keys and values (a generation's), as the recorder counts them in a run.
    #[serde(default)]
    kv_cache: u64,
    /// FSDP2's gathered (unsharded) parameters: the root's from its forward to its backward,
    /// each block's while it runs.
    #[serde(default)]
    gathered_parameters: u64,
    /// The buffers FSDP2's collectives were given, still alive (flat all-gather buffers before
    /// their copy-out, a reduce-scatter's unreduced input until the next one).
    #[serde(default)]
    collective_buffers: u64,
}

/// A pipeline rank's work, for the step's time: the ops it dispatched a step and its schedule.
#[derive(Clone, Debug, PartialEq)]
pub struct RankWork {
    pub ops: Vec<TracedOp>,
    pub actions: Vec<crate::record::pipeline_play::Action>,
}

/// An estimate with what its step's time is predicted from.
#[derive(Clone, Debug)]
pub struct Traced {
    pub estimate: TorchEstimate,
    /// The ops one step dispatched (a pipeline's fullest rank's).
    pub ops: Vec<TracedOp>,
    /// A pipeline's ranks in order; empty for any other job.
    pub pipeline: Vec<RankWork>,
}

/// Traces `spec` (which has `torch`) and replays it.
pub fn estimate(spec: &Spec) -> anyhow::Result<TorchEstimate> {
    Ok(estimate_with_ops(spec)?.estimate)
}

/// The same, with the ops a step dispatched (for the predicted step time).
pub fn estimate_with_ops(spec: &Spec) -> anyhow::Result<Traced> {
    let Some(target) = &spec.torch else {
        bail!("internal: torch::estimate needs a Spec with --engine torch");
    };
    let request = Request::new(spec)?;
    let text = answer(
        "memscope._workers.trace",
        &request,
        "the torch estimator's trace",
    )?;
    let train = spec.mode == crate::spec::Mode::Train;
    let limit = target.gpu_memory_limit_bytes;
    if target
        .parallel
        .is_some_and(|p| p.plan == crate::spec::ParallelPlan::Pp)
    {
        return pipeline_from_trace(&text, &target.device, train, limit);
    }
    let (estimate, ops) = from_trace(&text, &target.device, train, limit)?;
    Ok(Traced {
        estimate,
        ops,
        pipeline: Vec::new(),
    })
}

/// A pipeline job's traces replayed rank by rank: the fullest rank's estimate (the reserved
/// peak on CUDA, the allocated one on the CPU) and its ops, every rank's in `pipeline_ranks`.
fn pipeline_from_trace(
    text: &str,
    device: &str,
    train: bool,
    limit: Option<u64>,
) -> anyhow::Result<Traced> {
    let all: PipelineTrace = serde_json::from_str(text.trim())
        .context("the torch trace's output (a pipeline's ranks)")?;
    let mut each = Vec::with_capacity(all.ranks.len());
    for t in &all.ranks {
        each.push(replayed(t, device, train, limit));
    }
    let ranks: Vec<PipelineRank> = each
        .iter()
        .zip(&all.ranks)
        .enumerate()
        .map(|(rank, ((e, _), t))| PipelineRank {
            rank,
            stages: t.pipeline_stages.clone(),
            in_flight: t.pipeline_in_flight,
            params: e.params,
            categories: e.categories.clone(),
            peak_bytes: e.peak_bytes,
            peak_phase: e.peak_phase.clone(),
            reserved_peak_bytes: e.reserved_peak_bytes,
            collectives: e.collectives.clone(),
        })
        .collect();
    let fullest = PipelineRank::fullest(&ranks)
        .map(|r| r.rank)
        .context("the torch trace gave no rank of the pipeline")?;
    let pipeline = each
        .iter()
        .zip(&all.ranks)
        .map(|((_, ops), t)| RankWork {
            ops: ops.clone(),
            actions: t
                .pipeline_actions
                .iter()
                .filter_map(|(kind, stage, micro)| {
                    Some(crate::record::pipeline_play::Action {
                        kind: crate::record::pipeline_play::Kind::of_letter(kind)?,
                        stage: *stage,
                        micro: *micro,
                    })
                })
                .collect(),
        })
        .collect();
    let (mut estimate, ops) = each.swap_remove(fullest);
    estimate.pipeline_ranks = ranks;
    Ok(Traced {
        estimate,
        ops,
        pipeline,
    })
}

/// A trace's answer (its JSON text: the torch engine's, or a user's own workload traced by
/// `memscope.estimate`) replayed for `device`: the estimate and the ops one step dispatched.
/// `train`: autograd's thread runs products beside the forward's (a second cuBLAS workspace);
/// `limit`: CUDA's cap on the caching allocator.
pub fn from_trace(
    text: &str,
    device: &str,
    train: bool,
    limit: Option<u64>,
) -> anyhow::Result<(TorchEstimate, Vec<TracedOp>)> {
    let t: Trace = serde_json::from_str(text.trim()).context("the torch trace's output")?;
    Ok(replayed(&t, device, train, limit))
}

/// One rank's trace replayed: its estimate and the ops one step dispatched.
fn replayed(
    t: &Trace,
    device: &str,
    train: bool,
    limit: Option<u64>,
) -> (TorchEstimate, Vec<TracedOp>) {
    let steps = t.steps.max(1) as f64;
    let ops = t
        .ops
        .iter()
        .map(|(phase, op, inputs, outputs, flags, n)| TracedOp {
            phase: phase.clone(),
            op: op.clone(),
            inputs: inputs.clone(),
            outputs: outputs.clone(),
            flags: flags.clone(),
            calls: *n as f64 / steps,
        })
        .collect();
    let workspaces = if device.starts_with("cuda") {
        // One per thread that runs products: the forward's, and in training autograd's.
        let threads = if train { 2 } else { 1 };
        let config = std::env::var("CUBLAS_WORKSPACE_CONFIG").ok();
        vec![cublas_workspace_bytes(config.as_deref(), t.cuda_capability); threads]
    } else {
        Vec::new()
    };
    // FSDP2's CPU offload: the device replays what stays on it; the host's bytes beside.
    let estimate = match t.on_device() {
        Some((on_device, host)) => TorchEstimate {
            host: Some(host),
            ..replay(&on_device, device, limit, &workspaces)
        },
        None => replay(t, device, limit, &workspaces),
    };
    (estimate, ops)
}

/// The workspace PyTorch gives each cuBLAS handle (one per thread and stream), allocated through
/// the caching allocator at the thread's first product and kept: `CUBLAS_WORKSPACE_CONFIG`'s
/// `:SIZE_KIB:COUNT` pairs summed, else 32 MiB on Hopper and later (compute capability 9 and up,
/// and where no GPU was there to ask) and 8 MiB + 128 KiB before.
pub fn cublas_workspace_bytes(config: Option<&str>, capability: Option<(u32, u32)>) -> u64 {
    if let Some(c) = config {
        let sum: u64 = c
            .split(':')
            .filter(|s| !s.is_empty())
            .collect::<Vec<_>>()
            .chunks(2)
            .filter_map(|p| match p {
                [size, count] => {
                    Some(size.parse::<u64>().ok()? * 1024 * count.parse::<u64>().ok()?)
                }
                _ => None,
            })
            .sum();
        if sum > 0 {
            return sum;
        }
    }
    match capability {
        Some((major, _)) if major < 9 => 4096 * 1024 * 2 + 16 * 1024 * 8,
        _ => 4096 * 8 * 1024,
    }
}

/// `workspaces`: cuBLAS's workspaces on CUDA, allocated before the step's tensors and never
/// freed (runtime buffers).
/// The trace's allocations and frees through the caching allocator under `limit`: its reserved
/// peak and, where an allocation failed under the cap, the first failure.
fn allocator_replay(t: &Trace, limit: Option<u64>, workspaces: &[u64]) -> (u64, Option<String>) {
    let mut alloc = CachingAllocator::new(limit);
    let mut oom = None;
    let mut handles = Vec::with_capacity(t.events.len());
    let try_malloc =
        |a: &mut CachingAllocator, n: u64, stream: u32, oom: &mut Option<String>| match a
            .malloc_on(n, stream)
        {
            Ok(h) => Some(h),
            Err(e) => {
                oom.get_or_insert_with(|| {
                    let b = |v: u64| crate::units::bytes(v as f64);
                    format!(
                        "out of memory under the cap: {} requested with {} allocated, {} reserved",
                        b(e.requested),
                        b(e.allocated),
                        b(e.reserved)
                    )
                });
                None
            }
        };
    for &n in t
        .param_sizes
        .iter()
        .chain(&t.buffer_sizes)
        .chain(&t.bucket_sizes)
        .chain(workspaces)
    {
        try_malloc(&mut alloc, n, 0, &mut oom);
    }
    let streams: std::collections::HashMap<usize, u32> = t.side_streams.iter().copied().collect();
    for &v in &t.events {
        if v >= 0 {
            let stream = streams.get(&handles.len()).copied().unwrap_or(0);
            handles.push(try_malloc(&mut alloc, v as u64, stream, &mut oom));
        } else if let Some(Some(h)) = handles.get_mut((-v - 1) as usize).map(Option::take) {
            alloc.free(h);
        }
    }
    (alloc.peak_reserved, oom)
}

fn replay(t: &Trace, device: &str, limit: Option<u64>, workspaces: &[u64]) -> TorchEstimate {
    let cuda = device.starts_with("cuda");
    let count = |n: u64| if cuda { round_size(n) } else { n };
    let param_bytes: u64 = t.param_sizes.iter().map(|&n| count(n)).sum();
    let buffer_bytes: u64 = t.buffer_sizes.iter().map(|&n| count(n)).sum();
    let bucket_bytes: u64 = t.bucket_sizes.iter().map(|&n| count(n)).sum();
    let workspace_bytes: u64 = workspaces.iter().map(|&n| round_size(n)).sum();
    let (mut live, mut peak) = (0u64, 0u64);
    let mut sizes = Vec::with_capacity(t.events.len());
    for &v in &t.events {
        if v >= 0 {
            sizes.push(count(v as u64));
            live += count(v as u64);
            peak = peak.max(live);
        } else {
            live -= sizes.get((-v - 1) as usize).copied().unwrap_or(0);
        }
    }
    let (mut peak_reserved, oom) = allocator_replay(t, limit, workspaces);
    if oom.is_some() {
        // Under the cap the replay stopped at the first failed allocation, so its reserved
        // figure is the cap's, not the run's: the reserved peak is the uncapped replay's (what
        // the run would need), beside the out-of-memory line.
        peak_reserved = allocator_replay(t, None, workspaces).0;
    }
    let workspaces = workspace_bytes;
    // The categories as a run's Record measures them (`analysis::breakdown`): what the last
    // forward left live (activations), the gradients the last backward made, the optimizer's
    // state, the KV cache a generation keeps; temporaries the rest of the peak.
    let p = &t.peak;
    let last = |phase: &str| t.ends.iter().rev().find(|e| e.phase == phase);
    let kept =
        |phase: &str, by: &str| last(phase).map_or(0, |e| e.by_phase.get(by).copied().unwrap_or(0));
    // FSDP2's gathered parameters are their own category: the root's, gathered in the forward
    // and kept to its backward, leave the forward's bytes; at the peak, whatever is gathered.
    let gathered_after_forward = last("forward").map_or(0, |e| e.gathered_parameters);
    let activations = kept("forward", "forward").saturating_sub(gathered_after_forward);
    let (gathered, collective) = match p.phase.as_str() {
        "forward" | "backward" => (p.gathered_parameters, p.collective_buffers),
        _ => (0, 0),
    };
    let gradients = last("backward").map_or(0, |e| e.gradients);
    let optimizer = t
        .ends
        .last()
        .map_or(0, |e| e.by_phase.get("optimizer").copied().unwrap_or(0));
    // The most the cache held as a phase ended: its keys' and values' storages.
    let kv_cache = t.ends.iter().map(|e| e.kv_cache).max().unwrap_or(0);
    let state_at_peak = p.by_phase.get("optimizer").copied().unwrap_or(0);
    // What the trace made before its first phase and kept: a user's workload's batch
    // (`memscope.estimate` makes it inside the trace; the torch engine's token ids are made
    // outside it, so its own estimates have none).
    let inputs = p.by_phase.get("setup").copied().unwrap_or(0);
    let named = inputs
        + match p.phase.as_str() {
            "optimizer" => state_at_peak + gradients,
            // As a run's breakdown splits it: the cache at its largest (the peak of a prefill
            // comes inside its forward, before the model hands its new cache back).
            "prefill" | "decode" => kv_cache,
            _ => state_at_peak + activations,
        };
    let mut categories = BTreeMap::from([
        ("parameters".to_string(), param_bytes),
        ("gradients".to_string(), gradients),
        ("optimizer_state".to_string(), optimizer),
        ("activations".to_string(), activations),
        ("kv_cache".to_string(), kv_cache),
        ("runtime_buffers".to_string(), buffer_bytes + workspaces),
        (
            "temporaries".to_string(),
            p.live.saturating_sub(named + gathered + collective),
        ),
    ]);
    if t.ends.iter().any(|e| e.gathered_parameters > 0) {
        // FSDP2's: its gathered parameters and its collectives' buffers.
        categories.insert("gathered_parameters".to_string(), gathered);
        categories.insert("collective_buffers".to_string(), collective);
    }
    if !t.bucket_sizes.is_empty() {
        categories.insert("gradient_buckets".to_string(), bucket_bytes);
    }
    if inputs > 0 {
        categories.insert("inputs".to_string(), inputs);
    }
    let peak_total = param_bytes + buffer_bytes + bucket_bytes + workspaces + peak;
    TorchEstimate {
        device: device.to_string(),
        params: t.params,
        categories,
        peak_bytes: peak_total,
        peak_phase: p.phase.clone(),
        reserved_peak_bytes: cuda.then_some(peak_reserved),
        out_of_memory: oom,
        events: t.events.len(),
        traced_on: t.traced_on.clone(),
        torch: t.torch.clone(),
        predicted_ms: BTreeMap::new(),
        outside_allocator: Vec::new(),
        collectives: t.collectives.clone(),
        communication_ms: BTreeMap::new(),
        link: None,
        flops: BTreeMap::new(),
        ddp_rebuild: (cuda && bucket_bytes > 0).then(|| DdpRebuild {
            bucket_bytes,
            peak_bytes: peak_total + bucket_bytes,
            reserved_peak_bytes: peak_reserved
                + t.bucket_sizes
                    .iter()
                    .map(|&n| segment_size(round_size(n)))
                    .sum::<u64>(),
        }),
        pipeline_ranks: Vec::new(),
        pipeline_bubble: None,
        pipeline_play: None,
        throughput: None,
        host: None,
    }
}

#[cfg(test)]
mod tests {
    use super::{cublas_workspace_bytes, replay, Trace};

    #[test]
    fn over_the_cap_the_reserved_peak_is_what_the_run_would_need() {
        // Three 100 MiB blocks live at once under a 256 MiB cap: the third fails. The reserved
        // peak is the uncapped replay's (never under the allocated peak), beside the failure.
        let mib = 1u64 << 20;
        let t: Trace = serde_json::from_value(serde_json::json!({
            "traced_on": "cuda", "params": 0, "param_sizes": [], "buffer_sizes": [],
            "events": [100 * mib, 100 * mib, 100 * mib, -1, -2, -3], "peak": {"phase": "forward"},
        }))
        .unwrap();
        let e = replay(&t, "cuda", Some(256 * mib), &[]);
        assert!(e.out_of_memory.is_some());
        assert_eq!(e.peak_bytes, 300 * mib);
        assert!(e.reserved_peak_bytes.unwrap() >= e.peak_bytes, "{e:?}");
        let fits = replay(&t, "cuda", Some(400 * mib), &[]);
        assert!(fits.out_of_memory.is_none());
        assert_eq!(fits.reserved_peak_bytes, e.reserved_peak_bytes);
    }

    #[test]
    fn cublas_workspaces_follow_the_config_then_the_gpu() {
        assert_eq!(cublas_workspace_bytes(None, Some((9, 0))), 32 << 20);
        assert_eq!(cublas_workspace_bytes(None, None), 32 << 20);
        assert_eq!(
            cublas_workspace_bytes(None, Some((8, 0))),
            (8 << 20) + (128 << 10)
        );
        assert_eq!(
            cublas_workspace_bytes(Some(":4096:8"), Some((8, 0))),
            32 << 20
        );
        assert_eq!(
            cublas_workspace_bytes(Some(":4096:2:16:8"), None),
            (8 << 20) + (128 << 10)
        );
        // Not a config PyTorch would parse: the device's default.
        assert_eq!(
            cublas_workspace_bytes(Some("x"), Some((8, 6))),
            (8 << 20) + (128 << 10)
        );
    }
}
