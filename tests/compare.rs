//! `memscope compare` through the binary on fixture Records written by the real tool
//! (tests/fixtures/, `bench --model tiny-gpt2 --steps 20 --json`, a 6-configuration sweep): the
//! Markdown is snapshotted; a Record against itself is "no change" (exit 0), against a copy with
//! every sample 1.5× slower "regressed" (exit 1), against a copy with noise inside the threshold
//! "no change" (exit 0).

mod support;
use assert_cmd::Command;
use serde_json::Value;
use std::path::{Path, PathBuf};
use support::fixture;

/// A copy of the train fixture with every timing sample mapped by `f(index, sample)`.
fn scaled(dir: &Path, name: &str, f: impl Fn(usize, f64) -> f64) -> PathBuf {
    let mut v: Value =
        serde_json::from_str(&std::fs::read_to_string(fixture("bench-train.json")).unwrap())
            .unwrap();
    for t in v["timing"].as_object_mut().unwrap().values_mut() {
        let s: Vec<f64> = t["samples_ms"]
            .as_array()
            .unwrap()
            .iter()
            .enumerate()
            .map(|(i, x)| f(i, x.as_f64().unwrap()))
            .collect();
        t["samples_ms"] = serde_json::json!(s);
    }
    let p = dir.join(name);
    std::fs::write(&p, serde_json::to_string(&v).unwrap()).unwrap();
    p
}

/// Runs compare from the fixtures directory (so the file names in the Markdown are stable).
fn compare(dir: &Path, base: &str, new: &str, extra: &[&str]) -> (i32, String, String) {
    let out = Command::cargo_bin("memscope")
        .unwrap()
        .current_dir(dir)
        .args(["compare", base, new])
        .args(extra)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

#[test]
fn a_record_against_itself_is_no_change_exit_0() {
    let (code, md, err) = compare(&fixture(""), "bench-train.json", "bench-train.json", &[]);
    assert_eq!(code, 0, "{err}");
    assert!(
        !md.contains("regressed |") && !md.contains("improved |"),
        "{md}"
    );
    insta::assert_snapshot!("compare_self", md);
}

#[test]
fn every_sample_one_and_a_half_times_slower_regresses_exit_1() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(fixture("bench-train.json"), dir.path().join("base.json")).unwrap();
    scaled(dir.path(), "slow.json", |_, x| x * 1.5);
    let (code, md, err) = compare(dir.path(), "base.json", "slow.json", &["--json", "c.json"]);
    assert_eq!(code, 1, "{md}{err}");
    assert!(
        md.contains("| step time: step |") && md.contains("**regressed**"),
        "{md}"
    );
    let j: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("c.json")).unwrap()).unwrap();
    assert_eq!(j["regressed"], true);
    assert_eq!(j["bootstrap"]["resamples"], 10000);
    let step = j["changes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["figure"] == "step time: step")
        .unwrap();
    assert_eq!(step["verdict"], "regressed");
    insta::assert_snapshot!("compare_slower", md);
}

#[test]
fn noise_inside_the_threshold_is_no_change_exit_0() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(fixture("bench-train.json"), dir.path().join("base.json")).unwrap();
    // ±0.5% per sample, alternating: medians move by less than the 2% threshold.
    scaled(dir.path(), "noisy.json", |i, x| {
        x * (1.0 + 0.005 * [1.0, -1.0, 0.5][i % 3])
    });
    let (code, md, err) = compare(
        dir.path(),
        "base.json",
        "noisy.json",
        &["--threshold", "2%"],
    );
    assert_eq!(code, 0, "{md}{err}");
    assert!(!md.contains("regressed |"), "{md}");
}

#[test]
fn two_sweeps_match_by_configuration() {
    let (code, md, err) = compare(&fixture(""), "sweep.jsonl", "sweep.jsonl", &[]);
    assert_eq!(code, 0, "{err}");
    assert!(
        md.contains("tiny-gpt2 train f32 b4 s32 w1 step time"),
        "{md}"
    );
    insta::assert_snapshot!("compare_sweep_self", md);
}

#[test]
fn bad_inputs_name_the_file_and_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("empty.json"), "").unwrap();
    std::fs::write(dir.path().join("other.json"), "{\"x\": 1}").unwrap();
    std::fs::copy(fixture("bench-train.json"), dir.path().join("b.json")).unwrap();
    let (code, _, err) = compare(dir.path(), "b.json", "empty.json", &[]);
    assert_eq!(code, 2);
    assert!(err.contains("empty.json") && err.contains("empty"), "{err}");
    let (code, _, err) = compare(dir.path(), "other.json", "b.json", &[]);
    assert_eq!(code, 2);
    assert!(
        err.contains("other.json") && err.contains("schema_version"),
        "{err}"
    );
    let (code, _, err) = compare(dir.path(), "b.json", "b.json", &["--threshold", "2"]);
    assert_eq!(code, 2);
    assert!(err.contains("--threshold"), "{err}");
    std::fs::copy(fixture("sweep.jsonl"), dir.path().join("s.jsonl")).unwrap();
    let (code, _, err) = compare(dir.path(), "b.json", "s.jsonl", &[]);
    assert_eq!(code, 2);
    assert!(err.contains("two Records or two sweep"), "{err}");
}

