//! `memscope sweep --slurm` against a REAL single-node Slurm (Debian's slurm-wlm 22.05 + munge)
//! that `tests/slurm/start.sh` starts on localhost (or reuses when it is already up; `.ci/run`
//! stops it with `tests/slurm/stop.sh`). When the daemons cannot start, these tests FAIL with the
//! script's reason: they are never skipped.
//!
//! The cluster has no accounting database (no slurmdbd): the follower reads final states from
//! `scontrol` and MaxRSS from `sstat`, and slurmstepd's "exceeded memory limit" line is the OOM
//! evidence (without cgroups, --mem is enforced by jobacct_gather's OverMemoryKill).

mod support;
use assert_cmd::cargo::cargo_bin;
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};
use support::rows;

/// Starts (or reuses) the test cluster once per test binary; its SLURM_CONF.
fn cluster() -> &'static PathBuf {
    static CONF: OnceLock<PathBuf> = OnceLock::new();
    CONF.get_or_init(|| {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/slurm/start.sh");
        let t = Instant::now();
        let out = Command::new(&script)
            .output()
            .unwrap_or_else(|e| panic!("{}: {e}", script.display()));
        assert!(
            out.status.success(),
            "the test Slurm did not start (install it with `apt-get install -y slurm-wlm munge`):\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8_lossy(&out.stdout);
        let conf = text
            .lines()
            .find_map(|l| l.strip_prefix("SLURM_CONF="))
            .expect("start.sh prints SLURM_CONF=…");
        eprintln!("test Slurm up in {:.1} s ({conf})", t.elapsed().as_secs_f64());
        PathBuf::from(conf)
    })
}

fn memscope() -> Command {
    let mut c = Command::new(cargo_bin("memscope"));
    c.env("SLURM_CONF", cluster())
        .env_remove("MEMSCOPE_TEST_FAULT")
        .env("RUST_BACKTRACE", "1");
    c
}

/// A tiny sweep of `batches` on the test cluster (add the Slurm flags).
fn sweep(batches: &str, steps: &str, work: &Path, jsonl: &Path) -> Command {
    let mut c = memscope();
    c.args([
        "sweep",
        "--model",
        "tiny-gpt2",
        "--batch",
        batches,
        "--seq",
        "16",
    ])
    .args(["--warmup", "0", "--steps", steps, "--slurm", "--work-dir"])
    .arg(work)
    .arg("--jsonl")
    .arg(jsonl);
    c
}

/// (index, status) sorted by index; panics on a duplicate index.
fn statuses(rows: &[Value]) -> Vec<(u64, String)> {
    let mut seen = BTreeSet::new();
    let mut out: Vec<(u64, String)> = rows
        .iter()
        .map(|r| {
            let i = r["index"].as_u64().unwrap();
            assert!(seen.insert(i), "duplicate row for index {i}");
            (i, r["status"].as_str().unwrap().to_string())
        })
        .collect();
    out.sort();
    out
}

fn run_ok(c: &mut Command) -> String {
    let out = c.output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "memscope failed:\n{err}");
    err
}

#[test]
fn a_task_over_mem_is_oom_from_slurm_and_larger_ones_are_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let (work, jsonl) = (dir.path().join("work"), dir.path().join("rows.jsonl"));
    let t = Instant::now();
    // Configuration 3 (batch 8) touches pages until slurmstepd kills it at --mem; one task at
    // a time, so 5 is still pending when the follower (polling every 200 ms) sees the OOM:
    // scancelled, `skipped`. Slurm may have started 4 the moment 3 ended (a started task is
    // never cancelled: it runs, and b16 fits), so 4 is `skipped` or `ok`.
    let err = run_ok(
        sweep("1,2,4,8,16,32", "20", &work, &jsonl)
            .args(["--mem", "300M", "--max-parallel", "1"])
            .env("MEMSCOPE_TEST_SLURM_POLL_MS", "200")
            .env("MEMSCOPE_TEST_FAULT", "alloc@3"),
    );
    eprintln!(
        "{err}\n6-configuration sweep: {:.1} s",
        t.elapsed().as_secs_f64()
    );
    let rows = rows(&jsonl);
    let s = statuses(&rows);
    let mut names: Vec<&str> = s.iter().map(|(_, s)| s.as_str()).collect();
    if names[4] == "ok" {
        eprintln!("configuration 4 had started when the OOM of 3 was seen: it ran");
        names[4] = "skipped";
    }
    assert_eq!(names, ["ok", "ok", "ok", "oom", "skipped", "skipped"]);
    let oom = rows.iter().find(|r| r["index"] == 3).unwrap();
    let reason = oom["reason"].as_str().unwrap();
    assert!(reason.contains("exceeded memory limit"), "{reason}");
    assert!(reason.contains("--mem 300M"), "{reason}");
    assert_eq!(oom["slurm"]["state"], "FAILED");
    assert_eq!(oom["slurm"]["exit_code"], "0:9");
    assert_eq!(oom["signal_name"], "SIGKILL");
    // No accounting database: slurmstepd's kill line, or sstat's sample if it was larger.
    let src = oom["slurm"]["max_rss_source"].as_str().unwrap();
    assert!(src == "slurmstepd" || src == "sstat", "{src}");
    assert!(oom["slurm"]["max_rss_bytes"].as_u64().unwrap() > 300 << 20);
    let skipped = rows.iter().find(|r| r["index"] == 5).unwrap();
    assert_eq!(skipped["reason"], "oom at batch 8 seq 16");
    let job = rows[0]["slurm"]["job_id"].as_str().unwrap().to_string();
    for r in &rows {
        assert_eq!(r["slurm"]["job_id"], job.as_str());
        assert_eq!(r["slurm"]["array_index"], r["index"]);
    }
    for r in rows.iter().filter(|r| r["status"] == "ok") {
        assert!(r["slurm"]["node"].is_string(), "{r}");
        assert!(r["summary"]["rss_peak_bytes"].as_u64().unwrap() > 0);
        assert_eq!(r["slurm"]["state"], "COMPLETED");
    }
    // The same rows as a local sweep, plus `slurm`.
    let local_keys = [
        "status",
        "reason",
        "index",
        "spec",
        "exit_code",
        "signal",
        "signal_name",
        "last_stderr",
        "wall_seconds",
        "worker_pid",
        "memory_limit_bytes",
        "enforcement",
        "summary",
        "series",
        "slurm",
    ];
    let keys: Vec<&str> = rows[0]
        .as_object()
        .unwrap()
        .keys()
        .map(|k| k.as_str())
        .collect();
    let mut want = local_keys.to_vec();
    want.sort();
    let mut got = keys.clone();
    got.sort();
    assert_eq!(got, want);
}

