//! `memscope sweep` and `memscope fit` end to end: real worker processes, tiny presets, real
//! memory limits, injected faults (MEMSCOPE_TEST_FAULT), a parent killed mid-sweep.

mod support;
use assert_cmd::cargo::cargo_bin;
use serde_json::Value;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use support::rows;

fn memscope() -> Command {
    let mut c = Command::new(cargo_bin("memscope"));
    c.env_remove("MEMSCOPE_TEST_FAULT")
        .env_remove("MEMSCOPE_TEST_WATCHDOG_ONLY")
        .env("RUST_BACKTRACE", "1"); // a backtrace must not hide the evidence
    c
}

/// One tiny configuration with a fault injected after its first step → its row.
fn fault_row(fault: &str, extra: &[&str], env: &[(&str, &str)]) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let jsonl = dir.path().join("rows.jsonl");
    let mut c = memscope();
    c.args([
        "sweep",
        "--model",
        "tiny-gpt2",
        "--batch",
        "1",
        "--seq",
        "16",
        "--warmup",
        "0",
        "--steps",
        "3",
        "--threads",
        "1",
        "--quiet",
        "--jsonl",
    ])
    .arg(&jsonl)
    .args(extra)
    .env("MEMSCOPE_TEST_FAULT", fault);
    for (k, v) in env {
        c.env(k, v);
    }
    let out = c.output().unwrap();
    assert!(
        out.status.success(),
        "{fault}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r = rows(&jsonl);
    assert_eq!(r.len(), 1, "{fault}");
    r[0].clone()
}

fn status_reason(r: &Value) -> (String, String) {
    (
        r["status"].as_str().unwrap().to_string(),
        r["reason"].as_str().unwrap_or("").to_string(),
    )
}

#[test]
fn one_configuration_over_the_memory_limit_is_an_oom_row_and_the_sweep_carries_on() {
    let dir = tempfile::tempdir().unwrap();
    let (jsonl, csv, md) = (
        dir.path().join("rows.jsonl"),
        dir.path().join("rows.csv"),
        dir.path().join("rows.md"),
    );
    // Plan order: (s32 b1) ok, (s32 b32) over 110 MiB, (s64 b1) ok (not larger on batch),
    // (s64 b32) skipped after the oom.
    let out = memscope()
        .args([
            "sweep",
            "--model",
            "tiny-gpt2",
            "--batch",
            "1,32",
            "--seq",
            "32,64",
            "--warmup",
            "0",
            "--steps",
            "1",
            "--threads",
            "1",
            "--memory-limit",
            "110MiB",
            "--quiet",
            "--jsonl",
        ])
        .arg(&jsonl)
        .arg("--csv")
        .arg(&csv)
        .arg("--markdown")
        .arg(&md)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r = rows(&jsonl);
    assert_eq!(r.len(), 4, "one row per configuration");
    let statuses: Vec<&str> = r.iter().map(|r| r["status"].as_str().unwrap()).collect();
    assert_eq!(statuses, ["ok", "oom", "ok", "skipped"]);
    let idx: Vec<u64> = r.iter().map(|r| r["index"].as_u64().unwrap()).collect();
    assert_eq!(idx, [0, 1, 2, 3]);
    assert!(r[1]["reason"]
        .as_str()
        .unwrap()
        .contains("memory allocation of"));
    assert_eq!(r[3]["reason"], "oom at batch 32 seq 32");
    // ok rows carry the full spec and the worker's own figures.
    assert_eq!(r[0]["spec"]["batch"], 1);
    assert!(r[0]["summary"]["rss_peak_bytes"].as_u64().unwrap() > 0);
    assert!(r[0]["summary"]["heap_peak_bytes"].as_u64().unwrap() > 0);
    assert_eq!(r[0]["enforcement"], "RLIMIT_DATA + PSS watchdog");
    assert!(stdout.contains("enforced by RLIMIT_DATA"), "{stdout}");
    let csv_text = std::fs::read_to_string(&csv).unwrap();
    assert_eq!(csv_text.lines().count(), 5);
    // Each row says which engine, device and plan made it, and what its heap figures count.
    let lines: Vec<&str> = csv_text.lines().collect();
    assert!(
        lines[0].ends_with(",engine,device,plan,world,heap_measures"),
        "{}",
        lines[0]
    );
    assert!(
        lines[1].ends_with(",candle,cpu,,1,heap (counting allocator)"),
        "{}",
        lines[1]
    );
    assert!(std::fs::read_to_string(&md).unwrap().contains("| oom |"));

    // `memscope scaling` reads the rows back.
    let s = memscope().arg("scaling").arg(&jsonl).output().unwrap();
    assert!(s.status.success());
    assert!(String::from_utf8_lossy(&s.stdout)
        .contains("| Seq | Batch | Peak MiB | Memory per token | Scaling |"));
}

