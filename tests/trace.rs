//! `--trace`: the Chrome trace written by bench (train and generate) and leak, parsed and checked
//! against the Trace Event Format's required fields (docs/trace.md): every event has name, ph,
//! pid, tid; X events ts and dur ≥ 0; C events ts and numeric args; M events args.name; X events
//! on one thread do not overlap; every measured step and phase is there.

use assert_cmd::Command;
use serde_json::Value;

#[path = "support/trace_check.rs"]
mod trace_check;
use trace_check::{names, validate};

fn trace(args: &[&str]) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.json");
    let out = Command::cargo_bin("memscope")
        .unwrap()
        .args(args)
        .args([
            "--model",
            "tiny-gpt2",
            "--batch",
            "1",
            "--seq",
            "16",
            "-q",
            "--trace",
        ])
        .arg(&path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).expect("trace is JSON")
}

#[test]
fn bench_train_trace_has_every_step_phase_and_counter() {
    let ev = validate(&trace(&["bench", "--steps", "3", "--warmup", "1"]));
    let x = names(&ev, "X");
    for s in ["step 1", "step 2", "step 3"] {
        assert!(x.contains(&s.to_string()), "{x:?}");
    }
    for p in ["forward", "backward", "optimizer"] {
        assert_eq!(x.iter().filter(|n| *n == p).count(), 3, "{p}: {x:?}");
    }
    let c = names(&ev, "C");
    for n in [
        "heap live (bytes)",
        "heap peak in step (bytes)",
        "RSS (bytes)",
        "live allocations",
    ] {
        assert_eq!(c.iter().filter(|x| *x == n).count(), 3, "{n}: {c:?}");
    }
    assert!(c.contains(&"heap by category, measured (bytes)".to_string()));
    let m = names(&ev, "M");
    assert!(m.contains(&"process_name".into()) && m.contains(&"thread_name".into()));
}

#[test]
fn generate_trace_spans_decode_over_its_tokens() {
    let ev = validate(&trace(&[
        "bench",
        "--mode",
        "generate",
        "--new-tokens",
        "4",
        "--steps",
        "2",
        "--warmup",
        "1",
    ]));
    let decode: Vec<&Value> = ev.iter().filter(|e| e["name"] == "decode").collect();
    assert_eq!(decode.len(), 2);
    for d in decode {
        let per = d["args"]["per_token_ms"].as_f64().unwrap();
        assert!(
            (d["dur"].as_f64().unwrap() - per * 4000.0).abs() < 1e-2,
            "{d}"
        );
    }
}

#[test]
fn leak_writes_a_trace_too() {
    let ev = validate(&trace(&["leak", "--steps", "12"]));
    assert_eq!(
        names(&ev, "X")
            .iter()
            .filter(|n| n.starts_with("step "))
            .count(),
        12
    );
}

#[test]
fn sweep_writes_one_trace_per_configuration_that_ran() {
    let dir = tempfile::tempdir().unwrap();
    let traces = dir.path().join("traces"); // created by the sweep
    let jsonl = dir.path().join("rows.jsonl");
    let out = Command::cargo_bin("memscope")
        .unwrap()
        .args([
            "sweep",
            "--model",
            "tiny-gpt2",
            "--batch",
            "1,2",
            "--seq",
            "16",
            "--warmup",
            "0",
            "--steps",
            "2",
            "--threads",
            "1",
            "-q",
            "--yes",
            "--trace",
        ])
        .arg(&traces)
        .arg("--jsonl")
        .arg(&jsonl)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: Vec<Value> = std::fs::read_to_string(&jsonl)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), 2);
    for (i, row) in rows.iter().enumerate() {
        let path = row["trace"].as_str().expect("an ok row names its trace");
        assert!(
            path.ends_with(&format!("{i:03}-b{}-s16-train-f32.trace.json", i + 1)),
            "{path}"
        );
        let doc: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let ev = validate(&doc);
        let steps = names(&ev, "X")
            .iter()
            .filter(|n| n.starts_with("step"))
            .count();
        assert_eq!(steps, 2, "two measured steps in {path}");
    }
    assert_eq!(std::fs::read_dir(&traces).unwrap().count(), 2);
}

#[test]
fn sweep_trace_on_slurm_is_refused_naming_both_flags() {
    let out = Command::cargo_bin("memscope")
        .unwrap()
        .args([
            "sweep",
            "--model",
            "tiny-gpt2",
            "--slurm",
            "--trace",
            "/tmp/x",
        ])
        .output()
        .unwrap();
    let e = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{e}");
    assert!(e.contains("--trace") && e.contains("--slurm"), "{e}");
}
