//! Wrong answers and unclear messages found by hostile use, through the binary: watch's report
//! never enters the child's stdout, lost output is an error, flags are validated with messages
//! that name what to do, and a config's name cannot write escape sequences to the terminal.

mod support;
use std::time::Duration;
use support::{fails_with, memscope, stderr_of};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures");

#[test]
fn watch_leaves_the_commands_stdout_alone_and_reports_on_stderr() {
    let out = memscope()
        .args(["watch", "--", "printf", "abc"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr_of(&out));
    assert_eq!(
        out.stdout, b"abc",
        "the report went into the command's stream"
    );
    assert!(stderr_of(&out).contains("── memscope watch ──"));
}

#[test]
fn lost_output_is_an_error() {
    fails_with(
        &["watch", "--jsonl", "/dev/full", "--", "sleep", "0.3"],
        &["--jsonl /dev/full", "writing failed"],
    );
    // Standard output closed (`>&-`): the report cannot be written, so the exit is not 0.
    let bin = assert_cmd::cargo::cargo_bin("memscope");
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "exec '{}' estimate --model tiny-gpt2 >&-",
            bin.display()
        ))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr_of(&out));
    assert!(stderr_of(&out).contains("standard output is closed"));
    // watch's report goes to stderr, so a closed stdout loses nothing.
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!("exec '{}' watch -- true >&-", bin.display()))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr_of(&out));
    assert!(stderr_of(&out).contains("── memscope watch ──"));
}

#[test]
fn fit_names_its_own_flags() {
    // --max below the context is --max, not the context.
    let out = memscope()
        .args([
            "fit",
            "--model",
            "tiny-gpt2",
            "--vary",
            "seq",
            "--max",
            "64",
            "--memory-limit",
            "4GiB",
            "--steps",
            "1",
            "--warmup",
            "0",
            "-q",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", stderr_of(&out));
    assert!(text.contains("raise --max"), "{text}");
    assert!(!text.contains("its context"), "{text}");
    // fit has no --prompt-len: its prompt is --seq.
    let e = fails_with(
        &[
            "fit",
            "--model",
            "tiny-gpt2",
            "--mode",
            "generate",
            "--seq",
            "250",
            "--memory-limit",
            "4GiB",
        ],
        &["--seq (the prompt length) 250"],
    );
    assert!(!e.contains("--prompt-len"), "{e}");
}

#[test]
fn conflicting_rope_fields_are_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("config.json");
    std::fs::write(
        &p,
        r#"{"model_type":"llama","vocab_size":1000,"hidden_size":128,"intermediate_size":352,
        "num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,
        "max_position_embeddings":256,"rms_norm_eps":1e-5,"rope_theta":10000.0,
        "rope_scaling":{"rope_type":"linear","factor":2.0},
        "rope_parameters":{"rope_type":"default","rope_theta":10000.0}}"#,
    )
    .unwrap();
    fails_with(
        &["estimate", "--config", p.to_str().unwrap(), "--seq", "16"],
        &["rope_scaling", "rope_parameters", "disagree"],
    );
}

