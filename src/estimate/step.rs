//! The workloads of `src/measure/workload.rs` replayed on the simulator: load, then two train
//! steps (the first creates the optimizer state; the second is the steady state that the
//! measured steps repeat), or a forward, or a prefill plus one decode step.

use super::backward::segmented_backward;
use super::models::{Built, ParamSlot, Params, WithParams};
use super::ops::cross_entropy;
use super::sim::{Id, Sim, SimPhase, N_SIM_PHASES};
use super::{
    runtime_buffers, ActivationRow, Attention, Categories, Estimate, Flops, Fusion, Hotspot,
    Optimizer, PhaseEstimate, Precision, Request,
};
use crate::model::param_specs;
use crate::spec::{Dtype, Mode};
use std::collections::{HashMap, HashSet};

/// Predicts the memory and FLOPs of `req`. Errors name the flag that fixes them.
pub fn estimate(req: &Request) -> anyhow::Result<Estimate> {
    req.cfg.validate().map_err(|e| anyhow::anyhow!("{e}"))?;
    let dt = req.dtype.size_bytes();
    // Mixed precision: f32 master parameters; the model computes in `dt` from a cast copy.
    let mixed = req.precision == Precision::Mixed && req.mode == Mode::Train;
    let param_dt = if mixed { 4 } else { dt };
    let purpose = req.mode.purpose();
    let trainable = purpose.trainable();
    let specs: Vec<ParamSlot> = param_specs(&req.cfg)
        .into_iter()
        .map(|p| ParamSlot {
            transposed: p.stored_transposed(purpose),
            name: p.name,
            shape: p.shape,
        })
        .collect();
    let params: u64 = specs
        .iter()
        .map(|p| p.shape.iter().map(|&d| d as u64).product::<u64>())
        .sum();
    let mut sim = Sim::new();
    sim.unfused = req.fusion == Fusion::None;
    sim.bf16_dot = req.dtype == Dtype::Bf16 && crate::kernels::dot_bf16::available();
    sim.phase = SimPhase::Load;
    let p = Params::create(&mut sim, &specs, param_dt, trainable);
    let model = Built {
        cfg: &req.cfg,
        dtype: dt,
        checkpoint: req.checkpoint && req.mode == Mode::Train,
        naive: req.attention == Attention::Naive,
    };
    let mut out = match req.mode {
        Mode::Train => train(&mut sim, &model, &p, req),
        Mode::Infer => infer(&mut sim, &model, &p, req),
        Mode::Generate => generate(&mut sim, &model, &p, req),
    };
    if sim.overflow {
        anyhow::bail!(
            "--batch {} × --seq {} (× --grad-accum {}) gives sizes beyond 2^63 bytes or FLOPs beyond 2^64: use smaller values",
            req.batch,
            req.seq,
            req.grad_accum
        );
    }
    if req.optimizer == Optimizer::Sgd && req.mode == Mode::Train {
        out.notes
            .push("what-if: memscope's engine trains with AdamW, not SGD".into());
    }
    if out.checkpoint {
        out.notes.push(
            "checkpointing (--checkpoint): each block keeps only its input, and backward \
             recomputes it (its FLOPs are counted in backward)"
                .into(),
        );
    }
    if req.attention == Attention::Naive {
        out.notes.push(
            "naive attention (--attention naive) keeps the (B, H, T, S) scores and \
             probabilities; the fused kernel keeps the output and a (B, H, T) log-sum-exp"
                .into(),
        );
    }
    out.params = params;
    out.categories.parameters = sim_param_bytes(&specs, param_dt);
    let rb = runtime_buffers(req.threads);
    out.categories.runtime_buffers = rb;
    out.peak_bytes = out.peak_bytes.saturating_add(rb);
    for p in &mut out.phases {
        p.peak_bytes = p.peak_bytes.saturating_add(rb);
    }
    Ok(out)
}

fn sim_param_bytes(specs: &[ParamSlot], dt: u64) -> u64 {
    specs
        .iter()
        .map(|p| p.shape.iter().map(|&d| d as u64).product::<u64>() * dt)
        .sum()
}

