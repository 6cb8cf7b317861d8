//! Model correctness on the tiny presets: exact sizes, gradients reach every parameter,
//! inference keeps no graph, causality, KV-cache decoding, half precision, checkpoint loading.

use candle_core::{DType, Device, IndexOp, Tensor};
use memscope::export::write_safetensors;
use memscope::model::config::ModelConfig;
use memscope::model::store::{ParamStore, Placement, Purpose};
use memscope::model::weights::{WDtype, WeightSet};
use memscope::model::{cost, ops, param_specs, segments, Model};

const TINY: [&str; 3] = ["tiny-gpt2", "tiny-llama", "tiny-bert"];
const DECODERS: [&str; 2] = ["tiny-gpt2", "tiny-llama"];

fn cfg(name: &str) -> ModelConfig {
    ModelConfig::preset(name).unwrap()
}

fn build(name: &str, trainable: bool, dtype: DType) -> (ModelConfig, ParamStore, Model) {
    let c = cfg(name);
    let purpose = if trainable {
        Purpose::Train
    } else {
        Purpose::Forward
    };
    let store = ParamStore::random(&param_specs(&c), 7, dtype, purpose).unwrap();
    let model = Model::load(&c, &store).unwrap();
    (c, store, model)
}

fn tokens(b: usize, t: usize, vocab: usize, salt: u32) -> Tensor {
    let v: Vec<u32> = (0..(b * t) as u32)
        .map(|i| (i * 7919 + salt * 104729) % vocab as u32)
        .collect();
    Tensor::from_vec(v, (b, t), &Device::Cpu).unwrap()
}

/// Largest absolute elementwise difference, in f32.
fn max_abs_diff(a: &Tensor, b: &Tensor) -> f32 {
    let a = a.to_dtype(DType::F32).unwrap();
    let b = b.to_dtype(DType::F32).unwrap();
    (a - b)
        .unwrap()
        .abs()
        .unwrap()
        .max_all()
        .unwrap()
        .to_scalar::<f32>()
        .unwrap()
}

fn loss_of(model: &Model, ids: &Tensor, vocab: usize) -> Tensor {
    let (b, t) = ids.dims2().unwrap();
    let logits = model.forward(ids, None).unwrap();
    // Targets unrelated to the inputs: with a tied embedding, predicting the input token itself
    // is easy and would lower the initial loss below ln V.
    let targets = ((ids.flatten_all().unwrap() * 3.0).unwrap() + 1.0).unwrap();
    let targets = targets.to_dtype(DType::F32).unwrap();
    let v: Vec<f32> = targets.to_vec1().unwrap();
    let targets = Tensor::from_vec(
        v.iter()
            .map(|x| (*x as u32) % vocab as u32)
            .collect::<Vec<_>>(),
        b * t,
        &Device::Cpu,
    )
    .unwrap();
    ops::cross_entropy(&logits.reshape((b * t, vocab)).unwrap(), &targets).unwrap()
}

#[test]
fn built_models_have_exactly_the_analytic_parameter_count() {
    for name in TINY.iter().chain(&["gpt2-small", "cs336-small"]) {
        let c = cfg(name);
        let specs = param_specs(&c);
        let from_specs: u64 = specs.iter().map(|s| s.elem_count() as u64).sum();
        assert_eq!(Some(from_specs), cost::param_count(&c), "{name}");
    }
    // The built model holds exactly those tensors (tiny ones: building gpt2-small is slow here).
    for name in TINY {
        let (c, store, _) = build(name, false, DType::F32);
        assert_eq!(Some(store.param_count()), cost::param_count(&c), "{name}");
        assert_eq!(store.param_bytes(), store.param_count() * 4, "{name}");
    }
    assert_eq!(cost::param_count(&cfg("gpt2-small")), Some(124_439_808));
    assert_eq!(cost::param_count(&cfg("cs336-small")), Some(128_625_408));
    assert_eq!(cost::param_count(&cfg("cs336-medium")), Some(423_183_360));
    assert_eq!(cost::param_count(&cfg("cs336-large")), Some(969_411_840));
}

