//! `memscope roofline` and `memscope profile`: the FLOP model against the 6·N·tokens rule, and
//! both commands through the binary on a tiny model (roofs given with --roofs, so no peaks cache
//! is needed).

mod support;
use assert_cmd::Command;
use memscope::analysis::op_cost::{self, Arch};
use memscope::model::config::{Family, ModelConfig};
use memscope::model::cost::param_count;
use support::memscope;

fn arch(cfg: &ModelConfig) -> Arch {
    Arch {
        llama: cfg.family == Family::Llama,
        n_layers: cfg.n_layers,
        d_model: cfg.d_model,
        n_heads: cfg.n_heads,
        n_kv_heads: cfg.n_kv_heads,
        d_ff: cfg.d_ff,
        vocab: cfg.vocab_size,
        elem_bytes: 4.0,
        params: param_count(cfg).unwrap(),
    }
}

/// Convention: N = the parameters that take part in a matmul = every parameter except the
/// embedding tables used as lookups (token, position), plus the LM head weight once (GPT-2's is
/// the tied token table). Attention term: 12·L·C per causal query–key pair (4 forward, 8
/// backward), pairs = B·T(T+1)/2.
fn six_n_plus_attention(cfg: &ModelConfig, b: usize, t: usize) -> f64 {
    let (v, c) = (cfg.vocab_size as f64, cfg.d_model as f64);
    let total = param_count(cfg).unwrap() as f64;
    let n = match cfg.family {
        Family::Gpt2 => total - v * c - cfg.max_seq_len as f64 * c + v * c,
        _ => total - v * c, // untied: the head is already a non-embedding matrix
    };
    let tokens = (b * t) as f64;
    let pairs = b as f64 * (t * (t + 1) / 2) as f64;
    6.0 * n * tokens + 12.0 * cfg.n_layers as f64 * c * pairs
}

#[test]
fn train_step_flops_match_six_n_tokens_plus_attention_within_2_percent() {
    for name in ["gpt2-small", "cs336-small"] {
        let cfg = ModelConfig::preset(name).unwrap();
        let a = arch(&cfg);
        let mut ops = op_cost::forward_ops(&a, 2, 128, 0, true, false);
        ops.push(op_cost::optimizer(&a));
        let ours: f64 = ops.iter().map(|o| o.flops).sum();
        let rule = six_n_plus_attention(&cfg, 2, 128);
        let rel = (ours - rule).abs() / rule;
        assert!(
            rel < 0.02,
            "{name}: ours {ours:.4e} vs rule {rule:.4e} ({:.2}%)",
            100.0 * rel
        );
    }
}

#[test]
fn matmul_backward_is_twice_forward_in_a_whole_model() {
    let cfg = ModelConfig::preset("tiny-llama").unwrap();
    let ops = op_cost::forward_ops(&arch(&cfg), 2, 16, 0, true, false);
    let sum = |pass: &str| -> f64 {
        ops.iter()
            .filter(|o| o.kind == "linear" && o.pass == pass)
            .map(|o| o.flops)
            .sum()
    };
    assert_eq!(sum("backward"), 2.0 * sum("forward"));
}

const TINY: &[&str] = &[
    "--steps", "2", "--warmup", "1", "--batch", "2", "--seq", "16", "--roofs", "100:10",
];

#[test]
fn roofline_json_has_the_step_and_every_op_with_its_class() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("r.json");
    let csv = dir.path().join("r.csv");
    memscope()
        .args(["roofline", "--model", "tiny-gpt2"])
        .args(TINY)
        .arg("--json")
        .arg(&json)
        .arg("--csv")
        .arg(&csv)
        .assert()
        .success();
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    for k in ["flops", "bytes", "achieved_gflops", "mfu_pct"] {
        assert!(v["step"][k].as_f64().unwrap() > 0.0, "step.{k}");
    }
    let ops = v["ops"].as_array().unwrap();
    let names: Vec<&str> = ops.iter().map(|o| o["name"].as_str().unwrap()).collect();
    for n in [
        "attention projections",
        "MLP projections",
        "attention",
        "norms",
        "activation",
        "LM head",
        "loss",
        "optimizer update",
        "residual adds",
        "embedding",
    ] {
        assert!(names.contains(&n), "{n} missing from {names:?}");
    }
    // The optimizer's update runs in its own step, not in the model's forward.
    let update = ops
        .iter()
        .find(|o| o["name"] == "optimizer update")
        .unwrap();
    assert_eq!(update["pass"], "optimizer step", "{update}");
    for o in ops {
        for k in [
            "flops",
            "bytes",
            "intensity",
            "time_ms",
            "achieved_gflops",
            "achieved_gbs",
        ] {
            assert!(o[k].is_number(), "{k}");
        }
        let b = o["bound"].as_str().unwrap();
        assert!(["compute-bound", "memory-bound", "overhead-bound"].contains(&b));
        assert!(["forward", "backward", "optimizer step"].contains(&o["pass"].as_str().unwrap()));
    }
    // Per-op times sum to no more than the step: the rest is the stated unattributed remainder.
    let step = &v["sections"][0]["step"];
    let (t, a) = (
        step["time_ms"].as_f64().unwrap(),
        step["attributed_ms"].as_f64().unwrap(),
    );
    let sum: f64 = ops.iter().map(|o| o["time_ms"].as_f64().unwrap()).sum();
    assert!((sum - a).abs() < 1e-6 * a.max(1.0));
    assert!(
        a > 0.0 && a <= t * 1.001,
        "attributed {a} ms of a {t} ms step"
    );
    assert!(std::fs::read_to_string(&csv).unwrap().lines().count() == ops.len() + 1);
}

