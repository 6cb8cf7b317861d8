//! Following a submitted array: every few seconds ask the scheduler where each task is, and turn
//! each task that ended into its row (saved in the work directory, appended to `--jsonl` once),
//! `scancel` the not-yet-started tasks larger than one that ran out of memory (rows `skipped`,
//! the local backend's rule: `plan::skip_reason`), and show queued / running / done.
//!
//! Re-attaching (`--attach DIR`) runs this same loop: rows already decided are read back from
//! DIR/rows, and a row already in the JSONL (same job, same index) is not appended again.
//!
//! On SIGINT/SIGTERM: with `--cancel-on-interrupt` the array is cancelled; at a terminal the
//! user is asked; otherwise the array keeps running and the message says how to re-attach.

use crate::export::JsonlStream;
use crate::record::sweep_row::{Row, Status};
use crate::spec::Spec;
use crate::sweep::interrupt::INTERRUPTED;
use crate::sweep::local::SweepOutcome;
use crate::sweep::plan::{skip_reason, Point};
use crate::sweep::progress::SweepProgress;
use crate::sweep::slurm::query::{self, TaskState};
use crate::sweep::slurm::task_row::{finished_row, skipped_row};
use crate::sweep::slurm::workdir::{read_json, write_json, PlanMeta, WorkDir};
use anyhow::Context;
use std::collections::{BTreeMap, BTreeSet};
use std::io::IsTerminal;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// How the follower behaves.
#[derive(Debug, Clone)]
pub struct FollowOptions {
    /// Time between two looks at the queue.
    pub poll: Duration,
    pub cancel_on_interrupt: bool,
}

/// Polls a task must be missing from every source before it is called lost.
const LOST_AFTER: u32 = 5;

/// Follows the array of `meta` until every task has a row (or an interruption).
/// `in_jsonl` are the indices whose rows the JSONL already holds.
pub fn follow(
    dir: &WorkDir,
    meta: &PlanMeta,
    specs: &[Spec],
    jsonl: Option<(JsonlStream, &Path)>,
    in_jsonl: &BTreeSet<usize>,
    progress: &SweepProgress,
    opts: &FollowOptions,
) -> anyhow::Result<SweepOutcome> {
    let job = meta
        .job_id
        .clone()
        .context("the plan in --work-dir was never submitted (no job id in plan.json)")?;
    let n = meta.points.len();
    let mut f = Follower {
        dir,
        meta,
        specs,
        jsonl,
        in_jsonl,
        progress,
        job,
        rows: BTreeMap::new(),
        accounting: true,
        sstat_rss: BTreeMap::new(),
        missing: BTreeMap::new(),
    };
    let mut last_counts = (usize::MAX, usize::MAX);
    // Rows decided by an earlier follower.
    for i in 0..n {
        if let Some(row) = read_json::<Row>(&dir.row(i)) {
            f.emit(row)?;
        }
    }
    loop {
        if f.rows.len() == n {
            break;
        }
        if INTERRUPTED.load(Ordering::SeqCst) {
            on_interrupt(dir, &f.job, opts.cancel_on_interrupt)?;
            return Ok(SweepOutcome {
                rows: f.rows.into_values().collect(),
                interrupted: true,
            });
        }
        let started = Instant::now();
        let queued: BTreeMap<usize, TaskState> = query::squeue(&f.job)
            .into_iter()
            .map(|t| (t.index, t))
            .collect();
        let ended: BTreeMap<usize, TaskState> = ended_tasks(&f.job, &mut f.accounting)?;
        if !f.accounting {
            f.sample_sstat(&queued);
        }
        let ooms = f.rows_for_ended(&queued, &ended)?;
        if !meta.no_skip && !ooms.is_empty() {
            f.skip_larger(&queued, &ooms)?;
        }
        let running = queued
            .iter()
            .filter(|(i, q)| q.state == "RUNNING" && !f.rows.contains_key(i))
            .count();
        let queued_n = n - f.rows.len() - running;
        if (queued_n, running) != last_counts {
            last_counts = (queued_n, running);
            progress.status(&format!(
                "job {}: {queued_n} queued · {running} running · {} done",
                f.job,
                f.rows.len()
            ));
        }
        if f.rows.len() < n {
            sleep_interruptibly(opts.poll.saturating_sub(started.elapsed()));
        }
    }
    Ok(SweepOutcome {
        rows: f.rows.into_values().collect(),
        interrupted: false,
    })
}

