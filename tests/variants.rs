//! The engine paths `memscope optimize` ranks, each against memscope's own: naive attention and
//! op-by-op kernels give the same outputs and gradients (1e-4), checkpointing the same gradients
//! (1e-5); saved activations grow linearly in the sequence with the fused kernel and
//! quadratically with naive attention; checkpointing keeps at most half the saved bytes; mixed
//! precision keeps f32 state and tracks the f32 loss; `memscope optimize` ranks them.

use assert_cmd::Command;
use candle_core::{DType, Device, Tensor};
use memscope::model::config::ModelConfig;
use memscope::model::store::{ParamStore, Purpose};
use memscope::model::variant::{Attention, Fusion, Variant};
use memscope::model::{param_specs, segments, Model};
use rand::{Rng, SeedableRng};
use serde_json::Value;

const TINY: [&str; 3] = ["tiny-gpt2", "tiny-llama", "tiny-bert"];

/// Fresh random ids (B, T) and targets (B·T,) for this seed.
fn batch(seed: u64, b: usize, t: usize, vocab: usize) -> (Tensor, Tensor) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut ids = || -> Vec<u32> {
        (0..b * t)
            .map(|_| rng.random_range(0..vocab as u32))
            .collect()
    };
    let x = Tensor::from_vec(ids(), (b, t), &Device::Cpu).unwrap();
    let y = Tensor::from_vec(ids(), b * t, &Device::Cpu).unwrap();
    (x, y)
}

/// One training forward and backward on `variant` → (logits, loss, gradient per parameter).
fn step(name: &str, v: Variant, seed: u64) -> (Tensor, f32, Vec<(String, Tensor)>) {
    let c = ModelConfig::preset(name).unwrap();
    let store = ParamStore::random(&param_specs(&c), seed, DType::F32, Purpose::Train).unwrap();
    let model = Model::load_variant(&c, &store, &v).unwrap();
    let (ids, targets) = batch(seed, 2, 24, c.vocab_size);
    let (logits, segs) =
        segments::forward_with(v.checkpoint, |cut| model.forward_cut(&ids, None, cut)).unwrap();
    let ops = memscope::model::ops::Ops::new(&v);
    let loss = ops
        .cross_entropy(&logits.reshape((48, c.vocab_size)).unwrap(), &targets)
        .unwrap();
    let l = loss.to_scalar::<f32>().unwrap();
    let grads = segs.backward(loss, &store.vars(), None).unwrap();
    let g = store
        .tensors()
        .map(|(n, t)| {
            let g = grads
                .get(t)
                .unwrap_or_else(|| panic!("{name} {v:?}: no gradient for {n}"));
            (n.clone(), g.clone())
        })
        .collect();
    (logits.detach(), l, g)
}

/// max |a − b| / max(1, max |a|).
fn rel(a: &Tensor, b: &Tensor) -> f32 {
    let d = (a - b)
        .unwrap()
        .abs()
        .unwrap()
        .max_all()
        .unwrap()
        .to_scalar::<f32>()
        .unwrap();
    let s = a
        .abs()
        .unwrap()
        .max_all()
        .unwrap()
        .to_scalar::<f32>()
        .unwrap();
    d / s.max(1.0)
}

fn agree(name: &str, v: Variant, tol: f32) {
    for seed in [11, 12] {
        let (lp, lossp, gp) = step(name, Variant::default(), seed);
        let (lv, lossv, gv) = step(name, v, seed);
        assert!(
            rel(&lp, &lv) <= tol,
            "{name} {v:?}: logits off by {}",
            rel(&lp, &lv)
        );
        assert!(
            (lossp - lossv).abs() <= tol * lossp.abs().max(1.0),
            "{name} {v:?}: loss"
        );
        for ((n, a), (_, b)) in gp.iter().zip(&gv) {
            let d = rel(a, b);
            assert!(
                d <= tol,
                "{name} {v:?} seed {seed}: gradient of {n} off by {d}"
            );
        }
    }
}

