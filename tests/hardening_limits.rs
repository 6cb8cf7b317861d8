//! Bounded reads, bounded work and interruptible waits, through the binary: a file read whole
//! is capped on the bytes read (not on metadata, 0 for /dev/zero); --grad-accum is bounded and
//! the estimate's cost does not grow with it; --roofs stays finite; a FIFO never blocks a run
//! and Ctrl-C always ends a wait; compare scales to Records of 10^5 samples per phase.

mod support;
use std::path::Path;
use std::time::{Duration, Instant};
use support::{fails_with, memscope, mkfifo, stderr_of};

#[test]
fn dev_zero_is_refused_at_once_by_every_whole_file_reader() {
    fails_with(
        &["estimate", "--config", "/dev/zero"],
        &["/dev/zero", "NUL byte"],
    );
    let a = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/bench-train.json"
    );
    fails_with(&["diff", "/dev/zero", a], &["/dev/zero", "NUL byte"]);
    fails_with(&["compare", a, "/dev/zero"], &["/dev/zero", "NUL byte"]);
    fails_with(&["scaling", "/dev/zero"], &["/dev/zero", "NUL byte"]);
    let dir = tempfile::tempdir().unwrap();
    let html = dir.path().join("r.html");
    fails_with(
        &["report", "/dev/zero", "-o", html.to_str().unwrap()],
        &["/dev/zero", "NUL byte"],
    );
}

#[test]
fn a_config_over_its_cap_names_the_cap_and_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("huge.json");
    std::fs::write(&p, vec![b' '; (16 << 20) + 1]).unwrap();
    fails_with(
        &["estimate", "--config", p.to_str().unwrap()],
        &["huge.json", "the cap on a config", "16.0 MiB"],
    );
}

#[test]
fn grad_accum_is_bounded_like_steps() {
    fails_with(
        &[
            "bench",
            "--model",
            "tiny-gpt2",
            "--grad-accum",
            "1000000",
            "-q",
        ],
        &["--grad-accum 1000000", "micro-batches", "1000000 at most"],
    );
    fails_with(
        &[
            "sweep",
            "--model",
            "tiny-gpt2",
            "--grad-accum",
            "1000000",
            "-q",
        ],
        &["--grad-accum 1000000", "nothing was run"],
    );
}

fn forward_flops(grad_accum: &str) -> u64 {
    let out = memscope()
        .args([
            "estimate",
            "--model",
            "tiny-gpt2",
            "--grad-accum",
            grad_accum,
            "--json",
            "-",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr_of(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    v["flops"]["forward"].as_u64().unwrap()
}

#[test]
fn the_estimate_of_a_million_micro_batches_is_quick_and_exact() {
    // Before: 30,000 micro-batches took 21 s and 6.5 GB (the replay was linear in them).
    let one = forward_flops("1");
    let started = Instant::now();
    assert_eq!(forward_flops("1000000"), one * 1_000_000);
    assert_eq!(forward_flops("5"), one * 5);
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn roofs_must_be_finite_ranges() {
    fails_with(
        &["roofline", "--model", "tiny-gpt2", "--roofs", "1e308:1"],
        &["--roofs 1e308:1", "between"],
    );
    fails_with(
        &["roofline", "--model", "tiny-gpt2", "--roofs", "1:inf"],
        &["--roofs 1:inf"],
    );
}

/// Starts `args`, waits until its stderr says `waiting` (or 4 s), sends `sig`, and returns its
/// exit status and stderr; fails if it is still running 10 s later.
fn interrupted(args: &[&str], sig: i32) -> (std::process::ExitStatus, String) {
    let dir = tempfile::tempdir().unwrap();
    let err_path = dir.path().join("err");
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("memscope"))
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&err_path).unwrap())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(3));
    unsafe { libc::kill(child.id() as i32, sig) };
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return (status, std::fs::read_to_string(&err_path).unwrap());
        }
        if Instant::now() > deadline {
            child.kill().unwrap();
            panic!("{args:?} still running 10 s after signal {sig}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn an_output_fifo_without_a_reader_never_blocks_signals() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("f");
    mkfifo(&f);
    let f = f.to_str().unwrap();
    // watch handles SIGINT/SIGTERM (it forwards them to its child); the wait still ends.
    for sig in [libc::SIGINT, libc::SIGTERM] {
        let (status, e) = interrupted(&["watch", "--json", f, "--", "true"], sig);
        assert!(!status.success(), "{e}");
        assert!(e.contains("waiting for a reader on the FIFO"), "{e}");
    }
    // A stream (written during the run) is refused at once.
    fails_with(
        &["watch", "--jsonl", f, "--", "true"],
        &["--jsonl", "nobody reads"],
    );
}

#[test]
fn a_config_fifo_without_a_writer_ends_on_ctrl_c() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("cfg");
    mkfifo(&f);
    let (status, e) = interrupted(
        &["bench", "--config", f.to_str().unwrap(), "-q"],
        libc::SIGINT,
    );
    assert!(!status.success(), "{e}");
}

