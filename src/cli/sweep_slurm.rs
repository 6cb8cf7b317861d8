//! `memscope sweep --slurm …` and `memscope sweep --attach DIR`: the sweep's Slurm flags, and the
//! glue from a planned sweep to `sweep::slurm` (submit, then follow) and back to rows.

use crate::export::JsonlStream;
use crate::record::sweep_row::Row;
use crate::spec::Spec;
use crate::sweep::local::SweepOutcome;
use crate::sweep::plan::Point;
use crate::sweep::progress::SweepProgress;
use crate::sweep::slurm::follow::{follow, FollowOptions};
use crate::sweep::slurm::submit::{find_sbatch, submit, write_plan, SubmitOptions};
use crate::sweep::slurm::workdir::{read_json, WorkDir};
use anyhow::{bail, Context};
use clap::Args;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Time between two looks at the queue (tests shorten it with MEMSCOPE_TEST_SLURM_POLL_MS).
fn poll() -> Duration {
    std::env::var("MEMSCOPE_TEST_SLURM_POLL_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .map_or(Duration::from_secs(2), Duration::from_millis)
}

#[derive(Args, Debug, Default)]
pub struct SlurmArgs {
    /// Run the sweep as one Slurm job array (sbatch) instead of on this machine; needs --work-dir
    #[arg(long, help_heading = "Slurm")]
    pub slurm: bool,
    /// With --slurm: a directory every node can read and write; the plan, per-task Records and logs go there
    #[arg(long, value_name = "DIR", requires = "slurm", help_heading = "Slurm")]
    pub work_dir: Option<PathBuf>,
    /// With --slurm: sbatch --partition
    #[arg(long, requires = "slurm", help_heading = "Slurm")]
    pub partition: Option<String>,
    /// With --slurm: sbatch --gres (e.g. gpu:1)
    #[arg(long, requires = "slurm", help_heading = "Slurm")]
    pub gres: Option<String>,
    /// With --slurm: sbatch --time per task (30:00, 2:00:00; Slurm's minimum is 1 minute); past it the row is `timeout`
    #[arg(long, value_name = "TIME", requires = "slurm", help_heading = "Slurm")]
    pub time: Option<String>,
    /// With --slurm: sbatch --mem per task (32G, 500M); a task killed for exceeding it is `oom`
    #[arg(long, value_name = "SIZE", requires = "slurm", help_heading = "Slurm")]
    pub mem: Option<String>,
    /// With --slurm and --nproc N: run each configuration's N ranks across M nodes, N/M on each (sbatch --nodes M --ntasks-per-node 1; srun starts torchrun on every node, which meet at the first)
    #[arg(long, value_name = "M", requires = "slurm", help_heading = "Slurm")]
    pub nodes: Option<usize>,
    /// With --slurm: at most N tasks at once (--array=0-(N-1)%max_parallel)
    #[arg(long, value_name = "N", requires = "slurm", help_heading = "Slurm")]
    pub max_parallel: Option<usize>,
    /// With --slurm: one more sbatch option, as it is (repeatable): --sbatch-arg=--account=cs336
    #[arg(
        long,
        value_name = "ARG",
        requires = "slurm",
        allow_hyphen_values = true,
        help_heading = "Slurm"
    )]
    pub sbatch_arg: Vec<String>,
    /// Follow a Slurm sweep again (after the submitting shell was closed): rows not yet in the JSONL are appended
    #[arg(
        long,
        value_name = "DIR",
        conflicts_with = "slurm",
        help_heading = "Slurm"
    )]
    pub attach: Option<PathBuf>,
    /// On Ctrl-C, cancel the job array without asking (otherwise asked at a terminal; not cancelled elsewhere)
    #[arg(long, help_heading = "Slurm")]
    pub cancel_on_interrupt: bool,
}

/// Flags of a local sweep that mean nothing on Slurm, with the one to use instead.
pub fn check_flags(s: &SlurmArgs, memory_limit: bool, timeout: bool) -> anyhow::Result<()> {
    if !s.slurm {
        return Ok(());
    }
    if memory_limit {
        bail!("--memory-limit is for local sweeps; with --slurm give each task --mem (Slurm enforces it)");
    }
    if timeout {
        bail!("--timeout is for local sweeps; with --slurm give each task --time");
    }
    if s.work_dir.is_none() {
        bail!("--slurm needs --work-dir DIR: a directory on a filesystem the nodes share");
    }
    if s.max_parallel == Some(0) {
        bail!("--max-parallel 0: use at least 1");
    }
    Ok(())
}

