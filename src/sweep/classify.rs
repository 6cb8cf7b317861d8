//! How a worker ended → a row's status and reason: the parent's own actions (timeout, watchdog),
//! cgroup OOM kills, Rust's allocation-failure abort, stack overflow, panics, clean errors, other
//! exit codes, then signals.

use crate::record::sweep_row::Status;
use crate::record::torch_oom::ALLOC_FAILURES;
use crate::sweep::limits::GRACE;
use crate::units::human_duration;
use std::time::Duration;

pub use crate::signals::name as signal_name;

/// Everything [`classify`] looks at.
#[derive(Debug, Clone)]
pub struct WorkerExit<'a> {
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
/// watchdog), cgroup OOM kills, the torch engine's out-of-memory line (`record::torch_oom`),
/// Rust's allocation-failure abort, stack overflow, panics (exit
/// 101), clean errors (exit 2), other exit codes, then signals; a SIGKILL with no evidence of
/// OOM is a crash, "killed (unknown cause)".
pub fn classify(o: &WorkerExit) -> (Status, Option<String>) {
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
    // The torch engine's own report: PyTorch's out-of-memory error, with its figures.
    if let Some(f) = crate::record::torch_oom::OomFacts::find(o.stderr) {
        return (Status::Oom, Some(f.describe()));
    }
    // Under a --memory-limit below what the interpreter and PyTorch's libraries need, the
    // engine dies loading them: a shared object that cannot be mapped, C++'s bad_alloc, the
    // loader's thread-local block, Python's MemoryError. That is the limit, not a missing
    // package: an oom row, so larger configurations are skipped. The last such line: a job's
    // is memscope's own error, which names the rank.
    if let Some(lim) = o.memory_limit {
        if let Some(line) = o
            .stderr
            .iter()
            .rev()
            .find(|l| ALLOC_FAILURES.iter().any(|e| l.contains(e)))
        {
            return (
                Status::Oom,
                Some(format!(
                    "out of memory under --memory-limit {}: {}",
                    bytes(lim),
                    line.trim().trim_start_matches("error: ")
                )),
            );
        }
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

    fn outcome<'a>(code: Option<i32>, sig: Option<i32>, stderr: &'a [String]) -> WorkerExit<'a> {
        WorkerExit {
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
    fn the_torch_engines_out_of_memory_line_is_an_oom_row_with_its_figures() {
        let err = lines(&[
            r#"memscope-oom {"device":"cpu","requested_bytes":16777216,"allocated_bytes":234989568,"phase":"forward"}"#,
            "out of memory: DefaultCPUAllocator: not enough memory: you tried to allocate 16777216 bytes.",
            "error: PyTorch ran out of memory on cpu in forward: tried to allocate 16.0 MiB with 224.1 MiB heap live",
        ]);
        let (status, reason) = classify(&outcome(Some(2), None, &err));
        assert_eq!(status, Status::Oom);
        assert_eq!(
            reason.as_deref(),
            Some("PyTorch ran out of memory on cpu in forward: tried to allocate 16.0 MiB with 224.1 MiB heap live")
        );
    }

    #[test]
    fn an_interpreter_that_cannot_load_under_the_limit_is_an_oom_row() {
        // What python3 printed under --memory-limit 64 MiB, 300 MiB and 700 MiB (RLIMIT_DATA).
        for (code, sig, line) in [
            (Some(2), None, "error: the torch engine needs PyTorch and transformers (/x/torch/_C.so: failed to map segment from shared object): pip install torch"),
            (None, Some(libc::SIGABRT), "what():  std::bad_alloc"),
            (Some(1), None, "ImportError: libgomp.so.1: cannot allocate memory in static TLS block"),
        ] {
            let e = lines(&[line]);
            let mut w = outcome(code, sig, &e);
            w.memory_limit = Some(64 << 20);
            let (s, r) = classify(&w);
            assert_eq!(s, Status::Oom, "{line}");
            assert!(r.unwrap().starts_with("out of memory under --memory-limit 64"), "{line}");
            // Without a limit the same line is what it says.
            w.memory_limit = None;
            assert_ne!(classify(&w).0, Status::Oom, "{line}");
        }
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
