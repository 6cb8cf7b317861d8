//! The worker side of a sweep: the hidden `memscope worker` subcommand. It reads one Spec as
//! JSON on stdin, runs it with `bench::run`, prints progress as JSON lines on stdout, appends each
//! step's memory entry to a side file (so a run killed for memory keeps the series it reached),
//! and writes the Record to a temporary file beside `--out`, renamed into place at the end.
//!
//! Its own peak (VmHWM of this process) is in the Record; the parent never infers it.
//!
//! As a Slurm array task (`memscope worker --plan DIR --index I`) it reads the Spec from
//! DIR/specs/I.json instead, says which job and node it is in DIR/results/I.start.json, and writes
//! its Record and series beside it (`sweep::slurm::workdir`).
//!
//! Test-only fault injection: `MEMSCOPE_TEST_FAULT=KIND[@INDEX]` fires after the first step
//! (in the main thread, between steps), in every worker or only the one with `--index INDEX`.
//! KIND is `panic`, `segfault`, `abort`, `hang`, `alloc` (touch pages until killed; refuses to
//! run without an RLIMIT_DATA, so it never eats the machine) or `stack` (unbounded recursion).

use crate::record::StepMemory;
use crate::spec::Spec;
use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Environment variable for test-only fault injection (see the module docs).
pub const FAULT_ENV: &str = "MEMSCOPE_TEST_FAULT";

/// How often the progress thread looks at the step counter.
const PROGRESS_POLL: Duration = Duration::from_millis(50);

/// Where a worker writes (from the hidden `memscope worker` command's flags).
#[derive(Debug, Clone)]
pub struct WorkerOptions {
    /// Where the Record goes (written to a temporary file beside it, then renamed).
    pub out: PathBuf,
    /// Side file: one JSON line per finished step (its memory entry).
    pub series: Option<PathBuf>,
    /// Position of this configuration in the sweep (for fault injection and messages).
    pub index: usize,
    /// Read the Spec from this file instead of stdin (a Slurm array task).
    pub spec_file: Option<PathBuf>,
    /// A Slurm array task: where to say which job and node it is, as it starts.
    pub start_file: Option<PathBuf>,
}

/// One progress line on the worker's stdout.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "lowercase")]
pub enum Event {
    /// The worker is up: its pid (the parent knows it too; tests read it).
    Start { pid: u32 },
    /// `done` of `total` steps (warm-up included) have finished.
    Step { done: usize, total: usize },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    Panic,
    Segfault,
    Abort,
    Hang,
    Alloc,
    Stack,
}

impl Fault {
    fn parse(s: &str) -> Option<Fault> {
        Some(match s {
            "panic" => Fault::Panic,
            "segfault" => Fault::Segfault,
            "abort" => Fault::Abort,
            "hang" => Fault::Hang,
            "alloc" => Fault::Alloc,
            "stack" => Fault::Stack,
            _ => return None,
        })
    }
}

/// The fault this worker must inject, from [`FAULT_ENV`] (`KIND` or `KIND@INDEX`).
fn fault_for(index: usize) -> anyhow::Result<Option<Fault>> {
    let Ok(text) = std::env::var(FAULT_ENV) else {
        return Ok(None);
    };
    let (kind, only) = match text.split_once('@') {
        Some((k, i)) => (k, Some(i.parse::<usize>().ok().context("bad index")?)),
        None => (text.as_str(), None),
    };
    let Some(fault) = Fault::parse(kind) else {
        bail!("{FAULT_ENV}={text}: use panic, segfault, abort, hang, alloc or stack[@INDEX]");
    };
    Ok((only.is_none() || only == Some(index)).then_some(fault))
}

