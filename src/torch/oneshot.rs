//! A Python module of the package run once (the estimator's trace, `peaks`): the request on its
//! stdin, its `started` line (the end of the start bound), then one JSON answer on its stdout.

use super::python::{failure, python, spawn};
use super::watchdog::{never, start_limit, Watchdog};
use anyhow::{bail, Context};
use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::ExitStatusExt;

/// Runs `python -m MODULE` with `request` on stdin; returns what it printed after its `started`
/// line. `what` names it in errors ("the torch estimator's trace").
pub fn answer(module: &str, request: &str, what: &str) -> anyhow::Result<String> {
    answer_from(&["-m", module], request, &[], what)
}

/// As `answer`, for `python ARGS` with `env` set (a torchrun job: its ranks read the request
/// from `MEMSCOPE_REQUEST`; rank 0 answers).
pub fn answer_from(
    args: &[&str],
    request: &str,
    env: &[(&str, &str)],
    what: &str,
) -> anyhow::Result<String> {
    let limit = start_limit()?;
    let (mut child, stderr) = spawn(args, request, env)?;
    let dog = Watchdog::start(child.id(), limit, never);
    let mut out = BufReader::new(child.stdout.take().expect("piped"));
    let mut first = String::new();
    let mut text = String::new();
    let read = out.read_line(&mut first).and_then(|_| {
        dog.heard();
        out.read_to_string(&mut text)
    });
    let timed_out = dog.finish(what, &python());
    let status = child
        .wait()
        .with_context(|| format!("waiting for {what}"))?;
    let last = stderr.join().unwrap_or_default();
    if let Some(e) = timed_out {
        bail!("{e}");
    }
    if !status.success() {
        bail!("{}", failure(what, status.code(), status.signal(), &last));
    }
    read.with_context(|| format!("reading {what}'s answer"))?;
    Ok(text)
}