/// `--nodes M`: every planned job's ranks spread over M nodes; refused, naming the flag, for a
/// sweep without --nproc or a --nproc that M does not divide.
pub fn spread_over_nodes(s: &SlurmArgs, planned: &mut [(Point, Spec)]) -> anyhow::Result<()> {
    let Some(m) = s.nodes else {
        return Ok(());
    };
    if m == 0 {
        bail!("--nodes 0: a job runs on at least 1 node");
    }
    for (_, spec) in planned.iter_mut() {
        let Some(p) = spec.parallel_mut() else {
            bail!("--nodes {m}: a job across nodes is a data-parallel job; give it --engine torch --nproc N --parallel PLAN");
        };
        p.nodes = m;
        spec.validate()?;
    }
    Ok(())
}

/// Writes the plan, submits the array and follows it.
pub fn submit_and_follow(
    s: &SlurmArgs,
    planned: &[(Point, Spec)],
    no_skip: bool,
    jsonl: Option<&Path>,
    threads: usize,
    progress: &SweepProgress,
    quiet: bool,
) -> anyhow::Result<SweepOutcome> {
    find_sbatch()?;
    let dir = WorkDir::new(
        s.work_dir
            .as_deref()
            .context("--slurm needs --work-dir DIR")?,
    );
    let opts = SubmitOptions {
        partition: s.partition.clone(),
        gres: s.gres.clone(),
        time: s.time.clone(),
        mem: s.mem.clone(),
        max_parallel: s.max_parallel,
        cpus_per_task: threads,
        nodes: s.nodes.unwrap_or(1),
        extra: s.sbatch_arg.clone(),
    };
    let mut meta = write_plan(&dir, planned, no_skip, jsonl, &opts)?;
    let job = submit(&dir, &mut meta, &opts)?;
    if !quiet {
        eprintln!(
            "memscope sweep: submitted job array {job} ({} tasks); follow it again with `memscope sweep --attach {}`",
            planned.len(),
            dir.root.display()
        );
    }
    let specs: Vec<Spec> = planned.iter().map(|(_, s)| s.clone()).collect();
    let writer = jsonl.map(JsonlStream::appending).transpose()?;
    follow(
        &dir,
        &meta,
        &specs,
        writer.map(|w| (w, jsonl.unwrap_or(Path::new("")))),
        &BTreeSet::new(),
        progress,
        &FollowOptions {
            poll: poll(),
            cancel_on_interrupt: s.cancel_on_interrupt,
        },
    )
}

/// The sweep in `dir` and the JSONL to append to: `--jsonl`, else the one given at submission.
pub fn attach_target(dir: &Path, jsonl: Option<&Path>) -> anyhow::Result<(usize, Option<PathBuf>)> {
    let meta = WorkDir::new(dir).read_meta()?;
    Ok((
        meta.points.len(),
        jsonl.map(Path::to_path_buf).or(meta.jsonl),
    ))
}

/// Re-attaches to the sweep in `dir`: rows already in the JSONL for this job are not written again.
pub fn attach(
    dir: &Path,
    jsonl: Option<&Path>,
    cancel_on_interrupt: bool,
    progress: &SweepProgress,
) -> anyhow::Result<SweepOutcome> {
    let dir = WorkDir::new(dir);
    let meta = dir.read_meta()?;
    let job = meta.job_id.clone().with_context(|| {
        format!(
            "--attach {}: the plan was never submitted (its sbatch failed or was interrupted), so there is nothing to follow; run the same `memscope sweep --slurm --work-dir {0} …` again to submit it",
            dir.root.display()
        )
    })?;
    let specs = (0..meta.points.len())
        .map(|i| {
            read_json::<Spec>(&dir.spec(i))
                .with_context(|| format!("--attach: {} is missing or bad", dir.spec(i).display()))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let in_jsonl = match jsonl {
        Some(p) => rows_of_job(p, &job),
        None => BTreeSet::new(),
    };
    let writer = jsonl.map(JsonlStream::appending).transpose()?;
    follow(
        &dir,
        &meta,
        &specs,
        writer.map(|w| (w, jsonl.unwrap_or(Path::new("")))),
        &in_jsonl,
        progress,
        &FollowOptions {
            poll: poll(),
            cancel_on_interrupt,
        },
    )
}

/// Indices of the rows of `job` a JSONL already holds (a torn last line is ignored).
fn rows_of_job(path: &Path, job: &str) -> BTreeSet<usize> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .filter_map(|l| serde_json::from_str::<Row>(l).ok())
        .filter(|r| r.slurm.as_ref().is_some_and(|s| s.job_id == job))
        .map(|r| r.index)
        .collect()
}