pub fn run(args: WorkerOptions) -> anyhow::Result<ExitCode> {
    // Die with the parent (the parent also sets this between fork and exec).
    #[cfg(target_os = "linux")]
    unsafe {
        libc::prctl(
            libc::PR_SET_PDEATHSIG,
            libc::SIGKILL as libc::c_ulong,
            0,
            0,
            0,
        );
    }
    let text;
    let from = match &args.spec_file {
        Some(p) => {
            text = crate::capped::read_capped_string(p, crate::capped::MAX_CONFIG_FILE, "Spec")
                .with_context(|| format!("reading {}", p.display()))?;
            p.display().to_string()
        }
        None => {
            let bytes = crate::capped::read_capped_from(
                std::io::stdin(),
                crate::capped::MAX_CONFIG_FILE,
                "Spec",
            )
            .context("reading the Spec on stdin")?;
            text = String::from_utf8(bytes).context("the Spec on stdin is not UTF-8")?;
            "stdin".to_string()
        }
    };
    let spec: Spec =
        serde_json::from_str(&text).with_context(|| format!("parsing the Spec on {from}"))?;
    if follower_node(&spec)? {
        // Another node of a job across nodes: it runs its node's ranks; their Records go to
        // rank 0 on node 0, whose task writes the Record, the series and the start.
        spec.validate()?;
        crate::torch::run(&spec, &AtomicUsize::new(0), &mut |_| {}, || false)?;
        return Ok(ExitCode::SUCCESS);
    }
    if let Some(p) = &args.start_file {
        crate::sweep::slurm::workdir::write_json(
            p,
            &crate::sweep::slurm::workdir::TaskStart::from_env(),
        )?;
    }
    spec.validate()?;
    crate::measure::threads::set_run_threads(&spec);
    let fault = fault_for(args.index)?;
    emit(&Event::Start {
        pid: std::process::id(),
    });

    let mut series_file = match &args.series {
        Some(p) => Some(
            crate::export::open_stream(p, false)
                .with_context(|| format!("--series {}", p.display()))?,
        ),
        None => None,
    };
    let total = spec.warmup + spec.steps;
    let steps = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let poller = {
        let (steps, done) = (steps.clone(), done.clone());
        std::thread::spawn(move || {
            let mut last = 0;
            loop {
                let finished = done.load(Ordering::Acquire);
                let now = steps.load(Ordering::Relaxed);
                if now != last {
                    last = now;
                    emit(&Event::Step { done: now, total });
                }
                if finished {
                    break;
                }
                std::thread::sleep(PROGRESS_POLL);
            }
        })
    };
    let mut on_step = |m: &StepMemory| {
        if let Some(f) = series_file.as_mut() {
            if let Ok(mut line) = serde_json::to_string(m) {
                line.push('\n');
                let _ = f.write_all(line.as_bytes());
            }
        }
        if let Some(fault) = fault {
            inject(fault);
        }
    };
    let result = crate::runner::run_with(&spec, &steps, &mut on_step);
    done.store(true, Ordering::Release);
    let _ = poller.join();
    let record = result?;
    let json = serde_json::to_string(&record)?;
    crate::export::write_atomic(&args.out, &json)
        .with_context(|| format!("--out {}", args.out.display()))?;
    Ok(ExitCode::SUCCESS)
}

/// Whether this process is a Slurm task on a node other than node 0 of a job across nodes.
fn follower_node(spec: &Spec) -> anyhow::Result<bool> {
    let Some(p) = spec.parallel() else {
        return Ok(false);
    };
    Ok(crate::torch::nodes::this_node(&p)?.is_some_and(|n| n.rank > 0))
}

/// One JSON line on stdout, flushed (the parent reads it as it comes).
fn emit(e: &Event) {
    if let Ok(line) = serde_json::to_string(e) {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{line}");
        let _ = out.flush();
    }
}

fn inject(fault: Fault) {
    match fault {
        Fault::Panic => panic!("injected test fault ({FAULT_ENV}=panic)"),
        Fault::Segfault => unsafe {
            let p: *mut u8 = std::ptr::null_mut();
            std::ptr::write_volatile(p, 1);
        },
        Fault::Abort => std::process::abort(),
        Fault::Hang => loop {
            std::thread::sleep(Duration::from_secs(3600));
        },
        Fault::Alloc => {
            if !data_limited() {
                panic!(
                    "{FAULT_ENV}=alloc needs a memory limit (run it under sweep --memory-limit)"
                );
            }
            let mut held: Vec<Vec<u8>> = Vec::new();
            loop {
                let mut chunk = vec![0u8; 16 << 20];
                for i in (0..chunk.len()).step_by(4096) {
                    chunk[i] = 1; // touch every page
                }
                held.push(std::hint::black_box(chunk));
                // ≤ 1.6 GB/s, so the parent's 100 ms PSS watchdog overshoots by little.
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        Fault::Stack => {
            #[allow(unconditional_recursion)]
            fn recurse(n: u64) -> u64 {
                let pad = std::hint::black_box([n; 64]);
                recurse(pad[7] + 1) + pad[3]
            }
            std::hint::black_box(recurse(0));
        }
    }
}

/// True when this process runs under a finite RLIMIT_DATA (or a cgroup limit set by the parent,
/// which says so in MEMSCOPE_WORKER_LIMITED, or a Slurm --mem).
fn data_limited() -> bool {
    // A Slurm task with --mem: slurmstepd enforces it.
    if std::env::var_os("MEMSCOPE_WORKER_LIMITED").is_some()
        || std::env::var_os("SLURM_MEM_PER_NODE").is_some()
    {
        return true;
    }
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_DATA, &mut lim) };
    rc == 0 && lim.rlim_cur != libc::RLIM_INFINITY
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_serialise_as_the_parent_reads_them() {
        let s = serde_json::to_string(&Event::Step { done: 3, total: 5 }).unwrap();
        assert_eq!(s, r#"{"event":"step","done":3,"total":5}"#);
        let e: Event = serde_json::from_str(r#"{"event":"start","pid":42}"#).unwrap();
        assert_eq!(e, Event::Start { pid: 42 });
    }
}
