//! The parent side of a sweep: spawn one worker process for a Spec, watch it (memory budget,
//! timeout, interruption), and classify how it ended into a [`Row`].
//!
//! - The worker is this binary re-executed as `memscope worker`, in its own process group, with
//!   PR_SET_PDEATHSIG(SIGKILL) set between fork and exec (and again by the worker). Spawn workers
//!   from the main thread only: the death signal follows the thread that forked.
//! - Memory budget (`--memory-limit`): cgroup v2 `memory.max` in a child cgroup where a delegated,
//!   writable v2 hierarchy offers the memory controller (detected, never assumed); otherwise
//!   `RLIMIT_DATA` (never `RLIMIT_AS`, which breaks mmap'd weights). Either way the parent polls the
//!   worker's PSS every [`POLL`] and kills the group when it exceeds the limit.
//! - `--timeout`: SIGTERM to the group, [`GRACE`], then SIGKILL.
//! - Classification: see [`classify`].

use crate::record::StepMemory;
use crate::spec::Spec;
use crate::sweep::rows::{Row, RowSummary, Status};
use crate::units::human_duration;
use std::collections::VecDeque;
use std::ffi::CString;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

/// How often the parent checks the worker's PSS, the clock and the interrupt flag.
pub const POLL: Duration = Duration::from_millis(100);
/// Time between SIGTERM and SIGKILL on a timeout.
pub const GRACE: Duration = Duration::from_secs(2);
/// Lines of the worker's stderr kept for the row.
const STDERR_LINES: usize = 12;
/// Stderr lines that tell how a worker ended, kept even when a backtrace follows them.
const KEY_PATTERNS: [&str; 5] = [
    "memory allocation of",
    "has overflowed its stack",
    "panicked at",
    "Cannot allocate memory",
    "error: ",
];
/// At most this many such lines are kept.
const KEY_LINES: usize = 8;

/// How the per-worker memory budget is enforced.
#[derive(Debug, Clone, PartialEq)]
pub enum Enforcement {
    /// No `--memory-limit`.
    None,
    /// cgroup v2 `memory.max` in child cgroups of this directory, plus the PSS watchdog.
    CgroupV2 { parent: PathBuf },
    /// `RLIMIT_DATA` plus the PSS watchdog; `why` says why cgroup v2 was not used.
    RlimitData { why: String },
}

impl Enforcement {
    /// Chooses the enforcement for a limit (detecting cgroup v2; nothing is created here).
    pub fn detect(limit: Option<u64>) -> Enforcement {
        if limit.is_none() {
            return Enforcement::None;
        }
        match delegated_cgroup_v2() {
            Ok(parent) => Enforcement::CgroupV2 { parent },
            Err(why) => Enforcement::RlimitData { why },
        }
    }

    /// A short name for rows: `cgroup-v2 memory.max + PSS watchdog`, `RLIMIT_DATA + PSS watchdog`.
    pub fn name(&self) -> Option<&'static str> {
        match self {
            Enforcement::None => None,
            Enforcement::CgroupV2 { .. } => Some("cgroup-v2 memory.max + PSS watchdog"),
            Enforcement::RlimitData { .. } => Some("RLIMIT_DATA + PSS watchdog"),
        }
    }

    /// One sentence for the user.
    pub fn describe(&self, limit: Option<u64>) -> String {
        let lim = limit.map_or(String::new(), |b| crate::units::bytes(b as f64));
        match self {
            Enforcement::None => "no memory limit per worker (set one with --memory-limit)".into(),
            Enforcement::CgroupV2 { parent } => format!(
                "memory limit {lim} per worker, enforced by cgroup v2 memory.max (under {}) and a PSS watchdog every {} ms",
                parent.display(),
                POLL.as_millis()
            ),
            Enforcement::RlimitData { why } => format!(
                "memory limit {lim} per worker, enforced by RLIMIT_DATA and a PSS watchdog every {} ms (cgroup v2 not used: {why})",
                POLL.as_millis()
            ),
        }
    }
}

