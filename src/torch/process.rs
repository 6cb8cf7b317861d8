//! Runs one Spec on the torch engine: `python3 -m memscope run -m memscope.engine` (under the
//! counting allocator, so CPU figures are counted allocations; on CUDA without it: the figures
//! are the caching allocator's) with the request on stdin. The engine writes one JSON line per
//! finished step (its memory entry) on stdout, then `{"record": …}` as its last line; its stderr
//! is passed on line by line and its last lines kept for the error. `MEMSCOPE_PYTHON` names the
//! interpreter.

use super::python::{failure, python, spawn, Request};
use super::watchdog::{start_limit, Watchdog};
use crate::record::{Record, StepMemory};
use crate::spec::{Spec, TorchRun};
use anyhow::{bail, Context};
use std::io::{BufRead, BufReader};
use std::os::unix::process::ExitStatusExt;
use std::sync::atomic::{AtomicUsize, Ordering};

/// One line of the engine's stdout.
#[derive(serde::Deserialize, schemars::JsonSchema)]
#[serde(untagged)]
#[schemars(rename = "EngineLine")]
pub(crate) enum Line {
    Record {
        record: Box<Record>,
    },
    /// Its first line, once torch and transformers are imported (the start bound's end).
    Started {
        #[allow(dead_code)]
        started: serde_json::Value,
    },
    Step(StepMemory),
}

/// The engine's command line: on the CPU under the counting allocator (exact malloc bytes); on
/// CUDA without it (the caching allocator's own statistics; the host's malloc left alone).
fn engine_args(target: &TorchRun) -> Vec<&'static str> {
    if target.is_cuda() {
        vec!["-m", "memscope.engine"]
    } else {
        vec!["-m", "memscope", "run", "-m", "memscope.engine"]
    }
}

/// Runs `spec` (which has `torch`) to its Record, handing each step's memory entry to `on_step`
/// and counting steps in `progress`. When `stop()` turns true (`leak`'s signals) the engine is
/// sent SIGINT: it drops the step under way and writes the Record of the steps it finished.
pub fn run(
    spec: &Spec,
    progress: &AtomicUsize,
    on_step: &mut dyn FnMut(&StepMemory),
    stop: fn() -> bool,
) -> anyhow::Result<Record> {
    let Some(target) = &spec.torch else {
        bail!("internal: torch::run needs a Spec with --engine torch");
    };
    let request = Request::new(spec)?;
    let limit = start_limit()?;
    let (mut child, stderr) = spawn(&engine_args(target), &request)?;
    let dog = Watchdog::start(child.id(), limit, stop);
    let stdout = child.stdout.take().expect("piped");
    let mut record = None;
    for line in BufReader::new(stdout).lines().map_while(Result::ok) {
        dog.heard();
        match serde_json::from_str::<Line>(&line) {
            Ok(Line::Step(m)) => {
                on_step(&m);
                progress.fetch_add(1, Ordering::Relaxed);
            }
            Ok(Line::Record { record: r }) => record = Some(*r),
            Ok(Line::Started { .. }) => {}
            // Anything else a library printed on stdout is passed on.
            Err(_) => eprintln!("{line}"),
        }
    }
    let timed_out = dog.finish("the torch engine", &python());
    let status = child.wait().context("waiting for the torch engine")?;
    let last = stderr.join().unwrap_or_default();
    if let Some(e) = timed_out {
        bail!("{e}");
    }
    if !status.success() {
        bail!(
            "{}",
            failure("the torch engine", status.code(), status.signal(), &last)
        );
    }
    record.context("the torch engine exited 0 without writing its Record")
}
