//! The watched command: spawned with stdin inherited and stdout/stderr piped (for the relay); SIGINT
//! and SIGTERM sent to `watch` are caught and forwarded; how it ended, told plainly (exit code, the
//! signal, an OOM kill when the kernel's `oom_kill` counters rose).

use crate::record::watch::ChildExit;
use serde::Serialize;
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

static PENDING: AtomicI32 = AtomicI32::new(0);
static FROM_TERMINAL: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(sig: libc::c_int, info: *mut libc::siginfo_t, _: *mut libc::c_void) {
    // Only async-signal-safe work: two atomic stores. A terminal's Ctrl-C comes from the kernel
    // (si_pid 0) and reaches the child directly, being in the same foreground process group.
    let from_kill = !info.is_null() && unsafe { (*info).si_pid() } != 0;
    FROM_TERMINAL.store(!from_kill, Ordering::SeqCst);
    PENDING.store(sig, Ordering::SeqCst);
}

/// Catches SIGINT and SIGTERM from now on (the run ends and outputs are written instead of dying).
pub fn catch_signals() {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_signal as *const () as usize;
            sa.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
}

/// A signal caught since the last call: (signal, whether the child got it from the terminal too).
pub fn take_signal() -> Option<(i32, bool)> {
    match PENDING.swap(0, Ordering::SeqCst) {
        0 => None,
        s => Some((s, FROM_TERMINAL.load(Ordering::SeqCst))),
    }
}

/// Whether a signal is waiting (without taking it).
pub fn take_signal_peek() -> bool {
    PENDING.load(Ordering::SeqCst) != 0
}

/// Starts `argv` with stdin inherited and stdout/stderr piped.
pub fn spawn(argv: &[String]) -> anyhow::Result<Child> {
    let (prog, args) = argv.split_first().ok_or_else(|| {
        anyhow::anyhow!("no command: use `memscope watch -- COMMAND ARGS…` or --pid N")
    })?;
    Command::new(prog)
        .args(args)
        .stdin(Stdio::inherit())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| anyhow::anyhow!("cannot start {prog}: {e}"))
}

/// Sends `sig` to a process (errors ignored: it may be gone).
pub fn send(pid: u32, sig: i32) {
    unsafe {
        libc::kill(pid as libc::pid_t, sig);
    }
}

impl ChildExit {
    pub fn from_status(
        st: std::process::ExitStatus,
        oom_before: &OomCounters,
        killed_by_watch: bool,
    ) -> ChildExit {
        let signal = st.signal();
        let oom = signal == Some(libc::SIGKILL)
            && !killed_by_watch
            && OomCounters::read().rose_since(oom_before);
        let signal_name = signal.map(signal_name);
        let description = match (st.code(), &signal_name) {
            (Some(c), _) => format!("exited with code {c}"),
            (None, Some(n)) if oom => {
                format!("killed by {n}: OOM kill (the kernel's oom_kill counter rose)")
            }
            (None, Some(n)) if killed_by_watch => {
                format!("killed by {n} from memscope watch after the --grace period")
            }
            (None, Some(n)) => format!("killed by {n}"),
            _ => "ended (status unknown)".to_string(),
        };
        ChildExit {
            code: st.code(),
            signal,
            signal_name,
            oom_kill: oom,
            killed_by_watch,
            description,
        }
    }

    /// The shell's convention: the code, or 128 + the signal.
    pub fn exit_code(&self) -> u8 {
        match (self.code, self.signal) {
            (Some(c), _) => (c & 0xff) as u8,
            (None, Some(s)) => (128 + s).min(255) as u8,
            _ => 1,
        }
    }
}

pub use crate::signals::name as signal_name;

/// The kernel's OOM-kill counters: `/proc/vmstat` and this cgroup's (v2 `memory.events`, v1
/// `memory.oom_control`). Read only; None where unreadable.
#[derive(Clone, Debug, Default, Serialize)]
pub struct OomCounters {
    pub vmstat: Option<u64>,
    pub cgroup: Option<u64>,
}

impl OomCounters {
    pub fn read() -> OomCounters {
        OomCounters {
            vmstat: counter("/proc/vmstat", "oom_kill"),
            cgroup: cgroup_file().and_then(|f| counter(&f, "oom_kill")),
        }
    }

    pub fn rose_since(&self, before: &OomCounters) -> bool {
        let rose = |a: Option<u64>, b: Option<u64>| matches!((a, b), (Some(a), Some(b)) if a > b);
        rose(self.vmstat, before.vmstat) || rose(self.cgroup, before.cgroup)
    }
}

fn counter(path: &str, key: &str) -> Option<u64> {
    let text = std::fs::read_to_string(path).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(key)?.trim().parse().ok())
}

fn cgroup_file() -> Option<String> {
    let text = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    for l in text.lines() {
        let mut parts = l.splitn(3, ':');
        let (_, ctrl, path) = (parts.next()?, parts.next()?, parts.next()?);
        if ctrl.is_empty() {
            let f = format!("/sys/fs/cgroup{path}/memory.events");
            if std::path::Path::new(&f).exists() {
                return Some(f);
            }
        } else if ctrl.split(',').any(|c| c == "memory") {
            return Some(format!("/sys/fs/cgroup/memory{path}/memory.oom_control"));
        }
    }
    None
}
