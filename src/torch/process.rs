//! Runs one Spec on the torch engine: `python3 -m memscope run -m memscope._workers.engine` (under the
//! counting allocator, so CPU figures are counted allocations; on CUDA without it: the figures
//! are the caching allocator's) with the request on stdin. The engine writes one JSON line per
//! finished step (its memory entry) on stdout, then `{"record": …}` as its last line; its stderr
//! is passed on line by line and its last lines kept for the error. `MEMSCOPE_PYTHON` names the
//! interpreter.
//!
//! A data-parallel Spec (`--nproc N --parallel PLAN`) runs under torchrun (`python3 -m
//! torch.distributed.run --standalone --nproc-per-node N`, the launcher users run), each rank the
//! same engine with the request in `MEMSCOPE_REQUEST`; rank 0 writes the step lines and then
//! `{"ranks": [Record, …]}`, every rank's Record in rank order.

use super::nodes::{this_node, torchrun_flags, Node};
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
    /// A data-parallel run: rank 0's last line, every rank's Record in rank order.
    Ranks {
        ranks: Vec<Record>,
    },
    /// Its first line, once torch and transformers are imported (the start bound's end).
    Started {
        #[allow(dead_code)]
        started: serde_json::Value,
    },
    Step(StepMemory),
}

/// The engine's command line: on the CPU under the counting allocator (exact malloc bytes), unless
/// `MEMSCOPE_NO_COUNT` switched memscope's counting off (the engine's figures are then RSS, and
/// its Record says so); on CUDA without it (the caching allocator's own statistics; the host's
/// malloc left alone). A data-parallel job: that command as every rank of torchrun's job on this
/// machine.
fn engine_args(target: &TorchRun, node: Option<&Node>) -> Vec<String> {
    let engine: &[&str] = if target.is_cuda() || crate::environment::counting_switched_off() {
        &["-m", "memscope._workers.engine"]
    } else {
        &["-m", "memscope", "run", "-m", "memscope._workers.engine"]
    };
    let mut args: Vec<String> = Vec::new();
    if let Some(p) = target.parallel {
        // `-m` once more: torchrun starts `python -m memscope …` in every rank.
        args.extend(["-m", "torch.distributed.run"].map(String::from));
        args.extend(torchrun_flags(&p, node));
    }
    args.extend(engine.iter().map(|a| a.to_string()));
    args
}

/// A CPU job of more ranks than the cores memscope may use is refused, naming --nproc (each
/// rank is a process of at least one thread; `estimate --nproc` predicts larger jobs). CUDA
/// jobs are checked by the ranks (one GPU each).
pub fn check_local(target: &TorchRun) -> anyhow::Result<()> {
    if target.heap_limit_bytes.is_some() && crate::environment::counting_switched_off() {
        anyhow::bail!("--memory-limit: a CPU rank's limit is held by memscope's counting allocator, which MEMSCOPE_NO_COUNT switched off; unset MEMSCOPE_NO_COUNT");
    }
    let Some(p) = target.parallel else {
        return Ok(());
    };
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    if !target.is_cuda() && p.nodes <= 1 && p.world > cores {
        bail!(
            "--nproc {}: this machine lets memscope use {cores} cores and a CPU rank needs one; use --nproc {cores} or fewer (`memscope estimate --engine torch --nproc {} --parallel {}` predicts the larger job)",
            p.world,
            p.world,
            p.flag()
        );
    }
    Ok(())
}

/// Runs `spec` (which has `torch`) to its Records (one; a data-parallel job's in rank order),
/// handing each step's memory entry to `on_step` (rank 0's) and counting steps in `progress`.
/// When `stop()` turns true (`leak`'s signals) the engine is sent SIGINT: it drops the step
/// under way and writes the Record of the steps it finished.
pub fn run(
    spec: &Spec,
    progress: &AtomicUsize,
    on_step: &mut dyn FnMut(&StepMemory),
    stop: fn() -> bool,
) -> anyhow::Result<Vec<Record>> {
    let Some(target) = &spec.torch else {
        bail!("internal: torch::run needs a Spec with --engine torch");
    };
    check_local(target)?;
    let node = target
        .parallel
        .map(|p| this_node(&p))
        .transpose()?
        .flatten();
    let request = Request::new(spec)?;
    let limit = start_limit()?;
    let args = engine_args(target, node.as_ref());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    // torchrun's ranks read the request from the environment; OMP_NUM_THREADS set, torchrun
    // does not set its own and say so (the engine sets its threads from the Spec anyway).
    let threads = spec.threads.to_string();
    let env: Vec<(&str, &str)> = if target.parallel.is_some() {
        vec![
            ("MEMSCOPE_REQUEST", request.as_str()),
            ("OMP_NUM_THREADS", threads.as_str()),
        ]
    } else {
        vec![]
    };
    let (mut child, stderr) = spawn(&args, &request, &env)?;
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
            Ok(Line::Record { record: r }) => record = Some(vec![*r]),
            Ok(Line::Ranks { ranks }) => record = Some(ranks),
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
    // A job stopped (`bench --timeout`): its ranks ended their step and rank 0 sent the
    // Records, and torchrun, stopped too, then exits 1.
    let stopped_job = crate::stop::requested() && target.parallel.is_some();
    if stopped_job {
        if let Some(r) = record.take() {
            return Ok(r);
        }
    }
    if !status.success() {
        let why = failure("the torch engine", status.code(), status.signal(), &last);
        if stopped_job {
            bail!(
                "stopped by {} before the job's ranks sent what they measured: {why}",
                crate::stop::cause()
            );
        }
        bail!("{why}");
    }
    match (record, node) {
        (Some(r), _) => Ok(r),
        // A node other than node 0 of a job across nodes: its ranks' Records went to rank 0.
        (None, Some(n)) if n.rank > 0 => Ok(Vec::new()),
        (None, _) => bail!("the torch engine exited 0 without writing its Record"),
    }
}