#[test]
fn every_parameter_of_every_family_gets_a_nonzero_gradient() {
    for name in TINY {
        let (c, store, model) = build(name, true, DType::F32);
        let loss = loss_of(&model, &tokens(2, 16, c.vocab_size, 1), c.vocab_size);
        let grads = loss.backward().unwrap();
        for (pname, t) in store.tensors() {
            let g = grads
                .get(t)
                .unwrap_or_else(|| panic!("{name}: no gradient for {pname}"));
            let norm = g
                .sqr()
                .unwrap()
                .sum_all()
                .unwrap()
                .to_scalar::<f32>()
                .unwrap();
            assert!(
                norm > 0.0 && norm.is_finite(),
                "{name}: zero gradient for {pname}"
            );
        }
    }
}

/// Loss from logits with targets unrelated to the inputs (see `loss_of`).
fn loss_from_logits(logits: &Tensor, ids: &Tensor, vocab: usize) -> Tensor {
    let (b, t) = ids.dims2().unwrap();
    let v: Vec<u32> = ids.flatten_all().unwrap().to_vec1().unwrap();
    let targets: Vec<u32> = v.iter().map(|x| (x * 3 + 1) % vocab as u32).collect();
    let targets = Tensor::from_vec(targets, b * t, &Device::Cpu).unwrap();
    ops::cross_entropy(&logits.reshape((b * t, vocab)).unwrap(), &targets).unwrap()
}

#[test]
fn segmented_backward_gives_the_same_gradients_as_the_whole_graph() {
    for name in TINY {
        let (c, store, model) = build(name, true, DType::F32);
        let ids = tokens(2, 16, c.vocab_size, 3);
        let whole = loss_of(&model, &ids, c.vocab_size).backward().unwrap();
        let (logits, segs) = segments::forward(|cut| model.forward_cut(&ids, None, cut)).unwrap();
        let loss = loss_from_logits(&logits, &ids, c.vocab_size);
        drop(logits);
        let vars = store.vars();
        let seg = segs.backward(loss, &vars, None).unwrap();
        for (pname, t) in store.tensors() {
            let (a, b) = (whole.get(t).unwrap(), seg.get(t));
            let b = b.unwrap_or_else(|| panic!("{name}: segmented backward lost {pname}"));
            let scale = max_abs_diff(a, &a.zeros_like().unwrap()).max(1e-6);
            let d = max_abs_diff(a, b);
            assert!(
                d <= 1e-5 * scale.max(1.0),
                "{name} {pname}: off by {d} (max {scale})"
            );
        }
        assert_eq!(
            seg.get_ids().count(),
            vars.len(),
            "{name}: only parameters are kept"
        );
    }
}

#[test]
fn micro_batches_add_into_the_gradients_so_far() {
    // Two micro-batches through the segmented backward, the second adding into the first's
    // gradients (weights in place, in the sink) = the sum of two whole-graph backwards.
    for name in TINY {
        let (c, store, model) = build(name, true, DType::F32);
        let vars = store.vars();
        let batches = [
            tokens(2, 16, c.vocab_size, 3),
            tokens(2, 16, c.vocab_size, 7),
        ];
        let mut acc = None;
        for ids in &batches {
            let (logits, segs) =
                segments::forward(|cut| model.forward_cut(ids, None, cut)).unwrap();
            let loss = loss_from_logits(&logits, ids, c.vocab_size);
            drop(logits);
            acc = Some(segs.backward(loss, &vars, acc.take()).unwrap());
        }
        let acc = acc.unwrap();
        let whole: Vec<_> = batches
            .iter()
            .map(|ids| loss_of(&model, ids, c.vocab_size).backward().unwrap())
            .collect();
        for (pname, t) in store.tensors() {
            let sum = (whole[0].get(t).unwrap() + whole[1].get(t).unwrap()).unwrap();
            let got = acc.get(t).unwrap_or_else(|| panic!("{name}: lost {pname}"));
            let scale = max_abs_diff(&sum, &sum.zeros_like().unwrap()).max(1e-6);
            let d = max_abs_diff(&sum, got);
            assert!(
                d <= 1e-5 * scale.max(1.0),
                "{name} {pname}: off by {d} (max {scale})"
            );
        }
    }
}

