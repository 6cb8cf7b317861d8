//! `watch --trace`: the watched tree as a Chrome trace (Trace Event Format, JSON object form), the
//! same shape as bench's and leak's (`crate::report::trace`). Fields: docs/trace.md.
//!
//! - `C` (counter) events at every sample: summed RSS, PSS and USS of the tree, RSS per process
//!   (one stacked track, keyed `command (pid)`), GPU memory when NVML gave some, and every
//!   `--value-pattern` value when its line was read;
//! - `X` (complete) events: one per step marker the output printed, from the previous marker (the
//!   first from the start of the watch) to this one;
//! - `M` (metadata) events: process and thread names.
//!
//! Timestamps are the watch's own clock (seconds since it started the command or attached), not
//! reconstructed.

use crate::report::trace::{counter, us};
use crate::watch::observe::WatchResult;
use serde_json::{json, Map, Value};

const PID: u32 = 1;
const TID_STEPS: u32 = 1;

/// The trace of one watch as JSON text.
pub fn to_json(r: &WatchResult, command: &[String]) -> anyhow::Result<String> {
    let mut ev: Vec<Value> = Vec::new();
    let label = format!("memscope watch {}", command.join(" "));
    ev.push(
        json!({"name": "process_name", "ph": "M", "pid": PID, "tid": 0, "args": {"name": label}}),
    );
    ev.push(json!({"name": "thread_name", "ph": "M", "pid": PID, "tid": TID_STEPS, "args": {"name": "steps (output markers)"}}));
    // Steps: marker k closes step markers[k].0 at markers[k].1 s.
    let mut from = 0.0f64;
    for (k, &(step, at_s)) in r.log.markers.iter().enumerate() {
        let at = (at_s * 1e3).max(from);
        ev.push(json!({
            "name": format!("step {step}"), "cat": "step", "ph": "X", "pid": PID,
            "tid": TID_STEPS, "ts": us(from), "dur": us(at - from),
            "args": {"step": step, "marker": k + 1, "first": k == 0}
        }));
        from = at;
    }
    for s in &r.samples {
        let t = s.time_s * 1e3;
        let tot = &s.total;
        ev.push(counter("RSS (bytes)", t, json!({"RSS": tot.rss_bytes})));
        ev.push(counter("PSS (bytes)", t, json!({"PSS": tot.pss_bytes})));
        ev.push(counter("USS (bytes)", t, json!({"USS": tot.uss_bytes})));
        let per: Map<String, Value> = s
            .processes
            .iter()
            .map(|p| (format!("{} ({})", p.command, p.pid), json!(p.rss_bytes)))
            .collect();
        if !per.is_empty() {
            ev.push(counter("RSS by process (bytes)", t, Value::Object(per)));
        }
        if let Some(g) = &s.gpu {
            let mut args = Map::new();
            args.insert("device used".into(), json!(g.device_used_bytes));
            if let Some(b) = g.process_bytes {
                args.insert("watched processes".into(), json!(b));
            }
            ev.push(counter("GPU memory (bytes)", t, Value::Object(args)));
        }
    }
    for v in &r.log.values {
        // A value with a unit in its group name was converted to bytes (steps.rs).
        let name = match &v.unit {
            Some(_) => format!("{} (bytes)", v.name),
            None => v.name.clone(),
        };
        ev.push(counter(&name, v.time_s * 1e3, json!({ &v.name: v.value })));
    }
    let doc = json!({
        "traceEvents": ev,
        "displayTimeUnit": "ms",
        "otherData": {
            "tool": "memscope",
            "command": "watch",
            "version": env!("CARGO_PKG_VERSION"),
            "watched": command,
            "root_pid": r.root_pid,
            "duration_s": r.duration_s,
            "gpu": r.gpu.describe(),
            "timestamps": "the watch's clock: microseconds since it started the command or attached; steps run from the previous marker (the first from the start)",
        }
    });
    Ok(serde_json::to_string(&doc)? + "\n")
}
