//! One benchmark run end to end: measure a Spec, summarise its samples, and assemble the Record.

use crate::analysis::timing::{phase_timings, throughput};
use crate::measure::measure_with;
use crate::record::{EstimatedMemory, Record, StepMemory, SCHEMA_VERSION};
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
    let mut m = measure_with(spec, progress, on_step)?;
    m.memory.estimate = estimated(spec);
    m.memory.breakdown = crate::analysis::breakdown::breakdown(&m.memory, spec.mode);
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

/// The estimator's prediction for `spec` (None if it cannot be made; the run is unaffected).
fn estimated(spec: &Spec) -> Option<EstimatedMemory> {
    let req = crate::estimate::Request::for_spec(spec);
    let e = crate::estimate::estimate(&req).ok()?;
    let c = &e.categories;
    let single = if spec.grad_accum > 1 {
        let one = crate::estimate::Request {
            grad_accum: 1,
            ..req
        };
        crate::estimate::estimate(&one).ok().map(|e| e.peak_bytes)
    } else {
        None
    };
    Some(EstimatedMemory {
        categories: [
            ("parameters", c.parameters),
            ("gradients", c.gradients),
            ("optimizer_state", c.optimizer_state),
            ("activations", c.activations),
            ("kv_cache", c.kv_cache),
            ("temporaries", c.temporaries),
            ("runtime_buffers", c.runtime_buffers),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect(),
        peak_bytes: e.peak_bytes,
        peak_phase: e.peak_phase,
        single_micro_batch_peak_bytes: single,
    })
}