#[test]
fn inference_keeps_no_autograd_graph() {
    for name in TINY {
        let (c, store, model) = build(name, false, DType::F32);
        assert!(store.vars().is_empty());
        let logits = model.forward(&tokens(1, 8, c.vocab_size, 2), None).unwrap();
        assert!(!logits.track_op(), "{name}: inference output records ops");
    }
}

#[test]
fn initial_loss_is_ln_vocab_and_training_lowers_it() {
    use candle_nn::{AdamW, Optimizer, ParamsAdamW};
    for name in TINY {
        let (c, store, model) = build(name, true, DType::F32);
        let ids = tokens(2, 32, c.vocab_size, 3);
        let first = loss_of(&model, &ids, c.vocab_size)
            .to_scalar::<f32>()
            .unwrap();
        let ln_v = (c.vocab_size as f32).ln();
        assert!(
            (first - ln_v).abs() < 0.1,
            "{name}: initial loss {first} vs ln V {ln_v}"
        );
        let mut opt = AdamW::new(
            store.vars(),
            ParamsAdamW {
                lr: 3e-3,
                ..Default::default()
            },
        )
        .unwrap();
        let mut last = first;
        for _ in 0..5 {
            let loss = loss_of(&model, &ids, c.vocab_size);
            last = loss.to_scalar::<f32>().unwrap();
            opt.backward_step(&loss).unwrap();
        }
        assert!(
            last < first - 0.05,
            "{name}: loss did not fall: {first} → {last}"
        );
    }
}

#[test]
fn changing_a_future_token_leaves_earlier_logits_unchanged() {
    for name in DECODERS {
        let (c, _, model) = build(name, false, DType::F32);
        let a = tokens(1, 12, c.vocab_size, 4);
        let mut v: Vec<u32> = a.flatten_all().unwrap().to_vec1().unwrap();
        v[9] = (v[9] + 1) % c.vocab_size as u32;
        let b = Tensor::from_vec(v, (1, 12), &Device::Cpu).unwrap();
        let la = model.forward(&a, None).unwrap().i((.., ..9, ..)).unwrap();
        let lb = model.forward(&b, None).unwrap().i((.., ..9, ..)).unwrap();
        let diff = max_abs_diff(&la, &lb);
        assert_eq!(diff, 0.0, "{name}: position < 9 saw token 9");
    }
    // The encoder is bidirectional: the same change must be visible earlier.
    let (c, _, model) = build("tiny-bert", false, DType::F32);
    let a = tokens(1, 12, c.vocab_size, 4);
    let mut v: Vec<u32> = a.flatten_all().unwrap().to_vec1().unwrap();
    v[9] = (v[9] + 1) % c.vocab_size as u32;
    let b = Tensor::from_vec(v, (1, 12), &Device::Cpu).unwrap();
    let diff = max_abs_diff(
        &model.forward(&a, None).unwrap().i((.., 0, ..)).unwrap(),
        &model.forward(&b, None).unwrap().i((.., 0, ..)).unwrap(),
    );
    assert!(diff > 0.0, "bert: attention should be bidirectional");
}