fn blank(req: &Request) -> Estimate {
    Estimate {
        model: req.cfg.name.clone(),
        mode: req.mode,
        dtype: req.dtype,
        batch: req.batch,
        seq: if req.mode == Mode::Generate {
            req.prompt_len
        } else {
            req.seq
        },
        grad_accum: req.grad_accum,
        optimizer: req.optimizer,
        checkpoint: req.checkpoint && req.mode == Mode::Train,
        attention: req.attention,
        fusion: req.fusion,
        precision: req.precision,
        params: 0,
        categories: Categories::default(),
        peak_bytes: 0,
        peak_phase: String::new(),
        phases: vec![],
        activations: vec![],
        flops: Flops::default(),
        hotspots_forward: vec![],
        hotspots_backward: vec![],
        notes: vec![],
    }
}

/// Live bytes by module at a peak, largest first, without what `baseline` holds per module
/// (parameters and optimizer state: the same at every peak, each with its own category) —
/// as `memscope bench` prints its measured hotspots.
fn hotspots(sim: &Sim, by_module: &[u64], baseline: &[u64]) -> Vec<Hotspot> {
    let mut v: Vec<Hotspot> = by_module
        .iter()
        .enumerate()
        .map(|(i, &b)| Hotspot {
            module: sim.modules[i].clone(),
            bytes: b.saturating_sub(baseline.get(i).copied().unwrap_or(0)),
        })
        .filter(|h| h.bytes > 0)
        .collect();
    v.sort_by(|a, b| b.bytes.cmp(&a.bytes));
    v
}

struct PhaseRun {
    peak: u64,
    retained: i64,
}

/// Runs `f` as one phase: resets the peak window, returns (result, peak, retained).
fn phase<T>(sim: &mut Sim, p: SimPhase, f: impl FnOnce(&mut Sim) -> T) -> (T, PhaseRun) {
    sim.phase = p;
    sim.reset_peak();
    let before = sim.live_of(p) as i64;
    let out = f(sim);
    sim.settle_peak();
    let run = PhaseRun {
        peak: sim.peak.bytes,
        retained: sim.live_of(p) as i64 - before,
    };
    (out, run)
}

/// Micro-batches of one optimizer step the replay runs op by op (see `train`).
pub const REPLAYED_MICRO_BATCHES: usize = 3;

fn train(sim: &mut Sim, model: &Built, p: &Params, req: &Request) -> Estimate {
    train_replaying(sim, model, p, req, REPLAYED_MICRO_BATCHES)
}

/// `train`, replaying at most `replay_cap` micro-batches op by op (tests compare a full replay).
fn train_replaying(
    sim: &mut Sim,
    model: &Built,
    p: &Params,
    req: &Request,
    replay_cap: usize,
) -> Estimate {
    let mut est = blank(req);
    let (b, t) = (req.batch, req.seq);
    let ids = sim.ints(&[b, t]);
    let targets = sim.ints(&[b, t]);
    let mut tr = TrainReplay {
        model,
        req,
        ids,
        targets,
        params_by_module: sim.snapshot().by_module,
        state: Vec::new(),
    };
    let mixed = req.precision == Precision::Mixed;
    let linear: HashSet<String> = param_specs(&req.cfg)
        .into_iter()
        .filter(|p| p.through_linear)
        .map(|p| p.name)
        .collect();
    for step in 0..2 {
        let last = step == 1;
        let flops_before = sim.flops;
        let mut step_peak = 0;
        // Mixed precision: this step's working copy of the weights, in the compute dtype.
        let cast = mixed.then(|| {
            let (c, run) = phase(sim, SimPhase::Other, |sim| {
                sim.module = 0;
                p.cast(sim, req.dtype.size_bytes(), &linear)
            });
            step_peak = step_peak.max(run.peak);
            c
        });
        let working = cast.as_ref().unwrap_or(p);
        // Micro-batches after the second leave the replay exactly as they found it (the
        // accumulated gradients, nothing else), so only the first `REPLAYED_MICRO_BATCHES` are
        // replayed; the rest add their FLOPs, measured on the last one replayed. The cost of
        // an estimate is then O(1) in --grad-accum, its figures those of a full replay.
        let replayed = req.grad_accum.min(replay_cap);
        let micro = tr.micro_batches(sim, (p, working), replayed, last.then_some(&mut est));
        step_peak = step_peak.max(micro.peak);
        add_skipped_flops(sim, micro.last_flops, (req.grad_accum - replayed) as u64);
        let opt = tr.optimizer_step(sim, p);
        for (_, g) in micro.grads {
            sim.release(g);
        }
        for id in cast.map(|c| c.ids).unwrap_or_default() {
            sim.release(id);
        }
        sim.masters.clear();
        step_peak = step_peak.max(opt.peak);
        if last {
            let runs = [micro.fwd, micro.bwd, opt];
            steady_step_figures(&mut est, sim, &tr.state, flops_before, runs, step_peak);
        }
    }
    est.notes.push(
        "gradients and optimizer state are exact; activations and the peak replay candle 0.11's \
         tensor lifetimes (backward one block at a time, gradient temporaries) and memscope's \
         fused kernels (in-place AdamW with f32 moments, linear, attention, norms, GELU, \
         SwiGLU, loss)"
            .into(),
    );
    est
}

