//! `memscope analyze` on the logs people really write, through the binary (issue 14): Python
//! logging lines, cumulative deltas, stdin, UTF-16LE, a header without rows, extreme values,
//! budget wording, scaling's truncated last row, and a warm-up end that does not depend on how
//! long the series ran.

mod support;
use support::memscope;

struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

fn analyze_bytes(body: &[u8], name: &str, extra: &[&str]) -> Run {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join(name);
    std::fs::write(&p, body).unwrap();
    let out = memscope()
        .arg("analyze")
        .arg(&p)
        .args(extra)
        .output()
        .unwrap();
    Run {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn analyze(body: &str, name: &str, extra: &[&str]) -> Run {
    analyze_bytes(body.as_bytes(), name, extra)
}

fn json_of(body: &str, name: &str, extra: &[&str]) -> (serde_json::Value, Run) {
    let dir = tempfile::tempdir().unwrap();
    let j = dir.path().join("v.json");
    let mut args = extra.to_vec();
    let js = j.to_str().unwrap().to_string();
    args.extend(["--json", js.as_str()]);
    let run = analyze(body, name, &args);
    assert_eq!(run.code, Some(0), "{}{}", run.stdout, run.stderr);
    let v = serde_json::from_str(&std::fs::read_to_string(&j).unwrap()).unwrap();
    (v, run)
}

/// Python logging's default format, memory growing 1 MB per step: a text log, not a CSV.
fn python_log(n: usize) -> String {
    (0..n)
        .map(|i| {
            format!(
                "2024-01-01 10:{:02}:{:02},123 - INFO - Step {i}: {} MB\n",
                i / 60,
                i % 60,
                1000 + i
            )
        })
        .collect()
}

#[test]
fn python_logging_lines_are_read_as_a_text_log() {
    let (v, run) = json_of(&python_log(80), "train.log", &[]);
    assert_eq!(v["n_samples"], 80, "{}", run.stderr);
    assert_eq!(v["verdict"], "leak", "{}", run.stdout);
    let slope = v["slope_bytes_per_step"].as_f64().unwrap();
    assert!((slope - 1e6).abs() < 1.0, "{slope}");
    // A log in MB is reported in MB, binary units beside it.
    assert!(
        run.stdout.contains("1.00 MB/step (977 KiB/step)"),
        "{}",
        run.stdout
    );
    // One sample per second in the timestamps: 3,600 steps per hour.
    assert!((v["steps_per_hour"].as_f64().unwrap() - 3600.0).abs() < 1e-6);
}

#[test]
fn a_file_no_format_reads_suggests_format_log_and_pattern() {
    let run = analyze(
        "training started\nepoch 1 done, memory fine\n",
        "notes.txt",
        &[],
    );
    assert_eq!(run.code, Some(2));
    assert!(
        run.stderr.contains("--format") && run.stderr.contains("--pattern"),
        "{}",
        run.stderr
    );
}

#[test]
fn a_cumulative_delta_table_is_recognised_and_judged() {
    let deltas = [
        -0.46, 0.02, -1.76, 0.31, -0.52, 0.12, -0.23, 0.41, -1.02, 0.22, 0.0, -0.31, 0.52, -0.12,
        0.24, -0.65, 0.33, -0.41, 0.18, -0.27,
    ];
    let mut t = String::from("run,cumulative_mb\n");
    for (i, d) in deltas.iter().enumerate() {
        t += &format!("{i},{d}\n");
    }
    let (v, run) = json_of(&t, "deltas.csv", &[]);
    assert_eq!(v["n_samples"], 20);
    assert_eq!(v["relative"], true);
    // 20 samples with ±0.5 MB of noise cannot rule out tens of KB per step (tens of MB per 1,000
    // steps): never "no leak", and never a leak either.
    assert_eq!(v["verdict"], "inconclusive", "{}", run.stdout);
    assert!(
        run.stdout.contains("could still be growing by up to"),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout.contains("relative to its baseline"),
        "the verdict says so: {}",
        run.stdout
    );
    assert!(
        v["plateau_min_bytes"].as_f64().unwrap() < 0.0,
        "negative values kept"
    );
    // The value column also by position.
    let t2 = t.replace("run,cumulative_mb", "run,whatever");
    let (v, _) = json_of(&t2, "deltas2.csv", &["--value-column", "2", "--unit", "MB"]);
    assert_eq!(v["n_samples"], 20);
}

#[test]
fn dash_reads_stdin() {
    let out = memscope()
        .args(["analyze", "-"])
        .write_stdin(python_log(40))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.starts_with("Leak"), "{stdout}");
}

#[test]
fn utf16le_header_only_and_one_column_files_name_the_problem() {
    let mut utf16 = vec![0xff, 0xfe];
    for u in "step,rss_mb\n0,100\n1,101\n".encode_utf16() {
        utf16.extend(u.to_le_bytes());
    }
    let run = analyze_bytes(&utf16, "win.csv", &[]);
    assert_eq!(run.code, Some(2));
    assert!(
        run.stderr.contains("UTF-16LE") && run.stderr.contains("iconv"),
        "{}",
        run.stderr
    );
    let run = analyze("step,rss_mb\n", "empty.csv", &[]);
    assert_eq!(run.code, Some(2));
    assert!(
        run.stderr
            .contains("header (step, rss_mb) but no data rows"),
        "{}",
        run.stderr
    );
    let run = analyze("loss\n2.5\n2.4\n2.3\n", "loss.csv", &[]);
    assert_eq!(run.code, Some(2));
    assert!(
        run.stderr.contains("one column, 'loss'") && run.stderr.contains("--value-column 1"),
        "{}",
        run.stderr
    );
    let run = analyze("step,rss_mb\n0,1\n1,2,3\n2,3\n", "ragged.csv", &[]);
    assert_eq!(run.code, Some(2));
    assert!(
        run.stderr.contains("line 3") && run.stderr.contains("ragged"),
        "{}",
        run.stderr
    );
}

#[test]
fn extreme_values_give_a_verdict_or_a_clear_error() {
    // Steps near 2^64: a verdict, and the window is printed in order.
    let base = u64::MAX - 1000;
    let mut t = String::from("step,rss_mb\n");
    for i in 0..100u64 {
        t += &format!("{},{}\n", base + i * 10, 1000 + (i % 3));
    }
    let (v, run) = json_of(&t, "big_steps.csv", &[]);
    assert_eq!(v["verdict"], "plateau", "{}", run.stdout);
    let (a, b) = (
        v["tail_start_step"].as_u64().unwrap(),
        v["last_step"].as_u64().unwrap(),
    );
    assert!(a >= base && a < b && b == base + 990, "{a}–{b}");
    // Values near f64::MAX: a clear error about the unit.
    let mut t = String::from("step,bytes\n");
    for i in 0..40 {
        t += &format!("{i},1.7e308\n");
    }
    let run = analyze(&t, "huge.csv", &[]);
    assert!(
        run.stdout.contains("more than any memory") && run.stdout.contains("--unit"),
        "{}{}",
        run.stdout,
        run.stderr
    );
    // Identical timestamps: a verdict, no rate per hour invented.
    let mut t = String::from("step,rss_mb,time\n");
    for i in 0..60 {
        t += &format!("{i},{},100\n", 500 + (i % 2));
    }
    let (v, _) = json_of(&t, "same_time.csv", &[]);
    assert_eq!(v["verdict"], "plateau");
    assert!(v["steps_per_hour"].is_null());
}

#[test]
fn budget_wording_says_already_reached_not_reached_or_unknown() {
    let mut plateau = String::from("step,rss_mb\n");
    for i in 0..120 {
        plateau += &format!("{i},{}\n", 3000 + (i * 7) % 5);
    }
    let run = analyze(&plateau, "p.csv", &["--budget", "1GB"]);
    assert!(run.stdout.contains("already reached"), "{}", run.stdout);
    let run = analyze(&plateau, "p.csv", &["--budget", "10GB"]);
    assert!(
        run.stdout.contains("not reached: memory does not grow"),
        "{}",
        run.stdout
    );
    let run = analyze("step,rss_mb\n0,1\n1,2\n", "two.csv", &["--budget", "10GB"]);
    assert!(
        run.stdout.contains("unknown: no trend was measured"),
        "{}",
        run.stdout
    );
    for r in [&run] {
        assert!(!r.stdout.contains("never at the measured slope"));
    }
}

/// The scripts/gen_series.py process in Rust: RSS rises by 1,500 MB with time constant 100 steps,
/// then stays level with seeded noise (σ 2 MB). The first samples are the same whatever `n`.
fn warmup_process(n: usize) -> String {
    let mut s: u64 = 14;
    let mut unif = move || {
        s = s
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((s >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    };
    let mut out = String::from("step,rss_mb\n");
    for i in 0..n {
        // Box–Muller.
        let g = (-2.0 * unif().ln()).sqrt() * (2.0 * std::f64::consts::PI * unif()).cos();
        let v = 2000.0 + 1500.0 * (1.0 - (-(i as f64) / 100.0).exp()) + 2.0 * g;
        out += &format!("{i},{v:.2}\n");
    }
    out
}

#[test]
fn warmup_end_is_the_same_at_1e3_and_1e5_samples() {
    let (short, _) = json_of(&warmup_process(1_000), "short.csv", &[]);
    let (long, _) = json_of(&warmup_process(100_000), "long.csv", &[]);
    let a = short["warmup_end_step"].as_u64().unwrap();
    let b = long["warmup_end_step"].as_u64().unwrap();
    assert!(
        (400..=560).contains(&a) && (400..=560).contains(&b),
        "{a} and {b}"
    );
    assert!(a.abs_diff(b) <= 40, "1e3: {a}, 1e5: {b}");
    assert_eq!(short["verdict"], "plateau");
    assert_eq!(long["verdict"], "plateau");
}

#[test]
fn scaling_skips_a_truncated_last_row_with_a_warning() {
    let dir = tempfile::tempdir().unwrap();
    let jsonl = dir.path().join("r.jsonl");
    let out = memscope()
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
            "1",
            "--threads",
            "1",
            "--quiet",
            "--jsonl",
        ])
        .arg(&jsonl)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let full = std::fs::read_to_string(&jsonl).unwrap();
    let lines: Vec<&str> = full.lines().collect();
    assert_eq!(lines.len(), 2);
    let cut = format!("{}\n{}", lines[0], &lines[1][..lines[1].len() / 2]);
    std::fs::write(&jsonl, &cut).unwrap();
    let out = memscope().arg("scaling").arg(&jsonl).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains(":2:") && err.contains("truncated"), "{err}");
    // A corrupt row that is not the last is still an error with its line number.
    std::fs::write(&jsonl, format!("{}\n{}\n", &lines[0][..10], lines[1])).unwrap();
    let out = memscope().arg("scaling").arg(&jsonl).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains(":1:"));
}
