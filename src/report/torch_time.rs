//! The predicted step time of `estimate --engine torch`: by phase, and by op kind with what
//! bounds it (compute, memory, or the per-op overhead).

use crate::analysis::throughput::Job;
use crate::analysis::torch_time::Prediction;
use crate::record::torch_estimate::Throughput;
use crate::report::table::Table;
use crate::report::terminal::render_table;
use crate::torch::peaks::TorchPeaks;

pub fn render(p: &Prediction, peaks: &TorchPeaks, dtype: &str) -> String {
    let ms = |s: f64| format!("{:.2}", s * 1e3);
    let phases: Vec<String> = p
        .by_phase
        .iter()
        .map(|(k, v)| format!("{k} {} ms", ms(*v)))
        .collect();
    let rows = p
        .by_kind
        .iter()
        .map(|k| {
            vec![
                k.kind.name().to_string(),
                format!("{:.0}", k.calls),
                format!("{:.2}", k.flops / 1e9),
                format!("{:.1}", k.bytes / 1e6),
                ms(k.predicted_s),
                k.bound().to_string(),
            ]
        })
        .collect();
    let (op_us, _) = peaks.small_op_us();
    let fixed = if peaks.host_us_per_op.is_empty() {
        format!("{op_us:.2} µs (one bare op's)")
    } else {
        let each: Vec<String> = peaks
            .host_us_per_op
            .iter()
            .map(|(phase, us)| format!("{phase} {us:.1}"))
            .collect();
        format!(
            "the host's µs per op of {}'s own step at the smallest widths ({})",
            peaks.host_model,
            each.join(", ")
        )
    };
    let mut out = render_table(&Table {
        title: format!(
            "Predicted step time, {dtype}: {} ms ({}); every traced op at max(FLOPs / matmul rate, bytes / {:.1} GB/s) + {fixed}, from `peaks --engine torch` on {} ({}, {} threads)",
            ms(p.step_s),
            phases.join(", "),
            peaks.triad_gbs.best,
            peaks.device,
            peaks.device_name,
            peaks.threads
        ),
        header: vec![
            "op kind".into(),
            "calls".into(),
            "GFLOP".into(),
            "MB moved (min)".into(),
            "predicted ms".into(),
            "bound".into(),
        ],
        rows,
    });
    if peaks.device.starts_with("cuda") {
        out.push_str(
            "On CUDA a phase is the longer of its host side (the fixed costs: Python, dispatch, launches) and its device side (the roof times): the table's ms are the device's.\n",
        );
    }
    if !p.host_bound.is_empty() {
        out.push_str(&format!(
            "Host-bound: {} (the device waits on the host{}).\n",
            p.host_bound.join(", "),
            if peaks.host_us_per_op.is_empty() {
                "; a model's own Python between the ops costs more than the bare op `peaks` timed without --model, so this is a lower bound"
            } else {
                ", at the cost per op the model's own step took on this host"
            }
        ));
    }
    out.push_str(
        "A prediction, not a measurement: run `bench --engine torch` for the measured phases.\n",
    );
    out
}

/// Tokens a second for one rank and the job, MFU, and `--run-tokens`' hours.
pub fn render_throughput(t: &Throughput, job: &Job, with_collectives: bool) -> String {
    let rate = |v: f64| crate::units::thousands(v.round() as u64);
    let what = match job.mode {
        crate::spec::Mode::Generate => "decoded tokens",
        _ => "tokens",
    };
    let mut out = format!(
        "\nThroughput, predicted: {} {what}/s a rank ({} {what} a step); MFU {:.1}% (the step's traced FLOPs against the {} its dtype's products reached in `peaks`, a measured ceiling, not a datasheet's)",
        rate(t.tokens_per_s),
        rate(t.tokens_per_step),
        t.mfu * 100.0,
        if t.peak_gflops >= 1e3 {
            format!("{:.1} TFLOP/s", t.peak_gflops / 1e3)
        } else {
            format!("{:.1} GFLOP/s", t.peak_gflops)
        }
    );
    let (fast, slow) = t.job_tokens_per_s_bounds;
    if job.parallel.is_some() {
        if with_collectives {
            out += &format!(
                "; the job {} {what}/s with the communication it waits for (bounds {}–{}: its collectives after compute, or hidden behind it)",
                rate(t.job_tokens_per_s),
                rate(slow),
                rate(fast)
            );
        } else {
            out += &format!(
                "; the job {} {what}/s with its collectives' time left out (give --link, or measure it with `peaks --engine torch --collectives`)",
                rate(t.job_tokens_per_s)
            );
        }
    }
    out += ".\n";
    if let (Some(n), Some(at)) = (t.run_tokens, t.run_hours) {
        let h = |v: f64| {
            if v >= 48.0 {
                format!("{:.1} days", v / 24.0)
            } else {
                format!("{v:.1} h")
            }
        };
        let bounds = match t.run_hours_bounds {
            Some((lo, hi)) if (hi - lo).abs() > 1e-9 * hi.max(1.0) => {
                format!(" (bounds {} to {})", h(lo), h(hi))
            }
            _ => String::new(),
        };
        out += &format!(
            "--run-tokens {}: {}{bounds} at that rate, steps only (no evaluation, checkpoints or restarts).\n",
            crate::units::thousands(n.round() as u64),
            h(at)
        );
    }
    out
}
