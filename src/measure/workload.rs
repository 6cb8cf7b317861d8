//! The workloads — train, infer, generate — run on a model with every phase timed and its heap
//! accounted. Sample buffers are allocated before the first step; nothing here prints.

use crate::instrument::alloc::{self, Phase};
use crate::instrument::scope;
use crate::kernels::adamw::AdamW;
use crate::kernels::sink;
use crate::measure::batches::{random_batch, Batches};
use crate::measure::clock::time_ms;
use crate::measure::phases::PhaseTracker;
use crate::measure::procfs;
use crate::model::ops::Ops;
use crate::model::segments;
use crate::model::store::ParamStore;
use crate::model::variant::{Fusion, Precision};
use crate::model::weights::WeightSet;
use crate::model::{param_specs, Model};
use crate::record::{DataInfo, MemoryRecord, MicroStepMemory, ModelInfo, StepMemory};
use crate::spec::{Dtype, Mode, Spec};
use anyhow::Context;
use candle_core::backprop::GradStore;
use candle_core::{DType, Device, IndexOp, Tensor, Var, D};
use candle_nn::{Optimizer, ParamsAdamW};
use rand::SeedableRng;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

/// Raw results of one run: samples per phase (ms, one per measured step) and memory figures.
pub struct Measurement {
    pub model: ModelInfo,
    pub samples_ms: Vec<(String, Vec<f64>)>,
    pub memory: MemoryRecord,
    pub loss: Vec<f64>,
    pub warnings: Vec<String>,
    /// The `--data` file read, if any.
    pub data: Option<DataInfo>,
}

pub fn candle_dtype(d: Dtype) -> DType {
    match d {
        Dtype::F32 => DType::F32,
        Dtype::Bf16 => DType::BF16,
        Dtype::F16 => DType::F16,
    }
}

/// Test-only fault injection: retain one f32 tensor of this many bytes per step (a real leak).
pub const LEAK_ENV: &str = "MEMSCOPE_TEST_LEAK_BYTES";

/// Runs `spec`, counting finished steps (warm-up included) in `progress`.
pub fn measure(spec: &Spec, progress: &AtomicUsize) -> anyhow::Result<Measurement> {
    measure_with(spec, progress, &mut |_| {})
}

