//! A pipeline job's estimate rank by rank (`estimate --engine torch --parallel pp:P`): the
//! stages and blocks each rank holds, its parameters, gradients, optimizer state, activations
//! and peak; the fullest named.

use crate::record::torch_estimate::{PipelineRank, TorchEstimateFile};
use crate::units::bytes;
use comfy_table::{presets::UTF8_FULL_CONDENSED, CellAlignment, Table};
use std::fmt::Write;

/// Rank by rank, for every dtype estimated; empty when the estimate is not a pipeline's.
pub fn pipeline_ranks(f: &TorchEstimateFile) -> String {
    let mut out = String::new();
    for (dtype, e) in &f.by_dtype {
        if e.pipeline_ranks.is_empty() {
            continue;
        }
        let cuda = e.reserved_peak_bytes.is_some();
        let mut t = Table::new();
        t.load_preset(UTF8_FULL_CONDENSED);
        let mut header = vec![
            "rank",
            "stages (blocks)",
            "in flight, most",
            "parameters",
            "gradients",
            "optimizer state",
            "activations",
            "allocated peak",
        ];
        if cuda {
            header.push("reserved peak");
        }
        t.set_header(header);
        let fullest = e.fullest_rank();
        for r in &e.pipeline_ranks {
            let cat = |c: &str| bytes(r.categories.get(c).copied().unwrap_or(0) as f64);
            let mark = if Some(r.rank) == fullest {
                " (fullest)"
            } else {
                ""
            };
            let mut row = vec![
                format!("{}{mark}", r.rank),
                stages(r),
                r.in_flight.to_string(),
                cat("parameters"),
                cat("gradients"),
                cat("optimizer_state"),
                cat("activations"),
                format!("{} ({})", bytes(r.peak_bytes as f64), r.peak_phase),
            ];
            if let Some(res) = r.reserved_peak_bytes {
                row.push(bytes(res as f64));
            }
            t.add_row(row);
        }
        for i in 2..t.column_count() {
            if let Some(c) = t.column_mut(i) {
                c.set_cell_alignment(CellAlignment::Right);
            }
        }
        let _ = writeln!(
            out,
            "\nEvery rank of the pipeline ({dtype}), each traced as that rank: the first stage holds the embedding, the last the final norm, the head and the loss; a rank's activations are those its schedule keeps for the micro-batches in flight (the most at once, over its stages, counted from the schedule's own action list).\n{t}"
        );
        if let (Some(p), Some(pipe)) = (&f.parallel, &f.pipeline) {
            // GPipe's, 1F1B's and interleaved 1F1B's idle share with even stages.
            let idle = (p.world - 1) as f64 / (pipe.stages_per_rank * pipe.micro_batches) as f64;
            let _ = writeln!(
                out,
                "The predicted step time below is the fullest rank's own ops; these schedules also leave each rank idle for (P − 1) / (V × M) = {} / ({} × {}) = {:.0}% of its work (the bubble), which it does not include.",
                p.world - 1,
                pipe.stages_per_rank,
                pipe.micro_batches,
                100.0 * idle
            );
            if let Some(step) = e.predicted_ms.get("step") {
                let _ = writeln!(
                    out,
                    "With the bubble, and stages that take equal time: a step of about {:.2} ms ({step:.2} ms × {:.2}); the communication between stages not included.",
                    step * (1.0 + idle),
                    1.0 + idle
                );
            }
        }
    }
    out
}

/// `0: blocks 0–1, 2: blocks 4–5` (the end block shown inclusive).
fn stages(r: &PipelineRank) -> String {
    r.stages
        .iter()
        .map(|&(s, lo, hi)| match hi.saturating_sub(lo) {
            1 => format!("{s}: block {lo}"),
            _ => format!("{s}: blocks {lo}–{}", hi - 1),
        })
        .collect::<Vec<_>>()
        .join(", ")
}
