//! Runs one Spec end to end: measure it, summarise its samples, and assemble the Record (used by
//! bench, leak and the sweep worker); `profiled.rs` the same run twice, plain and profiled, for
//! roofline and profile.

pub mod profiled;

use crate::measure::measure_with;
use crate::record::{Compute, EstimatedMemory, PhaseTiming, Record, StepMemory, SCHEMA_VERSION};
use crate::spec::{Mode, Spec};
use anyhow::Context;
use std::sync::atomic::AtomicUsize;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

pub fn run(spec: &Spec, progress: &AtomicUsize) -> anyhow::Result<Record> {
    run_with(spec, progress, &mut |_| {})
}

/// As [`run`], handing each step's memory entry to `on_step` between steps (outside timing).
/// `spec` was validated by its caller (`Workload::runnable`, the sweep worker), once.
pub fn run_with(
    spec: &Spec,
    progress: &AtomicUsize,
    on_step: &mut dyn FnMut(&StepMemory),
) -> anyhow::Result<Record> {
    debug_assert!(
        spec.validate().is_ok(),
        "runner::run_with takes a validated Spec"
    );
    if let crate::spec::EngineRef::Torch(_) = spec.engine() {
        return run_torch(spec, progress, on_step);
    }
    let started_at = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let wall = Instant::now();
    let mut m = measure_with(spec, progress, on_step)?;
    // Stopped early (SIGINT under `leak`): the Record describes the steps that were measured.
    let measured = m.samples_ms.first().map_or(spec.steps, |(_, v)| v.len());
    let mut spec_run = spec.clone();
    if measured < spec.steps {
        m.warnings.push(format!(
            "stopped by {} after {measured} of {} measured steps; the figures are those steps'",
            crate::stop::cause(),
            spec.steps
        ));
        spec_run.steps = measured;
    }
    let spec = &spec_run;
    m.memory.estimate = estimated(spec);
    let mut warnings = oversubscription(spec.threads)
        .into_iter()
        .collect::<Vec<_>>();
    warnings.extend(m.warnings);
    let mut r = Record {
        schema_version: SCHEMA_VERSION,
        spec: spec.clone(),
        model: m.model,
        timing: Default::default(),
        throughput: Default::default(),
        compute: Compute::default(),
        memory: m.memory,
        loss: m.loss,
        data: m.data,
        warnings,
        profile: None,
        ranks: None,
        collectives: None,
        environment: crate::environment::capture(spec.threads),
        started_at,
        wall_seconds: wall.elapsed().as_secs_f64(),
    };
    crate::analysis::complete::complete(&mut r, &m.samples_ms);
    r.compute = compute(spec, &r.timing);
    Ok(r)
}