/// As [`measure`], handing each step's memory entry to `on_step` once the step is sampled —
/// after its timed region, before the next step starts (a sweep worker writes it to a side file,
/// so a run killed for memory keeps the series it reached).
pub fn measure_with(
    spec: &Spec,
    progress: &AtomicUsize,
    on_step: &mut dyn FnMut(&StepMemory),
) -> anyhow::Result<Measurement> {
    let dev = Device::Cpu;
    let dtype = candle_dtype(spec.dtype);
    let cfg = spec.arch();
    // Mixed precision: f32 master weights, gradients and optimizer state; compute in `dtype`.
    let mixed = spec.variant.precision == Precision::Mixed;
    let mut tracker = PhaseTracker::new();
    if mixed {
        tracker.other_category = "weights_copy";
    }

    // Load: parameters (random or from a checkpoint), then the model built from them.
    let load_start = Instant::now();
    let load_before = alloc::snapshot();
    let loaded = tracker.run(Phase::Load, || load(spec, mixed));
    let (store, model, mut warnings) = loaded?;
    let (batches, data) = Batches::open(spec, &dev)?;
    let load_seconds = load_start.elapsed().as_secs_f64();
    let load = Load {
        before: load_before,
        after: alloc::snapshot(),
        seconds: load_seconds,
    };
    let info = model_info(spec, &store);

    let total_steps = spec.warmup + spec.steps;
    // Room for every phase run of every step (train: a forward and a backward per micro-batch,
    // then the optimizer), so marking them never allocates inside a step.
    tracker.reserve_marks(total_steps * (2 * spec.grad_accum + 1));
    let mut run = MeasuredLoop {
        spec,
        dev: &dev,
        tracker: &mut tracker,
        series: Vec::with_capacity(total_steps),
        micro: Vec::with_capacity(total_steps * spec.grad_accum),
        loss: Vec::with_capacity(total_steps),
        leak: leak_bytes(),
        leaked: Vec::with_capacity(if leak_bytes() > 0 { total_steps } else { 0 }),
        step_peak: 0,
        on_step,
    };
    run.tracker.take_recent_peak(); // step peaks start after load
    let mut steps = Steps {
        total: total_steps,
        capture: capture_step(spec, total_steps),
        samples: phase_names(spec.mode)
            .iter()
            .map(|n| (n.to_string(), Vec::with_capacity(spec.steps)))
            .collect(),
        progress,
    };
    let mut kv_cache_bytes = None;

    let mut rng = rand::rngs::StdRng::seed_from_u64(spec.seed);
    match spec.mode {
        Mode::Train => {
            let fixed = random_batch(&mut rng, spec.batch, spec.seq, cfg, &dev)?;
            let vars = store.vars();
            let mut opt: Option<Optim> = None;
            let mut micro_batches = Vec::with_capacity(spec.grad_accum);
            steps.run(&mut run, |run, step| {
                micro_batches.clear();
                for m in 0..spec.grad_accum {
                    let k = (step * spec.grad_accum + m) as u64;
                    micro_batches.push(batches.get(k, spec.seq)?.unwrap_or_else(|| fixed.clone()));
                }
                run.train_step(
                    (model.as_ref(), &store),
                    &micro_batches,
                    &vars,
                    &mut opt,
                    step,
                )
            })?;
        }
        Mode::Infer => {
            let model = model.context("internal: no model for inference")?;
            let fixed = random_batch(&mut rng, spec.batch, spec.seq, cfg, &dev)?;
            drop(store); // inference keeps the model's detached tensors only
            steps.run(&mut run, |run, step| {
                let (ids, targets) = batches
                    .get(step as u64, spec.seq)?
                    .unwrap_or_else(|| fixed.clone());
                let ((logits, loss), ms) =
                    run.tracker.run(Phase::Forward, || -> anyhow::Result<_> {
                        // logits (B, T, V)
                        let (logits, ms) = time_ms(&dev, || model.forward(&ids, None))?;
                        // The batch's mean loss, outside the timed region (no update in infer).
                        let loss = Ops::new(&spec.variant).cross_entropy(&logits, &targets)?;
                        Ok(((logits, loss.to_dtype(DType::F64)?.to_scalar::<f64>()?), ms))
                    })?;
                drop(logits);
                run.loss.push(loss);
                Ok([ms])
            })?;
        }
        Mode::Generate => {
            let model = model.context("internal: no model for generate")?;
            let (fixed, _) = random_batch(&mut rng, spec.batch, spec.prompt_len, cfg, &dev)?;
            drop(store);
            let max_len = spec.prompt_len + spec.new_tokens;
            let mut cache = run.tracker.run(Phase::Other, || {
                Model::new_cache(cfg, spec.batch, max_len, dtype)
            })?;
            kv_cache_bytes = Some(cache.bytes());
            steps.run(&mut run, |run, step| {
                cache.reset();
                let prompt = match batches.get(step as u64, spec.prompt_len)? {
                    Some((ids, _)) => ids,
                    None => fixed.clone(),
                };
                let (prefill_ms, decode_ms) = run.generate_step(&model, &prompt, &mut cache)?;
                Ok([prefill_ms, decode_ms])
            })?;
        }
    }

    let MeasuredLoop {
        series,
        micro,
        loss,
        leaked,
        ..
    } = run;
    drop(leaked);
    let memory = memory_record(
        &mut tracker,
        &load,
        &info,
        kv_cache_bytes,
        (series, micro),
        total_steps,
        &mut warnings,
    );
    Ok(Measurement {
        model: info,
        samples_ms: steps.samples,
        memory,
        loss,
        warnings,
        data,
    })
}

/// The parameters (random or from `--weights`, in f32 for mixed precision) and the model built
/// from them (none for mixed precision), with the weights' warnings.
fn load(spec: &Spec, mixed: bool) -> anyhow::Result<(ParamStore, Option<Model>, Vec<String>)> {
    let cfg = spec.arch();
    let store_dtype = if mixed {
        DType::F32
    } else {
        candle_dtype(spec.dtype)
    };
    let purpose = spec.mode.purpose();
    let specs = param_specs(cfg);
    let (store, warnings) = match &spec.weights {
        None => (
            ParamStore::random(&specs, spec.seed, store_dtype, purpose)?,
            vec![],
        ),
        Some(path) => {
            let ws =
                WeightSet::open(path).with_context(|| format!("--weights {}", path.display()))?;
            ParamStore::from_weights(&specs, &ws, store_dtype, purpose)?
        }
    };
    // Mixed precision builds its model from a cast copy at every step (`MeasuredLoop::train_step`).
    let model = match mixed {
        true => None,
        false => Some(Model::load_variant(cfg, &store, &spec.variant)?),
    };
    Ok((store, model, warnings))
}

