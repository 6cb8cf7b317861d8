//! torchrun's report of a failed job, read into one sentence. When a rank dies, torchrun ends
//! its stderr with a "Root Cause (first observed failure)" block (the rank, its host, its exit
//! code, the signal) closed by a line of `=`: that separator, not the rank, would otherwise be
//! the last line memscope quotes.

/// The first rank of a job that failed, as torchrun's report names it.
#[derive(Debug, Clone, PartialEq)]
pub struct RootCause {
    /// `rank 1 was killed by SIGABRT (signal 6)`, `rank 0 on node-7 exited with code 1`.
    pub sentence: String,
    /// torchrun's `exitcode`: the rank's exit code, or minus the signal that killed it.
    pub exit_code: i32,
}

/// The first failed rank and how it ended, from torchrun's report among `last` (the engine's
/// last stderr lines); `None` when the lines hold no such report.
pub fn root_cause(last: &[String]) -> Option<RootCause> {
    let start = last.iter().position(|l| l.contains("Root Cause"))?;
    let field = |key: &str| {
        last[start..].iter().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            (k.trim() == key).then(|| v.trim().to_string())
        })
    };
    // `rank      : 1 (local_rank: 1)`
    let rank: u64 = field("rank")?.split_whitespace().next()?.parse().ok()?;
    // `exitcode  : -6 (pid: 10917)  (SIGABRT)`
    let code: i32 = field("exitcode")?.split_whitespace().next()?.parse().ok()?;
    let host = field("host")
        .filter(|h| !h.is_empty() && h != "localhost")
        .map(|h| format!(" on {h}"))
        .unwrap_or_default();
    let how = if code < 0 {
        let sig = -code;
        let name = crate::signals::name(sig);
        if name.starts_with("signal ") {
            format!("was killed by {name}")
        } else {
            format!("was killed by {name} (signal {sig})")
        }
    } else {
        format!("exited with code {code}")
    };
    Some(RootCause {
        sentence: format!("rank {rank}{host} {how}"),
        exit_code: code,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(text: &str) -> Vec<String> {
        text.lines().map(str::to_string).collect()
    }

    // torchrun 2.15's report of a job whose rank 1 aborted after rank 0 was stopped by it.
    const REPORT: &str = "\
=======================================================
memscope FAILED
-------------------------------------------------------
Failures:
[1]:
  time      : 2026-11-28_08:32:45
  host      : localhost
  rank      : 0 (local_rank: 0)
  exitcode  : -15 (pid: 10669)  (SIGTERM)
  error_file: <N/A>
  traceback : Signal 15 (SIGTERM) received by PID 10669
-------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-28_08:32:45
  host      : localhost
  rank      : 1 (local_rank: 1)
  exitcode  : -6 (pid: 10670)  (SIGABRT)
  error_file: <N/A>
  traceback : Signal 6 (SIGABRT) received by PID 10670
=======================================================";

    #[test]
    fn the_root_cause_names_the_first_failed_rank_and_its_signal() {
        assert_eq!(
            root_cause(&lines(REPORT)).map(|r| r.sentence).as_deref(),
            Some("rank 1 was killed by SIGABRT (signal 6)")
        );
    }

    #[test]
    fn an_exit_code_and_a_remote_host_are_said() {
        let text = REPORT
            .replace("-6 (pid: 10670)  (SIGABRT)", "1 (pid: 10670)")
            .replace(
                "host      : localhost\n  rank      : 1",
                "host      : node-7\n  rank      : 1",
            );
        assert_eq!(
            root_cause(&lines(&text)).map(|r| r.sentence).as_deref(),
            Some("rank 1 on node-7 exited with code 1")
        );
    }

    #[test]
    fn lines_without_a_report_have_no_root_cause() {
        assert_eq!(root_cause(&lines("Traceback\nValueError: x")), None);
    }
}