#[test]
fn sizes_above_gib_are_written_in_tib() {
    let out = memscope()
        .args([
            "estimate",
            "--model",
            "gpt2-small",
            "--batch",
            "4096",
            "--seq",
            "1024",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", stderr_of(&out));
    assert!(text.contains(" TiB"), "{text}");
    // No GiB figure of four or more digits before the point.
    assert!(
        !text.split_whitespace().collect::<Vec<_>>().windows(2).any(
            |w| w[1].starts_with("GiB") && w[0].split('.').next().is_some_and(|i| i.len() >= 4)
        ),
        "{text}"
    );
}

#[test]
fn out_of_range_flags_are_refused_before_anything_runs() {
    let log = tempfile::NamedTempFile::new().unwrap();
    let mut text = String::from("step,rss\n");
    for i in 0..50 {
        text += &format!("{i},{}\n", 1_000_000 + i);
    }
    std::fs::write(log.path(), text).unwrap();
    fails_with(
        &[
            "analyze",
            log.path().to_str().unwrap(),
            "--steps-per-hour",
            "1e308",
        ],
        &["--steps-per-hour", "at most 3.6e9"],
    );
    let sweep = [
        "sweep",
        "--model",
        "tiny-gpt2",
        "--steps",
        "1",
        "--seq",
        "16",
        "-q",
    ];
    fails_with(
        &[&sweep[..], &["--timeout", "1ms"]].concat(),
        &["--timeout 1ms", "100ms or more"],
    );
    for cmd in [
        &sweep[..],
        &["fit", "--model", "tiny-gpt2", "-q"][..],
        &["optimize", "--model", "tiny-gpt2"][..],
    ] {
        fails_with(
            &[cmd, &["--memory-limit", "1B"]].concat(),
            &["--memory-limit 1B", "64.0 MiB"],
        );
    }
    // A corrupt --weights is refused up front, not an error row per configuration.
    let junk = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(junk.path(), "1 2 3 4 5 6 7 8 9 10 11 12").unwrap();
    let out = memscope()
        .args(&sweep)
        .args(["--batch", "1,2", "--weights", junk.path().to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr_of(&out));
    assert!(
        stderr_of(&out).contains("--weights") && stderr_of(&out).contains("not a safetensors file"),
        "{}",
        stderr_of(&out)
    );
    assert!(out.stdout.is_empty(), "rows were written");
}

#[test]
fn a_config_name_cannot_write_escape_sequences() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("evil.json");
    std::fs::write(
        &p,
        r#"{"family":"gpt2","name":"evil\u001b[31mRED\u0000\nforged line","n_layers":2,"d_model":64,"n_heads":2,"d_ff":256,"vocab_size":100,"max_seq_len":64}"#,
    )
    .unwrap();
    let out = memscope()
        .args(["estimate", "--config", p.to_str().unwrap(), "--seq", "16"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr_of(&out));
    let all = [out.stdout.as_slice(), out.stderr.as_slice()].concat();
    assert!(
        !all.contains(&0x1b) && !all.contains(&0),
        "raw ESC or NUL printed"
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(r"evil\u{1b}[31mRED\u{0}\nforged line"),
        "{text}"
    );
}

#[test]
fn messages_say_what_to_do() {
    let cfg = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(
        cfg.path(),
        r#"{"family":"gpt2","name":"mini","n_layers":2,"d_model":64,"n_heads":2,"d_ff":256,"vocab_size":100,"max_seq_len":64}"#,
    )
    .unwrap();
    let c = cfg.path().to_str().unwrap();
    fails_with(
        &[
            "estimate",
            "--config",
            c,
            "--weights",
            "w.safetensors",
            "--seq",
            "16",
        ],
        &["--config", "drop --weights"],
    );
    // --fits does not recommend a flag no run command accepts as if it were one.
    let out = memscope()
        .args(["estimate", "--model", "gpt2-small", "--fits", "600MiB"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("what-if: memscope's runs train with AdamW"),
        "{text}"
    );
    assert!(!text.contains("(--optimizer sgd)"), "{text}");
    // A causal model's one position has no next token: refused before Python starts, on
    // every command that runs the torch engine.
    for cmd in ["estimate", "bench"] {
        fails_with(
            &[
                cmd,
                "--engine",
                "torch",
                "--model",
                "tiny-gpt2",
                "--seq",
                "1",
            ],
            &[
                "--seq 1: tiny-gpt2 predicts each next token",
                "use --seq 2 or more",
            ],
        );
    }
    // estimate --engine torch --json is read by report (its categories as bars) and named by
    // compare and diff, as memscope's own estimate is.
    let torch_estimate = format!("{FIXTURES}/torch-estimate.json");
    let html = tempfile::tempdir().unwrap();
    let page = html.path().join("estimate.html");
    let out = memscope()
        .args(["report", &torch_estimate, "-o", page.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&page).unwrap();
    assert!(text.contains("tiny-gpt2 train b2 s32 f32 on cpu, torch engine"));
    fails_with(
        &[
            "compare",
            &torch_estimate,
            &format!("{FIXTURES}/bench-train.json"),
        ],
        &[
            "is a torch estimate and",
            "a Record: compare takes two Records",
        ],
    );
    // A GPU index no machine has is refused before Python starts.
    fails_with(
        &[
            "estimate",
            "--engine",
            "torch",
            "--model",
            "tiny-gpt2",
            "--device",
            "cuda:99999",
        ],
        &["--device cuda:99999: use cpu, cuda or cuda:N (N: the GPU's index, 0 to 1023)"],
    );
    // A Record with a field of the wrong kind: the field is named.
    let mut v: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(format!("{FIXTURES}/bench-train.json")).unwrap(),
    )
    .unwrap();
    v["memory"]["heap_peak_bytes"] = (-5).into();
    let neg = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(neg.path(), v.to_string()).unwrap();
    fails_with(
        &[
            "diff",
            neg.path().to_str().unwrap(),
            &format!("{FIXTURES}/bench-train.json"),
        ],
        &["field `memory.heap_peak_bytes`: invalid value: integer `-5`, expected u64"],
    );
    // scaling on a Record says what the file is.
    let record = format!("{FIXTURES}/bench-train.json");
    fails_with(
        &["scaling", &record],
        &["is a Record, not a sweep", "sweep --jsonl"],
    );
    // A Record cut off part way says so.
    let full = std::fs::read_to_string(&record).unwrap();
    let cut = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(cut.path(), &full[..full.len() / 2]).unwrap();
    fails_with(
        &["diff", cut.path().to_str().unwrap(), &record],
        &["truncated"],
    );
    fails_with(
        &["compare", &record, cut.path().to_str().unwrap()],
        &["truncated"],
    );
}

#[test]
fn leak_stopped_by_sigint_writes_the_steps_it_measured() {
    let dir = tempfile::tempdir().unwrap();
    let (rec, verdict) = (dir.path().join("r.json"), dir.path().join("v.json"));
    let child = std::process::Command::new(assert_cmd::cargo::cargo_bin("memscope"))
        .args([
            "leak",
            "--model",
            "tiny-gpt2",
            "--seq",
            "64",
            "--steps",
            "1000000",
            "-q",
        ])
        .arg("--record")
        .arg(&rec)
        .arg("--json")
        .arg(&verdict)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(5));
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let out = child.wait_with_output().unwrap(); // ends after the step under way
    let e = stderr_of(&out);
    assert_eq!(out.status.code(), Some(130), "{e}");
    assert!(e.contains("stopped by a signal after"), "{e}");
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&rec).unwrap()).unwrap();
    let steps = r["spec"]["steps"].as_u64().unwrap();
    assert!(steps > 0 && steps < 1_000_000, "{steps}");
    assert_eq!(
        r["memory"]["series"].as_array().unwrap().len() as u64,
        steps
    );
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&verdict).unwrap()).unwrap();
    assert!(v["verdict"].is_string(), "{v}");
}

#[test]
fn fit_stopped_by_sigint_says_and_keeps_the_trials_it_finished() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("fit.json");
    let child = std::process::Command::new(assert_cmd::cargo::cargo_bin("memscope"))
        .args([
            "fit",
            "--model",
            "tiny-gpt2",
            "--seq",
            "64",
            "--steps",
            "40",
            "--memory-limit",
            "8GiB",
        ])
        .arg("--json")
        .arg(&json)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(6));
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let out = child.wait_with_output().unwrap();
    let e = stderr_of(&out);
    assert_eq!(out.status.code(), Some(130), "{e}");
    assert!(e.contains("memscope fit: interrupted after"), "{e}");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(v["interrupted"], true, "{v}");
    let trials = v["trials"].as_array().unwrap();
    assert!(
        trials
            .iter()
            .all(|t| t["status"] == "ok" || t["status"] == "oom"),
        "{v}"
    );
}