/// [`run_with`] on the torch engine: its Record, completed as memscope's own is (the Spec as
/// asked with the engine the run named, throughput over the Spec's tokens, FLOPs, the estimate).
fn run_torch(
    spec: &Spec,
    progress: &AtomicUsize,
    on_step: &mut dyn FnMut(&StepMemory),
) -> anyhow::Result<Record> {
    let records = crate::torch::run(spec, progress, on_step, crate::stop::requested)?;
    // A data-parallel job: the worst rank's Record, holding every rank's figures.
    let parallel = spec.parallel().is_some();
    let mut r = if parallel {
        crate::analysis::ranks::worst_rank(records)
    } else {
        records.into_iter().next()
    }
    .context("the torch engine wrote no Record")?;
    let engine = r.spec.engine.take();
    r.spec = spec.clone();
    r.spec.engine = engine;
    if let Some(d) = &spec.data {
        let t = crate::input::tokens::Tokens::open(d)?;
        r.data = Some(crate::record::DataInfo {
            path: d.path.clone(),
            dtype: t.dtype.clone(),
            tokens: t.len(),
        });
    }
    let measured = r.timing.values().map(|t| t.n).max().unwrap_or(0);
    if measured < spec.steps {
        r.warnings.push(format!(
            "stopped by {} after {measured} of {} measured steps; the figures are those steps'",
            crate::stop::cause(),
            spec.steps
        ));
        r.spec.steps = measured;
    }
    r.compute = compute(spec, &r.timing);
    // PyTorch's products are set against PyTorch's roofs on the device (`peaks --engine
    // torch`), not memscope's own engine's; none when they were not measured.
    let device = spec.device();
    let peak = crate::torch::peaks::cached(device, spec.threads)
        .map(|p| crate::analysis::torch_roofline::roofs(&p, spec.dtype.name()).matmul_gflops);
    r.compute.matmul_peak_gflops = peak;
    r.compute.fraction_of_peak = r.compute.achieved_gflops.zip(peak).map(|(a, p)| a / p);
    // Stopped by a signal (`leak`): the user asked to stop, so the estimate's trace (a second
    // Python process, seconds) is not started; what was measured is kept.
    if crate::stop::requested() {
        r.warnings.push(
            format!("no estimate beside the measured figures: the torch estimator's trace was not started after the stop ({})", crate::stop::cause()),
        );
    } else {
        let traced = torch_estimated(spec);
        // A model transformers built from its config: its products as traced (a mixture of
        // experts' top-k experts, whatever memscope's formulas know of it).
        if let (Some(_), Some((_, flops, _))) = (spec.arch().built(), &traced) {
            r.compute = compute_with(*flops, spec, &r.timing);
        }
        if let (Some(ranks), Some((_, _, each))) = (r.ranks.as_mut(), &traced) {
            // A pipeline's ranks differ: each measured rank beside its own prediction.
            for f in ranks.iter_mut() {
                f.predicted_peak_bytes = each.get(f.rank).copied();
            }
        }
        r.memory.estimate = traced.map(|(e, _, _)| e);
    }
    // The engine's Record was completed by the recorder; the estimate beside it is new.
    crate::analysis::complete::refresh(&mut r);
    Ok(r)
}

/// Matmul FLOPs per step (the estimator's count) over the step times, and the fraction of this
/// machine's cached matmul peak (`memscope peaks`) when there is one. A rank's share where ranks
/// share a batch (a pipeline's stages, a tensor-parallel group), as its traced products are:
/// one rank's work against one rank's peak.
fn compute(spec: &Spec, timing: &std::collections::BTreeMap<String, PhaseTiming>) -> Compute {
    let req = crate::estimate::Request::for_spec(spec);
    let Ok(e) = crate::estimate::estimate(&req) else {
        return Compute::default();
    };
    let sharing = spec
        .torch
        .as_ref()
        .and_then(|t| t.parallel)
        .map_or(1, |p| p.sharing_a_batch().max(1));
    compute_with(e.flops.total / sharing as u64, spec, timing)
}

/// [`compute`] with `flops` matmul FLOPs per step.
fn compute_with(
    flops: u64,
    spec: &Spec,
    timing: &std::collections::BTreeMap<String, PhaseTiming>,
) -> Compute {
    // (median, slowest, fastest) step in ms.
    let step = match spec.mode {
        Mode::Train | Mode::Infer => {
            let name = if spec.mode == Mode::Train {
                "step"
            } else {
                "forward"
            };
            timing.get(name).map(|t| (t.median_ms, t.max_ms, t.min_ms))
        }
        Mode::Generate => match (timing.get("prefill"), timing.get("decode")) {
            (Some(p), Some(d)) => {
                let g = spec.new_tokens as f64;
                Some((
                    p.median_ms + g * d.median_ms,
                    p.max_ms + g * d.max_ms,
                    p.min_ms + g * d.min_ms,
                ))
            }
            _ => None,
        },
    };
    let gflops = |ms: f64| flops as f64 / (ms.max(1e-9) * 1e6);
    let achieved = step.map(|s| gflops(s.0));
    let peak = crate::measure::peaks::cached(spec.threads)
        .and_then(|p| p.matmul_gflops.get(spec.dtype.name()).copied());
    Compute {
        matmul_flops_per_step: flops,
        achieved_gflops: achieved,
        achieved_gflops_range: step.map(|s| [gflops(s.1), gflops(s.2)]),
        matmul_peak_gflops: peak,
        fraction_of_peak: achieved.zip(peak).map(|(a, p)| a / p),
    }
}

