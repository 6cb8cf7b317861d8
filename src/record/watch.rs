//! A watch file (`watch --json`): the command, how it ended, every sample of the tree (per process
//! and summed), the peaks, step markers and values read from its output, the verdict and the
//! targets. Keys are written sorted at every level (the file is serialised through a JSON value).

use crate::record::leak::{LeakReport, TargetRow};
use crate::record::Environment;
use serde::{Deserialize, Serialize};

/// How the child ended.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ChildExit {
    pub code: Option<i32>,
    pub signal: Option<i32>,
    pub signal_name: Option<String>,
    /// SIGKILL while the kernel's OOM-kill counters rose.
    pub oom_kill: bool,
    /// `watch` sent the SIGKILL after the grace period.
    pub killed_by_watch: bool,
    /// One plain sentence.
    pub description: String,
}

/// Whether GPU figures can be reported, and why not.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "lowercase")]
pub enum GpuStatus {
    Available { devices: u32 },
    Unavailable { reason: String },
}

/// GPU memory at one instant.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct GpuSample {
    /// Summed over the watched processes NVML lists; None when NVML gives no per-process figure.
    pub process_bytes: Option<u64>,
    pub device_used_bytes: u64,
    pub device_total_bytes: u64,
}

/// One process at one instant. Bytes are bytes.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ProcSample {
    pub pid: u32,
    pub ppid: u32,
    pub command: String,
    pub rss_bytes: u64,
    pub pss_bytes: u64,
    pub uss_bytes: u64,
    pub swap_bytes: u64,
    pub threads: u64,
    /// Percent of one core since the previous sample (0 on a process's first sample).
    pub cpu_percent: f64,
    /// False when PSS and USS are RSS because `smaps_rollup` was unreadable.
    pub smaps: bool,
    /// Seconds since PSS, USS and swap were read (0 when read for this sample).
    pub smaps_age_s: f64,
}

/// The summed tree.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Totals {
    pub rss_bytes: u64,
    pub pss_bytes: u64,
    pub uss_bytes: u64,
    pub swap_bytes: u64,
    pub threads: u64,
    pub cpu_percent: f64,
    pub processes: usize,
}

/// The whole tree at one instant.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TreeSample {
    /// Seconds since the watch started.
    pub time_s: f64,
    /// The last step marker seen before this sample (None before the first).
    pub step: Option<u64>,
    pub total: Totals,
    pub processes: Vec<ProcSample>,
    /// GPU memory (None when NVML is unavailable).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<GpuSample>,
}

/// Where and when a peak happened.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Peak {
    pub pid: Option<u32>,
    pub command: String,
    pub rss_bytes: u64,
    pub pss_bytes: u64,
    pub time_s: f64,
    pub step: Option<u64>,
}

/// A value taken from an output line.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ValuePoint {
    pub name: String,
    /// In bytes when `unit` is a byte unit, else as printed.
    pub value: f64,
    pub unit: Option<String>,
    pub step: Option<u64>,
    pub time_s: f64,
}

impl TreeSample {
    /// The sample as one `watch --jsonl` line, with its line ending.
    pub fn to_jsonl_line(&self) -> serde_json::Result<String> {
        Ok(serde_json::to_string(self)? + "\n")
    }
}

/// The whole file.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct WatchFile {
    /// Always `memscope-watch`: how readers recognise the file.
    pub schema: String,
    pub schema_version: u32,
    pub command: Vec<String>,
    pub root_pid: u32,
    pub interval_s: f64,
    pub verdict: LeakReport,
    /// Which series the verdict judged, in words.
    pub judged: String,
    pub targets: Vec<TargetRow>,
    /// The summed tree's peak (by RSS), then each process's.
    pub peak: Option<Peak>,
    pub peaks_per_process: Vec<Peak>,
    /// Command mode: how the child ended.
    pub exit: Option<ChildExit>,
    /// The signal (SIGINT/SIGTERM) that ended the watch early.
    pub interrupted_by: Option<String>,
    pub gpu: GpuStatus,
    pub duration_s: f64,
    /// CPU seconds (user + system) `memscope watch` itself used.
    pub watcher_cpu_s: f64,
    pub notes: Vec<String>,
    /// (step, seconds) of every step marker the output printed.
    pub step_markers: Vec<(u64, f64)>,
    pub values: Vec<ValuePoint>,
    pub series: Vec<TreeSample>,
    pub environment: Environment,
}

/// `schema` of a watch file.
pub const WATCH_SCHEMA: &str = "memscope-watch";

impl WatchFile {
    /// The file's text: pretty JSON with every object's keys sorted, and a final newline.
    pub fn to_json(&self) -> serde_json::Result<String> {
        Ok(serde_json::to_string_pretty(&serde_json::to_value(self)?)? + "\n")
    }
}