#[test]
fn each_injected_fault_gets_its_own_status() {
    let (s, r) = status_reason(&fault_row("panic", &[], &[]));
    assert_eq!(s, "crash");
    assert!(r.starts_with("panic: injected test fault"), "{r}");

    let row = fault_row("segfault", &[], &[]);
    assert_eq!(status_reason(&row).0, "crash");
    assert_eq!(row["signal_name"], "SIGSEGV");

    let row = fault_row("abort", &[], &[]);
    assert_eq!(
        status_reason(&row),
        ("crash".into(), "aborted (SIGABRT)".into())
    );

    let (s, r) = status_reason(&fault_row("stack", &[], &[]));
    assert_eq!(s, "crash");
    assert!(r.starts_with("stack overflow"), "{r}");

    let row = fault_row("hang", &["--timeout", "1s"], &[]);
    assert_eq!(status_reason(&row).0, "timeout");
    assert!(row["wall_seconds"].as_f64().unwrap() < 4.0);

    // Allocation failure under RLIMIT_DATA, with the series it reached (one step).
    let row = fault_row("alloc", &["--memory-limit", "300MiB"], &[]);
    let (s, r) = status_reason(&row);
    assert_eq!(s, "oom");
    assert!(r.starts_with("memory allocation of"), "{r}");
    assert_eq!(
        row["series"].as_array().unwrap().len(),
        1,
        "partial series kept"
    );

    // The PSS watchdog alone (no RLIMIT_DATA).
    let row = fault_row(
        "alloc",
        &["--memory-limit", "300MiB"],
        &[("MEMSCOPE_TEST_WATCHDOG_ONLY", "1")],
    );
    let (s, r) = status_reason(&row);
    assert_eq!(s, "oom");
    assert!(r.contains("killed by the watchdog"), "{r}");
    assert_eq!(row["signal_name"], "SIGKILL");
}

fn children_of(parent: u32) -> Vec<u32> {
    let mut out = vec![];
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // pid (comm) state ppid …: comm may hold spaces, so split after the last ')'.
        let rest = &stat[stat.rfind(')').unwrap() + 2..];
        let ppid: u32 = rest.split(' ').nth(1).unwrap().parse().unwrap();
        if ppid == parent {
            out.push(pid);
        }
    }
    out
}

/// Gone, or a zombie waiting for a reaper that is not ours (the container's init may not reap).
fn dead(pid: u32) -> bool {
    let alive = unsafe { libc::kill(pid as i32, 0) } == 0;
    if !alive {
        return true;
    }
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| s[s.rfind(')').unwrap() + 2..].starts_with('Z'))
        .unwrap_or(true)
}

