//! Outputs never replace inputs, `-` is standard output, an unwritable output is refused before
//! anything runs, and a FIFO never blocks a run: through the binary.

mod support;
use std::path::Path;
use support::{memscope, stderr_of};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures");
const TINY_CONFIG: &str = r#"{"family":"gpt2","name":"mini","n_layers":2,"d_model":64,"n_heads":2,"d_ff":256,"vocab_size":100,"max_seq_len":64}"#;

/// Runs `args` in `dir` and asserts it is refused naming both flags, leaving `input` unchanged.
fn refused(dir: &Path, args: &[&str], input: &str, out_flag: &str, in_flag: &str) {
    let before = std::fs::read(dir.join(input)).unwrap();
    let out = memscope().current_dir(dir).args(args).output().unwrap();
    let e = stderr_of(&out);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {e}");
    assert!(
        e.contains(out_flag) && e.contains(in_flag) && e.contains("same file"),
        "{args:?}: {e}"
    );
    assert_eq!(
        std::fs::read(dir.join(input)).unwrap(),
        before,
        "{args:?} changed {input}"
    );
}

fn workdir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("c.json"), TINY_CONFIG).unwrap();
    std::fs::write(d.join("w.safetensors"), b"not really weights").unwrap();
    std::fs::write(d.join("t.txt"), "1 2 3 4 5 6 7 8 9 10 ".repeat(50)).unwrap();
    let mut log = String::from("step,rss\n");
    for i in 0..50 {
        log += &format!("{i},{}\n", 1_000_000 + i);
    }
    std::fs::write(d.join("log.csv"), log).unwrap();
    std::fs::copy(
        Path::new(FIXTURES).join("bench-train.json"),
        d.join("a.json"),
    )
    .unwrap();
    std::fs::copy(
        Path::new(FIXTURES).join("bench-generate.json"),
        d.join("b.json"),
    )
    .unwrap();
    std::os::unix::fs::symlink("w.safetensors", d.join("link")).unwrap();
    std::fs::hard_link(d.join("c.json"), d.join("hard.json")).unwrap();
    dir
}

#[test]
fn an_output_naming_an_input_is_refused_naming_both_flags() {
    let dir = workdir();
    let d = dir.path();
    let run = ["--steps", "100000", "--seq", "16", "-q"]; // would run for minutes if not refused
    let mut bench_w = vec![
        "bench",
        "--model",
        "tiny-gpt2",
        "--weights",
        "w.safetensors",
        "--json",
        "w.safetensors",
    ];
    bench_w.extend(run);
    refused(d, &bench_w, "w.safetensors", "--json", "--weights");
    let mut via_dot = vec![
        "bench",
        "--model",
        "tiny-gpt2",
        "--weights",
        "w.safetensors",
        "--csv",
        "./w.safetensors",
    ];
    via_dot.extend(run);
    refused(d, &via_dot, "w.safetensors", "--csv", "--weights");
    let mut via_link = vec![
        "bench",
        "--model",
        "tiny-gpt2",
        "--weights",
        "w.safetensors",
        "--trace",
        "link",
    ];
    via_link.extend(run);
    refused(d, &via_link, "w.safetensors", "--trace", "--weights");
    let mut bench_c = vec!["bench", "--config", "c.json", "--json", "hard.json"]; // a hard link
    bench_c.extend(run);
    refused(d, &bench_c, "c.json", "--json", "--config");
    let mut bench_d = vec![
        "bench",
        "--model",
        "tiny-gpt2",
        "--data",
        "t.txt",
        "--markdown",
        "t.txt",
    ];
    bench_d.extend(run);
    refused(d, &bench_d, "t.txt", "--markdown", "--data");
    refused(
        d,
        &[
            "estimate", "--config", "c.json", "--seq", "16", "--json", "c.json",
        ],
        "c.json",
        "--json",
        "--config",
    );
    refused(
        d,
        &[
            "sweep",
            "--model",
            "tiny-gpt2",
            "--data",
            "t.txt",
            "--seq",
            "16",
            "--csv",
            "t.txt",
            "-q",
        ],
        "t.txt",
        "--csv",
        "--data",
    );
    refused(
        d,
        &["analyze", "log.csv", "--json", "log.csv"],
        "log.csv",
        "--json",
        "FILE",
    );
    refused(
        d,
        &["compare", "a.json", "b.json", "--json", "a.json"],
        "a.json",
        "--json",
        "BASE",
    );
    refused(
        d,
        &["compare", "a.json", "b.json", "--markdown", "./b.json"],
        "b.json",
        "--markdown",
        "NEW",
    );
    refused(
        d,
        &["diff", "a.json", "b.json", "--markdown", "a.json"],
        "a.json",
        "--markdown",
        "BASE",
    );
    refused(
        d,
        &["report", "a.json", "b.json", "-o", "b.json"],
        "b.json",
        "--output",
        "FILE",
    );
}

#[test]
fn a_shard_of_a_weights_index_is_an_input_too() {
    let dir = workdir();
    let d = dir.path();
    std::fs::write(
        d.join("model.safetensors.index.json"),
        r#"{"metadata":{},"weight_map":{"wte.weight":"shard-1.safetensors"}}"#,
    )
    .unwrap();
    std::fs::write(d.join("shard-1.safetensors"), b"shard bytes").unwrap();
    refused(
        d,
        &[
            "bench",
            "--model",
            "tiny-gpt2",
            "--weights",
            "model.safetensors.index.json",
            "--json",
            "shard-1.safetensors",
            "-q",
        ],
        "shard-1.safetensors",
        "--json",
        "--weights",
    );
}

#[test]
fn json_dash_is_standard_output_and_the_summary_moves_to_stderr() {
    let dir = workdir();
    let out = memscope()
        .current_dir(dir.path())
        .args(["estimate", "--model", "tiny-gpt2", "--json", "-"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr_of(&out));
    let v: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("stdout is the JSON alone");
    assert_eq!(v["model"], "tiny-gpt2");
    assert!(
        stderr_of(&out).contains("memscope estimate"),
        "{}",
        stderr_of(&out)
    );
    assert!(!dir.path().join("-").exists(), "a file named - was created");
    // Two outputs cannot both be standard output.
    let out = memscope()
        .args([
            "bench",
            "--model",
            "tiny-gpt2",
            "--json",
            "-",
            "--csv",
            "-",
            "-q",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr_of(&out).contains("standard output"),
        "{}",
        stderr_of(&out)
    );
}

#[test]
fn an_unreplaceable_output_is_refused_before_the_run() {
    // /proc/version exists and is a regular file, but no file can be created beside it.
    let out = memscope()
        .args([
            "bench",
            "--model",
            "tiny-gpt2",
            "--steps",
            "100000",
            "-q",
            "--json",
            "/proc/version",
        ])
        .output()
        .unwrap();
    let e = stderr_of(&out);
    assert_eq!(out.status.code(), Some(2), "{e}");
    assert!(
        e.contains("--json /proc/version") && e.contains("cannot replace"),
        "{e}"
    );
    assert!(out.stdout.is_empty(), "the run went ahead");
}
