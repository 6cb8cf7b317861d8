//! The estimator against the measurement: parameters, gradients and optimizer state exact;
//! activations and the heap peak within 10% of what the counting allocator measures, for the
//! issue's four models. Each case runs the real binary (2 steps: the second has the optimizer
//! state, as every later step does).

use assert_cmd::Command;
use serde_json::Value;

fn bench(model: &str, batch: usize, seq: usize, extra: &[&str]) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r.json");
    Command::cargo_bin("memscope")
        .unwrap()
        .args([
            "bench",
            "--model",
            model,
            "--batch",
            &batch.to_string(),
            "--seq",
        ])
        .arg(seq.to_string())
        .args([
            "--warmup",
            "1",
            "--steps",
            "1",
            "--threads",
            "2",
            "-q",
            "--json",
        ])
        .arg(&out)
        .args(extra)
        .assert()
        .success();
    serde_json::from_str(&std::fs::read_to_string(out).unwrap()).unwrap()
}

fn within(label: &str, est: f64, measured: f64, tol: f64) {
    let d = (est - measured).abs() / measured;
    assert!(
        d <= tol,
        "{label}: estimated {est} vs measured {measured} ({:.1}% off)",
        d * 100.0
    );
}

fn check(model: &str, batch: usize, seq: usize) {
    check_variant(model, batch, seq, &[]);
}

/// [`check`] on an engine path (`--attention naive`, `--checkpoint`): the estimator replays
/// each one, with the same accuracy targets.
fn check_variant(model: &str, batch: usize, seq: usize, extra: &[&str]) {
    let r = bench(model, batch, seq, extra);
    let model = &format!("{model} {}", extra.join(" "));
    let m = &r["memory"];
    let b = &m["breakdown"];
    let param_bytes = m["param_bytes"].as_u64().unwrap();
    let est = |k: &str| b[k]["estimated_bytes"].as_u64().unwrap();
    let meas = |k: &str| b[k]["measured_bytes"].as_u64().unwrap() as f64;
    // Exact: the same bytes the parameters take (gradients), twice that (AdamW's moments).
    assert_eq!(est("parameters"), param_bytes, "{model}");
    assert_eq!(est("gradients"), param_bytes, "{model}");
    assert_eq!(est("optimizer_state"), 2 * param_bytes, "{model}");
    // The measured ones agree to within candle's small containers (shapes, Arcs).
    within(
        &format!("{model} gradients"),
        est("gradients") as f64,
        meas("gradients"),
        0.01,
    );
    within(
        &format!("{model} optimizer"),
        est("optimizer_state") as f64,
        meas("optimizer_state"),
        0.01,
    );
    within(
        &format!("{model} activations"),
        est("activations") as f64,
        meas("activations"),
        0.10,
    );
    let peak = m["heap_peak_bytes"].as_u64().unwrap() as f64;
    let est_peak = m["estimate"]["peak_bytes"].as_u64().unwrap() as f64;
    within(
        &format!("{model} b{batch} s{seq} heap peak"),
        est_peak,
        peak,
        0.10,
    );
}

#[test]
fn tiny_gpt2_estimate_matches_measurement() {
    check("tiny-gpt2", 8, 128);
    check("tiny-gpt2", 2, 64);
}

#[test]
fn tiny_llama_estimate_matches_measurement() {
    check("tiny-llama", 8, 128);
    check("tiny-llama", 4, 32);
}

