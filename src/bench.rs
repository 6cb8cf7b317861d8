//! One benchmark run end to end: measure a Spec, summarise its samples, and assemble the Record.

use crate::analysis::timing::{phase_timings, throughput};
use crate::measure::measure_with;
use crate::record::{Record, StepMemory, SCHEMA_VERSION};
use crate::spec::{Mode, Spec};
use std::sync::atomic::AtomicUsize;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

pub fn run(spec: &Spec, progress: &AtomicUsize) -> anyhow::Result<Record> {
    run_with(spec, progress, &mut |_| {})
}

/// As [`run`], handing each step's memory entry to `on_step` between steps (outside timing).
pub fn run_with(
    spec: &Spec,
    progress: &AtomicUsize,
    on_step: &mut dyn FnMut(&StepMemory),
) -> anyhow::Result<Record> {
    spec.validate()?;
    let started_at = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let wall = Instant::now();
    let m = measure_with(spec, progress, on_step)?;
    let (timing, mut warnings) = phase_timings(&m.samples_ms);
    warnings.extend(m.warnings);
    let decoded = if spec.mode == Mode::Generate {
        spec.new_tokens as u64
    } else {
        0
    };
    let sequences = (spec.batch * spec.grad_accum) as u64;
    let throughput = throughput(&timing, spec.tokens_per_step(), sequences, decoded);
    Ok(Record {
        schema_version: SCHEMA_VERSION,
        spec: spec.clone(),
        model: m.model,
        timing,
        throughput,
        memory: m.memory,
        loss: m.loss,
        warnings,
        environment: crate::environment::capture(spec.threads),
        started_at,
        wall_seconds: wall.elapsed().as_secs_f64(),
    })
}