#[test]
fn kv_cache_decoding_matches_the_full_forward() {
    for name in DECODERS {
        let (c, _, model) = build(name, false, DType::F32);
        let (b, prompt, new) = (2, 5, 6);
        let ids = tokens(b, prompt + new, c.vocab_size, 5);
        let full = model.forward(&ids, None).unwrap(); // (B, T, V)
        let mut cache = Model::new_cache(&c, b, prompt + new, DType::F32).unwrap();
        let mut outs = vec![model
            .forward(&ids.narrow(1, 0, prompt).unwrap(), Some(&mut cache))
            .unwrap()];
        for t in prompt..prompt + new {
            outs.push(
                model
                    .forward(&ids.narrow(1, t, 1).unwrap(), Some(&mut cache))
                    .unwrap(),
            );
        }
        assert_eq!(cache.len(), prompt + new);
        let cached = Tensor::cat(&outs, 1).unwrap();
        let diff = max_abs_diff(&full, &cached);
        assert!(diff < 1e-4, "{name}: cached decoding differs by {diff}");
        // Exact KV cache size: 2 (K, V) × layers × B × kv heads × positions × head dim × 4 B.
        let expect = 2 * c.n_layers * b * c.n_kv_heads * (prompt + new) * c.head_dim() * 4;
        assert_eq!(cache.bytes(), expect as u64);
        // Reset starts over at position 0 with the same result.
        cache.reset();
        let again = model
            .forward(&ids.narrow(1, 0, prompt).unwrap(), Some(&mut cache))
            .unwrap();
        let d = max_abs_diff(&again, &outs[0]);
        assert_eq!(d, 0.0);
    }
}

#[test]
fn half_precision_forward_and_backward_run_and_stay_close_to_f32() {
    for name in TINY {
        let c = cfg(name);
        let ids = tokens(2, 16, c.vocab_size, 6);
        let (_, _, m32) = build(name, false, DType::F32);
        let l32 = m32.forward(&ids, None).unwrap();
        for dt in [DType::BF16, DType::F16] {
            let (_, store, m) = build(name, true, dt);
            assert_eq!(store.param_bytes(), store.param_count() * 2);
            let l = m.forward(&ids, None).unwrap();
            assert_eq!(l.dtype(), dt);
            let diff = max_abs_diff(&l.to_dtype(DType::F32).unwrap(), &l32);
            assert!(
                diff < 0.1,
                "{name} {dt:?}: logits differ from f32 by {diff}"
            );
            let loss = loss_of(&m, &ids, c.vocab_size);
            assert!(loss.to_scalar::<f32>().unwrap().is_finite());
            let grads = loss.backward().unwrap();
            assert!(
                store.tensors().all(|(_, t)| grads.get(t).is_some()),
                "{name} {dt:?}: missing gradients"
            );
        }
    }
}

/// Writes a store's tensors as a Hugging Face-named safetensors checkpoint.
/// `store`'s parameters as a checkpoint, each with its spec's dims (an inference store's
/// weight in panels is a 3-d view whose elements run in the weight's own order).
fn write_checkpoint(c: &ModelConfig, store: &ParamStore, path: &std::path::Path, prefix: &str) {
    let specs = param_specs(c);
    let owned: Vec<(String, Vec<usize>, Vec<u8>)> = store
        .tensors()
        .map(|(n, t)| {
            let v: Vec<f32> = t.flatten_all().unwrap().to_vec1().unwrap();
            let spec = specs.iter().find(|s| &s.name == n).unwrap();
            (
                format!("{prefix}{n}"),
                spec.shape.clone(),
                v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            )
        })
        .collect();
    let tensors: Vec<(&str, WDtype, &[usize], &[u8])> = owned
        .iter()
        .map(|(n, s, d)| (n.as_str(), WDtype::F32, s.as_slice(), d.as_slice()))
        .collect();
    write_safetensors(path, &tensors).unwrap();
}