/// What the train replay keeps from step to step.
struct TrainReplay<'a> {
    model: &'a Built<'a>,
    req: &'a Request,
    ids: Id,
    targets: Id,
    /// Bytes by module after loading: the parameters, left out of the hotspots.
    params_by_module: Vec<u64>,
    /// The optimizer state, made by the first step.
    state: Vec<Id>,
}

/// One step's replayed micro-batches.
struct MicroRuns {
    /// The accumulated gradients, by parameter.
    grads: HashMap<Id, Id>,
    /// The first micro-batch's forward and backward.
    fwd: PhaseRun,
    bwd: PhaseRun,
    /// The highest peak of them all.
    peak: u64,
    /// The last replayed micro-batch's forward and backward FLOPs.
    last_flops: [u64; 2],
}

impl TrainReplay<'_> {
    /// Replays `replayed` micro-batches (forward, loss, segmented backward into the accumulated
    /// gradients) on `working`, the weights the model computes with (`p_all`'s, or their
    /// mixed-precision copy). With `est` (the steady step), the first one's activations and
    /// hotspots go into it.
    fn micro_batches(
        &self,
        sim: &mut Sim,
        (p_all, working): (&Params, &Params),
        replayed: usize,
        mut est: Option<&mut Estimate>,
    ) -> MicroRuns {
        let (model, req, p) = (self.model, self.req, working);
        let mut acc: Option<HashMap<Id, Id>> = None;
        let (mut fwd, mut bwd) = (None, None);
        let mut peak = 0;
        let mut last_flops = [0u64; 2];
        for micro in 0..replayed {
            let micro_flops_before = sim.flops;
            let ((loss, parts, head_input), f) = phase(sim, SimPhase::Forward, |sim| {
                sim.segmenting = true;
                let logits = model.forward(sim, p, self.ids, None);
                sim.segmenting = false;
                let parts = std::mem::take(&mut sim.segments);
                let head_input = sim.segment_input.take().expect("the model cuts");
                let loss = cross_entropy(sim, logits, self.targets); // logits (B, T, V)
                sim.release(logits);
                let loss = if req.grad_accum > 1 {
                    let scaled = sim.affine(loss, 1.0);
                    sim.release(loss);
                    scaled
                } else {
                    loss
                };
                (loss, parts, head_input)
            });
            // Parameters and the optimizer state (both outside the forward's modules) are left
            // out of the hotspots.
            let mut baseline = self.params_by_module.clone();
            baseline[0] += self
                .state
                .iter()
                .map(|&s| sim.elems(s) * sim.nodes[s].dtype)
                .sum::<u64>();
            let first = micro == 0;
            if let (Some(est), true) = (est.as_deref_mut(), first) {
                est.activations = sim
                    .live_by_module_kind(SimPhase::Forward)
                    .into_iter()
                    .map(|(module, kind, bytes)| ActivationRow {
                        module,
                        kind: kind.to_string(),
                        bytes,
                    })
                    .collect();
                est.hotspots_forward = hotspots(sim, &sim.peak.by_module, &baseline);
            }
            let ((), bw) = phase(sim, SimPhase::Backward, |sim| {
                let rc = WithParams(model, p);
                let prev = acc.take();
                let kept = segmented_backward(sim, loss, parts, head_input, &p_all.ids, &rc, prev);
                acc = Some(kept);
            });
            if let (Some(est), true) = (est.as_deref_mut(), first) {
                est.hotspots_backward = hotspots(sim, &sim.peak.by_module, &baseline);
            }
            peak = peak.max(f.peak).max(bw.peak);
            fwd.get_or_insert(f);
            bwd.get_or_insert(bw);
            last_flops = [SimPhase::Forward, SimPhase::Backward]
                .map(|ph| sim.flops[ph as usize] - micro_flops_before[ph as usize]);
        }
        MicroRuns {
            grads: acc.expect("grad_accum >= 1"),
            fwd: fwd.expect("ran"),
            bwd: bwd.expect("ran"),
            peak,
            last_flops,
        }
    }

    /// The optimizer phase: the state made on the first step; candle-nn's AdamW temporaries.
    fn optimizer_step(&mut self, sim: &mut Sim, p_all: &Params) -> PhaseRun {
        let (req, state) = (self.req, &mut self.state);
        let ((), opt) = phase(sim, SimPhase::Optimizer, |sim| {
            sim.module = 0;
            if state.is_empty() {
                let n = match req.optimizer {
                    Optimizer::Adamw => 2,
                    Optimizer::Sgd => 1,
                };
                // memscope's kernels: f32 moments (or momentum buffer) whatever the parameter
                // dtype, allocated once; the step itself (`kernels::adamw`, `kernels::sgd`)
                // works in place and allocates nothing. candle-nn's AdamW (`--fusion none`):
                // moments in the parameter's dtype.
                for &v in &p_all.ids {
                    for _ in 0..n {
                        let shape = sim.shape(v).to_vec();
                        let dt = if sim.unfused { sim.nodes[v].dtype } else { 4 };
                        state.push(sim.var(&shape, dt));
                    }
                }
            }
            if sim.unfused && req.optimizer == Optimizer::Adamw {
                candle_adamw_step(sim, &p_all.ids);
            }
        });
        opt
    }
}

