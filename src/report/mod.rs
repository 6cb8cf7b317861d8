//! Reports: one file per format, each a pure function from Records to text. Reports never
//! measure and never import candle.

pub mod breakdown;
pub mod compare;
pub mod csv;
pub mod diff;
pub mod estimate;
pub mod heap_kind;
pub mod html;
pub mod json;
pub mod leak;
pub mod markdown;
pub mod models;
pub mod moment_parts;
pub mod op_profile;
pub mod optimize;
pub mod peaks;
pub mod profile;
pub mod roofline;
pub mod roofline_chart;
pub mod scaling;
pub mod summary;
pub mod table;
pub mod terminal;
pub mod torch_estimate;
pub mod torch_pipeline;
pub mod torch_plans;
pub mod torch_time;
pub mod trace;

use crate::record::Record;

/// Where a run's figures end up besides the terminal.
pub trait Export {
    /// The whole file for these records.
    fn render(&self, records: &[Record]) -> anyhow::Result<String>;
}

/// What a phase's retained heap bytes are, in a run of `mode` ("train", "infer", "generate").
pub fn phase_meaning(mode: &str, phase: &str) -> &'static str {
    match phase {
        "forward" if mode != "train" => "output logits (no autograd graph kept)",
        "load" => "parameters and model structure",
        "forward" => "saved activations (alive at forward end)",
        "backward" => "gradients",
        "optimizer" => "optimizer state (first step)",
        "prefill" => "prefill outputs",
        "decode" => "decode outputs",
        "other" => "KV cache (preallocated)",
        _ => "",
    }
}