#[test]
fn every_engine_path_estimate_matches_measurement() {
    let naive: &[&str] = &["--attention", "naive"];
    let ck: &[&str] = &["--checkpoint"];
    let ck_naive: &[&str] = &["--checkpoint", "--attention", "naive"];
    let op: &[&str] = &["--fusion", "none"];
    let op_naive: &[&str] = &["--fusion", "none", "--attention", "naive"];
    let mixed: &[&str] = &["--dtype", "bf16"]; // bf16 training is mixed precision by default
    let mixed_ck: &[&str] = &["--dtype", "bf16", "--checkpoint"];
    // Every family × path within the 10% targets. The misses (docs/optimize.md lists them, with
    // their errors) are half types on the op-by-op path (backward's temporaries under-estimated
    // by 10–15%) and tiny-bert's op-by-op loss backward (−10.2%).
    for (model, paths) in [
        (
            "tiny-gpt2",
            vec![naive, ck, ck_naive, op, op_naive, mixed, mixed_ck],
        ),
        (
            "tiny-llama",
            vec![naive, ck, ck_naive, op, op_naive, mixed, mixed_ck],
        ),
        ("tiny-bert", vec![naive, ck, ck_naive, mixed, mixed_ck]),
    ] {
        for extra in paths {
            check_variant(model, 4, 128, extra);
        }
    }
}

#[test]
fn gpt2_small_estimate_matches_measurement() {
    check("gpt2-small", 1, 32);
}

#[test]
fn cs336_small_estimate_matches_measurement() {
    check("cs336-small", 1, 32);
}

#[test]
fn estimate_command_prints_dtype_columns_and_writes_json() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("e.json");
    let a = Command::cargo_bin("memscope")
        .unwrap()
        .args([
            "estimate",
            "--model",
            "tiny-gpt2",
            "--dtype",
            "f32,bf16",
            "--json",
        ])
        .arg(&out)
        .assert()
        .success();
    let text = String::from_utf8(a.get_output().stdout.clone()).unwrap();
    assert!(text.contains("f32") && text.contains("bf16"), "{text}");
    assert!(text.contains("954,112 parameters"), "{text}");
    let v: Value = serde_json::from_str(&std::fs::read_to_string(out).unwrap()).unwrap();
    for k in [
        "parameters",
        "gradients",
        "optimizer_state",
        "activations",
        "kv_cache",
        "temporaries",
    ] {
        assert!(v["categories"][k].is_u64(), "categories.{k} missing");
    }
    assert_eq!(v["categories"]["parameters"], 954_112 * 4);
    // bf16 training is mixed precision unless asked otherwise: f32 master weights.
    assert_eq!(v["by_dtype"][1]["precision"], "mixed");
    assert_eq!(v["by_dtype"][1]["categories"]["parameters"], 954_112 * 4);
    assert!(v["peak_bytes"].as_u64().unwrap() > 954_112 * 16);
    assert!(v["flops"]["total"].as_u64().unwrap() > 0);
}

#[test]
fn estimate_fits_says_what_to_change_and_exits_1_when_it_does_not_fit() {
    let a = Command::cargo_bin("memscope")
        .unwrap()
        .args([
            "estimate",
            "--model",
            "gpt2-small",
            "--batch",
            "8",
            "--fits",
            "2.5GiB",
        ])
        .assert()
        .code(1);
    let text = String::from_utf8(a.get_output().stdout.clone()).unwrap();
    assert!(text.contains("does NOT fit"), "{text}");
    assert!(text.contains("--dtype bf16"), "{text}");
    let ok = Command::cargo_bin("memscope")
        .unwrap()
        .args(["estimate", "--model", "tiny-gpt2", "--fits", "16GiB"])
        .assert()
        .success();
    let text = String::from_utf8(ok.get_output().stdout.clone()).unwrap();
    assert!(text.contains("fits; headroom"), "{text}");
}

