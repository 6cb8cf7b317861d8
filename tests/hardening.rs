//! Regression tests for bad input and hostile outputs, through the binary: outputs never destroy
//! what is there and are checked before any measurement, stdout errors are errors (not panics),
//! absurd sizes are refused before anything is allocated.

mod support;
use std::io::Read;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;
use support::{memscope, mkfifo, stderr_of};

#[test]
fn json_onto_a_fifo_is_written_through_not_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("out.json");
    mkfifo(&fifo);
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || {
            let mut s = String::new();
            std::fs::File::open(fifo)
                .unwrap()
                .read_to_string(&mut s)
                .unwrap();
            s
        })
    };
    let out = memscope()
        .args(["estimate", "--model", "tiny-gpt2", "--json"])
        .arg(&fifo)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr_of(&out));
    let text = reader.join().unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["model"], "tiny-gpt2");
    use std::os::unix::fs::FileTypeExt;
    assert!(
        std::fs::metadata(&fifo).unwrap().file_type().is_fifo(),
        "the FIFO was replaced"
    );
}

#[test]
fn json_onto_a_symlink_writes_the_file_it_names() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("real.json");
    std::fs::write(&target, "old").unwrap();
    let link = dir.path().join("link.json");
    std::os::unix::fs::symlink("real.json", &link).unwrap();
    memscope()
        .args(["estimate", "--model", "tiny-gpt2", "--json"])
        .arg(&link)
        .assert()
        .success();
    assert!(std::fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&target).unwrap()).unwrap();
    assert_eq!(v["model"], "tiny-gpt2");
}

#[test]
fn two_outputs_on_one_path_are_refused_naming_both_flags() {
    let dir = tempfile::tempdir().unwrap();
    let r = dir.path().join("r");
    let out = memscope()
        .args(["bench", "--model", "tiny-gpt2", "--steps", "1", "--json"])
        .arg(&r)
        .arg("--csv")
        .arg(dir.path().join(".").join("r"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let e = stderr_of(&out);
    assert!(e.contains("--json and --csv both name"), "{e}");
    assert!(!r.exists(), "nothing may be written");

    // sweep: the appended JSONL history must not be replaced by the Markdown.
    let k = dir.path().join("k");
    std::fs::write(&k, "{\"earlier\": \"sweep\"}\n").unwrap();
    let out = memscope()
        .args(["sweep", "--model", "tiny-gpt2", "--steps", "1", "--jsonl"])
        .arg(&k)
        .arg("--markdown")
        .arg(&k)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr_of(&out).contains("--jsonl and --markdown both name"));
    assert_eq!(
        std::fs::read_to_string(&k).unwrap(),
        "{\"earlier\": \"sweep\"}\n"
    );
}

/// A directory nobody may create files in: /proc for root (permission bits do not bind root),
/// else a directory without write permission.
fn unwritable_dir(tmp: &Path) -> std::path::PathBuf {
    if unsafe { libc::geteuid() } == 0 {
        "/proc".into()
    } else {
        use std::os::unix::fs::PermissionsExt;
        let d = tmp.join("ro");
        std::fs::create_dir(&d).unwrap();
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o555)).unwrap();
        d
    }
}

#[test]
fn unwritable_csv_is_refused_before_any_worker_starts() {
    let dir = tempfile::tempdir().unwrap();
    let jsonl = dir.path().join("rows.jsonl");
    let csv = unwritable_dir(dir.path()).join("x.csv");
    let out = memscope()
        .args([
            "sweep",
            "--model",
            "tiny-gpt2",
            "--batch",
            "1,2",
            "--steps",
            "1",
        ])
        .arg("--jsonl")
        .arg(&jsonl)
        .arg("--csv")
        .arg(&csv)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let e = stderr_of(&out);
    assert!(
        e.contains("--csv") && e.contains("cannot create a file"),
        "{e}"
    );
    assert!(
        !jsonl.exists(),
        "a worker ran (or the JSONL was opened) before the check"
    );
}

#[test]
fn json_onto_a_directory_is_refused_and_leaves_no_temp_file() {
    let dir = tempfile::tempdir().unwrap();
    let sub = dir.path().join("d");
    std::fs::create_dir(&sub).unwrap();
    let out = memscope()
        .args(["estimate", "--model", "tiny-gpt2", "--json"])
        .arg(&sub)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr_of(&out).contains("is a directory"));
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(
        names,
        vec![std::ffi::OsString::from("d")],
        "left behind: {names:?}"
    );
}

