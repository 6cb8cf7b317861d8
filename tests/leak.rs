//! `memscope leak` on real workloads and `memscope analyze` on files, end to end.

mod support;
use serde_json::Value;
use support::memscope;

fn verdict_of(args: &[&str], env: Option<(&str, &str)>) -> (Value, i32, String) {
    let dir = tempfile::tempdir().unwrap();
    let j = dir.path().join("v.json");
    let mut cmd = memscope();
    if let Some((k, v)) = env {
        cmd.env(k, v);
    }
    let out = cmd
        .args(args)
        .args(["--json", j.to_str().unwrap(), "-q"])
        .output()
        .unwrap();
    let code = out.status.code().unwrap();
    assert!(
        code == 0 || code == 1,
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v = serde_json::from_str(&std::fs::read_to_string(&j).unwrap()).unwrap();
    (v, code, String::from_utf8(out.stdout).unwrap())
}

#[test]
fn every_tiny_model_plateaus_over_300_identical_steps() {
    for (model, mode) in [
        ("tiny-gpt2", "train"),
        ("tiny-llama", "generate"),
        ("tiny-bert", "infer"),
    ] {
        let args = [
            "leak",
            "--model",
            model,
            "--mode",
            mode,
            "--batch",
            "1",
            "--seq",
            "16",
            "--new-tokens",
            "4",
        ];
        let (v, code, text) = verdict_of(
            &[
                &args[..],
                &["--steps", "300", "--max-growth-per-step", "64KiB"],
            ]
            .concat(),
            None,
        );
        assert_eq!(v["verdict"], "plateau", "{model} {mode}:\n{text}");
        assert_eq!(code, 0, "{model}: a passing target must exit 0");
        assert!(
            text.starts_with("No leak"),
            "the verdict sentence comes first:\n{text}"
        );
    }
}

#[test]
fn a_tensor_retained_every_step_is_a_leak_with_the_right_slope() {
    let injected = 262_144.0;
    let (v, code, text) = verdict_of(
        &[
            "leak",
            "--model",
            "tiny-llama",
            "--mode",
            "infer",
            "--seq",
            "16",
            "--steps",
            "300",
            "--max-growth-per-step",
            "64KiB",
        ],
        Some(("MEMSCOPE_TEST_LEAK_BYTES", "262144")),
    );
    assert_eq!(v["verdict"], "leak", "{text}");
    let slope = v["slope_bytes_per_step"].as_f64().unwrap();
    assert!(
        (slope - injected).abs() / injected < 0.1,
        "slope {slope} vs {injected}"
    );
    let ci = v["slope_ci_bytes_per_step"].as_array().unwrap();
    assert!(ci[0].as_f64().unwrap() > 0.0);
    assert_eq!(code, 1, "a failed target must exit 1:\n{text}");
    assert!(
        text.contains("| Metric | Target | Achieved | Status |") && text.contains("FAIL"),
        "{text}"
    );
}

fn analyze(text: &str, name: &str, extra: &[&str]) -> std::process::Output {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join(name);
    std::fs::write(&p, text).unwrap();
    memscope()
        .arg("analyze")
        .arg(&p)
        .args(extra)
        .output()
        .unwrap()
}

/// 12 GB of warm-up growth over 90 steps, then flat within ~0.7 GB: the team that restarted
/// at step 70 should have waited.
fn warmup_story_csv(last_step: usize) -> String {
    let mut s = String::from("step,memory_mb\n");
    for step in 0..=last_step {
        let warm = 12_000.0 * (1.0 - (-(step as f64) / 12.0).exp());
        let wiggle = ((step * 37) % 11) as f64 * 30.0;
        s += &format!("{step},{:.1}\n", 5_000.0 + warm + wiggle);
    }
    s
}

#[test]
fn analyze_tells_warmup_from_a_leak_in_a_csv() {
    let out = analyze(
        &warmup_story_csv(240),
        "story.csv",
        &["--max-growth-per-step", "1MiB"],
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.starts_with("No leak"), "{text}");
    // Cut off mid warm-up, the same process must never be called a plateau.
    let out = analyze(&warmup_story_csv(40), "cut.csv", &[]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(!text.starts_with("No leak"), "{text}");
}

#[test]
fn analyze_reads_a_text_log_with_a_pattern_and_thousands_separators() {
    let mut log = String::new();
    for step in (0..300).step_by(10) {
        log += &format!(
            "[info] Step {step}: {} MB allocated\n",
            group(4_000 + step * 3)
        );
    }
    let out = analyze(
        &log,
        "train.log",
        &[
            "--pattern",
            r"Step (?P<step>\d+):\s+(?P<value>[\d,]+) MB",
            "--unit",
            "MiB",
        ],
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.starts_with("Leak"),
        "3 MiB per 10 steps, to the end: {text}"
    );
}

fn group(n: usize) -> String {
    let s = n.to_string();
    if s.len() > 3 {
        format!("{},{}", &s[..s.len() - 3], &s[s.len() - 3..])
    } else {
        s
    }
}

#[test]
fn bad_logs_give_the_line_number_and_a_truncated_tail_only_warns() {
    let mut good = String::from("step,bytes\n");
    for i in 0..40 {
        good += &format!("{i},{}\n", 1_000_000 + i);
    }
    for (body, needle) in [
        (format!("{good}40,NaN\n41,5\n"), "line 42"),
        (format!("{good}40,inf\n41,5\n"), "line 42"),
        (format!("{good}40,1e400\n41,5\n"), "line 42"),
        (format!("{good}40,-1e400\n41,5\n"), "line 42"),
        (format!("{good}3,5\n41,5\n"), "line 42"),
        (format!("{good}40,hello\n41,5\n"), "line 42"),
    ] {
        let out = analyze(&body, "bad.csv", &[]);
        let err = String::from_utf8(out.stderr).unwrap();
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains(needle) && err.contains("bad.csv"), "{err}");
    }
    let out = analyze(&format!("{good}40,10"), "cut.csv", &[]);
    assert!(out.status.success());
    let _ = String::from_utf8(out.stderr).unwrap();
}

/// A seeded series as a CSV: `f(step)` plus Gaussian noise `sigma` (xorshift + Box–Muller).
fn seeded_csv(n: usize, seed: u64, sigma: f64, f: impl Fn(f64) -> f64) -> String {
    let mut s = seed.max(1);
    let mut unif = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        ((s >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    };
    let mut out = String::from("step,bytes\n");
    for i in 0..n {
        let g = (-2.0 * unif().ln()).sqrt() * (std::f64::consts::TAU * unif()).cos();
        out += &format!("{i},{:.0}\n", f(i as f64) + sigma * g);
    }
    out
}

#[test]
fn analyze_never_says_no_leak_about_a_slow_steady_leak() {
    // Exactly 1 KiB/step: 300 KiB over the run, under the 8 MiB plateau margin.
    let out = analyze(
        &seeded_csv(300, 1, 0.0, |t| 1073741824.0 + 1024.0 * t),
        "kib.csv",
        &[],
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.starts_with("Leak: memory keeps growing by 1.00 KiB/step"),
        "{text}"
    );
    // With 64 KiB of noise: a leak, or inconclusive with the rate it could still be.
    for seed in 1..6 {
        let csv = seeded_csv(300, seed, 65536.0, |t| 1073741824.0 + 1024.0 * t);
        let text = String::from_utf8(analyze(&csv, "n.csv", &[]).stdout).unwrap();
        assert!(!text.starts_with("No leak"), "seed {seed}: {text}");
    }
}

#[test]
fn analyze_calls_a_saturating_warmup_with_a_sawtooth_a_plateau() {
    for seed in 1..4 {
        let csv = seeded_csv(400, seed, 2.0 * 1048576.0, |t| {
            1073741824.0 * (2.0 - (-t / 30.0).exp())
                + 64.0 * 1048576.0 * ((t as u64 % 13) as f64 / 12.0)
        });
        let text =
            String::from_utf8(analyze(&csv, "sat.csv", &["--max-growth-per-step", "64KiB"]).stdout)
                .unwrap();
        assert!(
            text.starts_with("No leak: memory grew"),
            "seed {seed}: {text}"
        );
        assert!(text.contains("saturating approach"), "{text}");
    }
}

#[test]
fn targets_on_heap_figures_are_refused_with_counting_off() {
    let out = memscope()
        .env("MEMSCOPE_NO_COUNT", "1")
        .args([
            "leak",
            "--model",
            "tiny-gpt2",
            "--steps",
            "20",
            "--max-peak",
            "1KB",
            "-q",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("--max-peak") && err.contains("MEMSCOPE_NO_COUNT"),
        "{err}"
    );
}