/// Starts a sweep whose second worker hangs; returns (parent, the hanging worker's pid, jsonl).
fn sweep_with_a_hanging_second_worker(
    dir: &Path,
) -> (std::process::Child, u32, std::path::PathBuf) {
    let jsonl = dir.join("rows.jsonl");
    let mut parent = memscope()
        .args([
            "sweep",
            "--model",
            "tiny-gpt2",
            "--batch",
            "1,2,3",
            "--seq",
            "16",
            "--warmup",
            "0",
            "--steps",
            "2",
            "--threads",
            "1",
            "--quiet",
            "--jsonl",
        ])
        .arg(&jsonl)
        .env("MEMSCOPE_TEST_FAULT", "hang@1")
        // The sweep's scratch directory inside the test's own: a parent killed outright leaves
        // it behind (no handler runs), and the tempdir takes it away.
        .env("TMPDIR", dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    loop {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "the sweep never reached its second worker"
        );
        if rows(&jsonl).len() == 1 {
            if let Some(&w) = children_of(parent.id()).first() {
                let cmd = std::fs::read_to_string(format!("/proc/{w}/cmdline")).unwrap_or_default();
                if cmd.contains("worker") && cmd.contains("\u{0}1\u{0}") {
                    return (parent, w, jsonl);
                }
            }
        }
        assert!(
            parent.try_wait().unwrap().is_none(),
            "the sweep ended early"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn sigterm_on_the_parent_kills_the_worker_keeps_finished_rows_and_exits_130() {
    let dir = tempfile::tempdir().unwrap();
    let (mut parent, worker, jsonl) = sweep_with_a_hanging_second_worker(dir.path());
    unsafe { libc::kill(parent.id() as i32, libc::SIGTERM) };
    let status = parent.wait().unwrap();
    assert_eq!(status.code(), Some(130));
    assert!(dead(worker), "worker {worker} survived its parent");
    let r = rows(&jsonl);
    assert_eq!(r.len(), 1, "only the finished configuration is a row");
    assert_eq!(r[0]["status"], "ok");
}

#[test]
fn a_worker_dies_with_a_parent_killed_outright() {
    let dir = tempfile::tempdir().unwrap();
    let (mut parent, worker, _) = sweep_with_a_hanging_second_worker(dir.path());
    parent.kill().unwrap(); // SIGKILL: no handler runs; PR_SET_PDEATHSIG must do it
    parent.wait().unwrap();
    let t0 = Instant::now();
    while !dead(worker) {
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "worker {worker} outlived a SIGKILLed parent"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn fit_finds_a_batch_that_runs_while_twice_it_is_oom() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("fit.json");
    let out = memscope()
        .args([
            "fit",
            "--model",
            "tiny-gpt2",
            "--seq",
            "16",
            "--threads",
            "1",
            "--memory-limit",
            "110MiB",
            "--quiet",
            "--json",
        ])
        .arg(&json)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let fit: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let b = fit["max_batch"].as_u64().unwrap();
    assert!(b >= 1);
    assert_eq!(fit["first_oom"].as_u64().unwrap(), b + 1);
    // Size 1 first (it measures what the worker holds beyond its heap), then where the estimate
    // puts the heap peak at the limit.
    let start = fit["estimated_start"].as_u64().expect("estimated_start");
    assert!(start > 1, "{start}");
    assert_eq!(fit["trials"][0]["spec"]["batch"], 1);
    assert_eq!(fit["trials"][1]["spec"]["batch"], start);
    // The answer ran (its last run confirms it: a search run near the limit can go either way).
    let ok_at_b = fit["trials"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["spec"]["batch"] == b && t["status"] == "ok")
        .count();
    assert!(ok_at_b >= 1, "no ok run at batch {b}");
    let last_at_b = fit["trials"]
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .find(|t| t["spec"]["batch"] == b)
        .unwrap();
    assert_eq!(last_at_b["status"], "ok");
    assert!(String::from_utf8_lossy(&out.stdout).contains(&format!("max_batch = {b}")));

    let jsonl = dir.path().join("check.jsonl");
    let out = memscope()
        .args([
            "sweep",
            "--model",
            "tiny-gpt2",
            "--seq",
            "16",
            "--warmup",
            "1",
            "--steps",
            "1",
            "--threads",
            "1",
            "--memory-limit",
            "110MiB",
            "--quiet",
            "--no-skip",
            "--batch",
        ])
        .arg((2 * b).to_string())
        .arg("--jsonl")
        .arg(&jsonl)
        .output()
        .unwrap();
    assert!(out.status.success());
    let statuses: Vec<String> = rows(&jsonl)
        .iter()
        .map(|r| r["status"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(statuses, ["oom"], "twice the answer does not fit");
}

#[test]
fn invalid_configurations_are_error_rows_and_bad_flags_name_themselves() {
    let dir = tempfile::tempdir().unwrap();
    let jsonl = dir.path().join("rows.jsonl");
    // tiny-gpt2's context is 256: seq 512 is an error row, seq 16 runs.
    let out = memscope()
        .args([
            "sweep",
            "--model",
            "tiny-gpt2",
            "--batch",
            "1",
            "--seq",
            "16,512",
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
    assert!(out.status.success());
    let r = rows(&jsonl);
    assert_eq!(r[0]["status"], "ok");
    assert_eq!(r[1]["status"], "error");
    assert!(r[1]["reason"].as_str().unwrap().starts_with("--seq 512"));

    let bad = memscope()
        .args(["sweep", "--model", "tiny-gpt2", "--memory-limit", "8 gigs"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--memory-limit 8 gigs"));
    let bad = memscope()
        .args(["sweep", "--model", "tiny-gpt2", "--batch", "1,,2"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--batch"));
}
