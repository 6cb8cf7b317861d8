//! A finished array task → its row, from what it left in the work directory (its Record, its step
//! series, its stderr with slurmstepd's lines) and what the scheduler says (state, exit code,
//! node, MaxRSS). The same [`Row`] as a local sweep, plus its `slurm` part.

use crate::record::sweep_row::{Row, RowSummary, SlurmTask, Status};
use crate::record::torch_oom::ALLOC_FAILURES;
use crate::record::Record;
use crate::spec::Spec;
use crate::sweep::classify::signal_name;
use crate::sweep::slurm::classify::{classify, split_exit, TaskEnd, OOM_EVIDENCE};
use crate::sweep::slurm::query::TaskState;
use crate::sweep::slurm::workdir::{read_json, PlanMeta, WorkDir};
use crate::sweep::spawn::read_series;

/// Lines of the task's stderr kept for the row (as a local sweep keeps).
const STDERR_LINES: usize = 12;

/// The row of a task the scheduler says has ended. `sstat_rss` is the last MaxRSS sstat gave
/// while it ran (for clusters without an accounting database).
pub fn finished_row(
    dir: &WorkDir,
    meta: &PlanMeta,
    job: &str,
    spec: &Spec,
    st: &TaskState,
    sstat_rss: Option<u64>,
) -> Row {
    let i = st.index;
    let record: Option<Record> = read_json(&dir.record(i));
    let stderr = std::fs::read_to_string(dir.err_log(i)).unwrap_or_default();
    let lines: Vec<&str> = stderr.lines().collect();
    let tail: Vec<String> = lines[lines.len().saturating_sub(STDERR_LINES)..]
        .iter()
        .map(|s| s.to_string())
        .collect();
    // The telling lines first (a backtrace can push them out of the tail), then the tail.
    let mut evidence: Vec<String> = lines
        .iter()
        .filter(|l| {
            OOM_EVIDENCE.iter().any(|p| l.contains(p))
                || ALLOC_FAILURES.iter().any(|p| l.contains(p))
                || l.contains("panicked at")
                || l.contains("memory allocation of")
                || l.starts_with("error: ")
                || l.contains(crate::record::torch_oom::PREFIX)
        })
        .take(8)
        .map(|s| s.to_string())
        .collect();
    evidence.extend(tail.iter().cloned());
    let (status, reason) = classify(&TaskEnd {
        state: &st.state,
        exit_code: st.exit_code.as_deref(),
        stderr: &evidence,
        has_record: record.is_some(),
        time: meta.time.as_deref(),
        mem: meta.mem.as_deref(),
        memory_limit: held_to(spec, meta),
    });
    let (summary, series) = match (&record, status) {
        (Some(r), Status::Ok) => (Some(RowSummary::from_record(r)), r.memory.series.clone()),
        _ => (None, read_series(&dir.series(i))),
    };
    let (code, sig) = split_exit(st.exit_code.as_deref());
    let sig = sig.filter(|s| *s != 0);
    let start = dir.read_start(i);
    let killed_at = evidence.iter().find_map(|l| stepd_rss(l));
    let (max_rss_bytes, max_rss_source) = match (st.max_rss_bytes, sstat_rss, killed_at) {
        (Some(b), _, _) => (Some(b), Some("sacct".to_string())),
        (None, s, Some(k)) if s.is_none_or(|s| s < k) => (Some(k), Some("slurmstepd".to_string())),
        (None, Some(b), _) => (Some(b), Some("sstat".to_string())),
        _ => (None, None),
    };
    Row {
        status,
        reason,
        index: i,
        spec: spec.clone(),
        exit_code: if sig.is_none() { code } else { None },
        signal: sig,
        signal_name: sig.map(signal_name),
        last_stderr: tail,
        wall_seconds: st
            .elapsed_seconds
            .or(record.as_ref().map(|r| r.wall_seconds))
            .unwrap_or(0.0),
        worker_pid: start.as_ref().map(|s| s.pid),
        memory_limit_bytes: meta.mem.as_deref().and_then(slurm_mem_bytes),
        enforcement: meta.mem.as_ref().map(|m| format!("Slurm --mem {m}")),
        summary,
        series,
        trace: None,
        slurm: Some(SlurmTask {
            job_id: job.to_string(),
            array_index: i,
            raw_job_id: st
                .raw_job_id
                .clone()
                .or_else(|| start.as_ref().and_then(|s| s.raw_job_id.clone())),
            node: st
                .node
                .clone()
                .or_else(|| start.as_ref().and_then(|s| s.node.clone())),
            state: Some(st.state.clone()),
            exit_code: st.exit_code.clone(),
            max_rss_bytes,
            max_rss_source,
        }),
        torch_oom: crate::record::torch_oom::OomFacts::find(&evidence),
    }
}

/// The row of a task cancelled before it started because a smaller configuration ran out of
/// memory.
pub fn skipped_row(job: &str, index: usize, spec: &Spec, reason: String) -> Row {
    let mut row = Row::not_run(Status::Skipped, reason, index, spec.clone());
    row.slurm = Some(SlurmTask {
        job_id: job.to_string(),
        array_index: index,
        state: Some("CANCELLED".into()),
        ..SlurmTask::default()
    });
    row
}

/// The bytes a task's processes were held to: each CPU rank's heap under `--memory-limit`, else
/// Slurm's `--mem`.
fn held_to(spec: &Spec, meta: &PlanMeta) -> Option<u64> {
    let heap = spec.torch.as_ref().and_then(|t| t.heap_limit_bytes);
    heap.or_else(|| meta.mem.as_deref().and_then(slurm_mem_bytes))
}

/// The RSS slurmstepd measured when it killed the task: `… exceeded memory limit (476463104 >
/// 314572800), being killed`.
fn stepd_rss(line: &str) -> Option<u64> {
    let rest = &line[line.find("exceeded memory limit (")? + "exceeded memory limit (".len()..];
    rest.split_once(" > ")?.0.trim().parse().ok()
}

/// Slurm's `--mem` (`32G`, `500M`, `1024`: a bare number is MiB) in bytes.
pub fn slurm_mem_bytes(m: &str) -> Option<u64> {
    let m = m.trim();
    let bare = m.bytes().all(|b| b.is_ascii_digit());
    let b = crate::sweep::slurm::query::parse_slurm_size(m)?;
    Some(if bare { b << 20 } else { b })
}

#[cfg(test)]
mod tests {
    #[test]
    fn slurm_mem_units() {
        assert_eq!(super::slurm_mem_bytes("1024"), Some(1 << 30));
        assert_eq!(super::slurm_mem_bytes("300M"), Some(300 << 20));
        assert_eq!(super::slurm_mem_bytes("2G"), Some(2 << 30));
        let l = "slurmstepd-vm: error: StepId=16.batch exceeded memory limit (476463104 > 314572800), being killed";
        assert_eq!(super::stepd_rss(l), Some(476463104));
    }
}
