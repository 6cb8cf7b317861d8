//! A Record as a Chrome trace (the Trace Event Format's JSON object form), for Perfetto's JSON
//! importer and chrome://tracing. Fields: docs/trace.md.
//!
//! - `X` (complete) events: one per measured step on the "steps" thread, one per phase per step on
//!   the "phases" thread (generate: decode spans `new_tokens` × the per-token sample);
//! - `C` (counter) events after each measured step: heap live, heap peak in the step, RSS, live
//!   allocations; and the measured memory by category (one track, at the start and the end);
//! - `M` (metadata) events: process and thread names.
//!
//! The Record keeps each phase's duration, not its start time: timestamps are reconstructed by
//! laying the measured steps end to end and each step's phases end to end from its start, in
//! the order the step runs them. Durations are measured; gaps between steps are not shown.

use crate::record::Record;
use serde_json::{json, Value};

const PID: u32 = 1;
const TID_STEPS: u32 = 1;
const TID_PHASES: u32 = 2;

/// Sub-phases of a step, in the order they run.
const ORDER: [&str; 5] = ["forward", "backward", "optimizer", "prefill", "decode"];

/// Milliseconds to the trace's microseconds.
pub fn us(ms: f64) -> f64 {
    // Microseconds, rounded to the nanosecond so the JSON stays short.
    (ms * 1000.0 * 1000.0).round() / 1000.0
}

/// The trace of one Record as pretty-printed JSON.
pub fn to_json(r: &Record) -> anyhow::Result<String> {
    let mut ev: Vec<Value> = Vec::new();
    let label = format!(
        "memscope {} {} b{} s{} {}",
        r.spec.model,
        r.spec.mode.name(),
        r.spec.batch,
        r.spec.seq,
        r.spec.dtype.name()
    );
    ev.push(
        json!({"name": "process_name", "ph": "M", "pid": PID, "tid": 0, "args": {"name": label}}),
    );
    ev.push(json!({"name": "thread_name", "ph": "M", "pid": PID, "tid": TID_STEPS, "args": {"name": "steps"}}));
    ev.push(json!({"name": "thread_name", "ph": "M", "pid": PID, "tid": TID_PHASES, "args": {"name": "phases"}}));
    let phases: Vec<(&str, &crate::record::PhaseTiming)> = ORDER
        .iter()
        .filter_map(|p| r.timing.get(*p).map(|t| (*p, t)))
        .collect();
    let n = r
        .timing
        .values()
        .map(|t| t.samples_ms.len())
        .max()
        .unwrap_or(0);
    let measured: Vec<&crate::record::StepMemory> =
        r.memory.series.iter().filter(|s| !s.warmup).collect();
    let mut t = 0.0f64;
    for k in 0..n {
        let step_no = r.spec.warmup + k;
        let mut spans = Vec::new();
        for (name, timing) in &phases {
            let Some(&ms) = timing.samples_ms.get(k) else {
                continue;
            };
            let (dur, per_token) = if *name == "decode" {
                (ms * r.spec.new_tokens as f64, Some(ms))
            } else {
                (ms, None)
            };
            spans.push((*name, dur, per_token));
        }
        let sum: f64 = spans.iter().map(|s| s.1).sum();
        let step_ms = r
            .timing
            .get("step")
            .and_then(|s| s.samples_ms.get(k).copied())
            .unwrap_or(sum);
        ev.push(json!({
            "name": format!("step {step_no}"), "cat": "step", "ph": "X", "pid": PID,
            "tid": TID_STEPS, "ts": us(t), "dur": us(step_ms), "args": {"step": step_no}
        }));
        let mut at = t;
        for (name, dur, per_token) in spans {
            let mut args = json!({"step": step_no});
            if let Some(p) = per_token {
                args["per_token_ms"] = json!(p);
                args["tokens"] = json!(r.spec.new_tokens);
            }
            ev.push(json!({
                "name": name, "cat": "phase", "ph": "X", "pid": PID, "tid": TID_PHASES,
                "ts": us(at), "dur": us(dur), "args": args
            }));
            at += dur;
        }
        t += step_ms.max(sum);
        if let Some(m) = measured.get(k) {
            if r.memory.counting {
                ev.push(counter(
                    "heap live (bytes)",
                    t,
                    json!({"heap live": m.heap_live_bytes}),
                ));
                ev.push(counter(
                    "heap peak in step (bytes)",
                    t,
                    json!({"heap peak": m.heap_peak_bytes}),
                ));
                ev.push(counter(
                    "live allocations",
                    t,
                    json!({"live allocations": m.live_allocations}),
                ));
            }
            if let Some(rss) = m.rss_bytes {
                ev.push(counter("RSS (bytes)", t, json!({"RSS": rss})));
            }
        }
    }
    if r.memory.counting && !r.memory.breakdown.is_empty() {
        let cats: serde_json::Map<String, Value> = r
            .memory
            .breakdown
            .iter()
            .map(|(k, v)| (k.clone(), json!(v.measured_bytes)))
            .collect();
        ev.push(counter(
            "heap by category, measured (bytes)",
            0.0,
            Value::Object(cats.clone()),
        ));
        ev.push(counter(
            "heap by category, measured (bytes)",
            t,
            Value::Object(cats),
        ));
    }
    let doc = json!({
        "traceEvents": ev,
        "displayTimeUnit": "ms",
        "otherData": {
            "tool": "memscope",
            "version": r.environment.memscope_version,
            "git_commit": r.environment.git_commit,
            "spec": label,
            "started_at_unix_s": r.started_at,
            "timestamps": "reconstructed: measured steps end to end, each step's phases end to end from its start (durations measured, gaps not)",
        }
    });
    Ok(serde_json::to_string(&doc)? + "\n")
}

/// A counter (`C`) event on the process track at `t_ms`.
pub fn counter(name: &str, t_ms: f64, args: Value) -> Value {
    json!({"name": name, "ph": "C", "pid": PID, "tid": 0, "ts": us(t_ms), "args": args})
}
