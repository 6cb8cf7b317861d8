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

use crate::record::sweep_row::{Row, RowSummary, Status};
use crate::record::StepMemory;
use crate::spec::Spec;
use crate::sweep::classify::{classify, signal_name, WorkerExit};
use crate::sweep::limits::{cgroup_oom_kills, make_cgroup, Enforcement, GRACE, POLL};
use std::collections::VecDeque;
use std::ffi::CString;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

/// Lines of the worker's stderr kept for the row.
const STDERR_LINES: usize = 12;
/// Stderr lines that tell how a worker ended, kept even when a backtrace follows them.
const KEY_PATTERNS: [&str; 6] = [
    crate::record::torch_oom::PREFIX,
    "memory allocation of",
    "has overflowed its stack",
    "panicked at",
    "Cannot allocate memory",
    "error: ",
];
/// At most this many such lines are kept.
const KEY_LINES: usize = 8;

/// What a worker run needs besides its Spec.
#[derive(Debug, Clone)]
pub struct RunOptions {
    pub memory_limit: Option<u64>,
    pub enforcement: Enforcement,
    pub timeout: Option<Duration>,
    /// Directory for the worker's Record and series files.
    pub scratch: PathBuf,
    /// `sweep --trace DIR`: write each `ok` row's Chrome trace there.
    pub trace_dir: Option<PathBuf>,
}

/// What a running worker has done so far (its pid, steps done of total), for progress display.
#[derive(Debug, Default)]
pub struct WorkerProgress {
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
    /// The processes below the worker (torchrun's ranks run in sessions of their own).
    tree: crate::process_tree::reap::Tree,
}

/// The result of one worker run: the row, or `None` when the run was interrupted (the caller
/// stops the sweep and keeps the rows it has).
pub fn run_worker(
    spec: &Spec,
    index: usize,
    opts: &RunOptions,
    interrupted: &AtomicBool,
    live: &WorkerProgress,
    tick: impl FnMut(),
) -> anyhow::Result<Option<Row>> {
    if let Some((s, o, limit, how)) = engine_capped(spec, opts) {
        let row = run_worker(&s, index, &o, interrupted, live, tick)?;
        return Ok(row.map(|mut r| {
            r.memory_limit_bytes = Some(limit);
            r.enforcement = Some(how.into());
            r
        }));
    }
    let out = opts.scratch.join(format!("record-{index}.json"));
    let series_path = opts.scratch.join(format!("series-{index}.jsonl"));
    let _ = std::fs::remove_file(&out);
    let _ = std::fs::remove_file(&series_path);
    let (mut cmd, exe, cgroup) = worker_command(opts, index, &out, &series_path)?;

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
    let stderr = StderrCapture::default();
    let err_thread = child.stderr.take().map(|e| stderr.read(e));
    let (progress_tx, progress_rx) = mpsc::channel::<(usize, usize)>();
    let out_thread = child.stdout.take().map(|o| read_progress(o, progress_tx));
    let (exit_tx, exit_rx) = mpsc::channel::<std::io::Result<ExitStatus>>();
    let waiter = std::thread::spawn(move || {
        let _ = exit_tx.send(child.wait());
    });

    let running = Running {
        pid,
        started,
        opts,
        interrupted,
        live,
    };
    let (status, mut watch) = running.watch(&exit_rx, &progress_rx, tick)?;
    // No process of the group survives its leader, nor any process seen below it (torchrun's
    // ranks, in sessions of their own): killed, and waited for until gone.
    kill_group(pid, libc::SIGKILL);
    let left = watch.tree.kill_and_wait();
    if !left.is_empty() {
        eprintln!("memscope: processes {left:?} of worker {pid} still run after SIGKILL");
    }
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
    let last_stderr: Vec<String> = stderr
        .tail
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .cloned()
        .collect();
    let series = read_series(&series_path);
    let record = crate::capped::read_capped_string(&out, crate::capped::MAX_RESULT_FILE, "Record")
        .ok()
        .and_then(|t| serde_json::from_str::<crate::record::Record>(&t).ok());
    let _ = std::fs::remove_file(&series_path);
    let _ = std::fs::remove_file(&out);

    let mut evidence: Vec<String> = stderr.key.lock().unwrap_or_else(|p| p.into_inner()).clone();
    evidence.extend(last_stderr.iter().cloned());
    let outcome = WorkerExit {
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
    let trace = match (&record, status_, &opts.trace_dir) {
        (Some(r), Status::Ok, Some(dir)) => Some(write_trace(dir, index, r)?),
        _ => None,
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
        trace,
        slurm: None,
        torch_oom: crate::record::torch_oom::OomFacts::find(&evidence),
    }))
}

