//! What the scheduler says about an array's tasks, and `scancel`. Each command's output has a pure
//! parser (tested below); the runners only call the command.
//!
//! - `squeue -h -r -j JOB -o %K|%A|%T|%N`: tasks still pending or running, one line each.
//! - `sacct -j JOB -P -n -o JobID,JobIDRaw,State,ExitCode,MaxRSS,NodeList,Elapsed`: every task
//!   with the accounting database (slurmdbd); MaxRSS is on the task's step lines (`JOB_3.batch`).
//!   Slurm 22.05's sacct has no `--array` flag: tasks come out as `JOB_i` anyway, and pending
//!   ones as one `JOB_[4-5%1]` line, which is left to squeue.
//! - Without an accounting database sacct says "accounting storage is disabled": then
//!   `scontrol -o show job JOB` (every task slurmctld still holds, `MinJobAge`, 300 s by
//!   default) gives the final states, and `sstat` the MaxRSS of running tasks.

use std::collections::BTreeMap;
use std::process::Command;

/// One array task as the scheduler reports it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TaskState {
    pub index: usize,
    pub raw_job_id: Option<String>,
    /// First word of the state (`CANCELLED by 0` → `CANCELLED`).
    pub state: String,
    /// `code:signal`.
    pub exit_code: Option<String>,
    pub node: Option<String>,
    pub max_rss_bytes: Option<u64>,
    pub elapsed_seconds: Option<f64>,
}

impl TaskState {
    pub fn ended(&self) -> bool {
        is_terminal(&self.state)
    }
}

/// States a task does not leave.
pub fn is_terminal(state: &str) -> bool {
    matches!(
        state,
        "COMPLETED"
            | "FAILED"
            | "CANCELLED"
            | "TIMEOUT"
            | "OUT_OF_MEMORY"
            | "NODE_FAIL"
            | "PREEMPTED"
            | "BOOT_FAIL"
            | "DEADLINE"
            | "REVOKED"
            | "SPECIAL_EXIT"
    )
}

/// Runs a Slurm command; `Err` carries its stderr (or why it could not start).
fn run(cmd: &str, args: &[String]) -> Result<String, String> {
    match Command::new(cmd).args(args).output() {
        Ok(o) if o.status.success() => Ok(String::from_utf8_lossy(&o.stdout).into_owned()),
        Ok(o) => Err(String::from_utf8_lossy(&o.stderr).trim().to_string()),
        Err(e) => Err(format!("{cmd}: {e}")),
    }
}

/// Tasks still in the queue. A job slurmctld no longer knows is an empty queue.
pub fn squeue(job: &str) -> Vec<TaskState> {
    let args = ["-h", "-r", "-j", job, "-o", "%K|%A|%T|%N"].map(String::from);
    run("squeue", &args).map_or_else(|_| vec![], |t| parse_squeue(&t))
}

pub fn parse_squeue(text: &str) -> Vec<TaskState> {
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.trim().split('|').collect();
            let index = f.first()?.parse().ok()?;
            Some(TaskState {
                index,
                raw_job_id: f.get(1).filter(|s| !s.is_empty()).map(|s| s.to_string()),
                state: f.get(2).map_or("", |s| s).to_string(),
                node: f.get(3).and_then(|s| node(s)),
                ..TaskState::default()
            })
        })
        .collect()
}

/// `Ok(None)` when the cluster keeps no accounting database.
pub fn sacct(job: &str) -> anyhow::Result<Option<Vec<TaskState>>> {
    let args = [
        "-j",
        job,
        "-P",
        "-n",
        "-o",
        "JobID,JobIDRaw,State,ExitCode,MaxRSS,NodeList,Elapsed",
    ]
    .map(String::from);
    match run("sacct", &args) {
        Ok(t) => Ok(Some(parse_sacct(job, &t))),
        Err(e) if e.contains("accounting storage is disabled") => Ok(None),
        Err(e) => anyhow::bail!("sacct -j {job}: {e}"),
    }
}

