//! The `memscope` binary end to end, as a user runs it (tiny presets, real processes, real files).

mod support;
use serde_json::Value;
use std::path::Path;
use support::memscope;

fn read_json(p: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

fn usage_error(args: &[&str]) -> String {
    let out = memscope().args(args).output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(2),
        "expected a usage error for {args:?}"
    );
    String::from_utf8(out.stderr).unwrap()
}

#[test]
fn models_lists_every_preset_with_exact_counts() {
    let out = memscope().args(["models", "--json"]).output().unwrap();
    assert!(out.status.success());
    let rows: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(rows.len(), 15);
    let find = |n: &str| rows.iter().find(|r| r["name"] == n).unwrap().clone();
    assert_eq!(find("gpt2-small")["params"], 124_439_808u64);
    assert_eq!(find("gpt2-small")["f32_bytes"], 4 * 124_439_808u64);
    assert_eq!(find("cs336-medium")["params"], 423_183_360u64);
    assert_eq!(find("tinyllama-1.1b")["n_kv_heads"], 4);
    // The whole config, as a Spec carries it to the torch engine.
    assert_eq!(find("gpt2-small")["config"]["tie_embeddings"], true);
    assert_eq!(find("cs336-small")["config"]["family"], "llama");
    let table = memscope().arg("models").output().unwrap();
    let text = String::from_utf8(table.stdout).unwrap();
    assert!(text.contains("124,439,808") && text.contains("tiny-bert"));
}