#[test]
fn stdout_on_a_full_disk_exits_2_without_a_panic() {
    for args in [&["models"][..], &["estimate", "--model", "tiny-gpt2"][..]] {
        let full = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .unwrap();
        let out = std::process::Command::new(assert_cmd::cargo::cargo_bin("memscope"))
            .args(args)
            .stdout(Stdio::from(full))
            .output()
            .unwrap();
        let e = stderr_of(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {e}");
        assert!(e.contains("writing to standard output"), "{e}");
        assert!(!e.contains("panicked"), "{e}");
    }
}

#[test]
fn a_closed_stdout_pipe_is_silent_success() {
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("memscope"))
        .arg("models")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take()); // the reader goes away before memscope writes
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", stderr_of(&out));
    assert!(out.stderr.is_empty(), "{}", stderr_of(&out));
}

#[test]
fn absurd_step_counts_are_refused_by_name() {
    for flag in ["--steps", "--warmup"] {
        let out = memscope()
            .args([
                "bench",
                "--model",
                "tiny-gpt2",
                flag,
                "18446744073709551615",
            ])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2));
        let e = stderr_of(&out);
        assert!(e.contains(flag) && e.contains("1000000 at most"), "{e}");
    }
}

#[test]
fn a_million_layer_config_is_refused_before_allocating() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("huge.json");
    std::fs::write(
        &cfg,
        r#"{"family": "gpt2", "n_layers": 1000000, "d_model": 768, "n_heads": 12,
            "vocab_size": 50257, "max_seq_len": 1024, "d_ff": 3072}"#,
    )
    .unwrap();
    let start = std::time::Instant::now();
    let out = memscope()
        .arg("estimate")
        .arg("--config")
        .arg(&cfg)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let e = stderr_of(&out);
    assert!(e.contains("1000000 layers") && e.contains("--force"), "{e}");
    // Refused without replaying (the replay of a million layers takes minutes): generous bound.
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "{:?}",
        start.elapsed()
    );
    for cmd in ["bench", "leak"] {
        let out = memscope()
            .arg(cmd)
            .arg("--config")
            .arg(&cfg)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2));
        let e = stderr_of(&out);
        assert!(
            e.contains("parameters alone take") && e.contains("MemTotal") && e.contains("--force"),
            "{e}"
        );
    }
}

#[test]
fn a_sweep_of_a_million_configurations_needs_yes() {
    let out = memscope()
        .args([
            "sweep",
            "--model",
            "tiny-gpt2",
            "--batch",
            "1-1000",
            "--seq",
            "1-1000",
        ])
        .write_stdin("")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let e = stderr_of(&out);
    assert!(
        e.contains("1000000 configurations") && e.contains("--yes"),
        "{e}"
    );
}