pub fn parse_sacct(job: &str, text: &str) -> Vec<TaskState> {
    let mut tasks: BTreeMap<usize, TaskState> = BTreeMap::new();
    let prefix = format!("{job}_");
    for line in text.lines() {
        let f: Vec<&str> = line.trim().split('|').collect();
        if f.len() < 7 {
            continue;
        }
        let Some(rest) = f[0].strip_prefix(&prefix) else {
            continue;
        };
        let (idx, step) = match rest.split_once('.') {
            Some((i, s)) => (i, Some(s)),
            None => (rest, None),
        };
        let Ok(index) = idx.parse::<usize>() else {
            continue; // `JOB_[4-5%1]`: still pending, squeue has them
        };
        let t = tasks.entry(index).or_insert_with(|| TaskState {
            index,
            ..TaskState::default()
        });
        if let Some(rss) = parse_slurm_size(f[4]) {
            t.max_rss_bytes = Some(t.max_rss_bytes.map_or(rss, |m: u64| m.max(rss)));
        }
        if step.is_none() {
            t.raw_job_id = Some(f[1].to_string()).filter(|s| !s.is_empty());
            t.state = first_word(f[2]);
            t.exit_code = Some(f[3].to_string()).filter(|s| !s.is_empty());
            t.node = node(f[5]);
            t.elapsed_seconds = parse_elapsed(f[6]);
        }
    }
    tasks
        .into_values()
        .filter(|t| !t.state.is_empty())
        .collect()
}

/// Every task slurmctld still holds (finished ones for `MinJobAge`).
pub fn scontrol(job: &str) -> Vec<TaskState> {
    let args = ["-o", "show", "job", job].map(String::from);
    run("scontrol", &args).map_or_else(|_| vec![], |t| parse_scontrol(&t))
}

pub fn parse_scontrol(text: &str) -> Vec<TaskState> {
    text.lines()
        .filter_map(|l| {
            let kv: BTreeMap<&str, &str> = l
                .split_whitespace()
                .filter_map(|w| w.split_once('='))
                .collect();
            // `ArrayTaskId=4-5%1`: the pending remainder, one record for several tasks.
            let index = kv.get("ArrayTaskId")?.parse().ok()?;
            Some(TaskState {
                index,
                raw_job_id: kv.get("JobId").map(|s| s.to_string()),
                state: first_word(kv.get("JobState").unwrap_or(&"")),
                exit_code: kv.get("ExitCode").map(|s| s.to_string()),
                node: kv.get("NodeList").and_then(|s| node(s)),
                max_rss_bytes: None,
                elapsed_seconds: kv.get("RunTime").and_then(|s| parse_elapsed(s)),
            })
        })
        .collect()
}

/// MaxRSS of running tasks by raw job id (the largest of their steps), from `sstat`.
pub fn sstat(raw_ids: &[String]) -> BTreeMap<String, u64> {
    if raw_ids.is_empty() {
        return BTreeMap::new();
    }
    let args = [
        "-a",
        "-P",
        "-n",
        "-o",
        "JobID,MaxRSS",
        "-j",
        &raw_ids.join(","),
    ]
    .map(String::from);
    run("sstat", &args).map_or_else(|_| BTreeMap::new(), |t| parse_sstat(&t))
}

pub fn parse_sstat(text: &str) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let Some((id, rss)) = line.trim().split_once('|') else {
            continue;
        };
        let raw = id.split('.').next().unwrap_or(id).to_string();
        if let Some(b) = parse_slurm_size(rss) {
            let e = out.entry(raw).or_insert(0);
            *e = b.max(*e);
        }
    }
    out
}

/// `scancel JOB_i …`. Errors carry scancel's own message.
pub fn scancel(ids: &[String]) -> anyhow::Result<()> {
    if ids.is_empty() {
        return Ok(());
    }
    run("scancel", ids).map_err(|e| anyhow::anyhow!("scancel {}: {e}", ids.join(" ")))?;
    Ok(())
}

fn first_word(s: &str) -> String {
    s.split_whitespace().next().unwrap_or("").to_string()
}

