//! A Record's memory series (one value per measured step) and its step rate, as the leak verdict
//! reads them.

use crate::record::leak::MemorySeries;
use crate::record::{Record, StepMemory};

pub fn series(r: &Record, label: &str, value: impl Fn(&StepMemory) -> Option<u64>) -> MemorySeries {
    let (steps, values) = r
        .memory
        .series
        .iter()
        .filter_map(|s| value(s).map(|v| (s.step, v as f64)))
        .unzip();
    MemorySeries {
        steps,
        values,
        seconds: None,
        label: label.to_string(),
        ..Default::default()
    }
}

/// Steps per hour from the measured median step time.
pub fn steps_per_hour(r: &Record) -> Option<f64> {
    let med = |k: &str| r.timing.get(k).map(|t| t.median_ms);
    let step_ms = med("step")
        .or_else(|| med("forward"))
        .or_else(|| Some(med("prefill")? + med("decode")? * r.spec.new_tokens as f64))?;
    (step_ms > 0.0).then(|| 3.6e6 / step_ms)
}