/// A copy of the train fixture with `edit` applied to its JSON.
fn edited(dir: &Path, name: &str, edit: impl Fn(&mut Value)) -> PathBuf {
    let mut v: Value =
        serde_json::from_str(&std::fs::read_to_string(fixture("bench-train.json")).unwrap())
            .unwrap();
    edit(&mut v);
    let p = dir.join(name);
    std::fs::write(&p, serde_json::to_string(&v).unwrap()).unwrap();
    p
}

#[test]
fn an_identical_rerun_whose_rss_peak_moved_3_percent_is_no_change_exit_0() {
    // Back-to-back identical runs: the one VmHWM reading moves by a few percent (+3.2% here).
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(fixture("bench-train.json"), dir.path().join("a.json")).unwrap();
    edited(dir.path(), "b.json", |v| {
        let p = v["memory"]["rss_peak_bytes"].as_f64().unwrap();
        v["memory"]["rss_peak_bytes"] = serde_json::json!((p * 1.032) as u64);
    });
    let (code, md, err) = compare(dir.path(), "a.json", "b.json", &["--json", "c.json"]);
    assert_eq!(code, 0, "{md}{err}");
    assert!(
        md.contains("| RSS peak (VmHWM) |") && md.contains("single reading (±5.0% noise)"),
        "{md}"
    );
    assert!(
        md.contains("Exit status 1 when any figure above regresses"),
        "{md}"
    );
    assert!(
        md.contains("single readings beyond their noise: RSS peak (VmHWM) (±5.0%)"),
        "{md}"
    );
    let j: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("c.json")).unwrap()).unwrap();
    let rss = j["changes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["figure"] == "RSS peak (VmHWM)")
        .unwrap();
    assert_eq!(rss["verdict"], "no_change");
    assert_eq!(rss["tolerance"], 0.05);
    // Beyond its noise it still regresses (and gates the exit status).
    edited(dir.path(), "big.json", |v| {
        let p = v["memory"]["rss_peak_bytes"].as_f64().unwrap();
        v["memory"]["rss_peak_bytes"] = serde_json::json!((p * 1.2) as u64);
    });
    let (code, md, _) = compare(dir.path(), "a.json", "big.json", &[]);
    assert_eq!(code, 1, "{md}");
}

#[test]
fn different_workloads_are_refused_unless_allowed_and_then_flagged() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(fixture("bench-train.json"), dir.path().join("a.json")).unwrap();
    for (name, edit) in [
        (
            "model.json",
            (|v: &mut Value| v["spec"]["model"] = "tiny-llama".into()) as fn(&mut Value),
        ),
        ("shape.json", |v| v["spec"]["batch"] = 4.into()),
        ("mode.json", |v| v["spec"]["mode"] = "infer".into()),
        ("dtype.json", |v| v["spec"]["dtype"] = "bf16".into()),
        ("engine.json", |v| {
            v["spec"]["variant"] = serde_json::json!({"attention": "naive"})
        }),
    ] {
        edited(dir.path(), name, edit);
        let (code, md, err) = compare(dir.path(), "a.json", name, &[]);
        assert_eq!(code, 2, "{name}: {md}");
        assert!(
            err.contains("different workloads") && err.contains("--allow-different"),
            "{err}"
        );
        let (code, md, err) = compare(dir.path(), "a.json", name, &["--allow-different"]);
        assert!(code == 0 || code == 1, "{err}");
        assert!(
            md.contains("**DIFFERENT WORKLOADS (--allow-different)**"),
            "{md}"
        );
    }
}

#[test]
fn runs_of_two_plans_or_variants_are_said_to_differ_by_their_flags() {
    // The H100's DDP Record against the same Record made FSDP2 with checkpointing: refused as
    // unlike runs, naming the plans and the variants by their flags (not Rust's debug text).
    let dir = tempfile::tempdir().unwrap();
    let mut v: Value =
        serde_json::from_str(&std::fs::read_to_string(fixture("cuda-ddp-record.json")).unwrap())
            .unwrap();
    std::fs::write(dir.path().join("ddp.json"), v.to_string()).unwrap();
    v["spec"]["torch"]["parallel"]["plan"] = "fsdp".into();
    v["spec"]["variant"] = serde_json::json!({"checkpoint": true});
    std::fs::write(dir.path().join("fsdp.json"), v.to_string()).unwrap();
    let (code, _, err) = compare(dir.path(), "ddp.json", "fsdp.json", &[]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains(
            "parallel plan: base --parallel ddp over 1 rank, new --parallel fsdp over 1 rank"
        ),
        "{err}"
    );
    assert!(
        err.contains("engine variant: base --attention fused --fusion full --precision pure, new --attention fused --fusion full --precision pure --checkpoint"),
        "{err}"
    );
    assert!(!err.contains("Variant {"), "{err}");
}

#[test]
fn a_run_that_raised_is_said_beside_the_comparison() {
    let dir = tempfile::tempdir().unwrap();
    let mut v: Value =
        serde_json::from_str(&std::fs::read_to_string(fixture("bench-train.json")).unwrap())
            .unwrap();
    v["warnings"].as_array_mut().unwrap().push(
        "the training loop raised RuntimeError: the Record holds the 20 steps that finished before it"
            .into(),
    );
    std::fs::write(dir.path().join("raised.json"), v.to_string()).unwrap();
    let base = fixture("bench-train.json");
    let (code, md, err) = compare(dir.path(), base.to_str().unwrap(), "raised.json", &[]);
    assert_eq!(code, 0, "{err}");
    assert!(
        md.contains(
            "Note: raised.json did not run to its end (the training loop raised RuntimeError"
        ),
        "{md}"
    );
}
