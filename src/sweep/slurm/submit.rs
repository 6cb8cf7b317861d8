//! Submitting a planned sweep as one Slurm job array: the plan and one Spec per configuration
//! into the work directory, a batch script whose task i runs `memscope worker --plan DIR --index
//! i`, then `sbatch --parsable --array=0-(N-1)%max_parallel`.

use crate::spec::Spec;
use crate::sweep::plan::Point;
use crate::sweep::slurm::workdir::{write_json, PlanMeta, WorkDir, PLAN_VERSION};
use anyhow::{bail, Context};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The sbatch options of a sweep (`--partition`, `--gres`, … as given).
#[derive(Debug, Clone, Default)]
pub struct SubmitOptions {
    pub partition: Option<String>,
    pub gres: Option<String>,
    pub time: Option<String>,
    pub mem: Option<String>,
    pub max_parallel: Option<usize>,
    pub cpus_per_task: usize,
    /// Nodes of each task (`--nodes M`): sbatch `--nodes=M --ntasks-per-node=1`, the script
    /// starting the worker once a node with srun. 0 or 1: one node, no srun.
    pub nodes: usize,
    /// Passed to sbatch as they are, before the script.
    pub extra: Vec<String>,
}

/// `sbatch` on PATH, or an error that says how to get it.
pub fn find_sbatch() -> anyhow::Result<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join("sbatch"))
        .find(|p| p.is_file())
        .context(
            "--slurm: sbatch is not on PATH. On a cluster, load Slurm's client tools \
             (`module load slurm`, or ask your admins); on Debian/Ubuntu install them with \
             `apt-get install slurm-client` (`slurm-wlm` for a whole single-node Slurm). \
             Or drop --slurm to run the sweep on this machine",
        )
}

/// Writes the plan into `dir` (which must not hold a sweep already).
pub fn write_plan(
    dir: &WorkDir,
    planned: &[(Point, Spec)],
    no_skip: bool,
    jsonl: Option<&Path>,
    opts: &SubmitOptions,
) -> anyhow::Result<PlanMeta> {
    // A plan whose sbatch failed (no job id) holds nothing to follow: it is replaced.
    if dir.meta().exists() && dir.read_meta().is_ok_and(|m| m.job_id.is_none()) {
        eprintln!(
            "memscope sweep: --work-dir {}: replacing a plan that was never submitted",
            dir.root.display()
        );
        std::fs::remove_file(dir.meta())?;
    }
    if dir.meta().exists() {
        bail!(
            "--work-dir {}: already holds a sweep; follow it with `memscope sweep --attach {0}`, or choose another --work-dir",
            dir.root.display()
        );
    }
    dir.create()?;
    for (p, spec) in planned {
        write_json(&dir.spec(p.index), spec)?;
    }
    let meta = PlanMeta {
        version: PLAN_VERSION,
        job_id: None,
        points: planned.iter().map(|(p, _)| p.clone()).collect(),
        no_skip,
        jsonl: jsonl.map(|p| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf())),
        time: opts.time.clone(),
        mem: opts.mem.clone(),
    };
    dir.write_meta(&meta)?;
    crate::export::write_atomic(&dir.script(), &batch_script(dir, opts.nodes)?)
        .with_context(|| format!("writing {}", dir.script().display()))?;
    Ok(meta)
}

/// The batch script: every task runs this binary (by its absolute path, which the nodes must see);
/// a task of several nodes runs it once a node under srun (one node failing stops the others).
fn batch_script(dir: &WorkDir, nodes: usize) -> anyhow::Result<String> {
    let exe = std::env::current_exe().context("finding this memscope binary's path")?;
    let logs = dir.root.join("logs");
    // srun does not inherit sbatch's --cpus-per-task (Slurm 22.05 on): asked again.
    let launch = if nodes > 1 {
        "exec srun --kill-on-bad-exit=1 --cpus-per-task=\"$SLURM_CPUS_PER_TASK\" "
    } else {
        "exec "
    };
    Ok(format!(
        "#!/bin/sh\n\
         # Written by `memscope sweep --slurm`: array task i runs configuration i of {plan}.\n\
         #SBATCH --job-name=memscope-sweep\n\
         #SBATCH --output={out}\n\
         #SBATCH --error={err}\n\
         {launch}{exe} worker --plan {dir} --index \"$SLURM_ARRAY_TASK_ID\"\n",
        plan = dir.meta().display(),
        out = logs.join("%a.out").display(),
        err = logs.join("%a.err").display(),
        exe = quote(&exe.to_string_lossy()),
        dir = quote(&dir.root.to_string_lossy()),
    ))
}

