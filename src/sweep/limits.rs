//! The limits a worker runs under: how its memory budget is enforced (cgroup v2 `memory.max` in a
//! child cgroup where a delegated, writable v2 hierarchy offers the memory controller — detected,
//! never assumed — otherwise `RLIMIT_DATA`; the parent's PSS watchdog every [`POLL`] either way),
//! and the grace between SIGTERM and SIGKILL on a timeout.

use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How often the parent checks the worker's PSS, the clock and the interrupt flag.
pub const POLL: Duration = Duration::from_millis(100);
/// Time between SIGTERM and SIGKILL on a timeout.
pub const GRACE: Duration = Duration::from_secs(2);

/// The smallest `--memory-limit` a worker can be held to: the memscope process itself (its
/// binary, allocator arenas, threads' stacks) needs about this much before it loads a model, so
/// a smaller limit makes the worker die at start-up (a segmentation fault), not an `oom` row.
pub const MIN_MEMORY_LIMIT: u64 = 64 << 20;

/// `--memory-limit` (sweep, fit, optimize): a size, at least [`MIN_MEMORY_LIMIT`].
pub fn parse_memory_limit(text: &str) -> anyhow::Result<u64> {
    let b = crate::units::parse_bytes("--memory-limit", text)?;
    anyhow::ensure!(
        b >= MIN_MEMORY_LIMIT,
        "--memory-limit {text}: a worker needs at least {} before it loads any model (the process itself); give {} or more",
        crate::units::fmt_bytes(MIN_MEMORY_LIMIT as f64),
        crate::units::fmt_bytes(MIN_MEMORY_LIMIT as f64)
    );
    Ok(b)
}

/// `--timeout` (sweep, fit, optimize): a duration, at least [`POLL`], the interval at which a
/// worker is checked (a shorter one would be rounded up to it without a word).
pub fn parse_timeout(text: &str) -> anyhow::Result<Duration> {
    let d = crate::units::parse_duration("--timeout", text)?;
    anyhow::ensure!(
        d >= POLL,
        "--timeout {text}: shorter than the {} ms at which workers are checked; give 100ms or more",
        POLL.as_millis()
    );
    Ok(d)
}

/// What holds a CUDA run of the torch engine to `--memory-limit`: the GPU's memory, not the host's.
pub const GPU_CAP: &str = "torch.cuda.set_per_process_memory_fraction (GPU memory)";
/// What holds each CPU rank of a data-parallel torch run to `--memory-limit`.
pub const RANK_HEAP_CAP: &str =
    "counting allocator, per rank (heap: a malloc past the limit fails)";

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

/// The sentence saying how `limit` holds the runs of `specs`: on CUDA PyTorch's caching
/// allocator capped at it; a CPU data-parallel job's ranks each held to it by the counting
/// allocator; otherwise the worker's `enforcement`.
pub fn describe_for(
    specs: &[&crate::spec::Spec],
    enforcement: &Enforcement,
    limit: Option<u64>,
) -> String {
    let is = |f: fn(&crate::spec::Spec) -> bool| specs.iter().any(|s| f(s));
    match limit {
        Some(b) if is(|s| s.cpu_job().is_some()) => format!(
            "memory limit {} per rank: each rank's heap held to it by memscope's counting allocator (a malloc past it fails, as on a full device)",
            crate::units::bytes(b as f64)
        ),
        // A CUDA worker's cap is on PyTorch's caching allocator, not on the host's memory.
        Some(b) if is(crate::spec::Spec::is_cuda) => format!(
            "memory limit {} per worker: on CUDA, PyTorch's caching allocator capped at it (torch.cuda.set_per_process_memory_fraction, a smaller card simulated); on the CPU, {}",
            crate::units::bytes(b as f64),
            enforcement.describe(limit)
        ),
        _ => enforcement.describe(limit),
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

pub fn make_cgroup(parent: &Path, index: usize, limit: u64) -> std::io::Result<PathBuf> {
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

pub fn cgroup_oom_kills(dir: &Path) -> u64 {
    std::fs::read_to_string(dir.join("memory.events"))
        .ok()
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("oom_kill ")?.trim().parse().ok())
        })
        .unwrap_or(0)
}
