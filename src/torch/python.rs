//! Starting memscope's Python package (`python/memscope`): the interpreter, the request it reads
//! on stdin, its stderr passed on line by line (the last lines kept), and why it failed in one
//! sentence.

use crate::record::torch_oom::ALLOC_FAILURES;
use crate::spec::Spec;
use anyhow::Context;
use serde::Serialize;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::thread::JoinHandle;

/// The interpreter the engine runs in: `MEMSCOPE_PYTHON`, else `python3`.
pub fn python() -> String {
    std::env::var("MEMSCOPE_PYTHON")
        .ok()
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| "python3".into())
}

/// What the engine and the trace read on stdin.
#[derive(Serialize, schemars::JsonSchema)]
pub struct Request<'a> {
    pub spec: &'a Spec,
    /// memscope's exact parameter count: the engine refuses a model that differs.
    pub expected_params: u64,
}

impl<'a> Request<'a> {
    pub fn new(spec: &'a Spec) -> anyhow::Result<String> {
        let expected_params = crate::model::cost::param_count(spec.arch())
            .context("the model's parameter count overflows u64")?;
        Ok(serde_json::to_string(&Request {
            spec,
            expected_params,
        })?)
    }
}

/// Stderr lines kept for an error message.
const KEEP: usize = 20;

/// Starts `python ARGS` with `request` on its stdin and its stdout piped; the returned thread
/// passes its stderr on and ends with the last lines. The process dies with memscope, however
/// memscope ends (SIGKILL included): Linux's parent-death signal, set between fork and exec,
/// kills it when the thread that started it is gone.
pub fn spawn(
    args: &[&str],
    request: &str,
    env: &[(&str, &str)],
) -> anyhow::Result<(Child, JoinHandle<Vec<String>>)> {
    use std::os::unix::process::CommandExt;
    let py = python();
    let parent = std::process::id();
    let mut cmd = Command::new(&py);
    cmd.args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // SAFETY: prctl and getppid are async-signal-safe, as code between fork and exec must be.
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // memscope died between fork and prctl: nobody is left to send the signal.
            if libc::getppid() as u32 != parent {
                libc::_exit(1);
            }
            Ok(())
        });
    }
    let mut child = cmd
        .spawn()
        .map_err(|e| {
            anyhow::anyhow!(
                "--engine torch runs memscope's Python package in `{py}`, which could not start ({e}): \
                 install Python 3 and the package (`pip install ./python`, with torch and transformers), \
                 or set MEMSCOPE_PYTHON to the interpreter that has them"
            )
        })?;
    if let Some(mut stdin) = child.stdin.take() {
        // A process that died closes its stdin: its exit status says why.
        let _ = stdin.write_all(request.as_bytes());
    }
    let stderr = child.stderr.take().expect("piped");
    let passer = std::thread::spawn(move || {
        let mut kept: std::collections::VecDeque<String> = Default::default();
        // Its refusals and out-of-memory lines, kept however much follows them (torchrun's
        // report of a failed rank is longer than the last lines).
        let mut key: Vec<String> = Vec::new();
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            // Its own refusal ("error: …") becomes memscope's error: said once, not twice.
            if !line.starts_with("error: ") {
                eprintln!("{line}");
            }
            // Anywhere in the line: a job's ranks share one stderr (`OomFacts::find`).
            let oom = line.contains(crate::record::torch_oom::PREFIX);
            // Refusals and a library's allocation failure (C++'s bad_alloc, before torchrun's
            // long report) are kept; out-of-memory lines past their cap, as a job's other ranks
            // can say more first.
            let telling =
                line.starts_with("error: ") || ALLOC_FAILURES.iter().any(|e| line.contains(e));
            if (telling && key.len() < KEEP) || (oom && key.len() < 2 * KEEP) {
                key.push(line.clone());
            }
            if kept.len() == KEEP {
                kept.pop_front();
            }
            kept.push_back(line);
        }
        // Each line once: the key lines the last lines still hold are said there.
        key.retain(|k| !kept.contains(k));
        key.into_iter().chain(kept).collect::<Vec<_>>()
    });
    Ok((child, passer))
}

