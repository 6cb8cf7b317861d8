//! Whole steps on memscope's engine, as `memscope bench` runs them: a train step (segmented
//! forward, fused cross-entropy, segment-by-segment backward, in-place AdamW) and an inference
//! forward, for tiny-gpt2, tiny-llama and the tiny GPT-2 of issue 6 case c
//! (scripts/configs/gpt2-tiny-8k.json). Throughput in tokens per second.
//!
//! `cargo bench --bench steps`. For gpt2-small and the fraction of the matmul peak a step
//! reaches, `memscope bench` prints both (its FLOPs come from the estimator); criterion is
//! here for the small models, where per-op overhead dominates and spread matters.

use candle_core::{Device, Tensor, Var};
use candle_nn::ParamsAdamW;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use memscope::kernels::adamw::AdamW;
use memscope::model::config::ModelConfig;
use memscope::model::store::{ParamStore, Purpose};
use memscope::model::{ops, param_specs, segments, Model};
use std::path::Path;

#[global_allocator]
static GLOBAL: memscope::instrument::alloc::CountingAlloc =
    memscope::instrument::alloc::CountingAlloc;

fn config(name: &str) -> ModelConfig {
    if name.ends_with(".json") {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(name);
        ModelConfig::from_file(&path).expect("the config file in scripts/configs")
    } else {
        ModelConfig::preset(name).expect("a preset")
    }
}

fn batch(b: usize, t: usize, vocab: usize) -> (Tensor, Tensor) {
    let ids: Vec<u32> = (0..(b * (t + 1)) as u32)
        .map(|i| (i * 7919) % vocab as u32)
        .collect();
    let all = Tensor::from_vec(ids, (b, t + 1), &Device::Cpu).unwrap();
    (
        all.narrow(1, 0, t).unwrap().contiguous().unwrap(),
        all.narrow(1, 1, t).unwrap().flatten_all().unwrap(),
    )
}

/// One optimizer step: forward with cuts, loss, segmented backward, AdamW.
fn train_step(model: &Model, ids: &Tensor, targets: &Tensor, vars: &[Var], opt: &mut AdamW) {
    let (logits, segs) = segments::forward(|cut| model.forward_cut(ids, None, cut)).unwrap();
    let v = logits.dim(2).unwrap();
    let n = targets.elem_count();
    let loss = ops::cross_entropy(&logits.reshape((n, v)).unwrap(), targets).unwrap();
    drop(logits);
    let grads = segs.backward(loss, vars, None).unwrap();
    opt.step(&grads).unwrap();
}

fn steps(c: &mut Criterion) {
    memscope::instrument::alloc::keep_freed_memory();
    for (name, b, t) in [
        ("tiny-gpt2", 8, 128),
        ("tiny-llama", 8, 128),
        ("scripts/configs/gpt2-tiny-8k.json", 8, 128),
    ] {
        let cfg = config(name);
        let label = cfg.name.clone();
        let (ids, targets) = batch(b, t, cfg.vocab_size);
        let mut g = c.benchmark_group(format!("{label} b{b} s{t}"));
        g.sample_size(10);
        g.throughput(Throughput::Elements((b * t) as u64));

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
        g.bench_function("train step", |bch| {
            bch.iter(|| train_step(&model, &ids, &targets, &vars, &mut opt))
        });
        drop((model, opt, vars, store));

        let store = ParamStore::random(
            &param_specs(&cfg),
            0,
            candle_core::DType::F32,
            Purpose::Forward,
        )
        .unwrap();
        let model = Model::load(&cfg, &store).unwrap();
        g.bench_function("forward (inference)", |bch| {
            bch.iter(|| model.forward(&ids, None).unwrap())
        });
        g.finish();
    }
}

criterion_group!(benches, steps);
criterion_main!(benches);
