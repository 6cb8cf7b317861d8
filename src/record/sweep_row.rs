//! A sweep row: one configuration's outcome, whatever happened to it — the line `sweep --jsonl`
//! appends and flushes as each configuration ends, and what `scaling`, `report`, `compare` read back.

use crate::record::StepMemory;
use crate::spec::Spec;
use anyhow::Context;
use serde::{Deserialize, Serialize};
use std::path::Path;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Ok,
    Oom,
    Crash,
    Timeout,
    Error,
    Skipped,
}

impl Status {
    pub fn name(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Oom => "oom",
            Status::Crash => "crash",
            Status::Timeout => "timeout",
            Status::Error => "error",
            Status::Skipped => "skipped",
        }
    }
}

/// The figures of an `ok` run that the scaling analysis needs (the full Record stays with the
/// worker's output file when the caller keeps one).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RowSummary {
    /// Median of the measured step times, ms (train: the `step` phase; infer: `forward`;
    /// generate: prefill + decode of all new tokens).
    pub step_median_ms: f64,
    pub step_cv_pct: Option<f64>,
    /// The measured step times, ms (for the warm-up axis).
    pub step_samples_ms: Vec<f64>,
    /// heap peak over the whole run (counting allocator, exact).
    pub heap_peak_bytes: u64,
    /// Mean heap live after each measured step.
    pub heap_avg_bytes: u64,
    /// The worker's own VmHWM (peak RSS), from its /proc/self/status.
    pub rss_peak_bytes: Option<u64>,
    pub param_bytes: u64,
    pub tokens_per_s: Option<f64>,
    pub samples_per_s: Option<f64>,
    /// Seconds the worker spent loading the model.
    pub load_seconds: f64,
    /// Seconds of the worker's run (load + warm-up + measured steps), as the worker timed it.
    pub run_seconds: f64,
    /// Counting allocator on (heap figures are measured).
    pub counting: bool,
    /// heap bytes the first forward left live (saved activations; the breakdown's
    /// `activations`), train only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub activations_bytes: Option<u64>,
    /// The loss of the last step (train: after its update's forward; infer: that batch's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loss_last: Option<f64>,
    /// `memscope estimate`'s predicted heap peak for the same Spec, when it models it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub estimated_peak_bytes: Option<u64>,
    /// A data-parallel run: every rank's figures (the row's own are the worst rank's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ranks: Option<Vec<crate::record::ranks::RankFigures>>,
}

/// One configuration's outcome.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Row {
    pub status: Status,
    /// Why (for everything but `ok`): the panic message, the signal, the limit exceeded, ….
    pub reason: Option<String>,
    /// Position in the sweep plan.
    pub index: usize,
    pub spec: Spec,
    pub exit_code: Option<i32>,
    /// The signal that ended the worker (number), and its name.
    pub signal: Option<i32>,
    pub signal_name: Option<String>,
    /// The last lines the worker wrote to stderr.
    pub last_stderr: Vec<String>,
    /// Seconds from spawning the worker to reaping it (parent's clock).
    pub wall_seconds: f64,
    pub worker_pid: Option<u32>,
    /// The per-worker memory budget and how it was enforced.
    pub memory_limit_bytes: Option<u64>,
    pub enforcement: Option<String>,
    /// `ok` rows: the Record's summary figures.
    pub summary: Option<RowSummary>,
    /// The memory series, one entry per finished step (partial for `oom`, `crash`, `timeout`).
    pub series: Vec<StepMemory>,
    /// Slurm sweeps only (absent from local rows): where and how the array task ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slurm: Option<SlurmTask>,
    /// `sweep --trace DIR`: this configuration's Chrome trace (`ok` rows only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<std::path::PathBuf>,
    /// `--engine torch`, an `oom` row: PyTorch's figures when the allocation failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub torch_oom: Option<crate::record::torch_oom::OomFacts>,
}

/// A row's Slurm side: the scheduler's own evidence about the array task that ran it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SlurmTask {
    /// The array's job id (`sbatch --parsable`), and this task's index in it (= the row's index).
    pub job_id: String,
    pub array_index: usize,
    /// The task's own job id (`JobIDRaw`), once it was known.
    pub raw_job_id: Option<String>,
    /// The node it ran on.
    pub node: Option<String>,
    /// The scheduler's final state (`COMPLETED`, `OUT_OF_MEMORY`, `TIMEOUT`, `FAILED`, …) and its
    /// `ExitCode` (`code:signal`).
    pub state: Option<String>,
    pub exit_code: Option<String>,
    /// Slurm's MaxRSS of the task, beside the worker's own VmHWM (`summary.rss_peak_bytes`).
    pub max_rss_bytes: Option<u64>,
    /// Where `max_rss_bytes` came from: `sacct` (accounting database); without one, `slurmstepd`
    /// (the RSS it measured when it killed the task for --mem) or `sstat` (the largest sample the
    /// follower saw while the task ran).
    pub max_rss_source: Option<String>,
}

