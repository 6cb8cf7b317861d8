//! One watch from start to end: start (or attach to) the process, relay its output, sample the tree
//! every interval until it ends or a signal arrives, forward that signal and allow the grace period.
//! The loop never prints: the live line is drawn by [`crate::watch::status`] on its own thread.

use crate::watch::child::{self, OomCounters};

use crate::export::JsonlStream;
use crate::process_tree::descendants;
use crate::record::watch::ChildExit;
use crate::record::watch::GpuStatus;
use crate::record::watch::TreeSample;
use crate::watch::gpu;
use crate::watch::passthrough::{relay, Console, Relay, Stream};
use crate::watch::sample::Sampler;
use crate::watch::status::{StatusLine, TreeSoFar};
use crate::watch::steps::{Patterns, StepLog};
use std::process::ExitStatus;
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// What to watch.
#[derive(Clone, Debug)]
pub enum Target {
    Command(Vec<String>),
    Pid(u32),
}

/// Everything a watch needs, validated by the CLI.
pub struct WatchConfig {
    pub target: Target,
    pub interval: Duration,
    pub grace: Duration,
    pub patterns: Patterns,
    /// Draw the live status line (stderr is a terminal and not --quiet).
    pub status: bool,
    pub jsonl: Option<JsonlStream>,
    /// Read PSS/USS every sample (`--judge pss|uss`) instead of within the sampler's CPU budget.
    pub smaps_every_sample: bool,
}

/// What a watch saw.
pub struct WatchResult {
    pub samples: Vec<TreeSample>,
    pub log: StepLog,
    /// Command mode: how the child ended.
    pub exit: Option<ChildExit>,
    /// A SIGINT/SIGTERM that ended the watch early.
    pub interrupted: Option<i32>,
    pub gpu: GpuStatus,
    pub notes: Vec<String>,
    pub root_pid: u32,
    pub duration_s: f64,
    /// CPU seconds (user + system) `memscope watch` itself used.
    pub watcher_cpu_s: f64,
    /// The first --jsonl write that failed (a full disk): the watch then fails.
    pub jsonl_error: Option<String>,
}

pub fn watch(mut cfg: WatchConfig) -> anyhow::Result<WatchResult> {
    let start = Instant::now();
    let oom_before = OomCounters::read();
    let (gpu_status, nvml) = gpu::probe();
    child::catch_signals();
    let log = Arc::new(Mutex::new(StepLog::default()));
    let console = Arc::new(Console::default());
    let (wake_tx, wake_rx) = channel::<()>();
    let (exit_tx, exit_rx) = channel();
    let shared = Shared {
        start,
        patterns: Arc::new(cfg.patterns.clone()),
        log: log.clone(),
        console: console.clone(),
    };
    let (root, relays) = start_target(&cfg.target, &shared, wake_tx, exit_tx)?;
    let live = Arc::new(Mutex::new(TreeSoFar::default()));
    let status = cfg
        .status
        .then(|| StatusLine::start(live.clone(), console.clone()));

    let mut sampler = Sampler::new();
    sampler.every_sample = cfg.smaps_every_sample;
    let mut samples: Vec<TreeSample> = Vec::new();
    let mut notes = Vec::new();
    let mut interrupted = None;
    let mut kill_at: Option<Instant> = None;
    let mut killed_by_watch = false;
    let mut exit_status = None;
    let mut jsonl_error = None;
    loop {
        if let Some((sig, from_terminal)) = child::take_signal() {
            interrupted.get_or_insert(sig);
            match cfg.target {
                Target::Pid(_) => break,
                Target::Command(_) => {
                    if !from_terminal {
                        child::send(root, sig);
                    }
                    kill_at.get_or_insert(Instant::now() + cfg.grace);
                }
            }
        }
        if kill_at.is_some_and(|t| Instant::now() >= t) && !killed_by_watch {
            for pid in descendants(root).into_iter().rev() {
                child::send(pid, libc::SIGKILL);
            }
            killed_by_watch = true;
        }
        let pids = descendants(root);
        let step = log.lock().unwrap_or_else(|e| e.into_inner()).current;
        let t = start.elapsed().as_secs_f64();
        let mut s = sampler.sample(&pids, t, step);
        if let Some(n) = &nvml {
            s.gpu = n.sample(&pids);
        }
        if s.total.processes > 0 {
            if let Some(w) = cfg.jsonl.as_mut() {
                let line = s.to_jsonl_line().map_err(std::io::Error::other);
                if let Err(e) = line.and_then(|l| w.write_line(&l)) {
                    jsonl_error.get_or_insert(e.to_string());
                }
            }
            live.lock().unwrap_or_else(|e| e.into_inner()).push(&s);
            samples.push(s);
        }
        if let Ok(st) = exit_rx.try_recv() {
            exit_status = Some(st);
            break;
        }
        if matches!(cfg.target, Target::Pid(p) if !alive(p)) {
            break;
        }
        wait_for_next_tick(start, cfg.interval, t, &wake_rx);
    }
    if let Some(s) = status {
        s.stop();
    }
    leave_relays(relays, &mut notes);
    let exit = match exit_status {
        Some(Ok(st)) => Some(ChildExit::from_status(st, &oom_before, killed_by_watch)),
        Some(Err(e)) => {
            notes.push(format!("could not wait for the command: {e}"));
            None
        }
        None => None,
    };
    if let Some(e) = &jsonl_error {
        notes.push(format!("--jsonl: writing failed: {e}"));
    }
    notes.extend(sampler_notes(&sampler, cfg.smaps_every_sample));
    let log = std::mem::take(&mut *log.lock().unwrap_or_else(|e| e.into_inner()));
    Ok(WatchResult {
        samples,
        log,
        exit,
        interrupted,
        gpu: gpu_status,
        notes,
        root_pid: root,
        duration_s: start.elapsed().as_secs_f64(),
        watcher_cpu_s: own_cpu_seconds(),
        jsonl_error,
    })
}