#[test]
fn estimate_rejects_bad_flags_naming_them() {
    for (args, needle) in [
        (vec!["--dtype", "f32,int8"], "--dtype"),
        (vec!["--fits", "lots"], "--fits"),
        (vec!["--batch", "0"], "--batch"),
    ] {
        let a = Command::cargo_bin("memscope")
            .unwrap()
            .args(["estimate", "--model", "tiny-gpt2"])
            .args(&args)
            .assert()
            .code(2);
        let err = String::from_utf8(a.get_output().stderr.clone()).unwrap();
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}

/// Inference and generation: the predicted heap peak within 10% of the measured one; the KV
/// cache estimated to within candle's containers.
fn check_inference(model: &str, extra: &[&str]) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r.json");
    Command::cargo_bin("memscope")
        .unwrap()
        .args(["bench", "--warmup", "1", "--steps", "1"])
        .args(if model.is_empty() {
            vec![] // `extra` names a --config
        } else {
            vec!["--model", model]
        })
        .args(["-q", "--json"])
        .arg(&out)
        .args(extra)
        .args(if extra.contains(&"--threads") {
            &[][..]
        } else {
            &["--threads", "2"][..]
        })
        .assert()
        .success();
    let r: Value = serde_json::from_str(&std::fs::read_to_string(out).unwrap()).unwrap();
    let m = &r["memory"];
    let peak = m["heap_peak_bytes"].as_u64().unwrap() as f64;
    let est_peak = m["estimate"]["peak_bytes"].as_u64().unwrap() as f64;
    within(
        &format!("{model} {extra:?} heap peak"),
        est_peak,
        peak,
        0.10,
    );
    r
}

/// A product whose weight gemm would read column-major with a long inner dimension copies it
/// through a tile buffer (`kernels::product`): 4 MiB here, at the LM head of a 1-layer GPT-2
/// with d 1024 (the tied (V, C) table read as Wᵀ), where the inference peak is. The estimate
/// must charge it (without it, it is 7% low).
#[test]
fn the_tile_a_product_copies_its_weight_through_is_estimated() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("wide.json");
    std::fs::write(
        &cfg,
        r#"{"family":"gpt2","vocab_size":8192,"max_seq_len":256,"n_layers":1,"n_heads":8,"d_model":1024,"d_ff":1024}"#,
    )
    .unwrap();
    let cfg = cfg.to_str().unwrap();
    let r = check_inference(
        "",
        &[
            "--config", cfg, "--mode", "infer", "--batch", "1", "--seq", "128",
        ],
    );
    let m = &r["memory"];
    within(
        "wide GPT-2 infer 1×128 heap peak",
        m["estimate"]["peak_bytes"].as_u64().unwrap() as f64,
        m["heap_peak_bytes"].as_u64().unwrap() as f64,
        0.025,
    );
}

#[test]
fn infer_and_generate_estimates_match_measurement() {
    check_inference(
        "tiny-gpt2",
        &["--mode", "infer", "--batch", "8", "--seq", "128"],
    );
    check_inference(
        "tiny-llama",
        &["--mode", "infer", "--batch", "16", "--seq", "256"],
    );
    check_inference(
        "tiny-llama",
        &["--mode", "infer", "--batch", "4", "--seq", "64"],
    );
    check_inference(
        "tiny-gpt2",
        &[
            "--mode",
            "infer",
            "--batch",
            "8",
            "--seq",
            "128",
            "--threads",
            "1",
        ],
    );
    for model in ["tiny-gpt2", "tiny-llama"] {
        let r = check_inference(
            model,
            &[
                "--mode",
                "generate",
                "--batch",
                "2",
                "--prompt-len",
                "32",
                "--new-tokens",
                "16",
            ],
        );
        check_inference(
            model,
            &[
                "--mode",
                "generate",
                "--batch",
                "8",
                "--prompt-len",
                "128",
                "--new-tokens",
                "8",
            ],
        );
        let kv = &r["memory"]["breakdown"]["kv_cache"];
        within(
            &format!("{model} kv cache"),
            kv["estimated_bytes"].as_u64().unwrap() as f64,
            kv["measured_bytes"].as_u64().unwrap() as f64,
            0.01,
        );
    }
}

fn est(args: &[&str]) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("e.json");
    Command::cargo_bin("memscope")
        .unwrap()
        .arg("estimate")
        .args(args)
        .arg("--json")
        .arg(&out)
        .assert()
        .success();
    serde_json::from_str(&std::fs::read_to_string(out).unwrap()).unwrap()
}

fn kind_bytes(e: &Value, kind: &str) -> u64 {
    e["activations"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["kind"] == kind)
        .map(|r| r["bytes"].as_u64().unwrap())
        .sum()
}