impl Row {
    /// A row for a configuration that never ran.
    pub fn not_run(status: Status, reason: String, index: usize, spec: Spec) -> Row {
        Row {
            status,
            reason: Some(reason),
            index,
            spec,
            exit_code: None,
            signal: None,
            signal_name: None,
            last_stderr: vec![],
            wall_seconds: 0.0,
            worker_pid: None,
            memory_limit_bytes: None,
            enforcement: None,
            summary: None,
            series: vec![],
            slurm: None,
            torch_oom: None,
            trace: None,
        }
    }

    /// The row as one JSON Lines line (`sweep --jsonl`), with its line ending.
    pub fn to_jsonl_line(&self) -> serde_json::Result<String> {
        Ok(serde_json::to_string(self)? + "\n")
    }

    /// `tiny-gpt2 train f32 b4 s128 w1` (+ ` ga2` when not 1, the plan and ranks ` pp:2×2`, a
    /// pipeline's schedule and micro-batches ` 1f1b mb4`).
    pub fn label(&self) -> String {
        label(&self.spec)
    }
}

pub fn label(s: &Spec) -> String {
    let mut out = format!(
        "{} {} {} b{} s{} w{}",
        s.model,
        s.mode.name(),
        s.dtype.name(),
        s.batch,
        s.seq,
        s.warmup
    );
    if s.grad_accum > 1 {
        out.push_str(&format!(" ga{}", s.grad_accum));
    }
    if let Some(p) = s.parallel() {
        out.push_str(&format!(" {}×{}", p.flag(), p.world));
        if p.nodes > 1 {
            out.push_str(&format!(" on {} nodes", p.nodes));
        }
    }
    if let Some(pipe) = pipeline_label(s) {
        out.push_str(&format!(" {pipe}"));
    }
    out
}

/// A pipeline's schedule and micro-batches as a label says them (`1f1b mb4`); `None` for any
/// other run.
pub fn pipeline_label(s: &Spec) -> Option<String> {
    let pipe = s.torch.as_ref()?.pipeline.as_ref()?;
    Some(format!("{} mb{}", pipe.schedule_flag(), pipe.micro_batches))
}

/// The plan a row ran, as the report's curves are told apart: `--parallel`'s flag, a pipeline's
/// schedule and micro-batches after it (`pp:2 1f1b mb4`); `None` for one process.
pub fn plan_label(s: &Spec) -> Option<String> {
    let flag = s.parallel()?.flag();
    Some(pipeline_label(s).map_or(flag.clone(), |pipe| format!("{flag} {pipe}")))
}

/// Reads a JSONL file of rows; blank lines are skipped, a bad line is an error naming its number.
/// A cut-off LAST line (its JSON ends early, or it has no line ending and does not read as a row:
/// a sweep killed while appending) is skipped with a warning, as `analyze` does with its logs.
/// Returns the rows and the warnings.
pub fn read_jsonl(path: &Path) -> anyhow::Result<(Vec<Row>, Vec<String>)> {
    use crate::capped::{read_capped_string, MAX_RESULT_FILE};
    let text = read_capped_string(path, MAX_RESULT_FILE, "sweep JSONL file")
        .with_context(|| format!("reading {}", path.display()))?;
    let last = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, _)| i)
        .last();
    let mut rows = Vec::new();
    let mut warnings = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<Row>(line) {
            Ok(row) => rows.push(row),
            Err(e) if Some(i) == last && (e.is_eof() || !text.ends_with('\n')) => {
                warnings.push(format!(
                    "{}:{}: the last line is cut off ({e}); it looks truncated and was ignored",
                    path.display(),
                    i + 1
                ));
            }
            Err(e) => {
                return Err(anyhow::Error::new(e).context(format!(
                    "{}:{}: not a sweep row",
                    path.display(),
                    i + 1
                )))
            }
        }
    }
    Ok((rows, warnings))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_serialises_lowercase() {
        assert_eq!(serde_json::to_string(&Status::Oom).unwrap(), "\"oom\"");
        let s: Status = serde_json::from_str("\"skipped\"").unwrap();
        assert_eq!(s, Status::Skipped);
    }
}