fn node(s: &str) -> Option<String> {
    let s = s.trim();
    (!s.is_empty() && s != "(null)" && s != "None assigned").then(|| s.to_string())
}

/// Slurm's own notation for sizes in its output (`98492K`, `1.50G`, `0`): binary multiples, bare
/// numbers in bytes. Not a grammar users type: memscope's flags read sizes with `units::parse_bytes`.
pub fn parse_slurm_size(s: &str) -> Option<u64> {
    let s = s.trim();
    if s.is_empty() {
        return None;
    }
    let (num, mult) = match s.as_bytes()[s.len() - 1] {
        b'K' | b'k' => (&s[..s.len() - 1], 1u64 << 10),
        b'M' | b'm' => (&s[..s.len() - 1], 1 << 20),
        b'G' | b'g' => (&s[..s.len() - 1], 1 << 30),
        b'T' | b't' => (&s[..s.len() - 1], 1 << 40),
        _ => (s, 1),
    };
    let v: f64 = num.parse().ok()?;
    (v.is_finite() && v >= 0.0).then(|| (v * mult as f64).round() as u64)
}

/// `[D-]HH:MM:SS` or `MM:SS(.mmm)` → seconds.
pub fn parse_elapsed(s: &str) -> Option<f64> {
    let s = s.trim();
    let (days, rest) = match s.split_once('-') {
        Some((d, r)) => (d.parse::<f64>().ok()?, r),
        None => (0.0, s),
    };
    let mut secs = 0.0;
    for part in rest.split(':') {
        secs = secs * 60.0 + part.parse::<f64>().ok()?;
    }
    Some(days * 86_400.0 + secs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sacct_lines_become_tasks_with_the_steps_maxrss() {
        let text = "12_0|13|COMPLETED|0:0||vm|00:00:05\n\
                    12_0.batch|13.batch|COMPLETED|0:0|98492K|vm|00:00:05\n\
                    12_1|14|OUT_OF_MEMORY|0:125||vm|00:00:02\n\
                    12_1.batch|14.batch|OUT_OF_MEMORY|0:125|1.5G|vm|00:00:02\n\
                    12_2|15|CANCELLED by 0|0:0||None assigned|00:00:00\n\
                    12_[3-5%1]|12|PENDING|0:0|||00:00:00\n";
        let t = parse_sacct("12", text);
        assert_eq!(t.len(), 3);
        assert_eq!(t[0].state, "COMPLETED");
        assert_eq!(t[0].max_rss_bytes, Some(98492 * 1024));
        assert_eq!(t[0].raw_job_id.as_deref(), Some("13"));
        assert_eq!(t[1].state, "OUT_OF_MEMORY");
        assert_eq!(t[1].max_rss_bytes, Some(3 << 29));
        assert_eq!(t[2].state, "CANCELLED");
        assert_eq!(t[2].node, None);
        assert!(t.iter().all(|t| t.ended()));
    }

    #[test]
    fn scontrol_records_skip_the_pending_remainder() {
        let text = "JobId=3 ArrayJobId=1 ArrayTaskId=1 JobState=FAILED Reason=x ExitCode=0:9 RunTime=00:00:01 NodeList=vm\n\
                    JobId=1 ArrayJobId=1 ArrayTaskId=4-5%1 JobState=PENDING ExitCode=0:0 NodeList=(null)\n";
        let t = parse_scontrol(text);
        assert_eq!(t.len(), 1);
        assert_eq!(
            (t[0].index, t[0].state.as_str(), t[0].exit_code.as_deref()),
            (1, "FAILED", Some("0:9"))
        );
        assert_eq!(t[0].elapsed_seconds, Some(1.0));
    }

    #[test]
    fn squeue_and_sstat_lines() {
        let q = parse_squeue("0|5|RUNNING|vm\n4|1|PENDING|\n");
        assert_eq!(q[1].index, 4);
        assert_eq!(q[1].node, None);
        let s = parse_sstat("5.batch|98492K\n5.extern|100K\n");
        assert_eq!(s["5"], 98492 * 1024);
        assert_eq!(parse_elapsed("1-00:01:02"), Some(86_462.0));
    }
}