/// The torch estimator's prediction for `spec`, with the matmul and attention FLOPs of one step
/// from its traced ops, and a pipeline's peak predicted for each rank (on CUDA the allocated
/// one, as a rank's Record measures it) (None if it cannot be made; the run is unaffected).
fn torch_estimated(spec: &Spec) -> Option<(EstimatedMemory, u64, Vec<u64>)> {
    // The torch estimator traces the same workload; a failure costs the run nothing.
    let crate::torch::estimate::Traced {
        estimate: e,
        ops,
        pipeline,
    } = crate::torch::estimate::estimate_with_ops(spec).ok()?;
    let products = crate::analysis::aten_cost::product_flops(&ops);
    let each: Vec<u64> = e.pipeline_ranks.iter().map(|r| r.peak_bytes).collect();
    // Beside the measured times, where the device's roofs are cached (never measured here:
    // that would load the machine the run measures).
    let peaks = crate::torch::peaks::cached(&e.device, spec.threads);
    let mut predicted_ms = peaks
        .as_ref()
        .map(|p| crate::analysis::torch_time::predict(&ops, p).ms_by_phase())
        .unwrap_or_default();
    // A pipeline's step: every rank's phases played out along its schedule, hand-overs over
    // the link `peaks --collectives` measured here, if it did.
    if let (Some(p), false) = (&peaks, pipeline.is_empty()) {
        let link = crate::torch::link::cached(&e.device)
            .as_ref()
            .and_then(crate::analysis::collective_time::Links::of_measured);
        let transfer_ms = crate::analysis::pipeline_time::transfer_ms(spec, link.as_ref());
        if let Ok(play) = crate::analysis::pipeline_time::predict(&pipeline, p, transfer_ms) {
            predicted_ms.insert("step".into(), play.step_ms);
        }
    }
    // A step's decode phases summed, as one decode step: the Record times one run of it.
    if let Some(d) = predicted_ms.get_mut("decode") {
        *d /= spec.new_tokens.max(1) as f64;
    }
    let estimated = EstimatedMemory {
        categories: e.categories,
        peak_bytes: e.peak_bytes,
        peak_phase: e.peak_phase,
        single_micro_batch_peak_bytes: None,
        reserved_peak_bytes: e.reserved_peak_bytes,
        predicted_ms,
        ddp_rebuild: e.ddp_rebuild,
    };
    Some((estimated, products, each))
}