/// One sentence for an engine that did not finish: out of memory, the package or its libraries
/// missing, or its own last line; `signal` is the one that ended it, if one did.
pub fn failure(what: &str, code: Option<i32>, signal: Option<i32>, last: &[String]) -> String {
    let py = python();
    if let Some(f) = crate::record::torch_oom::OomFacts::find(last) {
        return f.describe();
    }
    let has = |s: &str| last.iter().any(|l| l.contains(s));
    if has("No module named memscope") || has("No module named 'memscope'") {
        return format!(
            "--engine torch: `{py}` has no memscope package: `pip install ./python` from memscope's clone (or set MEMSCOPE_PYTHON to the interpreter that has it)"
        );
    }
    if has("No module named 'torch'") || has("No module named 'transformers'") {
        return format!(
            "--engine torch: `{py}` lacks PyTorch or transformers: `{py} -m pip install torch transformers`"
        );
    }
    // torchrun's report of a job whose rank died names the rank that failed first.
    let root = super::torchrun_report::root_cause(last);
    // A refusal ("error: …", exit 2) says why, unless a rank failed some other way first: the
    // peers torchrun then stops can say "stopped by SIGTERM before any step finished", which is
    // not why the job failed.
    let refused = last.iter().any(|l| l.starts_with("error: "))
        && root.as_ref().is_none_or(|r| r.exit_code == 2);
    // Its own refusal, the first (a job's ranks each say theirs; torchrun's report follows);
    // else its last line.
    let line = last
        .iter()
        .find(|l| refused && l.starts_with("error: "))
        .or_else(|| last.iter().rev().find(|l| !l.trim().is_empty()))
        .map(|l| l.trim().trim_start_matches("error: ").to_string())
        .unwrap_or_default();
    let said = if line.is_empty() {
        " (it printed nothing on stderr)".to_string()
    } else {
        format!(": {line}")
    };
    if let (false, Some(root)) = (refused, root) {
        // A rank that died where the engine could not report it (C++'s bad_alloc in a gloo
        // thread under the heap limit): its library's line says why.
        let alloc = last
            .iter()
            .find(|l| ALLOC_FAILURES.iter().any(|e| l.contains(e)))
            .map_or(String::new(), |l| format!(" after `{}`", l.trim()));
        return format!(
            "{what}'s job failed: {}{alloc} (its output and torchrun's report are above)",
            root.sentence
        );
    }
    match code {
        Some(2) if !line.is_empty() => line,
        Some(_) if refused => line,
        Some(c) => format!("{what} exited with code {c}{said}"),
        None => format!("{what} was killed by {}{said}", killed_by(signal)),
    }
}

/// `SIGKILL (signal 9, …)` and the like; the kernel's out-of-memory killer sends SIGKILL.
fn killed_by(signal: Option<i32>) -> String {
    let Some(sig) = signal else {
        return "a signal".into();
    };
    let name = crate::signals::name(sig);
    let why = if sig == libc::SIGKILL {
        ", as the kernel's out-of-memory killer or a timeout sends"
    } else {
        ""
    };
    if name.starts_with("signal ") {
        return name;
    }
    format!("{name} (signal {sig}{why})")
}

#[cfg(test)]
mod tests {
    use super::failure;

    fn lines(text: &str) -> Vec<String> {
        text.lines().map(str::to_string).collect()
    }

    // torchrun's report when rank 0 died first (SIGABRT) and rank 1 was then stopped.
    const REPORT: &str = "\
Root Cause (first observed failure):
[0]:
  host      : localhost
  rank      : 0 (local_rank: 0)
  exitcode  : -6 (pid: 10670)  (SIGABRT)
=======================================================";

    #[test]
    fn a_peer_stopped_after_a_rank_died_is_not_the_cause() {
        let last = lines(&format!(
            "terminate called after throwing an instance of 'std::bad_alloc'\n\
             error: stopped by SIGTERM before any step finished\n{REPORT}"
        ));
        assert_eq!(
            failure("the torch engine", Some(1), None, &last),
            "the torch engine's job failed: rank 0 was killed by SIGABRT (signal 6) after \
             `terminate called after throwing an instance of 'std::bad_alloc'` (its output and \
             torchrun's report are above)"
        );
    }

    #[test]
    fn a_refusal_of_the_rank_that_failed_first_is_said() {
        let report = REPORT.replace("-6 (pid: 10670)  (SIGABRT)", "2 (pid: 10670)");
        let last = lines(&format!(
            "error: --parallel pp: GPT2Model keeps no list of blocks\n{report}"
        ));
        assert_eq!(
            failure("the torch engine", Some(1), None, &last),
            "--parallel pp: GPT2Model keeps no list of blocks"
        );
    }
}