/// What the output relays share with the sampling loop.
struct Shared {
    start: Instant,
    patterns: Arc<Patterns>,
    log: Arc<Mutex<StepLog>>,
    console: Arc<Console>,
}

/// Attaches to `--pid`, or starts the command with a relay thread per output stream and a thread
/// that sends its exit (and wakes the loop) → the root pid and the relays.
fn start_target(
    target: &Target,
    shared: &Shared,
    wake_tx: Sender<()>,
    exit_tx: Sender<std::io::Result<ExitStatus>>,
) -> anyhow::Result<(u32, Vec<JoinHandle<()>>)> {
    let mut relays = Vec::new();
    let root = match target {
        Target::Pid(pid) => {
            anyhow::ensure!(
                alive(*pid),
                "--pid {pid}: no such process (or it has exited)"
            );
            *pid
        }
        Target::Command(argv) => {
            let mut c = child::spawn(argv)?;
            let pid = c.id();
            let outs: [(Stream, Box<dyn std::io::Read + Send>); 2] = [
                (Stream::Stdout, Box::new(c.stdout.take().expect("piped"))),
                (Stream::Stderr, Box::new(c.stderr.take().expect("piped"))),
            ];
            for (stream, from) in outs {
                let r = Relay {
                    stream,
                    patterns: shared.patterns.clone(),
                    log: shared.log.clone(),
                    console: shared.console.clone(),
                    wake: wake_tx.clone(),
                    start: shared.start,
                };
                relays.push(std::thread::spawn(move || relay(from, r)));
            }
            let wake = wake_tx.clone();
            std::thread::spawn(move || {
                let st = c.wait();
                let _ = exit_tx.send(st);
                let _ = wake.send(());
            });
            pid
        }
    };
    Ok((root, relays))
}

/// Waits for the next tick after `t` seconds; a step marker or the child's exit wakes the loop
/// early. Signals are checked every 50 ms at most.
fn wait_for_next_tick(start: Instant, interval: Duration, t: f64, wake_rx: &Receiver<()>) {
    let next = start + interval.mul_f64(((t / interval.as_secs_f64()).floor()) + 1.0);
    loop {
        let now = Instant::now();
        if now >= next {
            break;
        }
        match wake_rx.recv_timeout((next - now).min(Duration::from_millis(50))) {
            Ok(()) => break,
            Err(RecvTimeoutError::Timeout) => {
                if child::take_signal_peek() {
                    break;
                }
            }
            Err(RecvTimeoutError::Disconnected) => {
                std::thread::sleep((next - now).min(Duration::from_millis(50)))
            }
        }
    }
}

/// The relays end when every holder of the pipes has closed them; a daemon grandchild may keep
/// them open, so wait a little, then leave them (with a note).
fn leave_relays(relays: Vec<JoinHandle<()>>, notes: &mut Vec<String>) {
    let deadline = Instant::now() + Duration::from_secs(2);
    for r in relays {
        while !r.is_finished() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        if r.is_finished() {
            let _ = r.join();
        } else {
            notes.push(
                "a process still holds the command's output open; its later output is not shown"
                    .into(),
            );
        }
    }
}

/// How the sampler read PSS/USS: the smaps_rollup reads and their cost, and the processes whose
/// smaps_rollup could not be read.
fn sampler_notes(sampler: &Sampler, every_sample: bool) -> Vec<String> {
    let mut notes = Vec::new();
    if sampler.smaps_reads > 0 {
        let avg_ms = sampler.smaps_cost_s / sampler.smaps_reads as f64 * 1e3;
        notes.push(if every_sample {
            format!("PSS/USS/swap read from smaps_rollup every sample ({} reads, {avg_ms:.2} ms each)", sampler.smaps_reads)
        } else {
            format!(
                "PSS/USS/swap re-read from smaps_rollup within a {:.2}% CPU budget ({} reads, {avg_ms:.2} ms each; RSS, threads and CPU every sample; smaps_age_s in --jsonl/--json says how old)",
                100.0 / crate::watch::sample::SMAPS_BUDGET,
                sampler.smaps_reads
            )
        });
    }
    for (pid, comm) in &sampler.no_smaps {
        notes.push(format!(
            "PSS and USS of {comm} (pid {pid}) are its RSS: /proc/{pid}/smaps_rollup is unreadable"
        ));
    }
    notes
}

/// The process exists and is not a zombie.
fn alive(pid: u32) -> bool {
    procfs::process::Process::new(pid as i32)
        .and_then(|p| p.stat())
        .is_ok_and(|s| s.state != 'Z' && s.state != 'X')
}

/// utime + stime of this process, every thread included.
pub fn own_cpu_seconds() -> f64 {
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}