/// The cgroup v2 directory of this process when it is writable and offers the memory controller
/// to children; otherwise why not. Reads only.
fn delegated_cgroup_v2() -> Result<PathBuf, String> {
    let cg = std::fs::read_to_string("/proc/self/cgroup")
        .map_err(|e| format!("/proc/self/cgroup: {e}"))?;
    let rel = cg
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .ok_or("no cgroup v2 membership")?
        .trim()
        .to_string();
    let mounts = std::fs::read_to_string("/proc/self/mountinfo")
        .map_err(|e| format!("/proc/self/mountinfo: {e}"))?;
    let mount = mounts
        .lines()
        .find_map(|l| {
            let (left, right) = l.split_once(" - ")?;
            right
                .starts_with("cgroup2 ")
                .then(|| left.split(' ').nth(4).map(PathBuf::from))?
        })
        .ok_or("no cgroup v2 hierarchy mounted (cgroup v1 only)")?;
    let dir = mount.join(rel.trim_start_matches('/'));
    let controllers = std::fs::read_to_string(dir.join("cgroup.controllers"))
        .map_err(|e| format!("{}: {e}", dir.join("cgroup.controllers").display()))?;
    if !controllers.split_whitespace().any(|c| c == "memory") {
        return Err(format!(
            "the cgroup v2 hierarchy at {} has no memory controller",
            dir.display()
        ));
    }
    let subtree = std::fs::read_to_string(dir.join("cgroup.subtree_control")).unwrap_or_default();
    if !subtree.split_whitespace().any(|c| c == "memory") {
        return Err(format!(
            "{} does not delegate the memory controller to children (cgroup.subtree_control)",
            dir.display()
        ));
    }
    let c = CString::new(dir.as_os_str().as_encoded_bytes()).map_err(|e| e.to_string())?;
    if unsafe { libc::access(c.as_ptr(), libc::W_OK) } != 0 {
        return Err(format!("{} is not writable by this user", dir.display()));
    }
    Ok(dir)
}

/// What a worker run needs besides its Spec.
#[derive(Debug, Clone)]
pub struct RunOptions {
    pub memory_limit: Option<u64>,
    pub enforcement: Enforcement,
    pub timeout: Option<Duration>,
    /// Directory for the worker's Record and series files.
    pub scratch: PathBuf,
}

/// Live view of a running worker, for progress display.
#[derive(Debug, Default)]
pub struct Live {
    pub pid: AtomicUsize,
    pub done: AtomicUsize,
    pub total: AtomicUsize,
}

/// Evidence gathered while the worker ran.
#[derive(Debug, Default)]
struct Watch {
    watchdog_pss: Option<u64>,
    timed_out: bool,
    interrupted: bool,
    cgroup_oom_kills: u64,
}