#[test]
fn naive_attention_gives_the_kernels_outputs_and_gradients() {
    for name in TINY {
        let v = Variant {
            attention: Attention::Naive,
            ..Variant::default()
        };
        agree(name, v, 1e-4);
    }
}

#[test]
fn op_by_op_kernels_give_the_fused_outputs_and_gradients() {
    for name in TINY {
        let v = Variant {
            fusion: Fusion::None,
            ..Variant::default()
        };
        agree(name, v, 1e-4);
        let both = Variant {
            fusion: Fusion::None,
            attention: Attention::Naive,
            ..Variant::default()
        };
        agree(name, both, 1e-4);
    }
}

#[test]
fn checkpointing_gives_the_plain_gradients() {
    for name in TINY {
        let v = Variant {
            checkpoint: true,
            ..Variant::default()
        };
        agree(name, v, 1e-5);
        let naive = Variant {
            checkpoint: true,
            attention: Attention::Naive,
            ..Variant::default()
        };
        agree(name, naive, 1e-4);
    }
}

fn bench(args: &[&str]) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r.json");
    Command::cargo_bin("memscope")
        .unwrap()
        .args(["bench", "-q", "--threads", "2", "--json"])
        .arg(&out)
        .args(args)
        .assert()
        .success();
    serde_json::from_str(&std::fs::read_to_string(out).unwrap()).unwrap()
}

fn measured(r: &Value, category: &str) -> u64 {
    r["memory"]["breakdown"][category]["measured_bytes"]
        .as_u64()
        .unwrap_or_else(|| panic!("no measured {category}"))
}

/// A tiny GPT-2 with a 1024-position context (the presets stop at 256).
fn long_config(dir: &std::path::Path) -> std::path::PathBuf {
    let p = dir.join("tiny-1k.json");
    std::fs::write(
        &p,
        r#"{"name": "tiny-1k", "family": "gpt2", "n_layers": 2, "d_model": 64, "n_heads": 4,
            "d_ff": 256, "vocab_size": 512, "max_seq_len": 1024}"#,
    )
    .unwrap();
    p
}

#[test]
fn saved_activations_grow_linearly_with_the_kernel_and_quadratically_with_naive_attention() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = long_config(dir.path());
    let cfg = cfg.to_str().unwrap();
    let acts = |attention: &str| -> Vec<(f64, f64)> {
        [256usize, 512, 1024]
            .iter()
            .map(|&t| {
                let r = bench(&[
                    "--config",
                    cfg,
                    "--batch",
                    "1",
                    "--seq",
                    &t.to_string(),
                    "--warmup",
                    "1",
                    "--steps",
                    "1",
                    "--attention",
                    attention,
                ]);
                (t as f64, measured(&r, "activations") as f64)
            })
            .collect()
    };
    // a + b·T + c·T² through the three points: c is the quadratic term, in bytes per T².
    let quad = |p: &[(f64, f64)]| -> f64 {
        let [(x0, y0), (x1, y1), (x2, y2)] = [p[0], p[1], p[2]];
        ((y2 - y1) / (x2 - x1) - (y1 - y0) / (x1 - x0)) / (x2 - x0)
    };
    let fused = acts("fused");
    let naive = acts("naive");
    // Naive keeps scores and probabilities (B, H, T, T) f32 per layer: 2 × 4 heads × 4 bytes ×
    // 2 layers = 64 bytes per T², at least (softmax's temporaries add more).
    let (cf, cn) = (quad(&fused), quad(&naive));
    assert!(
        cn >= 64.0,
        "naive: quadratic term {cn} bytes/T² ({naive:?})"
    );
    // The kernel's saved bytes are linear: its quadratic term is noise (< 1% of naive's).
    assert!(
        cf.abs() < cn / 100.0,
        "fused: quadratic term {cf} ({fused:?})"
    );
    let ratio = fused[2].1 / fused[1].1;
    assert!((1.9..=2.1).contains(&ratio), "fused: 512 → 1024 ×{ratio}");
}