/// Single-quotes a word for sh.
fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// The sbatch command line for `n` tasks.
pub fn sbatch_args(dir: &WorkDir, n: usize, opts: &SubmitOptions) -> Vec<String> {
    let mut a = vec!["--parsable".to_string()];
    let throttle = opts.max_parallel.map_or(String::new(), |p| format!("%{p}"));
    a.push(format!("--array=0-{}{throttle}", n.saturating_sub(1)));
    a.push(format!("--cpus-per-task={}", opts.cpus_per_task));
    if opts.nodes > 1 {
        a.push(format!("--nodes={}", opts.nodes));
        a.push("--ntasks-per-node=1".to_string());
    }
    // The logs are named by the script's #SBATCH lines; the job starts in the work directory.
    a.push(format!("--chdir={}", dir.root.display()));
    for (flag, v) in [
        ("--partition", &opts.partition),
        ("--gres", &opts.gres),
        ("--time", &opts.time),
        ("--mem", &opts.mem),
    ] {
        if let Some(v) = v {
            a.push(format!("{flag}={v}"));
        }
    }
    a.extend(opts.extra.iter().cloned());
    a.push(dir.script().to_string_lossy().into_owned());
    a
}

/// Submits the array; returns its job id and records it in plan.json.
pub fn submit(dir: &WorkDir, meta: &mut PlanMeta, opts: &SubmitOptions) -> anyhow::Result<String> {
    let sbatch = find_sbatch()?;
    let args = sbatch_args(dir, meta.points.len(), opts);
    let out = Command::new(&sbatch)
        .args(&args)
        .output()
        .with_context(|| format!("running {}", sbatch.display()))?;
    if !out.status.success() {
        bail!(
            "sbatch refused the job array ({}); check --partition / --gres / --time / --mem / --sbatch-arg (the script is {})",
            String::from_utf8_lossy(&out.stderr).trim(),
            dir.script().display()
        );
    }
    // `--parsable`: `JOBID` or `JOBID;CLUSTER`.
    let text = String::from_utf8_lossy(&out.stdout);
    let job = text.trim().split(';').next().unwrap_or("").to_string();
    if job.is_empty() || !job.bytes().all(|b| b.is_ascii_digit()) {
        bail!("sbatch answered {:?}, not a job id", text.trim());
    }
    meta.job_id = Some(job.clone());
    dir.write_meta(meta)?;
    Ok(job)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_array_with_the_throttle_and_the_options() {
        let dir = WorkDir::new(Path::new("/shared/sweep"));
        let opts = SubmitOptions {
            partition: Some("gpu".into()),
            mem: Some("32G".into()),
            max_parallel: Some(4),
            cpus_per_task: 8,
            extra: vec!["--account=cs336".into()],
            ..SubmitOptions::default()
        };
        assert_eq!(
            sbatch_args(&dir, 6, &opts),
            [
                "--parsable",
                "--array=0-5%4",
                "--cpus-per-task=8",
                "--chdir=/shared/sweep",
                "--partition=gpu",
                "--mem=32G",
                "--account=cs336",
                "/shared/sweep/sweep.sbatch"
            ]
        );
        assert_eq!(quote("a'b"), r"'a'\''b'");
        let across = SubmitOptions {
            cpus_per_task: 2,
            nodes: 2,
            ..SubmitOptions::default()
        };
        assert_eq!(
            sbatch_args(&dir, 1, &across)[2..5],
            ["--cpus-per-task=2", "--nodes=2", "--ntasks-per-node=1"]
        );
        let script = batch_script(&dir, 2).unwrap();
        assert!(
            script.contains(
                "exec srun --kill-on-bad-exit=1 --cpus-per-task=\"$SLURM_CPUS_PER_TASK\" "
            ),
            "{script}"
        );
        assert!(batch_script(&dir, 1).unwrap().contains("\nexec '"));
    }
}