/// One follow of one array: where its rows go, and what it knows so far.
struct Follower<'a> {
    dir: &'a WorkDir,
    meta: &'a PlanMeta,
    specs: &'a [Spec],
    jsonl: Option<(JsonlStream, &'a Path)>,
    in_jsonl: &'a BTreeSet<usize>,
    progress: &'a SweepProgress,
    job: String,
    rows: BTreeMap<usize, Row>,
    /// The cluster has an accounting database (sacct); false at its first refusal.
    accounting: bool,
    /// Without accounting: the largest RSS sstat showed for each running task.
    sstat_rss: BTreeMap<usize, u64>,
    /// Polls each task has been missing from every source.
    missing: BTreeMap<usize, u32>,
}

impl Follower<'_> {
    /// A decided row: saved in the work directory (once), appended to the JSONL (once), shown.
    fn emit(&mut self, row: Row) -> anyhow::Result<()> {
        if !self.dir.row(row.index).exists() {
            write_json(&self.dir.row(row.index), &row)?;
        }
        if !self.in_jsonl.contains(&row.index) {
            if let Some((w, path)) = self.jsonl.as_mut() {
                w.write_line(&row.to_jsonl_line()?)
                    .with_context(|| format!("--jsonl {}", path.display()))?;
            }
        }
        self.progress.finished(&row);
        self.rows.insert(row.index, row);
        Ok(())
    }

    /// Without accounting, the running tasks' RSS from sstat (the largest seen is kept).
    fn sample_sstat(&mut self, queued: &BTreeMap<usize, TaskState>) {
        let running: Vec<(usize, String)> = queued
            .values()
            .filter(|t| t.state == "RUNNING")
            .filter_map(|t| t.raw_job_id.clone().map(|r| (t.index, r)))
            .collect();
        let ids: Vec<String> = running.iter().map(|(_, r)| r.clone()).collect();
        let by_raw = query::sstat(&ids);
        for (i, raw) in running {
            if let Some(b) = by_raw.get(&raw) {
                let e = self.sstat_rss.entry(i).or_insert(0);
                *e = (*e).max(*b);
            }
        }
    }

    /// Rows for the tasks that ended, in index order → every point that ran out of memory.
    fn rows_for_ended(
        &mut self,
        queued: &BTreeMap<usize, TaskState>,
        ended: &BTreeMap<usize, TaskState>,
    ) -> anyhow::Result<Vec<Point>> {
        let (meta, n) = (self.meta, self.meta.points.len());
        let mut ooms: Vec<Point> = oom_points(meta, &self.rows);
        for i in 0..n {
            if self.rows.contains_key(&i) {
                continue;
            }
            let Some(state) = self.ended_state(i, queued.get(&i), ended.get(&i)) else {
                continue;
            };
            if !state.ended() && state.state != "UNKNOWN" {
                continue;
            }
            let row = finished_row(
                self.dir,
                meta,
                &self.job,
                &self.specs[i],
                &state,
                self.sstat_rss.get(&i).copied(),
            );
            if row.status == Status::Oom {
                ooms.push(meta.points[i].clone());
            }
            self.emit(row)?;
        }
        Ok(ooms)
    }

    /// Task `i`'s state from the queue and accounting; `None` while it is still queued or running,
    /// or missing from both for fewer than [`LOST_AFTER`] polls (then it is `UNKNOWN`: lost).
    fn ended_state(
        &mut self,
        i: usize,
        queued: Option<&TaskState>,
        ended: Option<&TaskState>,
    ) -> Option<TaskState> {
        Some(match (ended, queued) {
            (Some(t), _) if t.ended() => t.clone(),
            (_, Some(q)) if !q.ended() => {
                self.missing.remove(&i);
                return None;
            }
            (_, Some(q)) => q.clone(),
            (Some(t), None) => t.clone(),
            (None, None) => {
                // Not in the queue and not (yet) in accounting: a task that just ended, or a
                // record slurmctld dropped. Call it lost after a few polls.
                let c = self.missing.entry(i).or_insert(0);
                *c += 1;
                if *c < LOST_AFTER {
                    return None;
                }
                TaskState {
                    index: i,
                    state: "UNKNOWN".into(),
                    ..TaskState::default()
                }
            }
        })
    }

    /// The skip rule, for tasks that have not started: `scancel` those larger than one of `ooms`,
    /// each a `skipped` row.
    fn skip_larger(
        &mut self,
        queued: &BTreeMap<usize, TaskState>,
        ooms: &[Point],
    ) -> anyhow::Result<()> {
        let mut cancel = Vec::new();
        for (i, p) in self.meta.points.iter().enumerate() {
            let pending = queued.get(&i).is_some_and(|q| q.state == "PENDING");
            if self.rows.contains_key(&i) || !pending || self.dir.read_start(i).is_some() {
                continue;
            }
            if let Some(reason) = skip_reason(ooms, p) {
                cancel.push((i, reason));
            }
        }
        let job = self.job.clone();
        let ids: Vec<String> = cancel.iter().map(|(i, _)| format!("{job}_{i}")).collect();
        query::scancel(&ids)?;
        for (i, reason) in cancel {
            self.emit(skipped_row(&job, i, &self.specs[i], reason))?;
        }
        Ok(())
    }
}