/// A run whose budget the torch engine holds itself under `--memory-limit`: on CUDA, a cap on
/// PyTorch's caching allocator (a smaller card simulated on a larger one); a data-parallel job
/// on the CPU, each rank's heap held by the counting allocator (the limit is per rank, as a
/// GPU's memory is). The Spec with the cap, the options without a host budget, the limit, and
/// how it is enforced. None for every other run.
pub fn engine_capped(
    spec: &crate::spec::Spec,
    opts: &RunOptions,
) -> Option<(crate::spec::Spec, RunOptions, u64, &'static str)> {
    let limit = opts.memory_limit?;
    let t = spec.torch.as_ref()?;
    let mut s = spec.clone();
    let target = s.torch.as_mut()?;
    let how = if t.is_cuda() {
        target.gpu_memory_limit_bytes = Some(limit);
        crate::sweep::limits::GPU_CAP
    } else if t.parallel.is_some() {
        target.heap_limit_bytes = Some(limit);
        crate::sweep::limits::RANK_HEAP_CAP
    } else {
        return None;
    };
    let o = RunOptions {
        memory_limit: None,
        enforcement: crate::sweep::limits::Enforcement::None,
        ..opts.clone()
    };
    Some((s, o, limit, how))
}

/// The worker's command (this binary as `memscope worker`, in its own process group, its budget
/// applied between fork and exec), the executable it names, and its cgroup when it has one.
fn worker_command(
    opts: &RunOptions,
    index: usize,
    out: &Path,
    series_path: &Path,
) -> anyhow::Result<(Command, PathBuf, Option<PathBuf>)> {
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
        .arg(out)
        .arg("--series")
        .arg(series_path)
        .arg("--index")
        .arg(index.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);

    // cgroup v2: a child cgroup per worker, joined between fork and exec.
    let cgroup = match (&opts.enforcement, opts.memory_limit) {
        // Where the cgroup cannot be made: RLIMIT_DATA for this worker.
        (Enforcement::CgroupV2 { parent }, Some(limit)) => make_cgroup(parent, index, limit).ok(),
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
    Ok((cmd, exe, cgroup))
}

/// The worker's stderr as its reader thread keeps it: the last lines, and the telling ones.
#[derive(Default)]
struct StderrCapture {
    tail: Arc<Mutex<VecDeque<String>>>,
    key: Arc<Mutex<Vec<String>>>,
}

impl StderrCapture {
    /// Reads `e` to its end on a thread of its own.
    fn read(&self, e: std::process::ChildStderr) -> std::thread::JoinHandle<()> {
        let (tail, key) = (self.tail.clone(), self.key.clone());
        std::thread::spawn(move || {
            // A backtrace can push the evidence out of the tail: keep the telling lines apart
            // (and the line after a panic's "panicked at", which holds its message).
            let mut after_panic = false;
            for line in BufReader::new(e).lines() {
                let Ok(line) = line else { break };
                let telling = KEY_PATTERNS.iter().any(|p| line.contains(p));
                if telling || after_panic {
                    let mut k = key.lock().unwrap_or_else(|p| p.into_inner());
                    // Out-of-memory lines are kept past the others' cap: a job's other ranks
                    // can say more telling lines first.
                    let oom = line.contains(crate::record::torch_oom::PREFIX);
                    if k.len() < KEY_LINES || (oom && k.len() < 2 * KEY_LINES) {
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
    }
}

/// Sends the worker's step events (done, total) from its stdout, on a thread of its own.
fn read_progress(
    o: std::process::ChildStdout,
    progress_tx: mpsc::Sender<(usize, usize)>,
) -> std::thread::JoinHandle<()> {
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
}

/// A worker between its start and its exit.
struct Running<'a> {
    pid: u32,
    started: Instant,
    opts: &'a RunOptions,
    interrupted: &'a AtomicBool,
    live: &'a WorkerProgress,
}

impl Running<'_> {
    /// Polls until the worker exits: its progress, the interruption, the PSS watchdog and the
    /// timeout (SIGTERM, then SIGKILL after the grace period) → its exit status and the evidence.
    fn watch(
        &self,
        exit_rx: &mpsc::Receiver<std::io::Result<ExitStatus>>,
        progress_rx: &mpsc::Receiver<(usize, usize)>,
        mut tick: impl FnMut(),
    ) -> anyhow::Result<(ExitStatus, Watch)> {
        let (pid, opts) = (self.pid, self.opts);
        let mut watch = Watch::default();
        let mut term_sent: Option<Instant> = None;
        let status = loop {
            match exit_rx.recv_timeout(POLL) {
                Ok(s) => break s?,
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    anyhow::bail!("worker waiter vanished")
                }
            }
            while let Ok((done, total)) = progress_rx.try_recv() {
                self.live.done.store(done, Ordering::Relaxed);
                self.live.total.store(total, Ordering::Relaxed);
            }
            tick();
            watch.tree.note(pid, false);
            if self.interrupted.load(Ordering::Relaxed) && !watch.interrupted {
                watch.interrupted = true;
                kill_tree(pid, &mut watch.tree, libc::SIGKILL);
            }
            if let (Some(limit), None) = (opts.memory_limit, watch.watchdog_pss) {
                if let Some(pss) = crate::measure::procfs::tree_pss_bytes(pid as i32) {
                    if pss > limit {
                        watch.watchdog_pss = Some(pss);
                        kill_tree(pid, &mut watch.tree, libc::SIGKILL);
                    }
                }
            }
            if let Some(t) = opts.timeout {
                match term_sent {
                    None if self.started.elapsed() > t => {
                        watch.timed_out = true;
                        term_sent = Some(Instant::now());
                        kill_tree(pid, &mut watch.tree, libc::SIGTERM);
                    }
                    Some(at) if at.elapsed() > GRACE => {
                        kill_tree(pid, &mut watch.tree, libc::SIGKILL);
                    }
                    _ => {}
                }
            }
        };
        Ok((status, watch))
    }
}

/// `sig` to the worker's group and to every process noted below it (noted again first).
fn kill_tree(pgid: u32, tree: &mut crate::process_tree::reap::Tree, sig: i32) {
    tree.note(pgid, true);
    kill_group(pgid, sig);
    tree.signal(sig);
}

fn kill_group(pgid: u32, sig: i32) {
    unsafe {
        libc::killpg(pgid as libc::pid_t, sig);
    }
}

pub fn read_series(path: &Path) -> Vec<StepMemory> {
    std::fs::read_to_string(path)
        .map(|t| {
            t.lines()
                .filter_map(|l| serde_json::from_str(l).ok())
                .collect()
        })
        .unwrap_or_default()
}

/// Writes an `ok` row's Chrome trace into `dir`, named by its index and shape; returns the path.
fn write_trace(dir: &Path, index: usize, r: &crate::record::Record) -> anyhow::Result<PathBuf> {
    let s = &r.spec;
    let name = format!(
        "{index:03}-b{}-s{}-{}-{}.trace.json",
        s.batch,
        s.seq,
        s.mode.name(),
        s.dtype.name()
    );
    let path = dir.join(name);
    let text = crate::report::trace::to_json(r)?;
    crate::export::write_atomic(&path, &text)
        .map_err(|e| anyhow::anyhow!("--trace {}: {e}", path.display()))?;
    Ok(path)
}
