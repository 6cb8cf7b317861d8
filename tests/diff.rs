//! `memscope diff` through the binary: a Record against itself changes nothing; against a run
//! with twice the batch the peak moves and the forward's saved activations are named as the
//! cause; a non-Record input is refused naming the file.

mod support;
use assert_cmd::Command;
use std::path::Path;
use support::fixture;

fn diff(dir: &Path, base: &str, new: &str) -> (i32, String, String) {
    let out = Command::cargo_bin("memscope")
        .unwrap()
        .current_dir(dir)
        .args(["diff", base, new])
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

#[test]
fn a_record_against_itself_moves_nothing() {
    let (code, md, err) = diff(&fixture(""), "bench-train.json", "bench-train.json");
    assert_eq!(code, 0, "{err}");
    assert!(
        md.contains("nothing: every figure alive at the peak is unchanged"),
        "{md}"
    );
    assert!(md.contains("| activations |"), "{md}");
}

#[test]
fn a_larger_batch_moves_the_peak_through_forward_allocations() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::cargo_bin("memscope")
        .unwrap()
        .current_dir(dir.path())
        .args([
            "bench",
            "--model",
            "tiny-gpt2",
            "--batch",
            "4",
            "--steps",
            "2",
            "-q",
            "--json",
            "b4.json",
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    std::fs::copy(fixture("bench-train.json"), dir.path().join("b2.json")).unwrap();
    let (code, md, err) = diff(dir.path(), "b2.json", "b4.json");
    assert_eq!(code, 0, "{err}");
    assert!(
        md.contains("**What moved the peak**: bytes allocated in forward"),
        "{md}"
    );
}

#[test]
fn a_sweep_is_refused_naming_it() {
    let (code, _, err) = diff(&fixture(""), "bench-train.json", "sweep.jsonl");
    assert_eq!(code, 2);
    assert!(
        err.contains("sweep.jsonl") && err.contains("two Records"),
        "{err}"
    );
}

#[test]
fn a_pytorch_record_against_memscope_s_own_pairs_rows_by_allocating_phase() {
    // A PyTorch Record splits its peak by category, memscope's own by allocating phase: read
    // side by side, the categories go to the phase that allocates them (optimizer state → the
    // optimizer, parameters → load), not to rows of their own against "—".
    let (_, md, err) = diff(&fixture(""), "bench-train.json", "pytorch-record.json");
    let table = md
        .split("### Alive at the steady-step peak")
        .nth(1)
        .and_then(|t| t.split("###").next())
        .unwrap_or_else(|| panic!("{md}{err}"));
    for stray in ["| optimizer_state |", "| parameters |", "| gradients |"] {
        assert!(!table.contains(stray), "{table}");
    }
    let row = |name: &str| {
        table
            .lines()
            .find(|l| l.starts_with(&format!("| {name} |")))
            .unwrap_or_else(|| panic!("no {name} row: {table}"))
            .to_string()
    };
    assert!(!row("load").contains("| — |"), "{table}");
}
