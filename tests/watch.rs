//! `memscope watch` on real Python children (standard library only): the verdicts, the summed tree,
//! exit codes and signals, `--pid`, byte-for-byte output, Ctrl-C forwarding, a killed watcher's
//! `--jsonl`, and the GPU columns' `unavailable` wording where there is no NVIDIA driver. Short
//! runs (20 ms samples, a few seconds each); the only timing is a generous hang guard.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

#[path = "support/trace_check.rs"]
mod trace_check;

const BIN: &str = env!("CARGO_BIN_EXE_memscope");
const HANG: Duration = Duration::from_secs(90);

fn fixture(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
        .to_string_lossy()
        .into_owned()
}

/// A Python script in a temp dir.
fn script(dir: &tempfile::TempDir, name: &str, text: &str) -> String {
    let p = dir.path().join(name);
    std::fs::write(&p, text).unwrap();
    p.to_string_lossy().into_owned()
}

/// Waits (reading the pipes, so a large output cannot block the child) with a hang guard.
fn wait_guarded(c: Child) -> Output {
    let pid = c.id() as i32;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || tx.send(c.wait_with_output().unwrap()));
    match rx.recv_timeout(HANG) {
        Ok(o) => o,
        Err(_) => {
            unsafe { libc::kill(pid, libc::SIGKILL) };
            panic!("memscope watch hung");
        }
    }
}

fn watch(args: &[&str]) -> Output {
    let c = Command::new(BIN)
        .arg("watch")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_guarded(c)
}

/// The command's output (stdout) followed by memscope's report (stderr).
fn text(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr)
}

fn json(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[test]
fn warm_up_then_plateau_is_a_plateau_judged_per_step() {
    let dir = tempfile::tempdir().unwrap();
    let j = dir.path().join("w.json");
    let o = watch(&[
        "--interval",
        "20ms",
        "--json",
        j.to_str().unwrap(),
        "--",
        "python3",
        &fixture("watch_plateau.py"),
        "60",
        "0.03",
    ]);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(0), "{t}");
    assert!(t.contains("step 60\n"), "child output passed through: {t}");
    assert!(
        t.contains("Verdict                     plateau (summed RSS)"),
        "{t}"
    );
    assert!(
        t.contains("per step: the first sample after each step marker"),
        "{t}"
    );
    let v = json(&j);
    assert_eq!(v["verdict"]["verdict"], "plateau");
    assert_eq!(v["exit"]["code"], 0);
    assert!(v["step_markers"].as_array().unwrap().len() == 60);
    assert!(v["environment"]["cpu_model"].is_string());
}

#[test]
fn one_mib_per_step_is_a_leak_and_a_max_growth_target_fails_with_exit_1() {
    let o = watch(&[
        "--interval",
        "20ms",
        "--max-growth-per-step",
        "256KiB",
        "--",
        "python3",
        &fixture("watch_leak.py"),
        "60",
        "0.03",
    ]);
    let t = text(&o);
    assert!(
        t.contains("Verdict                     leak (summed RSS)"),
        "{t}"
    );
    assert!(t.contains("1.00 MiB/step") || t.contains("1,0"), "{t}");
    assert_eq!(
        o.status.code(),
        Some(1),
        "a failed --max-* target exits 1: {t}"
    );
}