/// What the Record says about the model.
fn model_info(spec: &Spec, store: &ParamStore) -> ModelInfo {
    let cfg = spec.arch();
    ModelInfo {
        name: spec.model.clone(),
        family: format!("{:?}", cfg.family).to_lowercase(),
        params: store.param_count(),
        param_bytes: store.param_bytes(),
        n_layers: cfg.n_layers,
        d_model: cfg.d_model,
        n_heads: cfg.n_heads,
        vocab_size: cfg.vocab_size,
    }
}

/// The heap before and after loading (data opened included), and how long it took.
struct Load {
    before: alloc::HeapStats,
    after: alloc::HeapStats,
    seconds: f64,
}

/// The step whose phase peaks are snapshotted (by module): the last warm-up step when it is a
/// steady one (train: the optimizer state exists from the second step on), so the snapshot's
/// copies never run inside a measured step; else the last step.
fn capture_step(spec: &Spec, total_steps: usize) -> usize {
    let steady = if spec.mode == Mode::Train { 2 } else { 1 };
    if spec.warmup >= steady {
        spec.warmup - 1
    } else {
        total_steps - 1
    }
}

/// The step loop the three workloads share, and the phase times of the measured steps.
struct Steps<'a> {
    total: usize,
    /// The step whose phase peaks are snapshotted ([`capture_step`]).
    capture: usize,
    /// (phase name, ms per measured step), in [`phase_names`] order.
    samples: Vec<(String, Vec<f64>)>,
    /// Finished steps, warm-up included.
    progress: &'a AtomicUsize,
}

impl Steps<'_> {
    /// Runs every step through `step_fn` (→ its phase times, in [`phase_names`] order): stops
    /// after the step under way on SIGINT/SIGTERM once the warm-up is over (`leak` keeps the
    /// measured steps), starts the per-op times with the measured steps, keeps each measured
    /// step's times, and samples memory after each step (outside every timed region).
    fn run<const N: usize>(
        &mut self,
        run: &mut MeasuredLoop,
        mut step_fn: impl FnMut(&mut MeasuredLoop, usize) -> anyhow::Result<[f64; N]>,
    ) -> anyhow::Result<()> {
        let warmup = run.spec.warmup;
        for step in 0..self.total {
            if step > warmup && crate::stop::requested() {
                break; // SIGINT/SIGTERM under `leak`: keep the measured steps
            }
            if step == warmup {
                crate::instrument::op_timer::reset(); // per-op times cover the measured steps
            }
            run.tracker.capture = step == self.capture;
            let t = step_fn(run, step)?;
            if step >= warmup {
                for (slot, v) in self.samples.iter_mut().zip(t) {
                    slot.1.push(v);
                }
            }
            run.end_step(step);
            self.progress.store(step + 1, Ordering::Relaxed);
        }
        Ok(())
    }
}

/// The run's memory figures once its steps are done: every step's phase marks into its series
/// entry, the load, the peaks, RSS now and at its highest.
fn memory_record(
    tracker: &mut PhaseTracker,
    load: &Load,
    info: &ModelInfo,
    kv_cache_bytes: Option<u64>,
    (mut series, micro): (Vec<StepMemory>, Vec<MicroStepMemory>),
    total_steps: usize,
    warnings: &mut Vec<String>,
) -> MemoryRecord {
    for (entry, phases) in series.iter_mut().zip(tracker.take_marks(total_steps)) {
        entry.phases = phases;
    }
    if !alloc::is_active() {
        warnings.push(
            "the counting allocator is not installed in this binary: heap figures are 0".into(),
        );
    }
    MemoryRecord {
        counting: alloc::is_active() && alloc::counting(),
        start_bytes: load.before.curr_bytes,
        load_bytes: load.after.curr_bytes.saturating_sub(load.before.curr_bytes),
        load_seconds: load.seconds,
        load_peak_bytes: tracker.peak_of(Phase::Load),
        param_bytes: info.param_bytes,
        heap_peak_bytes: tracker.run_peak(),
        heap_live_end_bytes: series.last().map_or(0, |s| s.heap_live_bytes),
        rss_peak_bytes: procfs::vm_hwm_bytes(None),
        rss_end_bytes: procfs::rss_bytes(None),
        kv_cache_bytes,
        phases: tracker.to_record(),
        series,
        micro_steps: micro,
        peak_moments: tracker.moments(),
        estimate: None,
        breakdown: Default::default(),
    }
}