/// The result of one worker run: the row, or `None` when the run was interrupted (the caller
/// stops the sweep and keeps the rows it has).
pub fn run_worker(
    spec: &Spec,
    index: usize,
    opts: &RunOptions,
    interrupted: &AtomicBool,
    live: &Live,
    mut tick: impl FnMut(),
) -> anyhow::Result<Option<Row>> {
    let out = opts.scratch.join(format!("record-{index}.json"));
    let series_path = opts.scratch.join(format!("series-{index}.jsonl"));
    let _ = std::fs::remove_file(&out);
    let _ = std::fs::remove_file(&series_path);
    // /proc/self/exe runs this very binary even when the file was replaced or deleted since
    // (a rebuild during a sweep): every worker runs the parent's code.
    let proc_exe = Path::new("/proc/self/exe");
    let exe = if proc_exe.exists() {
        proc_exe.to_path_buf()
    } else {
        std::env::current_exe()?
    };
    let mut cmd = Command::new(&exe);
    cmd.arg("worker")
        .arg("--out")
        .arg(&out)
        .arg("--series")
        .arg(&series_path)
        .arg("--index")
        .arg(index.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);

    // cgroup v2: a child cgroup per worker, joined between fork and exec.
    let cgroup = match (&opts.enforcement, opts.memory_limit) {
        (Enforcement::CgroupV2 { parent }, Some(limit)) => {
            match make_cgroup(parent, index, limit) {
                Ok(dir) => Some(dir),
                Err(_) => None, // fall back to RLIMIT_DATA for this worker
            }
        }
        _ => None,
    };
    let procs = cgroup
        .as_ref()
        .and_then(|d| CString::new(d.join("cgroup.procs").as_os_str().as_encoded_bytes()).ok());
    // Test-only: MEMSCOPE_TEST_WATCHDOG_ONLY=1 leaves the budget to the PSS watchdog alone.
    let watchdog_only = std::env::var_os("MEMSCOPE_TEST_WATCHDOG_ONLY").is_some_and(|v| v == "1");
    let data_limit = if cgroup.is_none() && !watchdog_only {
        opts.memory_limit
    } else {
        None
    };
    if opts.memory_limit.is_some() {
        cmd.env("MEMSCOPE_WORKER_LIMITED", "1");
    }
    let parent_pid = unsafe { libc::getpid() };
    unsafe {
        cmd.pre_exec(move || {
            // Only async-signal-safe calls here.
            if libc::prctl(
                libc::PR_SET_PDEATHSIG,
                libc::SIGKILL as libc::c_ulong,
                0,
                0,
                0,
            ) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            if libc::getppid() != parent_pid {
                libc::_exit(1); // the parent died before the death signal was armed
            }
            if let Some(p) = &procs {
                let fd = libc::open(p.as_ptr(), libc::O_WRONLY);
                if fd < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                let ok = libc::write(fd, b"0".as_ptr().cast(), 1) == 1;
                libc::close(fd);
                if !ok {
                    return Err(std::io::Error::last_os_error());
                }
            }
            if let Some(limit) = data_limit {
                let lim = libc::rlimit {
                    rlim_cur: limit as libc::rlim_t,
                    rlim_max: limit as libc::rlim_t,
                };
                if libc::setrlimit(libc::RLIMIT_DATA, &lim) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }

    let started = Instant::now();
    let mut child = cmd
        .spawn()
        .map_err(|e| anyhow::anyhow!("starting a worker process ({}): {e}", exe.display()))?;
    let pid = child.id();
    live.pid.store(pid as usize, Ordering::Relaxed);
    live.done.store(0, Ordering::Relaxed);
    live.total
        .store(spec.warmup + spec.steps, Ordering::Relaxed);

    if let Some(mut stdin) = child.stdin.take() {
        let json = serde_json::to_string(spec)?;
        let _ = stdin.write_all(json.as_bytes()); // a worker dead on arrival is classified below
    }
    let stderr_tail: Arc<Mutex<VecDeque<String>>> = Arc::default();
    let stderr_key: Arc<Mutex<Vec<String>>> = Arc::default();
    let err_thread = child.stderr.take().map(|e| {
        let (tail, key) = (stderr_tail.clone(), stderr_key.clone());
        std::thread::spawn(move || {
            // A backtrace can push the evidence out of the tail: keep the telling lines apart
            // (and the line after a panic's "panicked at", which holds its message).
            let mut after_panic = false;
            for line in BufReader::new(e).lines() {
                let Ok(line) = line else { break };
                let telling = KEY_PATTERNS.iter().any(|p| line.contains(p));
                if telling || after_panic {
                    let mut k = key.lock().unwrap_or_else(|p| p.into_inner());
                    if k.len() < KEY_LINES {
                        k.push(line.clone());
                    }
                }
                after_panic = line.contains("panicked at");
                let mut t = tail.lock().unwrap_or_else(|p| p.into_inner());
                if t.len() == STDERR_LINES {
                    t.pop_front();
                }
                t.push_back(line);
            }
        })
    });
    let (progress_tx, progress_rx) = mpsc::channel::<(usize, usize)>();
    let out_thread = child.stdout.take().map(|o| {
        std::thread::spawn(move || {
            for line in BufReader::new(o).lines() {
                let Ok(line) = line else { break };
                if let Ok(crate::sweep::worker::Event::Step { done, total }) =
                    serde_json::from_str(&line)
                {
                    let _ = progress_tx.send((done, total));
                }
            }
        })
    });
    let (exit_tx, exit_rx) = mpsc::channel::<std::io::Result<ExitStatus>>();
    let waiter = std::thread::spawn(move || {
        let _ = exit_tx.send(child.wait());
    });

    let mut watch = Watch::default();
    let mut term_sent: Option<Instant> = None;
    let status = loop {
        match exit_rx.recv_timeout(POLL) {
            Ok(s) => break s?,
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => anyhow::bail!("worker waiter vanished"),
        }
        while let Ok((done, total)) = progress_rx.try_recv() {
            live.done.store(done, Ordering::Relaxed);
            live.total.store(total, Ordering::Relaxed);
        }
        tick();
        if interrupted.load(Ordering::Relaxed) && !watch.interrupted {
            watch.interrupted = true;
            kill_group(pid, libc::SIGKILL);
        }
        if let (Some(limit), None) = (opts.memory_limit, watch.watchdog_pss) {
            if let Some(pss) = crate::measure::procfs::pss_bytes(Some(pid as i32)) {
                if pss > limit {
                    watch.watchdog_pss = Some(pss);
                    kill_group(pid, libc::SIGKILL);
                }
            }
        }
        if let Some(t) = opts.timeout {
            match term_sent {
                None if started.elapsed() > t => {
                    watch.timed_out = true;
                    term_sent = Some(Instant::now());
                    kill_group(pid, libc::SIGTERM);
                }
                Some(at) if at.elapsed() > GRACE => {
                    kill_group(pid, libc::SIGKILL);
                }
                _ => {}
            }
        }
    };
    // No process of the group survives its leader (the worker starts none; be sure anyway).
    kill_group(pid, libc::SIGKILL);
    let wall_seconds = started.elapsed().as_secs_f64();
    let _ = waiter.join();
    if let Some(t) = out_thread {
        let _ = t.join();
    }
    if let Some(t) = err_thread {
        let _ = t.join();
    }
    if let Some(dir) = &cgroup {
        watch.cgroup_oom_kills = cgroup_oom_kills(dir);
        let _ = std::fs::remove_dir(dir);
    }
    if watch.interrupted {
        return Ok(None);
    }
    let last_stderr: Vec<String> = stderr_tail
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .cloned()
        .collect();
    let series = read_series(&series_path);
    let record = std::fs::read_to_string(&out)
        .ok()
        .and_then(|t| serde_json::from_str::<crate::record::Record>(&t).ok());
    let _ = std::fs::remove_file(&series_path);
    let _ = std::fs::remove_file(&out);

    let mut evidence: Vec<String> = stderr_key.lock().unwrap_or_else(|p| p.into_inner()).clone();
    evidence.extend(last_stderr.iter().cloned());
    let outcome = Outcome {
        exit_code: status.code(),
        signal: status.signal(),
        stderr: &evidence,
        watchdog_pss: watch.watchdog_pss,
        cgroup_oom_kills: watch.cgroup_oom_kills,
        timed_out: watch.timed_out,
        has_record: record.is_some(),
        memory_limit: opts.memory_limit,
        timeout: opts.timeout,
    };
    let (status_, reason) = classify(&outcome);
    let (summary, series) = match (&record, status_) {
        (Some(r), Status::Ok) => (Some(RowSummary::from_record(r)), r.memory.series.clone()),
        _ => (None, series),
    };
    Ok(Some(Row {
        status: status_,
        reason,
        index,
        spec: spec.clone(),
        exit_code: status.code(),
        signal: status.signal(),
        signal_name: status.signal().map(signal_name),
        last_stderr,
        wall_seconds,
        worker_pid: Some(pid),
        memory_limit_bytes: opts.memory_limit,
        enforcement: opts.enforcement.name().map(|n| {
            if cgroup.is_none() && matches!(opts.enforcement, Enforcement::CgroupV2 { .. }) {
                "RLIMIT_DATA + PSS watchdog (cgroup creation failed)".to_string()
            } else {
                n.to_string()
            }
        }),
        summary,
        series,
    }))
}

fn kill_group(pgid: u32, sig: i32) {
    unsafe {
        libc::killpg(pgid as libc::pid_t, sig);
    }
}

fn make_cgroup(parent: &Path, index: usize, limit: u64) -> std::io::Result<PathBuf> {
    let dir = parent.join(format!("memscope-{}-{index}", std::process::id()));
    std::fs::create_dir(&dir)?;
    let set = std::fs::write(dir.join("memory.max"), limit.to_string())
        .and_then(|_| std::fs::write(dir.join("memory.swap.max"), "0").or(Ok(())));
    if let Err(e) = set {
        let _ = std::fs::remove_dir(&dir);
        return Err(e);
    }
    Ok(dir)
}

fn cgroup_oom_kills(dir: &Path) -> u64 {
    std::fs::read_to_string(dir.join("memory.events"))
        .ok()
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("oom_kill ")?.trim().parse().ok())
        })
        .unwrap_or(0)
}

