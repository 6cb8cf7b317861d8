//! How an array task ended → a row's status and reason, from the scheduler's own evidence: its
//! final state and `ExitCode` (sacct or scontrol), and the lines slurmstepd wrote into the task's
//! stderr. In order:
//! - `OUT_OF_MEMORY`, or slurmstepd's "Exceeded job memory limit" / "oom-kill" line → `oom`
//!   (without cgroups, Slurm's memory enforcement (`JobAcctGatherParams=OverMemoryKill`) kills
//!   the task and leaves it `FAILED` with signal 9: the line is the evidence);
//! - `TIMEOUT` → `timeout`;
//! - `COMPLETED` → `ok` with a Record, else `crash`;
//! - `FAILED` → the local rules on the worker's exit code, signal and stderr (panics, clean
//!   errors, allocation failures: a rank's C++ `bad_alloc` under `--memory-limit`'s heap limit
//!   is `oom`, as in a local sweep), the state and exit code in the reason;
//! - `NODE_FAIL`, `CANCELLED`, `PREEMPTED`, `BOOT_FAIL`, `DEADLINE`, … → `crash` with state and
//!   exit code.

use crate::record::sweep_row::Status;
use crate::sweep::classify::{classify as classify_exit, WorkerExit};
/// Lines slurmstepd writes when it kills a task for memory.
pub const OOM_EVIDENCE: [&str; 4] = [
    "Exceeded job memory limit",
    "exceeded memory limit",
    "oom-kill",
    "Out Of Memory",
];

/// What [`classify`] looks at.
#[derive(Debug, Clone)]
pub struct TaskEnd<'a> {
    pub state: &'a str,
    /// `code:signal`.
    pub exit_code: Option<&'a str>,
    /// Key lines and the tail of the task's stderr.
    pub stderr: &'a [String],
    pub has_record: bool,
    /// `--time` and `--mem` as given.
    pub time: Option<&'a str>,
    pub mem: Option<&'a str>,
    /// The bytes the task's processes were held to: each CPU rank's heap (`--memory-limit`),
    /// else `--mem`.
    pub memory_limit: Option<u64>,
}

/// `"0:9"` → (exit code 0, signal 9).
pub fn split_exit(e: Option<&str>) -> (Option<i32>, Option<i32>) {
    let Some((c, s)) = e.and_then(|e| e.split_once(':')) else {
        return (None, None);
    };
    (c.parse().ok(), s.parse().ok())
}

pub fn classify(t: &TaskEnd) -> (Status, Option<String>) {
    let ec = t.exit_code.unwrap_or("?");
    let said = format!("Slurm state {}, ExitCode {ec}", t.state);
    let oom_line = t
        .stderr
        .iter()
        .find(|l| OOM_EVIDENCE.iter().any(|p| l.contains(p)));
    if t.state == "OUT_OF_MEMORY" || oom_line.is_some() {
        let mem = t.mem.map_or(String::new(), |m| format!(" (--mem {m})"));
        let line = oom_line.map_or(String::new(), |l| format!(": {}", l.trim()));
        return (Status::Oom, Some(format!("{said}{mem}{line}")));
    }
    match t.state {
        "TIMEOUT" => {
            let time = t.time.map_or(String::new(), |m| format!(" {m}"));
            (
                Status::Timeout,
                Some(format!("{said}: exceeded --time{time}")),
            )
        }
        "COMPLETED" if t.has_record => (Status::Ok, None),
        "COMPLETED" => (
            Status::Crash,
            Some(format!("{said}, but the worker wrote no Record")),
        ),
        "FAILED" => {
            let (code, sig) = split_exit(t.exit_code);
            let outcome = WorkerExit {
                exit_code: if sig.unwrap_or(0) == 0 { code } else { None },
                signal: sig.filter(|s| *s != 0),
                stderr: t.stderr,
                watchdog_pss: None,
                cgroup_oom_kills: 0,
                timed_out: false,
                has_record: t.has_record,
                memory_limit: t.memory_limit,
                timeout: None,
            };
            match classify_exit(&outcome) {
                (Status::Error, r) => (Status::Error, r),
                (Status::Oom, r) => (
                    Status::Oom,
                    Some(format!("{said}: {}", r.unwrap_or_default())),
                ),
                (_, r) => (
                    Status::Crash,
                    Some(format!("{said}: {}", r.unwrap_or_default())),
                ),
            }
        }
        _ => (Status::Crash, Some(said)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn end<'a>(state: &'a str, ec: &'a str, stderr: &'a [String]) -> TaskEnd<'a> {
        TaskEnd {
            state,
            exit_code: Some(ec),
            stderr,
            has_record: false,
            time: Some("1"),
            mem: Some("300M"),
            memory_limit: Some(300 << 20),
        }
    }

    #[test]
    fn states_and_evidence() {
        let none: Vec<String> = vec![];
        assert_eq!(
            classify(&end("OUT_OF_MEMORY", "0:125", &none)).0,
            Status::Oom
        );
        let e = vec!["slurmstepd-vm: error: Exceeded job memory limit".to_string()];
        let (s, r) = classify(&end("FAILED", "0:9", &e));
        assert_eq!(s, Status::Oom);
        assert!(r.unwrap().contains("--mem 300M"));
        let (s, r) = classify(&end("TIMEOUT", "0:15", &none));
        assert_eq!(s, Status::Timeout);
        assert_eq!(
            r.unwrap(),
            "Slurm state TIMEOUT, ExitCode 0:15: exceeded --time 1"
        );
        let mut ok = end("COMPLETED", "0:0", &none);
        ok.has_record = true;
        assert_eq!(classify(&ok), (Status::Ok, None));
        let (s, r) = classify(&end("NODE_FAIL", "0:0", &none));
        assert_eq!(
            (s, r.unwrap()),
            (Status::Crash, "Slurm state NODE_FAIL, ExitCode 0:0".into())
        );
        let e = vec!["error: --weights x: no such file".to_string()];
        assert_eq!(classify(&end("FAILED", "2:0", &e)).0, Status::Error);
        let (s, r) = classify(&end("FAILED", "0:11", &none));
        assert_eq!(s, Status::Crash);
        assert!(r.unwrap().contains("SIGSEGV"));
    }

    #[test]
    fn a_rank_aborted_by_bad_alloc_under_a_heap_limit_is_oom() {
        // A rank's gloo thread refused by the heap limit: C++ terminates it; memscope in the
        // task then ends with its own error (exit 2) naming torchrun's root cause.
        let e = vec![
            "terminate called after throwing an instance of 'std::bad_alloc'".to_string(),
            "error: the torch engine's job failed: rank 0 was killed by SIGABRT (signal 6) after \
             `terminate called after throwing an instance of 'std::bad_alloc'` (its output and \
             torchrun's report are above)"
                .to_string(),
        ];
        let (s, r) = classify(&end("FAILED", "2:0", &e));
        assert_eq!(s, Status::Oom);
        // The reason is memscope's own last line, which names the rank.
        let r = r.unwrap();
        assert!(
            r.starts_with(
                "Slurm state FAILED, ExitCode 2:0: out of memory under --memory-limit 300.0 MiB: \
                 the torch engine's job failed: rank 0 was killed by SIGABRT"
            ),
            "{r}"
        );
        // Without a limit the same lines are the job's own error, not memory.
        let mut free = end("FAILED", "2:0", &e);
        free.memory_limit = None;
        assert_eq!(classify(&free).0, Status::Error);
    }
}