/// Phase names in the order their samples are stored, per mode.
pub fn phase_names(mode: Mode) -> &'static [&'static str] {
    match mode {
        Mode::Train => &["forward", "backward", "optimizer", "step"],
        Mode::Infer => &["forward"],
        Mode::Generate => &["prefill", "decode"],
    }
}

fn leak_bytes() -> usize {
    std::env::var(LEAK_ENV)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// The optimizer: memscope's in-place AdamW kernel, or candle-nn's op-by-op AdamW
/// (`--fusion none`: a temporary per operation, as `torch.optim.AdamW` without `fused=True`).
enum Optim {
    Fused(AdamW),
    Candle(candle_nn::AdamW),
}

impl Optim {
    fn new(vars: &[Var], spec: &Spec) -> candle_core::Result<Self> {
        let params = ParamsAdamW {
            lr: spec.lr,
            ..ParamsAdamW::default()
        };
        Ok(match spec.variant.fusion {
            Fusion::Full | Fusion::Compile => Optim::Fused(AdamW::new(vars.to_vec(), params)),
            Fusion::None => Optim::Candle(candle_nn::AdamW::new(vars.to_vec(), params)?),
        })
    }

    fn step(&mut self, grads: &GradStore) -> candle_core::Result<()> {
        match self {
            Optim::Fused(o) => o.step(grads),
            Optim::Candle(o) => o.step(grads),
        }
    }
}

struct MeasuredLoop<'a> {
    spec: &'a Spec,
    dev: &'a Device,
    tracker: &'a mut PhaseTracker,
    series: Vec<StepMemory>,
    micro: Vec<MicroStepMemory>,
    loss: Vec<f64>,
    leak: usize,
    leaked: Vec<Tensor>,
    /// Heap peak of micro-steps already closed within the current step.
    step_peak: u64,
    /// Called with each step's memory entry, outside the timed region.
    on_step: &'a mut dyn FnMut(&StepMemory),
}