/// The FLOPs of the `skipped` micro-batches not replayed, `per_micro` (forward, backward) each.
fn add_skipped_flops(sim: &mut Sim, per_micro: [u64; 2], skipped: u64) {
    for (ph, per_micro) in [SimPhase::Forward, SimPhase::Backward]
        .into_iter()
        .zip(per_micro)
    {
        match per_micro
            .checked_mul(skipped)
            .and_then(|extra| sim.flops[ph as usize].checked_add(extra))
        {
            Some(total) => sim.flops[ph as usize] = total,
            None => sim.overflow = true,
        }
    }
}

/// The steady (second) step's figures: FLOPs since `flops_before`, the forward, backward and
/// optimizer phases, the peak and the categories at it.
fn steady_step_figures(
    est: &mut Estimate,
    sim: &Sim,
    state: &[Id],
    flops_before: [u64; N_SIM_PHASES],
    [fwd, bwd, opt]: [PhaseRun; 3],
    step_peak: u64,
) {
    est.flops = Flops {
        forward: sim.flops[SimPhase::Forward as usize] - flops_before[SimPhase::Forward as usize],
        backward: sim.flops[SimPhase::Backward as usize]
            - flops_before[SimPhase::Backward as usize],
        total: 0,
    };
    est.flops.total = est.flops.forward + est.flops.backward;
    let peaks = [
        ("forward", fwd.peak),
        ("backward", bwd.peak),
        ("optimizer", opt.peak),
    ];
    est.phases = vec![
        PhaseEstimate {
            phase: "forward".into(),
            peak_bytes: fwd.peak,
            retained_bytes: fwd.retained,
        },
        PhaseEstimate {
            phase: "backward".into(),
            peak_bytes: bwd.peak,
            retained_bytes: bwd.retained,
        },
        PhaseEstimate {
            phase: "optimizer".into(),
            peak_bytes: opt.peak,
            retained_bytes: opt.retained,
        },
    ];
    let (name, peak) = peaks
        .iter()
        .max_by_key(|(_, b)| *b)
        .copied()
        .expect("three phases");
    est.peak_phase = name.into();
    est.peak_bytes = step_peak.max(peak);
    let c = &mut est.categories;
    c.activations = fwd.retained.max(0) as u64;
    c.gradients = bwd.retained.max(0) as u64;
    c.optimizer_state = state
        .iter()
        .map(|&s| sim.elems(s) * sim.nodes[s].dtype)
        .sum();
    // At the peak: what the other categories hold at that moment, the rest temporaries.
    let alive = match name {
        "forward" => c.optimizer_state + c.activations,
        "backward" => c.optimizer_state + c.activations,
        _ => c.optimizer_state + c.gradients,
    };
    let params = sim.live_of(SimPhase::Load);
    c.temporaries = est.peak_bytes.saturating_sub(alive + params);
}

fn infer(sim: &mut Sim, model: &Built, p: &Params, req: &Request) -> Estimate {
    let mut est = blank(req);
    let ids = sim.ints(&[req.batch, req.seq]);
    let params_by_module = sim.snapshot().by_module;
    let (logits, f) = phase(sim, SimPhase::Forward, |sim| {
        model.forward(sim, p, ids, None)
    });
    est.hotspots_forward = hotspots(sim, &sim.peak.by_module, &params_by_module);
    sim.release(logits);
    est.flops.forward = sim.flops[SimPhase::Forward as usize];
    est.flops.total = est.flops.forward;
    est.phases = vec![PhaseEstimate {
        phase: "forward".into(),
        peak_bytes: f.peak,
        retained_bytes: 0,
    }];
    est.peak_phase = "forward".into();
    est.peak_bytes = f.peak;
    est.categories.temporaries = f.peak - sim.live_of(SimPhase::Load);
    est
}