/// The fixture Record with every timing phase given `n` samples around its own value.
fn big_record(path: &Path, n: usize, scale: f64) {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/bench-train.json"
    ))
    .unwrap();
    let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
    fn walk(v: &mut serde_json::Value, n: usize, scale: f64) {
        match v {
            serde_json::Value::Object(m) => {
                for (k, x) in m.iter_mut() {
                    match x {
                        serde_json::Value::Array(a) if k == "samples_ms" && !a.is_empty() => {
                            let first = a[0].as_f64().unwrap();
                            *a = (0..n)
                                .map(|i| {
                                    (first
                                        * scale
                                        * (1.0 + 0.05 * ((i * 7919) % 1000) as f64 / 1000.0))
                                        .into()
                                })
                                .collect();
                        }
                        _ => walk(x, n, scale),
                    }
                }
            }
            serde_json::Value::Array(a) => a.iter_mut().for_each(|x| walk(x, n, scale)),
            _ => {}
        }
    }
    walk(&mut v, n, scale);
    std::fs::write(path, serde_json::to_string(&v).unwrap()).unwrap();
}

#[test]
fn compare_scales_to_records_of_300000_samples_and_says_how() {
    // Before: more than 5 minutes (the bootstrap resampled all 300,000 values 10,000 times).
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a.json"), dir.path().join("b.json"));
    big_record(&a, 300_000, 1.0);
    big_record(&b, 300_000, 1.5);
    let out = memscope().arg("compare").arg(&a).arg(&b).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}{}", stderr_of(&out));
    assert!(text.contains("regressed"), "{text}");
    assert!(text.contains("bootstrapped 2000 at a time"), "{text}");
}

#[test]
fn unallocatable_batches_are_refused_alike_by_bench_sweep_and_estimate() {
    // Before: bench panicked ("capacity overflow", exit 101) or aborted (exit 134); sweep wrote
    // crash rows and exited 0.
    for b in [
        "4611686018427387904",
        "9223372036854775807",
        "1152921504606846976",
    ] {
        let what =
            format!("--batch {b} × --seq 128 × vocab 1000 × 4 bytes does not fit one tensor");
        fails_with(
            &[
                "bench",
                "--model",
                "tiny-gpt2",
                "--batch",
                b,
                "-q",
                "--force",
            ],
            &[&what],
        );
        fails_with(
            &["estimate", "--model", "tiny-gpt2", "--batch", b],
            &[&what],
        );
        let batches = format!("1,{b}");
        fails_with(
            &[
                "sweep",
                "--model",
                "tiny-gpt2",
                "--batch",
                &batches,
                "-q",
                "--force",
            ],
            &[&what, "nothing was run"],
        );
    }
    // Each tensor fits, their sum does not: the estimate's replay refuses it, for bench too.
    let big = [
        "--model",
        "tiny-gpt2",
        "--batch",
        "1099511627776",
        "--seq",
        "256",
    ];
    fails_with(&[&["estimate"][..], &big].concat(), &["beyond 2^63 bytes"]);
    fails_with(
        &[&["bench"][..], &big, &["--force", "-q"]].concat(),
        &["beyond 2^63 bytes", "nothing was allocated"],
    );
    fails_with(
        &[
            "estimate",
            "--model",
            "tiny-gpt2",
            "--threads",
            "9223372036854775807",
        ],
        &["--threads 9223372036854775807", "4096 at most"],
    );
}
