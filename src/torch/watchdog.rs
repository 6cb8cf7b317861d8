//! Bounds on every wait for the Python engine or trace: the process must say it started (its
//! first protocol line, printed once torch and transformers are imported) within
//! `MEMSCOPE_ENGINE_START_TIMEOUT` seconds (default 300), else it is killed and the error says
//! so; and a stop asked of memscope (`leak`'s SIGINT/SIGTERM, `bench --timeout`) is passed on to
//! it as SIGINT, so the engine ends the step under way and writes what it measured. A process
//! still running [`STOP_GRACE`] after that (a rank stopped, or blocked in a collective whose
//! peer is, never sees it) is killed, with every process seen below it: torchrun's ranks run in
//! sessions of their own, and one stopped before it armed its parent-death signal outlives
//! torchrun, holding the output memscope reads.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The variable that sets the start bound, in seconds.
pub const START_VAR: &str = "MEMSCOPE_ENGINE_START_TIMEOUT";
const DEFAULT_START: Duration = Duration::from_secs(300);
/// How long a process asked to stop may take to write what it measured before it is killed.
pub const STOP_GRACE: Duration = Duration::from_secs(20);

/// The start bound: `MEMSCOPE_ENGINE_START_TIMEOUT` (seconds, > 0), else 300 s.
pub fn start_limit() -> anyhow::Result<Duration> {
    match std::env::var(START_VAR) {
        Ok(v) if !v.trim().is_empty() => match v.trim().parse::<f64>() {
            Ok(s) if s.is_finite() && s > 0.0 && s < 1e9 => Ok(Duration::from_secs_f64(s)),
            _ => anyhow::bail!(
                "{START_VAR}={v}: give the seconds the torch engine may take to start (a positive number; default 300)"
            ),
        },
        _ => Ok(DEFAULT_START),
    }
}

/// Watches one child process until [`Watchdog::finish`].
pub struct Watchdog {
    heard: Arc<AtomicBool>,
    done: Arc<AtomicBool>,
    timed_out: Arc<AtomicBool>,
    killed_after_stop: Arc<AtomicBool>,
    limit: Duration,
    thread: Option<JoinHandle<()>>,
}

impl Watchdog {
    /// Watches `pid`: killed (SIGKILL) when nothing was [`heard`](Self::heard) within `limit`;
    /// sent SIGINT once when `stop()` turns true.
    pub fn start(pid: u32, limit: Duration, stop: fn() -> bool) -> Watchdog {
        let heard = Arc::new(AtomicBool::new(false));
        let done = Arc::new(AtomicBool::new(false));
        let timed_out = Arc::new(AtomicBool::new(false));
        let killed_after_stop = Arc::new(AtomicBool::new(false));
        let (h, d, t) = (heard.clone(), done.clone(), timed_out.clone());
        let k = killed_after_stop.clone();
        let thread = std::thread::spawn(move || {
            let t0 = Instant::now();
            let mut tree = crate::process_tree::reap::Tree::default();
            // SIGKILL to the process and every process noted below it.
            let kill_all = |tree: &mut crate::process_tree::reap::Tree| {
                tree.note(pid, true);
                // SAFETY: kill(2) on the child's pid; the child is not reaped before
                // `finish` has joined this thread, so the pid is still the child's.
                unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
                tree.signal(libc::SIGKILL);
            };
            let mut forwarded: Option<Instant> = None;
            while !d.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(20));
                if d.load(Ordering::SeqCst) {
                    return;
                }
                tree.note(pid, false);
                if !h.load(Ordering::SeqCst) && t0.elapsed() > limit {
                    t.store(true, Ordering::SeqCst);
                    kill_all(&mut tree);
                    return;
                }
                match forwarded {
                    None if stop() => {
                        forwarded = Some(Instant::now());
                        // SAFETY: as in `kill_all`.
                        unsafe { libc::kill(pid as libc::pid_t, libc::SIGINT) };
                    }
                    Some(at) if at.elapsed() > STOP_GRACE => {
                        k.store(true, Ordering::SeqCst);
                        kill_all(&mut tree);
                        return;
                    }
                    _ => {}
                }
            }
        });
        Watchdog {
            heard,
            done,
            timed_out,
            killed_after_stop,
            limit,
            thread: Some(thread),
        }
    }

    /// The process spoke: the start bound no longer applies.
    pub fn heard(&self) {
        self.heard.store(true, Ordering::SeqCst);
    }

    /// Stops watching (call before reaping the child); the error when the start bound killed
    /// it, or a stop it did not end on.
    pub fn finish(mut self, what: &str, python: &str) -> Option<String> {
        self.done.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        if self.killed_after_stop.load(Ordering::SeqCst) {
            return Some(format!(
                "{what} was asked to stop ({}) and was still running {} s later, so it was killed and what it measured is lost: a rank stopped (SIGSTOP), or blocked in a collective a stopped or hung rank never joins, never sees the request",
                crate::stop::cause(),
                STOP_GRACE.as_secs()
            ));
        }
        self.timed_out.load(Ordering::SeqCst).then(|| {
            // Under a small data limit (a sweep's or fit's --memory-limit) the interpreter can
            // spin on failing maps while it loads PyTorch, rather than fail.
            let data = data_limit()
                .map(|b| format!("; it ran under a data limit of {} (--memory-limit), which may be too little for the interpreter to load PyTorch: raise it", crate::units::fmt_bytes(b as f64)))
                .unwrap_or_default();
            format!(
                "{what} (`{python}`) did not start within {:.0} s (no line once torch and transformers should have been imported), so it was killed: check that `{python}` is a Python with memscope's package (`pip install ./python`), or give it longer with {START_VAR}=SECONDS{data}",
                self.limit.as_secs_f64()
            )
        })
    }
}

/// This process's RLIMIT_DATA, when it has one (a sweep worker under `--memory-limit`); its
/// children inherit it.
fn data_limit() -> Option<u64> {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the struct it is given.
    let ok = unsafe { libc::getrlimit(libc::RLIMIT_DATA, &mut r) } == 0;
    (ok && r.rlim_cur != libc::RLIM_INFINITY).then_some(r.rlim_cur)
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.done.store(true, Ordering::SeqCst);
    }
}

/// No stop is ever asked (the estimate's trace).
pub fn never() -> bool {
    false
}