#[test]
fn roofline_svg_has_both_roofs_and_a_point_per_drawable_op() {
    let dir = tempfile::tempdir().unwrap();
    let (json, svg) = (dir.path().join("r.json"), dir.path().join("r.svg"));
    memscope()
        .args(["roofline", "--model", "tiny-llama"])
        .args(TINY)
        .arg("--json")
        .arg(&json)
        .arg("--svg")
        .arg(&svg)
        .assert()
        .success();
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let s = std::fs::read_to_string(&svg).unwrap();
    assert!(s.trim_start().starts_with("<svg") && s.trim_end().ends_with("</svg>"));
    let drawable: Vec<&serde_json::Value> = v["ops"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| {
            o["intensity"].as_f64().unwrap() > 0.0 && o["achieved_gflops"].as_f64().unwrap() > 0.0
        })
        .collect();
    assert!(drawable.len() >= 8, "{} drawable ops", drawable.len());
    // Forward and optimizer-step points are circles, backward triangles (polygons); plus one of
    // each series in the legend.
    let fwd = drawable.iter().filter(|o| o["pass"] == "forward").count();
    let opt = drawable
        .iter()
        .filter(|o| o["pass"] == "optimizer step")
        .count();
    assert_eq!(opt, 1, "the optimizer's update, a series of its own");
    let bwd = drawable.len() - fwd - opt;
    assert_eq!(
        s.matches("<circle").count(),
        fwd + opt + 2,
        "forward and optimizer points"
    );
    assert_eq!(s.matches("<polygon").count(), bwd + 1, "backward points");
    for o in &drawable {
        let name = o["name"].as_str().unwrap();
        assert!(s.contains(name), "label {name}");
    }
    assert!(
        s.contains("roof: min(100.0 GFLOP/s, 10.0 GB/s"),
        "the roofs' legend"
    );
    assert!(s.contains("ridge 10.00 FLOP/B"), "the ridge");
}

#[test]
fn roofline_svg_path_is_checked_before_measuring() {
    let e = failure_stderr(
        memscope()
            .args([
                "roofline",
                "--model",
                "tiny-gpt2",
                "--roofs",
                "1:1",
                "--svg",
            ])
            .arg("/nonexistent-dir/r.svg"),
    );
    assert!(e.contains("--svg") && e.contains("/nonexistent-dir"), "{e}");
}

#[test]
fn roofline_generate_reports_prefill_and_decode_with_copy_bandwidth() {
    let out = memscope()
        .args([
            "roofline",
            "--model",
            "tiny-llama",
            "--mode",
            "generate",
            "--new-tokens",
            "4",
        ])
        .args(TINY)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s = String::from_utf8(out.stdout).unwrap();
    assert!(s.contains("prefill:") && s.contains("decode step:"), "{s}");
    assert!(s.contains("of the measured copy bandwidth"), "{s}");
    assert!(s.contains("kv cache append"), "{s}");
}

#[test]
fn profile_tree_sums_to_the_step_within_the_remainder() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("p.json");
    let out = memscope()
        .args(["profile", "--model", "tiny-llama", "--depth", "4"])
        .args(TINY)
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("profiling overhead"));
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let t = &v[0];
    let nodes = t["nodes"].as_array().unwrap();
    let ms = |n: &serde_json::Value| n["fwd_ms"].as_f64().unwrap() + n["bwd_ms"].as_f64().unwrap();
    let model = nodes.iter().find(|n| n["depth"] == 1).unwrap();
    let leaves: f64 = nodes.iter().filter(|n| n["depth"] == 4).map(ms).sum();
    assert!((ms(model) - leaves).abs() < 1e-6 * leaves.max(1.0));
    let step = t["time_ms"][0].as_f64().unwrap();
    assert!(ms(model) > 0.0 && ms(model) <= step * 1.001);
    // Every parameter sits in exactly one module.
    let params = model["params"].as_u64().unwrap();
    let cfg = ModelConfig::preset("tiny-llama").unwrap();
    assert_eq!(params, param_count(&cfg).unwrap());
    assert!(nodes.iter().any(|n| n["name"] == "layer 0"));
}

fn failure_stderr(c: &mut Command) -> String {
    let out = c.output().unwrap();
    assert!(!out.status.success());
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn roofline_without_peaks_names_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let e = failure_stderr(memscope().env("MEMSCOPE_CACHE_DIR", dir.path()).args([
        "roofline",
        "--model",
        "tiny-gpt2",
        "--steps",
        "1",
    ]));
    assert!(e.contains("memscope peaks") && e.contains("--roofs"), "{e}");
    // With the bf16 dot products turned off the peaks measured with them on do not apply:
    // the fix names the variable (on CPUs without the instruction there is one path only).
    let e = failure_stderr(
        memscope()
            .env("MEMSCOPE_CACHE_DIR", dir.path())
            .env("MEMSCOPE_BF16_DOT", "0")
            .args(["roofline", "--model", "tiny-gpt2", "--steps", "1"]),
    );
    let has_dot = std::fs::read_to_string("/proc/cpuinfo")
        .unwrap()
        .lines()
        .any(|l| l.starts_with("flags") && l.contains(" avx512_bf16") && l.contains(" avx512f"));
    assert_eq!(
        e.contains("`MEMSCOPE_BF16_DOT=0 memscope peaks --threads"),
        has_dot,
        "{e}"
    );
    let e = failure_stderr(memscope().args(["roofline", "--model", "tiny-bert", "--roofs", "1:1"]));
    assert!(e.contains("--model tiny-bert"), "{e}");
}