#[test]
fn checkpoints_load_into_the_same_structs_and_give_the_same_logits() {
    let dir = tempfile::tempdir().unwrap();
    for (name, prefix) in [("tiny-gpt2", "transformer."), ("tiny-llama", "")] {
        let (c, store, model) = build(name, false, DType::F32);
        let path = dir.path().join(format!("{name}.safetensors"));
        write_checkpoint(&c, &store, &path, prefix);
        let ws = WeightSet::open(&path).unwrap();
        let (loaded, warnings) =
            ParamStore::from_weights(&param_specs(&c), &ws, DType::F32, Purpose::Forward).unwrap();
        assert!(warnings.is_empty(), "{warnings:?}");
        let m2 = Model::load(&c, &loaded).unwrap();
        let ids = tokens(1, 10, c.vocab_size, 8);
        let d = max_abs_diff(
            &model.forward(&ids, None).unwrap(),
            &m2.forward(&ids, None).unwrap(),
        );
        assert_eq!(d, 0.0, "{name}");
    }
}

#[test]
fn inference_stores_keep_linear_weights_transposed_with_the_same_values_and_logits() {
    let dir = tempfile::tempdir().unwrap();
    for name in ["tiny-llama", "tiny-bert", "tiny-gpt2"] {
        let (c, train, train_model) = build(name, true, DType::F32);
        let (_, infer, infer_model) = build(name, false, DType::F32);
        let path = dir.path().join(format!("{name}.safetensors"));
        write_checkpoint(&c, &train, &path, "");
        let ws = WeightSet::open(&path).unwrap();
        let (loaded, _) =
            ParamStore::from_weights(&param_specs(&c), &ws, DType::F32, Purpose::Forward).unwrap();
        let (mut transposed, mut panelled) = (0, 0);
        for spec in param_specs(&c) {
            let t = train.get(&spec.name).unwrap();
            assert!(
                t.is_contiguous(),
                "{name} {}: training keeps row-major",
                spec.name
            );
            for (how, i) in [
                ("random", infer.get(&spec.name)),
                ("checkpoint", loaded.get(&spec.name)),
            ] {
                let i = i.unwrap();
                let what = format!("{name} {} ({how})", spec.name);
                match spec.placement(Purpose::Forward, DType::F32) {
                    // (O, I) viewed over (I, O) row-major memory.
                    Placement::Transposed => assert_eq!(i.stride(), [1, spec.shape[0]], "{what}"),
                    // A 3-d view of strips as wide as gemm's kernel reads (AVX-512: 64, AVX2:
                    // 16), the weight's elements in its own order.
                    Placement::Panels(w) => {
                        assert_eq!(i.elem_count(), t.elem_count(), "{what}");
                        assert_eq!(i.rank(), 3, "{what}");
                        assert_eq!(Some(w), memscope::kernels::strips::width(), "{what}");
                    }
                    Placement::RowMajor => {
                        assert_eq!(i.dims(), t.dims(), "{what}");
                        assert!(i.is_contiguous(), "{what}");
                    }
                }
                let i = i.contiguous().unwrap().reshape(t.shape()).unwrap();
                assert_eq!(max_abs_diff(&i, &t), 0.0, "{what}");
            }
            transposed += spec.linear as usize;
            panelled += matches!(
                spec.placement(Purpose::Forward, DType::F32),
                Placement::Panels(_)
            ) as usize;
        }
        // Generation keeps every weight row-major (decode's one-row products read them so).
        let decode = ParamStore::random(&param_specs(&c), 7, DType::F32, Purpose::Decode).unwrap();
        for (pname, t) in decode.tensors() {
            assert!(t.is_contiguous(), "{name} {pname} (decode)");
        }
        // GPT-2's Conv1D weights are (I, O) already and its head is the tied embedding.
        assert_eq!(transposed > 0, name != "tiny-gpt2", "{name}: {transposed}");
        // Where gemm runs AVX-512 or AVX2 kernels every weight read only through the linear
        // kernel is in panels (the tiny models' out features are multiples of 64), Conv1D ones
        // included.
        assert_eq!(
            panelled > 0,
            memscope::kernels::strips::width().is_some(),
            "{name}"
        );
        let ids = tokens(2, 12, c.vocab_size, 3);
        let want = train_model.forward(&ids, None).unwrap();
        let got = infer_model.forward(&ids, None).unwrap();
        let scale = want
            .abs()
            .unwrap()
            .max_all()
            .unwrap()
            .to_scalar::<f32>()
            .unwrap();
        let d = max_abs_diff(&want, &got);
        assert!(d <= 1e-5 * scale.max(1.0), "{name}: logits differ by {d}");
    }
}