#[test]
fn checkpointing_keeps_at_most_half_the_saved_activations() {
    let run = |extra: &[&str]| {
        let args = [
            &[
                "--model",
                "tiny-llama",
                "--batch",
                "4",
                "--seq",
                "256",
                "--warmup",
                "1",
            ][..],
            &["--steps", "1"],
            extra,
        ]
        .concat();
        bench(&args)
    };
    let plain = run(&[]);
    let ck = run(&["--checkpoint"]);
    let (p, c) = (
        measured(&plain, "activations"),
        measured(&ck, "activations"),
    );
    assert!(2 * c <= p, "checkpointed {c} vs plain {p}");
    // The same steps, the same losses: recomputation changes no number.
    assert_eq!(plain["loss"], ck["loss"]);
    // What it costs: the recomputed forward is counted in backward.
    let bwd = |r: &Value| r["timing"]["backward"]["median_ms"].as_f64().unwrap();
    assert!(bwd(&ck) > 0.0 && bwd(&plain) > 0.0);
}

#[test]
fn mixed_precision_keeps_f32_state_and_tracks_the_f32_loss() {
    let run = |extra: &[&str]| {
        let args = [
            &[
                "--model",
                "tiny-gpt2",
                "--batch",
                "4",
                "--seq",
                "64",
                "--warmup",
                "0",
            ][..],
            &["--steps", "20", "--lr", "3e-3"],
            extra,
        ]
        .concat();
        bench(&args)
    };
    let f32run = run(&[]);
    let mixed = run(&["--dtype", "bf16", "--precision", "mixed"]);
    let pure = run(&["--dtype", "bf16", "--precision", "pure"]);
    // Mixed is what bf16 training means unless asked otherwise (torch.autocast's default).
    let default = bench(&[
        "--model",
        "tiny-gpt2",
        "--batch",
        "4",
        "--seq",
        "64",
        "--warmup",
        "0",
        "--steps",
        "1",
        "--lr",
        "3e-3",
        "--dtype",
        "bf16",
    ]);
    assert_eq!(default["spec"]["variant"]["precision"], "mixed");
    assert_eq!(default["loss"][0], mixed["loss"][0]);
    let params = mixed["model"]["params"].as_u64().unwrap();
    // f32 master weights, gradients and AdamW moments: 4 bytes each per parameter.
    assert_eq!(mixed["memory"]["param_bytes"].as_u64().unwrap(), 4 * params);
    let opt = measured(&mixed, "optimizer_state");
    assert!(
        opt >= 2 * 4 * params && opt <= 2 * 4 * params + (64 << 10),
        "optimizer state {opt} for {params} parameters"
    );
    // Pure bf16 keeps its weights in bf16 (memscope's AdamW keeps f32 moments either way).
    assert_eq!(pure["memory"]["param_bytes"].as_u64().unwrap(), 2 * params);
    // The loss over 20 steps follows f32's: within 2% at every step (bf16 rounding of the
    // compute; the updates are f32), and it falls as f32's does.
    let l = |r: &Value| -> Vec<f64> {
        r["loss"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap())
            .collect()
    };
    let (a, b) = (l(&f32run), l(&mixed));
    assert_eq!(a.len(), 20);
    for (i, (x, y)) in a.iter().zip(&b).enumerate() {
        assert!((x - y).abs() <= 0.02 * x, "step {i}: f32 {x} vs mixed {y}");
    }
    assert!(b[19] < b[0] - 0.1, "mixed precision does not learn: {b:?}");
}

#[test]
fn variant_flags_are_checked_and_recorded() {
    let bad = |args: &[&str], needle: &str| {
        let a = Command::cargo_bin("memscope")
            .unwrap()
            .args(["bench", "--model", "tiny-gpt2", "--steps", "1"])
            .args(args)
            .assert()
            .code(2);
        let err = String::from_utf8(a.get_output().stderr.clone()).unwrap();
        assert!(err.contains(needle), "{args:?}: {err}");
    };
    bad(&["--mode", "infer", "--checkpoint"], "--checkpoint");
    bad(&["--precision", "mixed"], "--dtype bf16 or f16");
    bad(
        &["--mode", "infer", "--dtype", "bf16", "--precision", "mixed"],
        "--mode train",
    );
    bad(&["--attention", "sparse"], "--attention");
    let r = bench(&[
        "--model",
        "tiny-gpt2",
        "--steps",
        "1",
        "--warmup",
        "0",
        "--attention",
        "naive",
        "--fusion",
        "none",
    ]);
    assert_eq!(r["spec"]["variant"]["attention"], "naive");
    assert_eq!(r["spec"]["variant"]["fusion"], "none");
    // memscope's own path writes no variant: Records stay as they were.
    let d = bench(&["--model", "tiny-gpt2", "--steps", "1", "--warmup", "0"]);
    assert!(d["spec"].get("variant").is_none());
}

