//! What `roofline` / `profile`'s instrumentation costs (instrument/op_timer.rs), side by side in one
//! run: (1) one scope per call — absent (the bare call), compiled in but off, and on; (2) a whole
//! tiny-gpt2 train step (8 × 128: the model where per-op overhead weighs most) with profiling off
//! and on; then the scopes a step opens, so that the off cost per step = scopes × (off − absent)
//! per call can be set against the step time.
//!
//! `cargo bench --bench op_timer`. Figures and the machine they came from: docs/roofline.md.

use candle_core::{Device, Tensor, Var};
use candle_nn::ParamsAdamW;
use criterion::{black_box, criterion_group, criterion_main, Criterion};
use memscope::instrument::op_timer::{self, Pass};
use memscope::kernels::adamw::AdamW;
use memscope::model::config::ModelConfig;
use memscope::model::store::{ParamStore, Purpose};
use memscope::model::{ops, param_specs, segments, Model};

#[global_allocator]
static GLOBAL: memscope::instrument::alloc::CountingAlloc =
    memscope::instrument::alloc::CountingAlloc;

fn per_call(c: &mut Criterion) {
    let mut g = c.benchmark_group("one scope");
    let work = |x: u64| black_box(x.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    g.bench_function("absent (bare call)", |b| b.iter(|| work(black_box(7))));
    op_timer::set_enabled(false);
    g.bench_function("compiled in, off", |b| {
        b.iter(|| {
            let _s = op_timer::op_scope("bench", Pass::Forward);
            work(black_box(7))
        })
    });
    op_timer::set_enabled(true);
    g.bench_function("on", |b| {
        b.iter(|| {
            let _s = op_timer::op_scope("bench", Pass::Forward);
            work(black_box(7))
        })
    });
    op_timer::set_enabled(false);
    op_timer::reset();
    g.finish();
}

fn batch(b: usize, t: usize, vocab: usize) -> (Tensor, Tensor) {
    let ids: Vec<u32> = (0..(b * (t + 1)) as u32)
        .map(|i| (i * 7919) % vocab as u32)
        .collect();
    let all = Tensor::from_vec(ids, (b, t + 1), &Device::Cpu).unwrap();
    (
        all.narrow(1, 0, t).unwrap().contiguous().unwrap(), // (B, T)
        all.narrow(1, 1, t).unwrap().flatten_all().unwrap(), // (B·T,)
    )
}

/// One optimizer step: forward with cuts, loss, segmented backward, AdamW.
fn train_step(model: &Model, ids: &Tensor, targets: &Tensor, vars: &[Var], opt: &mut AdamW) {
    let (logits, segs) = segments::forward(|cut| model.forward_cut(ids, None, cut)).unwrap(); // (B, T, V)
    let n = targets.elem_count();
    let v = logits.dim(2).unwrap();
    let loss = ops::cross_entropy(&logits.reshape((n, v)).unwrap(), targets).unwrap(); // ()
    drop(logits);
    let grads = segs.backward(loss, vars, None).unwrap();
    opt.step(&grads).unwrap();
}

fn whole_step(c: &mut Criterion) {
    memscope::instrument::alloc::keep_freed_memory();
    let cfg = ModelConfig::preset("tiny-gpt2").unwrap();
    let (b, t) = (8, 128);
    let (ids, targets) = batch(b, t, cfg.vocab_size);
    let store = ParamStore::random(
        &param_specs(&cfg),
        0,
        candle_core::DType::F32,
        Purpose::Train,
    )
    .unwrap();
    let model = Model::load(&cfg, &store).unwrap();
    let vars = store.vars();
    let mut opt = AdamW::new(vars.clone(), ParamsAdamW::default());
    let mut g = c.benchmark_group(format!("tiny-gpt2 train b{b} s{t}"));
    g.sample_size(20);
    for on in [false, true] {
        op_timer::set_enabled(on);
        let name = if on { "profiling on" } else { "profiling off" };
        g.bench_function(name, |bch| {
            bch.iter(|| train_step(&model, &ids, &targets, &vars, &mut opt))
        });
    }
    g.finish();
    // Scopes one step opens (outer scopes: nested ones are not counted, so this is a floor).
    op_timer::reset();
    op_timer::set_enabled(true);
    train_step(&model, &ids, &targets, &vars, &mut opt);
    op_timer::set_enabled(false);
    let calls: u64 = op_timer::take().iter().map(|o| o.calls).sum();
    println!("tiny-gpt2 train b{b} s{t}: {calls} outer op scopes per step");
}

criterion_group!(benches, per_call, whole_step);
criterion_main!(benches);
