//! Every phase run's end in the Record (`memory.series[].phases`), through the real binary: a
//! train step marks forward, backward and optimizer in order (each forward/backward pair with
//! --grad-accum), with activations alive at the end of forward, gradients at the end of backward
//! and optimizer state after the optimizer; infer and generate mark their own phases; the HTML
//! report draws the stacked chart from them, and a Record written before they existed still
//! renders with the older timeline.

mod support;
use assert_cmd::Command;
use serde_json::Value;
use support::fixture;

/// Runs `bench` with `args` → its Record.
fn bench(args: &[&str]) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let j = dir.path().join("r.json");
    let out = Command::cargo_bin("memscope")
        .unwrap()
        .args(["bench", "--model", "tiny-gpt2", "-q", "--threads", "1"])
        .args(args)
        .arg("--json")
        .arg(&j)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(&std::fs::read_to_string(&j).unwrap()).unwrap()
}

fn phases(step: &Value) -> Vec<&str> {
    step["phases"]
        .as_array()
        .unwrap_or_else(|| panic!("no phases in {step}"))
        .iter()
        .map(|m| m["phase"].as_str().unwrap())
        .collect()
}

fn live(mark: &Value, category: &str) -> u64 {
    mark["heap_live_by_category"][category]
        .as_u64()
        .unwrap_or(0)
}

#[test]
fn a_train_record_marks_forward_backward_optimizer_every_step() {
    let r = bench(&["--mode", "train", "--steps", "3", "--warmup", "1"]);
    let param_bytes = r["model"]["param_bytes"].as_u64().unwrap();
    let series = r["memory"]["series"].as_array().unwrap();
    assert_eq!(series.len(), 4);
    for (i, s) in series.iter().enumerate() {
        assert_eq!(phases(s), ["forward", "backward", "optimizer"], "step {i}");
        let m = s["phases"].as_array().unwrap();
        let (fwd, bwd, opt) = (&m[0], &m[1], &m[2]);
        for mark in m {
            // The parameters stay alive throughout; a run's peak holds at least what is alive
            // at its end.
            assert!(live(mark, "parameters") >= param_bytes, "{mark}");
            let sum: u64 = mark["heap_live_by_category"]
                .as_object()
                .unwrap()
                .values()
                .map(|v| v.as_u64().unwrap())
                .sum();
            assert!(mark["heap_peak_bytes"].as_u64().unwrap() >= sum, "{mark}");
        }
        assert!(live(fwd, "activations") > 0, "step {i}: {fwd}");
        assert!(live(bwd, "gradients") > 0, "step {i}: {bwd}");
        // Backward frees the saved activations segment by segment.
        assert!(
            live(bwd, "activations") < live(fwd, "activations"),
            "step {i}: {fwd} {bwd}"
        );
        // AdamW's two moments, made by the first optimizer run and kept.
        assert!(live(opt, "optimizer_state") >= 2 * param_bytes, "{opt}");
        if i > 0 {
            assert!(live(fwd, "optimizer_state") >= 2 * param_bytes, "{fwd}");
        } else {
            assert_eq!(live(fwd, "optimizer_state"), 0, "{fwd}");
        }
    }
}

#[test]
fn mixed_precision_marks_its_weight_copy_not_a_kv_cache() {
    let r = bench(&["--steps", "1", "--warmup", "0", "--dtype", "bf16"]);
    let m = &r["memory"]["series"][0]["phases"][0]; // the end of forward
    let params = r["model"]["params"].as_u64().unwrap();
    // The bf16 copy of every weight (2 bytes each) lives through the step; the masters are f32.
    assert!(live(m, "weights_copy") >= 2 * params, "{m}");
    assert_eq!(live(m, "kv_cache"), 0, "{m}");
    assert!(live(m, "parameters") >= 4 * params, "{m}");
}

#[test]
fn grad_accum_marks_every_micro_batch() {
    let r = bench(&["--steps", "1", "--warmup", "0", "--grad-accum", "2"]);
    let s = &r["memory"]["series"][0];
    assert_eq!(
        phases(s),
        ["forward", "backward", "forward", "backward", "optimizer"]
    );
    let m = s["phases"].as_array().unwrap();
    assert!(live(&m[1], "gradients") > 0 && live(&m[3], "gradients") > 0);
}

#[test]
fn infer_and_generate_mark_their_own_phases() {
    let r = bench(&["--mode", "infer", "--steps", "2", "--warmup", "0"]);
    for s in r["memory"]["series"].as_array().unwrap() {
        assert_eq!(phases(s), ["forward"]);
    }
    let r = bench(&[
        "--mode",
        "generate",
        "--steps",
        "1",
        "--warmup",
        "0",
        "--prompt-len",
        "16",
        "--new-tokens",
        "4",
    ]);
    let s = &r["memory"]["series"][0];
    assert_eq!(phases(s), ["prefill", "decode"]);
    let kv = r["memory"]["kv_cache_bytes"].as_u64().unwrap();
    for m in s["phases"].as_array().unwrap() {
        // The preallocated cache (exact) and its containers.
        let k = live(m, "kv_cache");
        assert!(k >= kv && k < kv + kv / 10, "{m}");
    }
}

fn report(files: &[&str]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("r.html");
    let out = Command::cargo_bin("memscope")
        .unwrap()
        .current_dir(fixture(""))
        .arg("report")
        .args(files)
        .arg("-o")
        .arg(&page)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::read_to_string(&page).unwrap()
}

#[test]
fn the_report_stacks_marked_records_and_keeps_the_timeline_for_old_ones() {
    // The train fixture carries marks: the stacked chart, no timeline.
    let html = report(&["bench-train.json"]);
    assert!(html.contains("data-chart=\"memory-stacked\""));
    assert!(!html.contains("data-chart=\"memory-timeline\""));
    assert!(html.contains("highest heap peak in a phase run"), "{html}");
    // A Record written before marks existed still loads and gets the timeline.
    let old: Value =
        serde_json::from_str(&std::fs::read_to_string(fixture("leak-record.json")).unwrap())
            .unwrap();
    assert!(old["memory"]["series"]
        .as_array()
        .unwrap()
        .iter()
        .all(|s| s.get("phases").is_none()));
    let html = report(&["leak-record.json"]);
    assert!(html.contains("data-chart=\"memory-timeline\""));
    assert!(!html.contains("data-chart=\"memory-stacked\""));
    // Both together: one of each.
    let html = report(&["bench-train.json", "leak-record.json"]);
    assert!(html.contains("data-chart=\"memory-stacked\""));
    assert!(html.contains("data-chart=\"memory-timeline\""));
}