#[test]
fn a_task_past_time_is_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let (work, jsonl) = (dir.path().join("work"), dir.path().join("rows.jsonl"));
    let t = Instant::now();
    // Slurm's shortest --time is one minute, and slurmctld looks at time limits every 30 s:
    // the worker hangs after its first step and this test takes 60–95 s.
    run_ok(
        sweep("1", "2", &work, &jsonl)
            .args(["--mem", "500M", "--time", "1"])
            .env("MEMSCOPE_TEST_FAULT", "hang"),
    );
    let secs = t.elapsed().as_secs_f64();
    eprintln!("timeout test: {secs:.1} s");
    let rows = rows(&jsonl);
    assert_eq!(statuses(&rows), [(0, "timeout".to_string())]);
    let reason = rows[0]["reason"].as_str().unwrap();
    assert!(
        reason.contains("TIMEOUT") && reason.contains("--time 1"),
        "{reason}"
    );
    assert!(secs >= 60.0, "{secs}");
}

#[test]
fn reattach_after_killing_the_follower_gives_the_same_rows_once() {
    let dir = tempfile::tempdir().unwrap();
    let (work, jsonl) = (dir.path().join("work"), dir.path().join("rows.jsonl"));
    let mut follower = sweep("1,2,3,4", "150", &work, &jsonl)
        .args(["--mem", "500M", "--max-parallel", "1", "--quiet"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Kill it (SIGKILL: no goodbye) once the first row is in.
    let t = Instant::now();
    while rows(&jsonl).is_empty() {
        assert!(t.elapsed() < Duration::from_secs(120), "no row after 120 s");
        std::thread::sleep(Duration::from_millis(200));
    }
    follower.kill().unwrap();
    follower.wait().unwrap();
    let before = rows(&jsonl).len();
    assert!(before < 4, "the follower finished before it was killed");
    // Ctrl-C on a follower that is not at a terminal: the array is not cancelled, the message
    // says how to re-attach, exit 130.
    let mut c = memscope();
    let f = c
        .args(["sweep", "--attach"])
        .arg(&work)
        .arg("--jsonl")
        .arg(dir.path().join("other.jsonl"))
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    unsafe { libc_kill(f.id() as i32, 2) };
    let out = f.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{err}");
    assert!(
        err.contains("keeps running") && err.contains("--attach"),
        "{err}"
    );

    // Re-attach: --jsonl is remembered from the submission.
    let mut c = memscope();
    c.args(["sweep", "--attach"]).arg(&work);
    run_ok(&mut c);
    let after = rows(&jsonl);
    assert_eq!(
        statuses(&after),
        (0..4).map(|i| (i, "ok".to_string())).collect::<Vec<_>>()
    );
    // Again, on a finished array: nothing appended; a fresh JSONL gets every row once.
    run_ok(memscope().args(["sweep", "--attach"]).arg(&work));
    assert_eq!(rows(&jsonl).len(), 4);
    let fresh = dir.path().join("fresh.jsonl");
    run_ok(
        memscope()
            .args(["sweep", "--attach"])
            .arg(&work)
            .arg("--jsonl")
            .arg(&fresh),
    );
    let strip = |rs: Vec<Value>| -> Vec<Value> {
        let mut rs = rs;
        rs.sort_by_key(|r| r["index"].as_u64());
        rs
    };
    assert_eq!(strip(rows(&fresh)), strip(after));
}

extern "C" {
    #[link_name = "kill"]
    fn libc_kill(pid: i32, sig: i32) -> i32;
}

#[test]
fn slurm_without_sbatch_on_path_says_how_to_get_it() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(cargo_bin("memscope"))
        .env("PATH", dir.path())
        .args(["sweep", "--model", "tiny-gpt2", "--slurm", "--work-dir"])
        .arg(dir.path().join("w"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("sbatch is not on PATH"), "{err}");
    assert!(
        err.contains("module load slurm") && err.contains("apt-get install"),
        "{err}"
    );
    assert!(
        !dir.path().join("w").exists(),
        "nothing is written before sbatch is found"
    );

    let out = Command::new(cargo_bin("memscope"))
        .args(["sweep", "--model", "tiny-gpt2", "--slurm"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("--slurm needs --work-dir"));
    let out = Command::new(cargo_bin("memscope"))
        .args(["sweep", "--model", "tiny-gpt2", "--mem", "1G"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("--slurm"));
}
