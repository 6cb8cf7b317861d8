//! The predicted step time of `estimate --engine torch`: by phase, and by op kind with what
//! bounds it (compute, memory, or the per-op overhead).

use crate::analysis::torch_time::Prediction;
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
    let mut out = render_table(&Table {
        title: format!(
            "Predicted step time, {dtype}: {} ms ({}); every traced op at max(FLOPs / matmul rate, bytes / {:.1} GB/s) + {op_us:.2} µs, from `peaks --engine torch` on {} ({}, {} threads)",
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
            "Host-bound: {} (the device waits on the host; a model's own Python between the ops costs more than the bare op `peaks` times, so this is a lower bound).\n",
            p.host_bound.join(", ")
        ));
    }
    out.push_str(
        "A prediction, not a measurement: run `bench --engine torch` for the measured phases.\n",
    );
    out
}