fn read_series(path: &Path) -> Vec<StepMemory> {
    std::fs::read_to_string(path)
        .map(|t| {
            t.lines()
                .filter_map(|l| serde_json::from_str(l).ok())
                .collect()
        })
        .unwrap_or_default()
}

pub fn signal_name(sig: i32) -> String {
    match sig {
        libc::SIGABRT => "SIGABRT".into(),
        libc::SIGSEGV => "SIGSEGV".into(),
        libc::SIGKILL => "SIGKILL".into(),
        libc::SIGTERM => "SIGTERM".into(),
        libc::SIGBUS => "SIGBUS".into(),
        libc::SIGILL => "SIGILL".into(),
        libc::SIGFPE => "SIGFPE".into(),
        libc::SIGINT => "SIGINT".into(),
        other => format!("signal {other}"),
    }
}

/// Everything [`classify`] looks at.
#[derive(Debug, Clone)]
pub struct Outcome<'a> {
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub stderr: &'a [String],
    pub watchdog_pss: Option<u64>,
    pub cgroup_oom_kills: u64,
    pub timed_out: bool,
    pub has_record: bool,
    pub memory_limit: Option<u64>,
    pub timeout: Option<Duration>,
}

/// How a worker ended → status and reason. In order: the parent's own actions (timeout,
/// watchdog), cgroup OOM kills, Rust's allocation-failure abort, stack overflow, panics (exit
/// 101), clean errors (exit 2), other exit codes, then signals; a SIGKILL with no evidence of
/// OOM is a crash, "killed (unknown cause)".
pub fn classify(o: &Outcome) -> (Status, Option<String>) {
    let bytes = |b: u64| crate::units::bytes(b as f64);
    let find = |needle: &str| o.stderr.iter().find(|l| l.contains(needle)).cloned();
    let last = || {
        o.stderr
            .iter()
            .rev()
            .find(|l| !l.trim().is_empty())
            .cloned()
    };
    if o.timed_out {
        let t = o
            .timeout
            .map_or(String::new(), |t| format!(" {}", human_duration(t)));
        return (
            Status::Timeout,
            Some(format!(
                "exceeded --timeout{t} (SIGTERM to the process group, SIGKILL after {} s)",
                GRACE.as_secs()
            )),
        );
    }
    if let Some(pss) = o.watchdog_pss {
        let lim = o.memory_limit.map_or(String::new(), bytes);
        return (
            Status::Oom,
            Some(format!(
                "PSS {} exceeded --memory-limit {lim}: killed by the watchdog",
                bytes(pss)
            )),
        );
    }
    if o.cgroup_oom_kills > 0 {
        return (
            Status::Oom,
            Some("killed by the kernel at cgroup memory.max (--memory-limit)".into()),
        );
    }
    let aborted = o.signal == Some(libc::SIGABRT);
    if let (true, Some(line)) = (aborted, find("memory allocation of")) {
        return (Status::Oom, Some(line.trim().to_string()));
    }
    if let Some(line) = find("has overflowed its stack") {
        return (
            Status::Crash,
            Some(format!("stack overflow: {}", line.trim())),
        );
    }
    if o.exit_code == Some(0) {
        if o.has_record {
            return (Status::Ok, None);
        }
        return (
            Status::Crash,
            Some("the worker exited 0 without writing its Record".into()),
        );
    }
    if o.exit_code == Some(101) {
        // "thread 'main' panicked at src/x.rs:1:2:" then the message on the next line.
        let msg = o
            .stderr
            .iter()
            .position(|l| l.contains("panicked at"))
            .map(|i| {
                let at = o.stderr[i].trim();
                match o.stderr.get(i + 1) {
                    Some(m) if !m.trim().is_empty() && !m.starts_with("note:") => {
                        format!("{} ({at})", m.trim())
                    }
                    _ => at.to_string(),
                }
            })
            .or_else(last)
            .unwrap_or_default();
        return (Status::Crash, Some(format!("panic: {msg}")));
    }
    if o.memory_limit.is_some()
        && (find("Cannot allocate memory").is_some() || find("os error 12").is_some())
    {
        let line = find("Cannot allocate memory")
            .or_else(|| find("os error 12"))
            .unwrap_or_default();
        return (Status::Oom, Some(line.trim().to_string()));
    }
    if let Some(code) = o.exit_code {
        let line = last().unwrap_or_default();
        if code == 2 {
            if let Some(msg) = line.trim().strip_prefix("error: ") {
                return (Status::Error, Some(msg.to_string()));
            }
        }
        return (
            Status::Crash,
            Some(format!("exit code {code}: {}", line.trim())),
        );
    }
    let sig = o.signal.unwrap_or(0);
    let reason = match sig {
        libc::SIGSEGV => "segmentation fault (SIGSEGV)".to_string(),
        libc::SIGABRT => "aborted (SIGABRT)".to_string(),
        libc::SIGKILL => "killed (unknown cause): SIGKILL with no evidence of OOM".to_string(),
        s => format!("killed by {}", signal_name(s)),
    };
    (Status::Crash, Some(reason))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome<'a>(code: Option<i32>, sig: Option<i32>, stderr: &'a [String]) -> Outcome<'a> {
        Outcome {
            exit_code: code,
            signal: sig,
            stderr,
            watchdog_pss: None,
            cgroup_oom_kills: 0,
            timed_out: false,
            has_record: false,
            memory_limit: Some(1 << 30),
            timeout: None,
        }
    }

    fn lines(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn classification_table() {
        let none: Vec<String> = vec![];
        let mut ok = outcome(Some(0), None, &none);
        ok.has_record = true;
        assert_eq!(classify(&ok), (Status::Ok, None));

        let e = lines(&["memory allocation of 16777216 bytes failed"]);
        let (s, r) = classify(&outcome(None, Some(libc::SIGABRT), &e));
        assert_eq!(s, Status::Oom);
        assert_eq!(r.unwrap(), "memory allocation of 16777216 bytes failed");

        let (s, r) = classify(&outcome(None, Some(libc::SIGABRT), &none));
        assert_eq!((s, r.unwrap()), (Status::Crash, "aborted (SIGABRT)".into()));

        let e = lines(&[
            "",
            "thread 'main' has overflowed its stack",
            "fatal runtime error: stack overflow",
        ]);
        let (s, r) = classify(&outcome(None, Some(libc::SIGABRT), &e));
        assert_eq!(s, Status::Crash);
        assert!(r.unwrap().starts_with("stack overflow"));

        let e = lines(&[
            "thread 'main' panicked at src/x.rs:1:2:",
            "boom",
            "note: run with",
        ]);
        let (s, r) = classify(&outcome(Some(101), None, &e));
        assert_eq!(s, Status::Crash);
        assert_eq!(
            r.unwrap(),
            "panic: boom (thread 'main' panicked at src/x.rs:1:2:)"
        );

        let (s, r) = classify(&outcome(None, Some(libc::SIGKILL), &none));
        assert_eq!(s, Status::Crash);
        assert!(r.unwrap().starts_with("killed (unknown cause)"));

        let mut w = outcome(None, Some(libc::SIGKILL), &none);
        w.watchdog_pss = Some(2 << 30);
        assert_eq!(classify(&w).0, Status::Oom);

        let mut t = outcome(None, Some(libc::SIGTERM), &none);
        t.timed_out = true;
        t.timeout = Some(Duration::from_secs(2));
        let (s, r) = classify(&t);
        assert_eq!(s, Status::Timeout);
        assert!(r.unwrap().contains("--timeout 2s"));

        let e = lines(&["error: --weights x: no such file"]);
        assert_eq!(
            classify(&outcome(Some(2), None, &e)),
            (Status::Error, Some("--weights x: no such file".into()))
        );
    }
}