#[test]
fn bench_train_writes_a_complete_record_csv_and_markdown() {
    let dir = tempfile::tempdir().unwrap();
    let (j, c, m) = (
        dir.path().join("r.json"),
        dir.path().join("r.csv"),
        dir.path().join("r.md"),
    );
    let out = memscope()
        .args([
            "bench",
            "--model",
            "tiny-gpt2",
            "--batch",
            "2",
            "--seq",
            "32",
            "--warmup",
            "1",
            "--steps",
            "3",
        ])
        .args([
            "--threads",
            "1",
            "--json",
            j.to_str().unwrap(),
            "--csv",
            c.to_str().unwrap(),
        ])
        .args(["--markdown", m.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    for needle in [
        "heap peak",
        "RSS peak",
        "optimizer state",
        "median",
        "tokens/s",
    ] {
        assert!(
            text.contains(needle),
            "terminal summary lacks {needle:?}:\n{text}"
        );
    }
    let csv_text = std::fs::read_to_string(&c).unwrap();
    let mut csv_lines = csv_text.lines();
    let (head, row) = (csv_lines.next().unwrap(), csv_lines.next().unwrap());
    assert!(
        head.ends_with(",engine,device,plan,world,heap_measures"),
        "{head}"
    );
    assert!(
        row.ends_with(",candle,cpu,,1,heap (counting allocator)"),
        "{row}"
    );
    let r = read_json(&j);
    assert_eq!(r["schema_version"], 1);
    for k in [
        "model", "mode", "batch", "seq", "dtype", "threads", "warmup", "steps",
    ] {
        assert!(!r["spec"][k].is_null(), "spec.{k}");
    }
    assert_eq!(r["spec"]["mode"], "train");
    assert_eq!(r["spec"]["threads"], 1);
    let params = r["model"]["params"].as_u64().unwrap();
    assert_eq!(params, 954_112);
    assert_eq!(r["model"]["param_bytes"].as_u64().unwrap(), params * 4);
    assert_eq!(r["model"]["family"], "gpt2");
    for phase in ["forward", "backward", "optimizer", "step"] {
        let t = &r["timing"][phase];
        assert_eq!(t["samples_ms"].as_array().unwrap().len(), 3, "{phase}");
        for k in [
            "mean_ms",
            "std_ms",
            "cv_pct",
            "median_ms",
            "min_ms",
            "max_ms",
            "p90_ms",
            "p99_ms",
        ] {
            assert!(t[k].as_f64().is_some(), "timing.{phase}.{k}");
        }
    }
    let mem = &r["memory"];
    assert_eq!(mem["counting"], true);
    let pb = params * 4;
    assert!(mem["load_bytes"].as_u64().unwrap() >= pb);
    assert!(mem["load_seconds"].as_f64().unwrap() > 0.0);
    assert!(mem["rss_peak_bytes"].as_u64().unwrap() > mem["heap_peak_bytes"].as_u64().unwrap() / 2);
    // Gradients and AdamW's two moments, measured by phase attribution: exact up to containers.
    let grads = mem["phases"]["backward"]["retained_bytes"]
        .as_i64()
        .unwrap() as u64;
    let state = mem["phases"]["optimizer"]["retained_bytes"]
        .as_i64()
        .unwrap() as u64;
    assert!(
        grads >= pb && grads < pb + 64 * 1024,
        "gradients {grads} vs params {pb}"
    );
    assert!(
        state >= 2 * pb && state < 2 * pb + 64 * 1024,
        "optimizer state {state} vs 2 × {pb}"
    );
    // The state is made once. Allowance: rayon's job queue allocates a 1520-byte block every 63
    // jobs pushed from outside its pool, charged to whichever phase pushes that job.
    let later = mem["phases"]["optimizer"]["retained_bytes_last"]
        .as_i64()
        .unwrap();
    assert!(
        (0..=1520).contains(&later),
        "optimizer retained {later} in its last run"
    );
    assert!(mem["phases"]["forward"]["peak_bytes"].as_u64().unwrap() > pb);
    let series = mem["series"].as_array().unwrap();
    assert_eq!(series.len(), 4);
    assert_eq!(series[0]["warmup"], true);
    for s in series {
        for k in ["step", "heap_live_bytes", "live_allocations", "rss_bytes"] {
            assert!(s[k].as_u64().is_some(), "series.{k}");
        }
    }
    for k in [
        "cpu_model",
        "isa",
        "cores",
        "threads",
        "os",
        "memscope_version",
        "git_commit",
        "candle_version",
    ] {
        assert!(!r["environment"][k].is_null(), "environment.{k}");
    }
    assert_eq!(r["environment"]["candle_version"], "0.11.1");
    let isa = r["environment"]["isa"].as_str().unwrap();
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap();
    assert_eq!(
        isa.starts_with("avx512"),
        cpuinfo.contains(" avx512f"),
        "environment.isa {isa:?} against /proc/cpuinfo"
    );
    assert!(
        ["avx512", "avx2", "sse2"]
            .iter()
            .any(|p| isa.starts_with(p)),
        "environment.isa {isa:?}"
    );
    let losses = r["loss"].as_array().unwrap();
    assert!(losses.last().unwrap().as_f64() < losses.first().unwrap().as_f64());

    let csv = std::fs::read_to_string(&c).unwrap();
    let mut lines = csv.lines();
    let header = lines.next().unwrap();
    assert!(header.contains("step_median_ms") && header.contains("heap_peak_bytes"));
    assert_eq!(lines.count(), 1);
    let md = std::fs::read_to_string(&m).unwrap();
    assert!(md.contains("| phase |") && md.contains("| forward |"));
}

#[test]
fn bench_infer_and_generate_report_their_own_phases() {
    let dir = tempfile::tempdir().unwrap();
    let j = dir.path().join("i.json");
    memscope()
        .args([
            "bench",
            "--model",
            "tiny-llama",
            "--mode",
            "infer",
            "--dtype",
            "bf16",
            "--seq",
            "16",
        ])
        .args([
            "--warmup",
            "0",
            "--steps",
            "2",
            "--json",
            j.to_str().unwrap(),
        ])
        .assert()
        .success();
    let r = read_json(&j);
    assert_eq!(
        r["timing"].as_object().unwrap().keys().collect::<Vec<_>>(),
        vec!["forward"]
    );
    assert_eq!(r["model"]["param_bytes"].as_u64().unwrap(), 994_432 * 2);
    assert!(r["memory"]["phases"]["backward"].is_null());

    let g = dir.path().join("g.json");
    memscope()
        .args([
            "bench",
            "--model",
            "tiny-llama",
            "--mode",
            "generate",
            "--batch",
            "2",
            "--prompt-len",
            "8",
        ])
        .args([
            "--new-tokens",
            "4",
            "--warmup",
            "1",
            "--steps",
            "2",
            "--json",
            g.to_str().unwrap(),
        ])
        .assert()
        .success();
    let r = read_json(&g);
    assert_eq!(
        r["timing"]["prefill"]["samples_ms"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
    assert_eq!(
        r["timing"]["decode"]["samples_ms"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
    // 2 (K, V) × 4 layers × batch 2 × 2 kv heads × 12 positions × head dim 32 × 4 bytes
    assert_eq!(r["memory"]["kv_cache_bytes"], 2 * 4 * 2 * 2 * 12 * 32 * 4);
    assert!(r["throughput"]["decode_tokens_per_s"].as_f64().unwrap() > 0.0);
}

#[test]
fn grad_accum_records_every_micro_step() {
    let dir = tempfile::tempdir().unwrap();
    let j = dir.path().join("a.json");
    memscope()
        .args([
            "bench",
            "--model",
            "tiny-bert",
            "--seq",
            "16",
            "--grad-accum",
            "2",
            "--warmup",
            "1",
            "--steps",
            "2",
        ])
        .args(["--json", j.to_str().unwrap()])
        .assert()
        .success();
    let r = read_json(&j);
    let micro = r["memory"]["micro_steps"].as_array().unwrap();
    assert_eq!(micro.len(), 3 * 2);
    assert!(micro
        .iter()
        .all(|m| m["heap_peak_bytes"].as_u64().unwrap() >= m["heap_live_bytes"].as_u64().unwrap()));
}

#[test]
fn counting_can_be_switched_off_for_overhead_measurements() {
    let dir = tempfile::tempdir().unwrap();
    let j = dir.path().join("n.json");
    memscope()
        .env("MEMSCOPE_NO_COUNT", "1")
        .args([
            "bench",
            "--model",
            "tiny-gpt2",
            "--mode",
            "infer",
            "--seq",
            "8",
            "--steps",
            "1",
            "--warmup",
            "0",
        ])
        .args(["--json", j.to_str().unwrap()])
        .assert()
        .success();
    let r = read_json(&j);
    assert_eq!(r["memory"]["counting"], false);
    // Only what was allocated before main() switched counting off.
    assert!(r["memory"]["heap_peak_bytes"].as_u64().unwrap() < 4096);
}

#[test]
fn bad_flags_name_the_flag_that_fixes_them() {
    let e = usage_error(&["bench", "--model", "gpt5"]);
    assert!(e.contains("--model gpt5") && e.contains("tiny-gpt2"), "{e}");
    let e = usage_error(&["bench", "--model", "tiny-gpt2", "--seq", "5000"]);
    assert!(e.contains("--seq 5000") && e.contains("256"), "{e}");
    let e = usage_error(&["bench", "--model", "tiny-bert", "--mode", "generate"]);
    assert!(e.contains("encoder"), "{e}");
    let e = usage_error(&["bench", "--model", "tiny-gpt2", "--batch", "0"]);
    assert!(e.contains("--batch"), "{e}");
    let e = usage_error(&[
        "bench",
        "--model",
        "tiny-gpt2",
        "--mode",
        "infer",
        "--grad-accum",
        "2",
    ]);
    assert!(e.contains("--grad-accum"), "{e}");
    let e = usage_error(&[
        "bench",
        "--model",
        "tiny-gpt2",
        "--json",
        "/no/such/dir/r.json",
    ]);
    assert!(e.contains("--json") && e.contains("does not exist"), "{e}");
}

#[test]
fn bad_configs_are_errors_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        (
            r#"{"family":"gpt2","vocab_size":100,"max_seq_len":64,"n_layers":2,"n_heads":0,"d_model":64}"#,
            "n_heads",
        ),
        (
            r#"{"family":"gpt2","vocab_size":100,"max_seq_len":64,"n_layers":2,"n_heads":3,"d_model":64}"#,
            "n_heads",
        ),
        (
            r#"{"family":"llama","vocab_size":100,"max_seq_len":64,"n_layers":2,"n_heads":4,"n_kv_heads":3,"d_model":64,"d_ff":128}"#,
            "n_kv_heads",
        ),
        (
            r#"{"family":"llama","vocab_size":100,"max_seq_len":64,"n_layers":2,"n_heads":4,"d_model":64,"d_ff":128,"rope_theta":NaN}"#,
            "rope_theta",
        ),
        (r#"{"family":"gpt3","vocab_size":100}"#, "family"),
        (
            r#"{"family":"gpt2","vocab_size":18446744073709551615,"max_seq_len":64,"n_layers":2,"n_heads":4,"d_model":64}"#,
            "overflow",
        ),
    ];
    for (i, (text, field)) in cases.iter().enumerate() {
        let p = dir.path().join(format!("c{i}.json"));
        std::fs::write(&p, text).unwrap();
        let e = usage_error(&["bench", "--config", p.to_str().unwrap(), "--steps", "1"]);
        assert!(
            e.contains(field) && e.contains(&format!("c{i}.json")),
            "case {i}: {e}"
        );
        assert!(!e.contains("panicked"), "{e}");
    }
    let deep = format!(
        r#"{{"family":"gpt2","x":{}{}}}"#,
        "[".repeat(200),
        "]".repeat(200)
    );
    let p = dir.path().join("deep.json");
    std::fs::write(&p, deep).unwrap();
    let e = usage_error(&["bench", "--config", p.to_str().unwrap()]);
    assert!(e.contains("levels"), "{e}");
}

#[test]
fn a_custom_config_runs_and_hf_config_names_are_understood() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("config.json");
    std::fs::write(
        &p,
        r#"{"model_type":"llama","hidden_size":64,"num_hidden_layers":2,"num_attention_heads":4,
            "num_key_value_heads":2,"intermediate_size":128,"vocab_size":300,"max_position_embeddings":64,
            "rms_norm_eps":1e-5,"tie_word_embeddings":false}"#,
    )
    .unwrap();
    let j = dir.path().join("r.json");
    memscope()
        .args([
            "bench",
            "--config",
            p.to_str().unwrap(),
            "--seq",
            "16",
            "--steps",
            "1",
            "--warmup",
            "0",
        ])
        .args(["--json", j.to_str().unwrap()])
        .assert()
        .success();
    let r = read_json(&j);
    // embed 300×64 + 2 × (64 + 64·64 + 2·64·32 + 64·64 + 64 + 3·64·128) + 64 + head 300×64
    let expect = 300 * 64 + 2 * (64 + 4096 + 2 * 2048 + 4096 + 64 + 3 * 8192) + 64 + 300 * 64;
    assert_eq!(r["model"]["params"], expect);
    assert_eq!(r["model"]["family"], "llama");
}

#[test]
fn malformed_weights_are_rejected_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let cases: [(&str, Vec<u8>, &str); 3] = [
        ("short.safetensors", vec![1, 2, 3], "header too small"),
        (
            "huge.safetensors",
            u64::MAX.to_le_bytes().to_vec(),
            "header too large",
        ),
        (
            "long.safetensors",
            [64u64.to_le_bytes().to_vec(), b"{}".to_vec()].concat(),
            "invalid header length",
        ),
    ];
    for (name, bytes, needle) in cases {
        let p = dir.path().join(name);
        std::fs::write(&p, bytes).unwrap();
        let e = usage_error(&[
            "bench",
            "--model",
            "tiny-gpt2",
            "--weights",
            p.to_str().unwrap(),
            "--steps",
            "1",
        ]);
        assert!(e.contains(needle) && e.contains(name), "{name}: {e}");
    }
}

/// `memscope peaks` measures, caches by machine fingerprint and thread count, and reuses the
/// cache; `bench` then reports its step's rate as a fraction of the cached matmul peak.
#[test]
fn peaks_measure_cache_and_feed_bench_compute_line() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("peaks.json");
    let run = |extra: &[&str]| {
        let out = memscope()
            .env("MEMSCOPE_CACHE_DIR", dir.path())
            .args(["peaks", "--threads", "1", "--model", "tiny-gpt2", "--json"])
            .arg(&json)
            .args(extra)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let first = run(&[]);
    assert!(first.contains("measured now, cached in"), "{first}");
    let p = read_json(&json);
    for dt in ["f32", "bf16", "f16"] {
        assert!(p["matmul_gflops"][dt].as_f64().unwrap() > 0.0, "{dt}: {p}");
    }
    let bw = p["bandwidth_gbs"].as_f64().unwrap();
    assert!(bw > 0.1 && bw < 10_000.0, "{bw}");
    assert_eq!(p["model_shapes"].as_array().unwrap().len(), 5);
    let second = run(&[]);
    assert!(second.contains("cached in"), "{second}");
    assert!(!second.contains("measured now"), "{second}");
    assert_eq!(read_json(&json)["measured_at"], p["measured_at"]);

    let rec = dir.path().join("r.json");
    let out = memscope()
        .env("MEMSCOPE_CACHE_DIR", dir.path())
        .args([
            "bench",
            "--model",
            "tiny-gpt2",
            "--batch",
            "2",
            "--seq",
            "32",
        ])
        .args(["--warmup", "1", "--steps", "2", "--threads", "1", "--json"])
        .arg(&rec)
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("of this machine's f32 matmul peak"), "{text}");
    let c = &read_json(&rec)["compute"];
    assert!(c["matmul_flops_per_step"].as_u64().unwrap() > 0);
    let f = c["fraction_of_peak"].as_f64().unwrap();
    assert!(f > 0.0 && f < 2.0, "{c}");
}