#[test]
fn a_checkpoint_missing_a_tensor_or_with_a_wrong_shape_is_rejected_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let c = cfg("tiny-gpt2");
    let path = dir.path().join("bad.safetensors");
    let data = vec![0u8; 4 * 4];
    write_safetensors(&path, &[("wte.weight", WDtype::F32, &[2, 2], &data)]).unwrap();
    let ws = WeightSet::open(&path).unwrap();
    let err = ParamStore::from_weights(&param_specs(&c), &ws, DType::F32, Purpose::Forward)
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.contains("wte.weight") && err.contains("[2, 2]") && err.contains("[1000, 128]"),
        "{err}"
    );
    let path = dir.path().join("missing.safetensors");
    write_safetensors(&path, &[("something.else", WDtype::F32, &[2, 2], &data)]).unwrap();
    let ws = WeightSet::open(&path).unwrap();
    let err = ParamStore::from_weights(&param_specs(&c), &ws, DType::F32, Purpose::Forward)
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.contains("wte.weight") && err.contains("missing"),
        "{err}"
    );
}

#[test]
fn mixed_precision_linear_weight_gradients_reach_their_f32_masters_directly() {
    // The working copy of every weight read only through the linear kernel is detached, and
    // the kernel adds its f32 weight gradient into the master's (`kernels::sink::Masters`).
    // Against the recorded cast of every weight (candle's cast backward): the same variables
    // get gradients, all f32, equal within bf16's rounding of the old path's gradient.
    use memscope::kernels::sink;
    use std::collections::BTreeSet;
    for name in TINY {
        let (c, store, _) = build(name, true, DType::F32);
        let ids = tokens(2, 16, c.vocab_size, 3);
        let vars = store.vars();
        let through: BTreeSet<String> = param_specs(&c)
            .into_iter()
            .filter(|p| p.through_linear)
            .map(|p| p.name)
            .collect();
        assert!(
            !through.is_empty(),
            "{name}: no weight is read through the linear kernel"
        );
        let grads = |linear: &BTreeSet<String>| {
            let (cast, masters) = store.cast(DType::BF16, linear).unwrap();
            assert_eq!(masters.len(), linear.len(), "{name}");
            for (n, t) in cast.tensors() {
                // A detached copy: only the sink can bring its gradient to the master.
                assert_eq!(t.track_op(), !linear.contains(n), "{name} {n}");
            }
            let model = Model::load(&c, &cast).unwrap();
            let (logits, segs) =
                segments::forward(|cut| model.forward_cut(&ids, None, cut)).unwrap();
            let loss = loss_from_logits(&logits.to_dtype(DType::F32).unwrap(), &ids, c.vocab_size);
            drop(logits);
            sink::with_masters(masters, || segs.backward(loss, &vars, None)).unwrap()
        };
        let (old, new) = (grads(&BTreeSet::new()), grads(&through));
        for (pname, t) in store.tensors() {
            let (a, b) = (old.get(t).unwrap(), new.get(t));
            let b = b.unwrap_or_else(|| panic!("{name}: {pname} lost its gradient"));
            assert_eq!(b.dtype(), DType::F32, "{name} {pname}");
            let scale = max_abs_diff(a, &a.zeros_like().unwrap()).max(1e-6);
            let d = max_abs_diff(a, b);
            assert!(
                d <= 2e-2 * scale,
                "{name} {pname}: off by {d} (max {scale})"
            );
        }
        assert_eq!(new.get_ids().count(), vars.len(), "{name}");
    }
}