/// The estimator's prediction for `spec` (None if it cannot be made; the run is unaffected).
fn estimated(spec: &Spec) -> Option<EstimatedMemory> {
    if let crate::spec::EngineRef::Torch(_) = spec.engine() {
        return torch_estimated(spec).map(|(e, _, _)| e);
    }
    let req = crate::estimate::Request::for_spec(spec);
    let e = crate::estimate::estimate(&req).ok()?;
    let c = &e.categories;
    let single = if spec.grad_accum > 1 {
        let one = crate::estimate::Request {
            grad_accum: 1,
            ..req
        };
        crate::estimate::estimate(&one).ok().map(|e| e.peak_bytes)
    } else {
        None
    };
    Some(EstimatedMemory {
        categories: [
            ("parameters", c.parameters),
            ("gradients", c.gradients),
            ("optimizer_state", c.optimizer_state),
            ("activations", c.activations),
            ("kv_cache", c.kv_cache),
            ("temporaries", c.temporaries),
            ("runtime_buffers", c.runtime_buffers),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect(),
        peak_bytes: e.peak_bytes,
        peak_phase: e.peak_phase,
        single_micro_batch_peak_bytes: single,
        reserved_peak_bytes: None,
        predicted_ms: Default::default(),
        ddp_rebuild: None,
    })
}

/// More threads than cores: every step waits on descheduled threads, and the spread that follows is
/// this, not a noisy machine. Said first, so the noise warnings after it are read in its light.
fn oversubscription(threads: usize) -> Option<String> {
    let cores = crate::measure::threads::all_cores();
    (threads > cores).then(|| {
        format!(
            "--threads {threads} on {cores} available cores: threads wait for each other's time slices, \
             so steps are slower and noisier than at --threads {cores} (the cause of any noise warning below)"
        )
    })
}

/// Layer counts above this skip the estimate in [`check_machine_memory`] (its replay grows with
/// depth); the parameter bytes still decide.
const ESTIMATE_MAX_LAYERS: usize = 1000;

/// Refuses, before anything is allocated and whatever `--force` says, a Spec whose memory no
/// machine could hold: the estimate's replay finds its live bytes beyond 64 bits (what
/// `memscope estimate` refuses). `Spec::validate` has already refused any single tensor past
/// 2^63 bytes; the replay runs only where the tensors could add up past it.
pub fn refuse_unallocatable(spec: &Spec) -> anyhow::Result<()> {
    let c = spec.arch();
    let tokens = (spec.batch as u128).saturating_mul(spec.tokens_per_sequence() as u128);
    let widest = [
        c.vocab_size,
        c.d_ff,
        c.d_model.saturating_mul(3),
        c.n_heads.saturating_mul(spec.tokens_per_sequence()),
    ]
    .into_iter()
    .max()
    .unwrap_or(0) as u128;
    // At most a few dozen tensors per layer, each at most tokens × widest × 4 bytes.
    let bound = tokens
        .saturating_mul(widest)
        .saturating_mul(4 * 64)
        .saturating_mul(c.n_layers as u128 + 2);
    if bound < i64::MAX as u128 || spec.arch().n_layers > ESTIMATE_MAX_LAYERS {
        return Ok(());
    }
    crate::estimate::estimate(&crate::estimate::Request::for_spec(spec))
        .map(|_| ())
        .map_err(|e| anyhow::anyhow!("{e}; nothing was allocated"))
}

/// Refuses, before anything is allocated, a Spec this machine's memory could never hold: its
/// parameters alone, or its estimated heap peak, above MemTotal. The message gives the numbers.
pub fn check_machine_memory(spec: &Spec) -> anyhow::Result<()> {
    use crate::units::fmt_bytes;
    if spec.is_cuda() {
        return Ok(()); // the GPU's memory decides, and PyTorch says so when it runs out
    }
    let Some(total) = crate::measure::procfs::mem_total_bytes() else {
        return Ok(());
    };
    let params = crate::model::cost::param_count(spec.arch()).unwrap_or(u64::MAX);
    // A CPU job under DDP holds the whole model in each of this machine's ranks; sharded plans
    // hold about one copy across them, which the one-process estimate does not split.
    let (copies, sharded) = match spec.engine() {
        crate::spec::EngineRef::Torch(crate::spec::TorchRun {
            parallel: Some(p), ..
        }) => match p.plan {
            crate::spec::ParallelPlan::Ddp => (spec.ranks_here(), false),
            _ => (1, true),
        },
        _ => (1, false),
    };
    // ` × 2 ranks on this machine (1.2 GiB)`: what the ranks hold together.
    let per = |b: u64| {
        format!(
            " × {copies} ranks on this machine ({})",
            fmt_bytes(b as f64)
        )
    };
    let param_bytes = params.saturating_mul(spec.dtype.size_bytes());
    let hint =
        "nothing was allocated; choose a smaller model or size, or pass --force to run it anyway";
    if param_bytes.saturating_mul(copies) > total {
        anyhow::bail!(
            "{}: its {params} parameters alone take {} in {}{}, more than this machine's {} of memory (MemTotal); {hint}",
            spec.model,
            fmt_bytes(param_bytes as f64),
            spec.dtype.name(),
            if copies > 1 { per(param_bytes.saturating_mul(copies)) } else { String::new() },
            fmt_bytes(total as f64),
        );
    }
    // memscope's own estimate knows its families; a model transformers built is judged by its
    // exact parameters above (its own estimate is the torch trace, `estimate --engine torch`).
    let ours = spec.arch().transformers.is_none();
    if spec.arch().n_layers <= ESTIMATE_MAX_LAYERS && !sharded && ours {
        let req = crate::estimate::Request::for_spec(spec);
        if let Ok(e) = crate::estimate::estimate(&req) {
            if e.peak_bytes.saturating_mul(copies) > total {
                anyhow::bail!(
                    "{} {} batch {} seq {}: the estimated heap peak is {}{}, more than this machine's {} of memory (MemTotal; `memscope estimate` shows where it goes); {hint}",
                    spec.model,
                    spec.mode.name(),
                    spec.batch,
                    spec.seq,
                    fmt_bytes(e.peak_bytes as f64),
                    if copies > 1 { per(e.peak_bytes.saturating_mul(copies)) } else { String::new() },
                    fmt_bytes(total as f64),
                );
            }
        }
    }
    Ok(())
}
