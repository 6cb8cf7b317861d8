//! A `watch --json` file read back for `memscope report`: the command, its verdict, and the
//! summed memory of the watched tree per sample (RSS, PSS, and GPU memory when NVML answered).
//! Only the fields the report draws; the rest of the file is ignored.

use crate::analysis::leak::LeakReport;
use serde::Deserialize;

#[derive(Clone, Debug, Deserialize)]
pub struct WatchFile {
    pub command: Vec<String>,
    pub verdict: LeakReport,
    #[serde(default)]
    pub series: Vec<WatchPoint>,
    /// (step, seconds) of every step marker the output printed.
    #[serde(default)]
    pub step_markers: Vec<(u64, f64)>,
}

#[derive(Clone, Debug, Deserialize)]
pub struct WatchPoint {
    /// Seconds since the watch started the command or attached.
    pub time_s: f64,
    pub total: WatchTotal,
    #[serde(default)]
    pub gpu: Option<WatchGpu>,
}

/// The tree's sums at one sample.
#[derive(Clone, Debug, Deserialize)]
pub struct WatchTotal {
    pub rss_bytes: u64,
    pub pss_bytes: u64,
}

/// NVML's figures at one sample: the device's used memory (every process, the context and
/// library pools included) and the watched processes' own, when NVML lists them.
#[derive(Clone, Debug, Deserialize)]
pub struct WatchGpu {
    pub process_bytes: Option<u64>,
    pub device_used_bytes: u64,
}
