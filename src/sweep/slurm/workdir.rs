//! The work directory of a Slurm sweep (`--work-dir`, on a filesystem the nodes share): the plan,
//! one Spec per array task, what each task left behind, and each finished row.
//!
//! ```text
//! DIR/plan.json            PlanMeta: the job id, the points, the options the follower needs
//! DIR/sweep.sbatch         the batch script (one line: memscope worker --plan DIR --index $SLURM_ARRAY_TASK_ID)
//! DIR/specs/<i>.json       the Spec of array task i
//! DIR/results/<i>.json     its Record (written by the worker, renamed into place at the end)
//! DIR/results/<i>.series.jsonl  one memory entry per finished step (kept when the task is killed)
//! DIR/results/<i>.start.json    TaskStart: written by the worker when it starts
//! DIR/logs/<i>.out|.err    the task's stdout and stderr (slurmstepd's own lines land in .err)
//! DIR/rows/<i>.json        the row, once the follower has decided it (re-attach reads these)
//! ```

use crate::sweep::plan::Point;
use anyhow::Context;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// Version of `plan.json`.
pub const PLAN_VERSION: u32 = 1;

#[derive(Debug, Clone)]
pub struct WorkDir {
    pub root: PathBuf,
}

impl WorkDir {
    pub fn new(root: &Path) -> WorkDir {
        // Absolute, so the batch script and the nodes see the same path.
        let root = std::path::absolute(root).unwrap_or_else(|_| root.to_path_buf());
        WorkDir { root }
    }
    pub fn meta(&self) -> PathBuf {
        self.root.join("plan.json")
    }
    pub fn script(&self) -> PathBuf {
        self.root.join("sweep.sbatch")
    }
    pub fn spec(&self, i: usize) -> PathBuf {
        self.root.join("specs").join(format!("{i}.json"))
    }
    pub fn record(&self, i: usize) -> PathBuf {
        self.root.join("results").join(format!("{i}.json"))
    }
    pub fn series(&self, i: usize) -> PathBuf {
        self.root.join("results").join(format!("{i}.series.jsonl"))
    }
    pub fn start(&self, i: usize) -> PathBuf {
        self.root.join("results").join(format!("{i}.start.json"))
    }
    pub fn err_log(&self, i: usize) -> PathBuf {
        self.root.join("logs").join(format!("{i}.err"))
    }
    pub fn row(&self, i: usize) -> PathBuf {
        self.root.join("rows").join(format!("{i}.json"))
    }
    /// Creates the subdirectories.
    pub fn create(&self) -> anyhow::Result<()> {
        for sub in ["specs", "results", "logs", "rows"] {
            let d = self.root.join(sub);
            std::fs::create_dir_all(&d)
                .with_context(|| format!("--work-dir: creating {}", d.display()))?;
        }
        Ok(())
    }
    pub fn read_meta(&self) -> anyhow::Result<PlanMeta> {
        let p = self.meta();
        let text =
            crate::capped::read_capped_string(&p, crate::capped::MAX_CONFIG_FILE, "plan file")
                .with_context(|| {
                    format!(
                        "--attach {}: no {} (not a memscope Slurm sweep directory?)",
                        self.root.display(),
                        p.display()
                    )
                })?;
        let meta: PlanMeta = serde_json::from_str(&text)
            .with_context(|| format!("--attach: {} is not a sweep plan", p.display()))?;
        Ok(meta)
    }
    pub fn write_meta(&self, meta: &PlanMeta) -> anyhow::Result<()> {
        write_json(&self.meta(), meta)
    }
    pub fn read_start(&self, i: usize) -> Option<TaskStart> {
        read_json(&self.start(i))
    }
}

/// What the follower needs to know about a submitted sweep (DIR/plan.json).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PlanMeta {
    pub version: u32,
    /// The array's job id; `None` until sbatch answered.
    pub job_id: Option<String>,
    /// The configurations, index = array task index.
    pub points: Vec<Point>,
    /// `--no-skip`: run configurations larger than an OOM anyway.
    pub no_skip: bool,
    /// The `--jsonl` given at submission (re-attach appends there unless told otherwise).
    pub jsonl: Option<PathBuf>,
    /// `--time` and `--mem` as given to sbatch (for the rows' reasons).
    pub time: Option<String>,
    pub mem: Option<String>,
}

/// Written by the worker when its task starts: which job and node it is, its pid.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct TaskStart {
    pub raw_job_id: Option<String>,
    pub node: Option<String>,
    pub pid: u32,
}

impl TaskStart {
    /// From the environment Slurm gives a task.
    pub fn from_env() -> TaskStart {
        TaskStart {
            raw_job_id: std::env::var("SLURM_JOB_ID").ok(),
            node: std::env::var("SLURMD_NODENAME").ok(),
            pid: std::process::id(),
        }
    }
}

/// Writes JSON atomically (`export::write_atomic`: a temporary file beside `path`, renamed).
pub fn write_json<T: Serialize>(path: &Path, value: &T) -> anyhow::Result<()> {
    crate::export::write_atomic(path, &serde_json::to_string_pretty(value)?)
        .with_context(|| format!("writing {}", path.display()))
}

pub fn read_json<T: for<'de> Deserialize<'de>>(path: &Path) -> Option<T> {
    let text = crate::capped::read_capped_string(
        path,
        crate::capped::MAX_RESULT_FILE,
        "work directory file",
    )
    .ok()?;
    serde_json::from_str(&text).ok()
}