#[test]
fn negative_sizes_say_sizes_are_positive() {
    let out = memscope()
        .args(["estimate", "--model", "tiny-gpt2", "--fits", "-5GiB"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr_of(&out).contains("sizes are positive"),
        "{}",
        stderr_of(&out)
    );
}

#[test]
fn prompt_len_zero_names_prompt_len() {
    let out = memscope()
        .args([
            "bench",
            "--model",
            "tiny-gpt2",
            "--mode",
            "generate",
            "--prompt-len",
            "0",
        ])
        .output()
        .unwrap();
    assert!(
        stderr_of(&out).contains("--prompt-len must be at least 1"),
        "{}",
        stderr_of(&out)
    );
}

#[test]
fn peaks_checks_the_model_before_the_cache() {
    let out = memscope()
        .args(["peaks", "--model", "nope"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr_of(&out).contains("--model nope: no such preset"));
}

#[test]
fn leak_checks_steps_per_hour_before_the_run() {
    let out = memscope()
        .args([
            "leak",
            "--model",
            "tiny-gpt2",
            "--steps-per-hour",
            "0",
            "--steps",
            "100000",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr_of(&out).contains("--steps-per-hour must be a positive number"));
}

#[test]
fn a_text_file_as_weights_is_not_a_safetensors_file() {
    let dir = tempfile::tempdir().unwrap();
    let txt = dir.path().join("notes.txt");
    std::fs::write(&txt, "these are my training notes\n").unwrap();
    let out = memscope()
        .args(["bench", "--model", "tiny-gpt2", "--weights"])
        .arg(&txt)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let e = stderr_of(&out);
    assert!(e.contains("not a safetensors file"), "{e}");
}

#[test]
fn a_missing_weights_file_says_why_once() {
    let out = memscope()
        .args([
            "bench",
            "--model",
            "tiny-gpt2",
            "--weights",
            "no-such.safetensors",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let e = stderr_of(&out);
    assert_eq!(e.matches("No such file or directory").count(), 1, "{e}");
}

#[test]
fn fits_lists_only_changes_that_lower_the_peak() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("fits.json");
    // At 16 tokens checkpointing and fused attention save nothing; they must not be offered.
    let out = memscope()
        .args([
            "estimate",
            "--model",
            "gpt2-small",
            "--batch",
            "2",
            "--seq",
            "16",
        ])
        .args(["--fits", "100MiB", "--json"])
        .arg(&json)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stderr_of(&out)); // 1: does not fit
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let fit = &v["fits"];
    let peak = fit["peak_bytes"].as_u64().unwrap();
    let changes = fit["changes"].as_array().unwrap();
    assert!(!changes.is_empty());
    for c in changes {
        assert!(
            c["peak_bytes"].as_u64().unwrap() < peak,
            "{c} does not help"
        );
    }
}

/// `bench --data FILE` on tiny-gpt2 (vocab 1000) with `bytes` in FILE: exit 2 and stderr.
fn bad_data(name: &str, bytes: &[u8], extra: &[&str]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(name);
    std::fs::write(&path, bytes).unwrap();
    let out = memscope()
        .args([
            "bench",
            "--model",
            "tiny-gpt2",
            "--seq",
            "16",
            "--steps",
            "1",
        ])
        .args(["--warmup", "0", "-q", "--data"])
        .arg(&path)
        .args(extra)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{name}");
    let e = stderr_of(&out);
    assert!(!e.contains("panicked"), "{e}");
    assert!(e.contains("--data") || e.contains("--data-dtype"), "{e}");
    e
}

/// A minimal .npy (format 1.0) with this dtype descriptor and shape, then `data`.
fn npy(descr: &str, shape: &str, data: &[u8]) -> Vec<u8> {
    let mut h = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}\n");
    while (10 + h.len()) % 64 != 0 {
        h.insert(h.len() - 1, ' ');
    }
    let mut b = b"\x93NUMPY\x01\x00".to_vec();
    b.extend((h.len() as u16).to_le_bytes());
    b.extend(h.as_bytes());
    b.extend(data);
    b
}

#[test]
fn a_token_file_with_an_unknown_extension_lists_the_formats() {
    let e = bad_data("tokens.csv", b"1,2,3", &[]);
    assert!(e.contains("unknown extension \"csv\""), "{e}");
    assert!(
        e.contains(".bin") && e.contains(".npy") && e.contains(".txt"),
        "{e}"
    );
}

#[test]
fn data_dtype_on_a_npy_file_is_refused() {
    let data: Vec<u8> = (0..64u16).flat_map(|i| i.to_le_bytes()).collect();
    let e = bad_data(
        "t.npy",
        &npy("<u2", "(64,)", &data),
        &["--data-dtype", "u32"],
    );
    assert!(e.contains("--data-dtype applies to .bin files only"), "{e}");
}

#[test]
fn an_empty_token_file_says_how_many_tokens_it_needs() {
    let e = bad_data("empty.bin", b"", &[]);
    assert!(e.contains("the file is empty (0 tokens)"), "{e}");
    assert!(e.contains("--seq + 1 = 17 tokens"), "{e}");
}

#[test]
fn an_odd_byte_count_is_not_a_u16_token_file() {
    let e = bad_data("odd.bin", &[1, 0, 2, 0, 3], &[]);
    assert!(
        e.contains("5 bytes is not a whole number of u16 tokens"),
        "{e}"
    );
    let e = bad_data("odd32.bin", &[0; 42], &["--data-dtype", "u32"]);
    assert!(
        e.contains("42 bytes is not a whole number of u32 tokens"),
        "{e}"
    );
}

#[test]
fn a_file_shorter_than_one_window_names_both_sizes() {
    let data: Vec<u8> = (0..10u16).flat_map(|i| i.to_le_bytes()).collect();
    let e = bad_data("short.bin", &data, &[]);
    assert!(
        e.contains("10 tokens is shorter than one window of --seq + 1 = 17"),
        "{e}"
    );
}

#[test]
fn an_id_beyond_the_vocabulary_names_id_position_and_vocab() {
    // 40 tokens, all 5 except position 20 = 4000 (vocab 1000): every window of 17 holds it.
    let ids: Vec<String> = (0..40)
        .map(|i| {
            if i == 20 {
                "4000".into()
            } else {
                "5".to_string()
            }
        })
        .collect();
    let e = bad_data("ids.txt", ids.join(" ").as_bytes(), &[]);
    assert!(
        e.contains("token id 4000 at position 20 is outside the model's vocabulary of 1000"),
        "{e}"
    );
    let e = bad_data("ids2.txt", b"1 2 -3 4", &[]);
    assert!(e.contains("line 1: \"-3\" is not a token id"), "{e}");
}

#[test]
fn a_npy_of_floats_is_refused_by_its_dtype() {
    let e = bad_data("f.npy", &npy("<f4", "(64,)", &[0; 256]), &[]);
    assert!(
        e.contains(".npy dtype \"<f4\" is not an integer id type"),
        "{e}"
    );
    let e = bad_data("big.npy", &npy(">u2", "(64,)", &[0; 128]), &[]);
    assert!(e.contains("\">u2\""), "{e}");
    let e = bad_data("cut.npy", &npy("<u2", "(64,)", &[0; 100]), &[]);
    assert!(e.contains("needs 64 × 2 bytes but 100 bytes follow"), "{e}");
}
