//! A roofline file (`roofline --json`): what was run, against which roofs, the whole step, every
//! op kind's row, and each section (train step, forward, prefill, one decode step) with its rows.
//! Written and read back (for `memscope report`) as this one type.

use serde::{Deserialize, Serialize};

/// The ceilings, measured.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Roofs {
    pub matmul_gflops: f64,
    /// The memory roof: the best measured bandwidth (copy or triad), GB/s read + written.
    pub bandwidth_gbs: f64,
    /// Copy bandwidth alone (decode's weight and KV-cache reads are compared with it).
    pub copy_gbs: f64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Bound {
    ComputeBound,
    MemoryBound,
    OverheadBound,
}

/// One row of the roofline table.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OpRow {
    pub name: String,
    pub pass: String,
    pub flops: f64,
    pub bytes: f64,
    pub intensity: f64,
    pub time_ms: f64,
    pub achieved_gflops: f64,
    pub achieved_gbs: f64,
    pub roof_pct: f64,
    pub bound: Bound,
    /// Measured time minus the time at the roof.
    pub lost_ms: f64,
}

/// A whole step (or phase) at once.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StepRow {
    pub flops: f64,
    pub bytes: f64,
    /// Mean measured step time (profiling on).
    pub time_ms: f64,
    /// The part of it inside timed ops; the rest is unattributed (candle's autograd,
    /// reshapes and copies outside the kernels, the loop itself).
    pub attributed_ms: f64,
    pub achieved_gflops: f64,
    pub mfu_pct: f64,
}

/// What was run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Head {
    pub model: String,
    pub mode: String,
    pub batch: usize,
    pub seq: usize,
    pub new_tokens: usize,
    pub steps: usize,
    pub threads: usize,
    /// The CPU's vector instructions (`environment::isa`); empty in files written before it.
    #[serde(default)]
    pub isa: String,
    pub roofs: Roofs,
    pub weights_bytes: u64,
    /// `torch` when PyTorch ran the workload (`--engine torch`); empty for memscope's engine
    /// and in files written before the field.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub engine: String,
    /// PyTorch ran on a CUDA device: an op's time is its kernels' time on the device, and the
    /// rest of the plain step is the device idle, waiting on the host.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub gpu: bool,
}

/// One section (train step, forward, prefill, one decode step) analysed.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SectionReport {
    pub name: String,
    pub step: StepRow,
    /// Profiled and plain time: mean and standard deviation, ms.
    pub profiled_ms: (f64, f64),
    pub plain_ms: (f64, f64),
    pub ops: Vec<OpRow>,
    pub biggest_loss: String,
}

/// A `roofline --json` file: what was run, the whole step (train step, forward, or prefill +
/// new_tokens decode steps), every section's op rows in one list, and the sections.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RooflineFile {
    pub run: Head,
    pub step: StepRow,
    pub ops: Vec<OpRow>,
    pub sections: Vec<SectionReport>,
}

impl RooflineFile {
    /// The file's text: pretty JSON in field order, a final newline.
    pub fn to_json(&self) -> serde_json::Result<String> {
        Ok(serde_json::to_string_pretty(self)? + "\n")
    }
}
