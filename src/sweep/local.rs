//! The local backend: runs a planned sweep on this machine, one worker at a time, a row per
//! configuration (errors and skips included), skipping configurations larger than one that ran
//! out of memory, appending each row to the JSONL before the next one starts.

use crate::export::JsonlStream;
use crate::record::sweep_row::{Row, Status};
use crate::spec::Spec;
use crate::sweep::interrupt::INTERRUPTED;
use crate::sweep::plan::{skip_reason, Point};
use crate::sweep::progress::SweepProgress;
use crate::sweep::spawn::{run_worker, RunOptions, WorkerProgress};
use anyhow::Context;
use std::path::Path;
use std::sync::atomic::Ordering;

/// What a sweep produced: every finished row, and whether SIGINT/SIGTERM stopped it early.
pub struct SweepOutcome {
    pub rows: Vec<Row>,
    pub interrupted: bool,
}

/// Runs `planned` in order. `jsonl` is the writer and the path its errors name; `check_machine`
/// turns a configuration this machine's memory could never hold into an error row.
pub fn run_planned(
    planned: &[(Point, Spec)],
    opts: &RunOptions,
    no_skip: bool,
    check_machine: bool,
    mut jsonl: Option<(JsonlStream, &Path)>,
    progress: &SweepProgress,
) -> anyhow::Result<SweepOutcome> {
    let live = WorkerProgress::default();
    let mut rows: Vec<Row> = Vec::new();
    let mut ooms: Vec<Point> = Vec::new();
    let mut interrupted = false;
    for (point, spec) in planned {
        if INTERRUPTED.load(Ordering::SeqCst) {
            interrupted = true;
            break;
        }
        let fits = || match check_machine {
            true => crate::runner::check_machine_memory(spec),
            false => Ok(()),
        };
        let row = if let Err(e) = spec.validate() {
            Row::not_run(Status::Error, e.to_string(), point.index, spec.clone())
        } else if let Err(e) = fits() {
            Row::not_run(Status::Error, e.to_string(), point.index, spec.clone())
        } else if let Some(reason) = (!no_skip).then(|| skip_reason(&ooms, point)).flatten() {
            Row::not_run(Status::Skipped, reason, point.index, spec.clone())
        } else {
            let label = crate::record::sweep_row::label(spec);
            match run_worker(spec, point.index, opts, &INTERRUPTED, &live, || {
                progress.current(&label, &live)
            })? {
                Some(row) => row,
                None => {
                    interrupted = true;
                    break;
                }
            }
        };
        if row.status == Status::Oom {
            ooms.push(point.clone());
        }
        if let Some((w, path)) = jsonl.as_mut() {
            w.write_line(&row.to_jsonl_line()?)
                .with_context(|| format!("--jsonl {}", path.display()))?;
        }
        progress.finished(&row);
        rows.push(row);
    }
    Ok(SweepOutcome { rows, interrupted })
}