#[test]
fn optimize_ranks_every_variant_at_two_sequence_lengths() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("o.json");
    let a = Command::cargo_bin("memscope")
        .unwrap()
        .args([
            "optimize",
            "--model",
            "tiny-llama",
            "--batch",
            "2",
            "--seq",
            "32",
            "--warmup",
            "1",
            "--steps",
            "2",
            "--threads",
            "2",
            "-q",
            "--json",
        ])
        .arg(&json)
        .assert()
        .success();
    let text = String::from_utf8(a.get_output().stdout.clone()).unwrap();
    for needle in [
        "### seq 32",
        "### seq 128",
        "| baseline |",
        "checkpointing: −",
        "| Heap peak |",
    ] {
        assert!(text.contains(needle), "{needle}: {text}");
    }
    let j: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(j["seqs"], serde_json::json!([32, 128]));
    let v = j["variants"].as_array().unwrap();
    assert_eq!(v.len(), 12, "six variants at two lengths");
    for seq in [32, 128] {
        let rows: Vec<&Value> = v.iter().filter(|r| r["seq"] == seq).collect();
        let peaks: Vec<u64> = rows
            .iter()
            .map(|r| r["heap_peak_bytes"].as_u64().unwrap())
            .collect();
        assert!(
            peaks.windows(2).all(|w| w[0] <= w[1]),
            "ranked by peak: {peaks:?}"
        );
        let get = |n: &str| *rows.iter().find(|r| r["name"] == n).unwrap();
        assert!(get("baseline")["delta_peak_pct"].is_null());
        let all = get("all together");
        assert!(all["delta_peak_pct"].as_f64().unwrap() < -10.0, "{all}");
        assert!(
            all["delta_activations_pct"].as_f64().unwrap() < -50.0,
            "{all}"
        );
        // The estimator replays every path: its error is beside each measured peak.
        for r in &rows {
            let e = r["estimate_error_pct"].as_f64().unwrap();
            assert!(e.abs() < 15.0, "{r}");
        }
        assert!(get("checkpointing")["loss_last"].as_f64().unwrap() > 0.0);
    }
}

#[test]
fn optimize_with_a_budget_runs_every_variant_and_finds_its_largest_batch() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("o.json");
    Command::cargo_bin("memscope")
        .unwrap()
        .args([
            "optimize",
            "--model",
            "tiny-llama",
            "--batch",
            "2",
            "--seq",
            "32",
            "--long-seq",
            "0",
            "--memory-limit",
            "300MiB",
            "--max-batch",
            "64",
            "--warmup",
            "1",
            "--steps",
            "1",
            "--threads",
            "2",
            "-q",
            "--json",
        ])
        .arg(&json)
        .assert()
        .success();
    let j: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let v = j["variants"].as_array().unwrap();
    assert_eq!(v.len(), 6);
    for r in v {
        // Each variant ran under the budget, and its own fit search (a worker per trial, in
        // scratch directories of its own) found a largest batch of at least the one it ran.
        assert_eq!(r["status"], "ok", "{r}");
        assert!(r["max_batch"].as_u64().unwrap() >= 2, "{r}");
    }
    let mb = |n: &str| {
        v.iter().find(|r| r["name"] == n).unwrap()["max_batch"]
            .as_u64()
            .unwrap()
    };
    // Saving activations buys batch: checkpointing fits more than the baseline.
    assert!(mb("checkpointing") > mb("baseline"), "{v:?}");
}