/// Tasks that ended: from sacct while the cluster has an accounting database, else from
/// scontrol (`accounting` turns false at the first "accounting storage is disabled").
fn ended_tasks(job: &str, accounting: &mut bool) -> anyhow::Result<BTreeMap<usize, TaskState>> {
    if *accounting {
        match query::sacct(job)? {
            Some(tasks) => return Ok(tasks.into_iter().map(|t| (t.index, t)).collect()),
            None => *accounting = false,
        }
    }
    Ok(query::scontrol(job)
        .into_iter()
        .map(|t| (t.index, t))
        .collect())
}

fn oom_points(meta: &PlanMeta, rows: &BTreeMap<usize, Row>) -> Vec<Point> {
    rows.values()
        .filter(|r| r.status == Status::Oom)
        .map(|r| meta.points[r.index].clone())
        .collect()
}

fn sleep_interruptibly(d: Duration) {
    let until = Instant::now() + d;
    while Instant::now() < until && !INTERRUPTED.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(100).min(until - Instant::now()));
    }
}

/// Ctrl-C on the follower: cancel the array, or leave it running and say how to re-attach.
fn on_interrupt(dir: &WorkDir, job: &str, cancel_on_interrupt: bool) -> anyhow::Result<()> {
    let cancel = if cancel_on_interrupt {
        true
    } else if std::io::stdin().is_terminal() && std::io::stderr().is_terminal() {
        eprint!("\nmemscope sweep: cancel the job array {job} too? [y/N] ");
        let mut answer = String::new();
        std::io::stdin().read_line(&mut answer)?;
        matches!(answer.trim(), "y" | "Y" | "yes")
    } else {
        false
    };
    if cancel {
        query::scancel(&[job.to_string()])?;
        eprintln!("memscope sweep: job array {job} cancelled");
    } else {
        eprintln!(
            "memscope sweep: job array {job} keeps running; follow it again with `memscope sweep --attach {}`{}",
            dir.root.display(),
            if cancel_on_interrupt { "" } else { " (or cancel it: `scancel JOB`, or pass --cancel-on-interrupt)" }
                .replace("JOB", job)
        );
    }
    Ok(())
}