fn generate(sim: &mut Sim, model: &Built, p: &Params, req: &Request) -> Estimate {
    let mut est = blank(req);
    let cfg = &req.cfg;
    let max_len = req.prompt_len + req.new_tokens;
    let dt = req.dtype.size_bytes();
    sim.phase = SimPhase::Load;
    sim.enter("kv cache");
    let cache: Vec<(Id, Id)> = (0..cfg.n_layers)
        .map(|_| {
            let shape = [req.batch, cfg.n_kv_heads, max_len, cfg.head_dim()];
            (sim.leaf(&shape, dt), sim.leaf(&shape, dt))
        })
        .collect();
    let kv_bytes: u64 = cache
        .iter()
        .map(|(k, v)| (sim.elems(*k) + sim.elems(*v)) * dt)
        .sum();
    let params_by_module = sim.snapshot().by_module;
    let prompt = sim.ints(&[req.batch, req.prompt_len]);
    let (next, pre) = phase(sim, SimPhase::Forward, |sim| {
        let logits = model.forward(sim, p, prompt, Some((&cache, 0)));
        let last = sim.narrow(logits, 1, req.prompt_len - 1, 1);
        sim.release(logits);
        let next = sim.ints(&[req.batch, 1]);
        sim.release(last);
        next
    });
    est.hotspots_forward = hotspots(sim, &sim.peak.by_module, &params_by_module);
    let prefill_flops = sim.flops[SimPhase::Forward as usize];
    // One decode step at the longest context: the largest of the decode steps.
    let (_, dec) = phase(sim, SimPhase::Backward, |sim| {
        let logits = model.forward(sim, p, next, Some((&cache, max_len - 1)));
        sim.release(logits);
    });
    let decode_flops = sim.flops[SimPhase::Backward as usize];
    est.flops.forward = prefill_flops + decode_flops * req.new_tokens as u64;
    est.flops.total = est.flops.forward;
    est.phases = vec![
        PhaseEstimate {
            phase: "prefill".into(),
            peak_bytes: pre.peak,
            retained_bytes: 0,
        },
        PhaseEstimate {
            phase: "decode".into(),
            peak_bytes: dec.peak,
            retained_bytes: 0,
        },
    ];
    let (name, peak) = if pre.peak >= dec.peak {
        ("prefill", pre.peak)
    } else {
        ("decode", dec.peak)
    };
    est.peak_phase = name.into();
    est.peak_bytes = peak;
    est.categories.kv_cache = kv_bytes;
    est.categories.temporaries = peak.saturating_sub(sim.live_of(SimPhase::Load));
    est.notes.push(
        "decode FLOPs are counted at the longest context for every token (an upper bound)".into(),
    );
    est
}

/// candle-nn's `AdamW::step`, one parameter after the other. The moments and the parameter
/// are `Var`s, so every expression derived from them records its op, and the op keeps its
/// inputs: all fifteen intermediates of a parameter's update stay alive until its iteration
/// ends, except `g²` (made from the gradient alone, recorded by nothing). Measured on
/// gpt2-small: fourteen tensors of the embedding's size at the optimizer's peak.
fn candle_adamw_step(sim: &mut Sim, params: &[Id]) {
    for &v in params {
        let (shape, dt) = (sim.shape(v).to_vec(), sim.nodes[v].dtype);
        let new = |sim: &mut Sim| sim.leaf(&shape, dt);
        let mut live = Vec::with_capacity(14);
        // next_m = m·β1 + g·(1 − β1)
        for _ in 0..3 {
            live.push(new(sim));
        }
        // next_v = v·β2 + g²·(1 − β2): g² is freed with its statement
        live.push(new(sim));
        let g2 = new(sim);
        live.push(new(sim));
        live.push(new(sim));
        sim.release(g2);
        // m_hat, v_hat, θ·(1 − lr·λ), sqrt(v_hat), + eps, m_hat / …, · lr, θ − …
        for _ in 0..8 {
            live.push(new(sim));
        }
        for t in live {
            sim.release(t);
        }
    }
}