#[test]
fn checkpointing_and_attention_what_ifs_keep_exact_categories_and_change_activations() {
    for model in ["tiny-gpt2", "tiny-llama", "tiny-bert"] {
        let base = ["--model", model, "--batch", "8", "--seq", "128"];
        let fl = est(&base); // the engine's fused attention
        let ck = est(&[&base[..], &["--checkpoint"]].concat());
        let naive = est(&[&base[..], &["--attention", "naive"]].concat());
        // `flash`, the old name, still selects the fused kernel.
        assert_eq!(est(&[&base[..], &["--attention", "flash"]].concat()), fl);
        let c = |e: &Value, k: &str| e["categories"][k].as_u64().unwrap();
        for e in [&ck, &naive] {
            // Gradients and optimizer state do not depend on how activations are kept.
            for k in ["parameters", "gradients", "optimizer_state"] {
                assert_eq!(c(e, k), c(&fl, k), "{model} {k}");
            }
        }
        let peak = |e: &Value| e["peak_bytes"].as_u64().unwrap();
        assert!(peak(&ck) < peak(&fl) && peak(&fl) < peak(&naive), "{model}");
        // Checkpointing keeps each block's input, not its internals; backward recomputes.
        assert!(c(&ck, "activations") * 2 < c(&fl, "activations"), "{model}");
        assert!(ck["flops"]["backward"].as_u64() > fl["flops"]["backward"].as_u64());
        assert_eq!(ck["flops"]["forward"], fl["flops"]["forward"]);
        // The kernel keeps a (B, H, T) f32 log-sum-exp per layer instead of the probabilities.
        let lse = 8 * 4 * 128 * 4 * 4; // B·H·T·4 bytes × 4 layers
        assert_eq!(kind_bytes(&fl, "scores + probabilities"), lse, "{model}");
        assert!(kind_bytes(&naive, "scores + probabilities") > 16 * lse as u64);
    }
}

#[test]
fn fits_offers_checkpointing_and_fused_attention_as_labelled_changes() {
    let a = Command::cargo_bin("memscope")
        .unwrap()
        .args([
            "estimate",
            "--model",
            "gpt2-small",
            "--batch",
            "8",
            "--seq",
            "512",
            "--attention",
            "naive",
        ])
        .args(["--fits", "9GiB"])
        .assert()
        .code(1);
    let text = String::from_utf8(a.get_output().stdout.clone()).unwrap();
    assert!(text.contains("(--checkpoint)"), "{text}");
    assert!(text.contains("(--attention fused)"), "{text}");
    let bad = Command::cargo_bin("memscope")
        .unwrap()
        .args([
            "estimate",
            "--model",
            "tiny-gpt2",
            "--mode",
            "infer",
            "--checkpoint",
        ])
        .assert()
        .code(2);
    let err = String::from_utf8(bad.get_output().stderr.clone()).unwrap();
    assert!(err.contains("--checkpoint"), "{err}");
}

#[test]
fn a_half_precision_model_loads_without_an_f32_copy_of_itself() {
    // The seeded init draws each tensor in f32; drawing them all before casting any made a bf16
    // model's load peak its own size plus twice that in f32 (cs336-small: 508 MiB at load, its
    // forward 310 MiB). Now at most one f32 tensor per thread (2 threads) is alive beside it.
    let r = check_inference(
        "tiny-llama",
        &[
            "--mode", "infer", "--batch", "1", "--seq", "16", "--dtype", "bf16",
        ],
    );
    let m = &r["memory"];
    let at = |k: &str| m[k].as_u64().unwrap();
    let cfg = memscope::model::config::ModelConfig::preset("tiny-llama").unwrap();
    let largest_f32 = memscope::model::param_specs(&cfg)
        .iter()
        .map(|s| s.elem_count() as u64 * 4)
        .max()
        .unwrap();
    let over_start = at("load_peak_bytes") - at("start_bytes");
    assert!(
        over_start <= at("param_bytes") + 2 * largest_f32,
        "load peak {over_start} B above the start for {} B of bf16 parameters (largest f32 tensor {largest_f32} B)",
        at("param_bytes")
    );
}