#[test]
fn a_multiprocessing_pool_is_summed_and_each_worker_listed() {
    let dir = tempfile::tempdir().unwrap();
    let s = script(
        &dir,
        "pool.py",
        r#"
import multiprocessing as mp, time
def work(i):
    b = bytearray(8 << 20)
    time.sleep(0.6)
    return len(b)
if __name__ == "__main__":
    with mp.Pool(3) as p:
        print(sum(p.map(work, range(3))), flush=True)
"#,
    );
    let j = dir.path().join("w.json");
    let o = watch(&[
        "--interval",
        "20ms",
        "--json",
        j.to_str().unwrap(),
        "--",
        "python3",
        &s,
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let v = json(&j);
    let series = v["series"].as_array().unwrap();
    let most = series
        .iter()
        .max_by_key(|s| s["total"]["processes"].as_u64().unwrap())
        .unwrap();
    assert!(
        most["total"]["processes"].as_u64().unwrap() >= 4,
        "parent + 3 workers: {most}"
    );
    let sum: u64 = most["processes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["rss_bytes"].as_u64().unwrap())
        .sum();
    assert_eq!(most["total"]["rss_bytes"].as_u64().unwrap(), sum);
    let pythons = v["peaks_per_process"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["command"].as_str().unwrap().starts_with("python"))
        .count();
    assert!(
        pythons >= 4,
        "each worker has its own peak: {}",
        v["peaks_per_process"]
    );
    assert!(text(&o).matches("peak RSS").count() >= 4);
}

#[test]
fn a_child_killed_by_a_signal_returns_128_plus_the_signal() {
    let dir = tempfile::tempdir().unwrap();
    let s = script(
        &dir,
        "die.py",
        "import os, signal\nos.kill(os.getpid(), signal.SIGTERM)\n",
    );
    let o = watch(&["--interval", "20ms", "--", "python3", &s]);
    assert_eq!(o.status.code(), Some(128 + 15), "{}", text(&o));
    assert!(
        text(&o).contains("Command: killed by SIGTERM"),
        "{}",
        text(&o)
    );
}

#[test]
fn the_childs_exit_code_comes_back() {
    let dir = tempfile::tempdir().unwrap();
    let s = script(&dir, "three.py", "import sys\nprint('bye')\nsys.exit(3)\n");
    let o = watch(&["--interval", "20ms", "--", "python3", &s]);
    assert_eq!(o.status.code(), Some(3));
    assert!(text(&o).starts_with("bye\n"));
    assert!(text(&o).contains("Command: exited with code 3"));
}

#[test]
fn pid_attaches_to_a_running_process_and_exits_0_when_it_ends() {
    let dir = tempfile::tempdir().unwrap();
    let s = script(
        &dir,
        "sleeper.py",
        "import time\nb = bytearray(4 << 20)\ntime.sleep(1.5)\nraise SystemExit(5)\n",
    );
    let mut c = Command::new("python3").arg(&s).spawn().unwrap();
    let pid = c.id().to_string();
    std::thread::sleep(Duration::from_millis(200));
    let o = watch(&["--interval", "20ms", "--pid", &pid]);
    let _ = c.wait();
    let t = text(&o);
    assert_eq!(o.status.code(), Some(0), "--pid mode exits 0: {t}");
    assert!(t.contains(&format!("Process {pid} ended")), "{t}");
    assert!(t.contains("Verdict"), "{t}");
}

#[test]
fn stdout_passes_through_byte_for_byte() {
    let dir = tempfile::tempdir().unwrap();
    let s = script(
        &dir,
        "blob.py",
        r#"
import sys, time
out = sys.stdout.buffer
blob = bytes(range(256)) * 300 + b"\r\nstep 1\n\x00\xff no newline at the end"
out.write(blob[:1000]); out.flush(); time.sleep(0.05)
out.write(blob[1000:]); out.flush()
sys.stderr.write("to stderr\n")
"#,
    );
    let o = watch(&["--interval", "20ms", "--", "python3", &s]);
    let mut blob: Vec<u8> = (0..=255u8).collect::<Vec<u8>>().repeat(300);
    blob.extend_from_slice(b"\r\nstep 1\n\x00\xff no newline at the end");
    // Exactly the child's bytes: memscope's report goes to stderr, never into this stream.
    assert!(o.stdout == blob, "stdout differs from the child's bytes");
    assert!(String::from_utf8_lossy(&o.stderr).contains("── memscope watch ──"));
    assert!(String::from_utf8_lossy(&o.stderr).contains("to stderr\n"));
}

#[test]
fn sigint_to_watch_is_forwarded_and_the_outputs_are_still_written() {
    let dir = tempfile::tempdir().unwrap();
    let s = script(
        &dir,
        "int.py",
        r#"
import time, sys
try:
    print("ready", flush=True)
    time.sleep(60)
except KeyboardInterrupt:
    print("child got SIGINT", flush=True)
    sys.exit(7)
"#,
    );
    let j = dir.path().join("w.json");
    let csv = dir.path().join("w.csv");
    let mut c = Command::new(BIN)
        .args([
            "watch",
            "--interval",
            "20ms",
            "--json",
            j.to_str().unwrap(),
            "--csv",
        ])
        .arg(&csv)
        .args(["--", "python3", &s])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = c.stdout.take().unwrap();
    let mut seen = Vec::new();
    let mut buf = [0u8; 256];
    while !String::from_utf8_lossy(&seen).contains("ready") {
        let n = out.read(&mut buf).unwrap();
        assert!(n > 0, "the child never started");
        seen.extend_from_slice(&buf[..n]);
    }
    unsafe { libc::kill(c.id() as i32, libc::SIGINT) };
    let mut rest = Vec::new();
    out.read_to_end(&mut rest).unwrap();
    seen.extend_from_slice(&rest);
    let o = wait_guarded(c);
    // The child's output (stdout), then memscope's report (stderr).
    let t = String::from_utf8_lossy(&seen).into_owned() + &String::from_utf8_lossy(&o.stderr);
    assert!(t.contains("child got SIGINT"), "{t}");
    assert!(
        t.contains("after memscope watch received SIGINT and forwarded it"),
        "{t}"
    );
    assert_eq!(o.status.code(), Some(7), "{t}");
    assert_eq!(json(&j)["interrupted_by"], "SIGINT");
    assert!(std::fs::read_to_string(&csv)
        .unwrap()
        .starts_with("time_s,step,pid,"));
}

#[test]
fn a_watcher_killed_mid_run_leaves_a_valid_jsonl_prefix() {
    let dir = tempfile::tempdir().unwrap();
    let s = script(&dir, "long.py", "import time\ntime.sleep(30)\n");
    let l: PathBuf = dir.path().join("w.jsonl");
    let mut c = Command::new(BIN)
        .args([
            "watch",
            "--interval",
            "20ms",
            "--jsonl",
            l.to_str().unwrap(),
            "--",
            "python3",
            &s,
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while std::fs::read_to_string(&l).map_or(0, |t| t.lines().count()) < 5 {
        assert!(start.elapsed() < HANG, "no samples written");
        std::thread::sleep(Duration::from_millis(20));
    }
    c.kill().unwrap(); // SIGKILL
    c.wait().unwrap();
    let text = std::fs::read_to_string(&l).unwrap();
    let mut pids = Vec::new();
    let complete: Vec<&str> = text
        .split_inclusive('\n')
        .filter(|l| l.ends_with('\n'))
        .collect();
    assert!(complete.len() >= 5);
    for line in complete {
        let v: serde_json::Value = serde_json::from_str(line).expect("every complete line is JSON");
        assert!(v["total"]["rss_bytes"].as_u64().unwrap() > 0);
        for p in v["processes"].as_array().unwrap() {
            pids.push(p["pid"].as_u64().unwrap() as i32);
        }
    }
    for p in pids {
        unsafe { libc::kill(p, libc::SIGKILL) }; // the orphaned child
    }
}

#[test]
fn without_an_nvidia_driver_the_gpu_columns_say_unavailable_and_why() {
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("w.csv");
    let o = watch(&[
        "--interval",
        "20ms",
        "--csv",
        csv.to_str().unwrap(),
        "--",
        "python3",
        "-c",
        "print('step 1')",
    ]);
    let t = text(&o);
    if t.contains("GPU memory: available (") {
        return; // this machine has NVML: nothing to assert about its absence
    }
    assert!(
        t.contains(
            "GPU memory: unavailable (no NVIDIA driver: libnvidia-ml.so.1 could not be loaded"
        ),
        "{t}"
    );
    let c = std::fs::read_to_string(&csv).unwrap();
    let total = c.lines().find(|l| l.contains(",total,")).unwrap();
    assert!(total.ends_with(",unavailable,unavailable"), "{total}");
    // Judging GPU memory that cannot be read is refused before the command runs.
    let marker = dir.path().join("ran");
    let touch = format!("open({:?}, 'w')", marker.to_str().unwrap());
    let o = watch(&["--judge", "gpu", "--", "python3", "-c", &touch]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains("--judge gpu: GPU memory is unavailable"),
        "{}",
        text(&o)
    );
    assert!(!marker.exists(), "the command must not run");
}

#[test]
fn a_judged_series_that_never_appears_fails_the_run() {
    // The pattern defines `alloc`, the command never prints it: no verdict is exit code 1,
    // never a silent pass.
    let o = watch(&[
        "--quiet",
        "--value-pattern",
        r"alloc (?P<alloc>\d+) MB",
        "--judge",
        "alloc",
        "--",
        "python3",
        "-c",
        "print('reserved 3 MB')",
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("nothing was judged"), "{}", text(&o));
}

#[test]
fn trace_holds_memory_counters_step_spans_and_names() {
    let dir = tempfile::tempdir().unwrap();
    let s = script(
        &dir,
        "grow.py",
        "import time\nkeep = []\nfor i in range(1, 21):\n    keep.append(bytearray(1 << 20))\n    time.sleep(0.03)\n    print(f'step {i} allocated_mb={i}', flush=True)\n",
    );
    let tr = dir.path().join("w.trace.json");
    let o = watch(&[
        "--interval",
        "20ms",
        "-q",
        "--value-pattern",
        r"allocated_mb=(?P<allocated_mb>[\d.]+)",
        "--trace",
        tr.to_str().unwrap(),
        "--",
        "python3",
        &s,
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let doc = json(&tr);
    let ev = trace_check::validate(&doc);
    // 20 steps, one span each, end to end, from the start of the watch.
    let steps: Vec<&serde_json::Value> = ev
        .iter()
        .filter(|e| e["ph"] == "X" && e["cat"] == "step")
        .collect();
    assert_eq!(steps.len(), 20, "{steps:?}");
    assert_eq!(steps[0]["name"], "step 1");
    assert_eq!(steps[0]["ts"].as_f64(), Some(0.0));
    assert_eq!(steps[19]["args"]["step"], 20);
    for w in steps.windows(2) {
        let end = w[0]["ts"].as_f64().unwrap() + w[0]["dur"].as_f64().unwrap();
        assert!((end - w[1]["ts"].as_f64().unwrap()).abs() < 1e-2, "{w:?}");
    }
    // The child sleeps 30 ms a step: 20 steps span more than half a second.
    let last = steps[19]["ts"].as_f64().unwrap() + steps[19]["dur"].as_f64().unwrap();
    assert!(last > 500_000.0, "{last} µs");
    // Counters: RSS grows by about the 20 MiB the child keeps, PSS and per-process RSS present.
    let rss: Vec<f64> = ev
        .iter()
        .filter(|e| e["name"] == "RSS (bytes)")
        .map(|e| e["args"]["RSS"].as_f64().unwrap())
        .collect();
    assert!(rss.len() >= 10, "{} RSS samples", rss.len());
    let growth = rss.iter().cloned().fold(f64::MIN, f64::max) - rss[0];
    assert!(growth > 15.0 * 1048576.0, "RSS grew {growth} bytes");
    let c = trace_check::names(&ev, "C");
    for n in ["PSS (bytes)", "USS (bytes)", "RSS by process (bytes)"] {
        assert_eq!(c.iter().filter(|x| *x == n).count(), rss.len(), "{n}");
    }
    // Per process, by name: the child shows up as python3 (the first sample can catch it as
    // the shell of a `python3` wrapper script, e.g. pyenv's shim, before it execs).
    assert!(
        ev.iter()
            .filter(|e| e["name"] == "RSS by process (bytes)")
            .any(|e| e["args"]
                .as_object()
                .unwrap()
                .keys()
                .any(|k| k.starts_with("python3 ("))),
        "no python3 in the per-process RSS track"
    );
    // --value-pattern values, in bytes, stamped when their line was read.
    let alloc: Vec<f64> = ev
        .iter()
        .filter(|e| e["name"] == "allocated (bytes)")
        .map(|e| e["args"]["allocated"].as_f64().unwrap())
        .collect();
    assert_eq!(alloc.len(), 20);
    assert_eq!(alloc[19], 20e6);
    // No NVIDIA driver here: no GPU track (tests/report_html.rs draws one from a fixture).
    if !std::path::Path::new("/proc/driver/nvidia").exists() {
        assert!(!c.iter().any(|n| n.starts_with("GPU")));
    }
    let m = trace_check::names(&ev, "M");
    assert!(m.contains(&"process_name".into()) && m.contains(&"thread_name".into()));
    let pname = ev.iter().find(|e| e["name"] == "process_name").unwrap();
    assert!(pname["args"]["name"].as_str().unwrap().contains("grow.py"));
    assert!(doc["otherData"]["root_pid"].is_u64());
}

#[test]
fn watch_refuses_an_unknown_judge_before_starting() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");
    let out = assert_cmd::Command::cargo_bin("memscope")
        .unwrap()
        .args([
            "watch",
            "--quiet",
            "--judge",
            "nosuch",
            "--max-peak",
            "1KB",
            "--",
            "touch",
        ])
        .arg(&marker)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("--judge nosuch") && err.contains("--value-pattern"),
        "{err}"
    );
    assert!(!marker.exists(), "the command must not run");
}