impl MeasuredLoop<'_> {
    /// One optimizer step over `grad_accum` micro-batches → [forward, backward, optimizer, step] ms.
    /// `model`: the model, or none for mixed precision, which builds this step's from a cast
    /// copy of `store`'s f32 master weights (time counted in forward, bytes in phase "other").
    fn train_step(
        &mut self,
        (model, store): (Option<&Model>, &ParamStore),
        batches: &[(Tensor, Tensor)],
        vars: &[Var],
        opt: &mut Option<Optim>,
        step: usize,
    ) -> anyhow::Result<[f64; 4]> {
        let (dev, accum, spec) = (self.dev, self.spec.grad_accum, self.spec);
        let step_start = Instant::now();
        let (mut fwd_ms, mut bwd_ms) = (0.0, 0.0);
        let ops = Ops::new(&spec.variant);
        let working = match model {
            Some(_) => None,
            None => {
                let (m, ms) = self.tracker.run(Phase::Other, || {
                    time_ms(dev, || {
                        let linear = param_specs(spec.arch())
                            .into_iter()
                            .filter(|p| p.through_linear)
                            .map(|p| p.name)
                            .collect();
                        let (cast, masters) = store.cast(candle_dtype(spec.dtype), &linear)?;
                        let m = Model::load_variant(spec.arch(), &cast, &spec.variant)?;
                        Ok((m, masters))
                    })
                })?;
                fwd_ms += ms;
                Some(m)
            }
        };
        let (working, masters) = match working {
            Some((m, masters)) => (Some(m), masters),
            None => (None, Default::default()),
        };
        let model = match (model, &working) {
            (Some(m), _) | (None, Some(m)) => m,
            (None, None) => unreachable!("a working model is built when none is given"),
        };
        let mut grads: Option<GradStore> = None;
        let mut loss_sum = 0.0;
        for (micro, (ids, targets)) in batches.iter().enumerate() {
            if accum > 1 {
                self.tracker.take_recent_peak();
            }
            let ((loss, segs), ms) = self.tracker.run(Phase::Forward, || {
                time_ms(dev, || {
                    let (logits, segs) = segments::forward_with(spec.variant.checkpoint, |cut| {
                        model.forward_cut(ids, None, cut)
                    })?; // (B, T, V)
                    let loss = ops.cross_entropy(&logits, &targets)?; // logits (B, T, V)
                    let loss = if accum > 1 {
                        (loss / accum as f64)?
                    } else {
                        loss
                    };
                    Ok((loss, segs))
                })
            })?;
            fwd_ms += ms;
            loss_sum += loss.to_scalar::<f32>()? as f64;
            scope::enter(scope::OTHER_ID); // candle's backward runs outside the modules
            let ((), ms) = self.tracker.run(Phase::Backward, || {
                time_ms(dev, || {
                    // Segment by segment: each block's activations are freed once its
                    // gradients are out (model::segments).
                    // Micro-batches add into the gradients so far (weights in place).
                    let masters = masters.clone();
                    let acc = grads.take();
                    grads = Some(sink::with_masters(masters, || {
                        segs.backward(loss, vars, acc)
                    })?);
                    Ok(())
                })
            })?;
            bwd_ms += ms;
            if accum > 1 {
                let heap_peak_bytes = self.tracker.take_recent_peak();
                self.step_peak = self.step_peak.max(heap_peak_bytes);
                self.micro.push(MicroStepMemory {
                    step: step as u64,
                    micro_step: micro as u64,
                    heap_live_bytes: alloc::snapshot().curr_bytes,
                    heap_peak_bytes,
                });
            }
        }
        let grads = grads.expect("grad_accum >= 1 is validated");
        let ((), opt_ms) = self.tracker.run(Phase::Optimizer, || {
            time_ms(dev, || {
                let o = match opt {
                    Some(o) => o,
                    None => opt.insert(Optim::new(vars, spec)?),
                };
                o.step(&grads)
            })
        })?;
        drop(grads);
        drop(working);
        let step_ms = step_start.elapsed().as_secs_f64() * 1e3;
        self.loss.push(loss_sum);
        Ok([fwd_ms, bwd_ms, opt_ms, step_ms])
    }

    /// Prefill the prompt, then decode `new_tokens` tokens greedily → (prefill ms, mean ms per
    /// decoded token).
    fn generate_step(
        &mut self,
        model: &Model,
        prompt: &Tensor,
        cache: &mut crate::model::kv_cache::KvCache,
    ) -> anyhow::Result<(f64, f64)> {
        let dev = self.dev;
        let (next, prefill_ms) = self.tracker.run(Phase::Prefill, || {
            time_ms(dev, || {
                let logits = model.forward(prompt, Some(cache))?; // (B, P, V)
                let last = logits.i((.., logits.dim(1)? - 1, ..))?; // (B, V)
                last.argmax(D::Minus1)?.unsqueeze(1) // (B, 1)
            })
        })?;
        let n = self.spec.new_tokens;
        let (_, decode_ms) = self.tracker.run(Phase::Decode, || {
            time_ms(dev, || {
                let mut next = next;
                for _ in 0..n {
                    let logits = model.forward(&next, Some(cache))?; // (B, 1, V)
                    next = logits.squeeze(1)?.argmax(D::Minus1)?.unsqueeze(1)?; // (B, 1)
                }
                Ok(next)
            })
        })?;
        Ok((prefill_ms, decode_ms / n as f64))
    }

    /// Samples memory after a step (outside every timed region).
    fn end_step(&mut self, step: usize) {
        if self.leak > 0 {
            if let Ok(t) = Tensor::zeros(self.leak / 4, DType::F32, self.dev) {
                self.leaked.push(t);
            }
        }
        let step_peak = self
            .tracker
            .take_recent_peak()
            .max(std::mem::take(&mut self.step_peak));
        let now = alloc::snapshot();
        self.series.push(StepMemory {
            step: step as u64,
            warmup: step < self.spec.warmup,
            heap_live_bytes: now.curr_bytes,
            live_allocations: now.curr_blocks,
            heap_peak_bytes: step_peak,
            rss_bytes: procfs::rss_bytes(None),
            pss_bytes: procfs::pss_bytes(None),
            reserved_bytes: None,
            phases: Vec::new(), // filled when the run ends (PhaseTracker::take_marks)
        });
        if let Some(last) = self.series.last() {
            // The callback sees the step's phase marks in a copy, freed before the next step.
            let entry = StepMemory {
                phases: self.tracker.current_marks(),
                ..last.clone()
            };
            (self.on_step)(&entry);
        }
        self.tracker.next_step();
    }
}
