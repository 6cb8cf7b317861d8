//! A pipeline job's estimate rank by rank (`estimate --engine torch --parallel pp:P`): the
//! stages and blocks each rank holds, its parameters, gradients, optimizer state, activations
//! and peak; the fullest named.

use crate::record::pipeline_play::PipelinePlay;
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
        if let (Some(pipe), Some(idle)) = (&f.pipeline, e.pipeline_bubble) {
            let formula = format!(
                "{:.0}% of its work (the schedule's own action lists played out with every stage's forward, input backward and weight backward of equal time{})",
                100.0 * idle,
                if pipe.splits_backward() {
                    "; its weight backwards fill waits that 1F1B's (P − 1) / (V × M) would leave"
                } else {
                    ": (P − 1) / (V × M)"
                }
            );
            match &e.pipeline_play {
                Some(play) => out += &played(play, &formula),
                None => {
                    let _ = writeln!(
                        out,
                        "With stages of equal time, the rank that waits most waits {formula} (the bubble); with the device's roofs measured, the step is played out along each rank's schedule."
                    );
                }
            }
        }
    }
    out
}

/// The step played out along the ranks' schedules: the step, each rank's busy and idle time,
/// the hand-overs between ranks; `formula`: the bubble as equal stages would leave it.
fn played(play: &PipelinePlay, formula: &str) -> String {
    let mut out = format!(
        "The step played out along every rank's schedule (PyTorch's action list; each action its rank's predicted phase time over that phase's actions): {:.2} ms, the job's predicted step (the table of op kinds below is the fullest rank's own ops).\n",
        play.step_ms
    );
    for r in &play.ranks {
        let share = if r.end_ms > 0.0 {
            100.0 * r.idle_ms / r.end_ms
        } else {
            0.0
        };
        let _ = writeln!(
            out,
            "  rank {}: {:.2} ms of actions, idle {:.2} ms ({share:.0}% of its schedule's {:.2} ms), then {:.2} ms after it (the optimizer); its step {:.2} ms",
            r.rank,
            r.busy_ms,
            r.idle_ms,
            r.end_ms,
            r.step_ms - r.end_ms,
            r.step_ms
        );
    }
    let _ = writeln!(
        out,
        "With stages of equal time, the rank that waits most would wait {formula}."
    );
    if play.transfer_ms > 0.0 {
        let _ = writeln!(
            out,
            "{} hand-overs between ranks at {:.3} ms each (a micro-batch's hidden states or their gradient, over the link's fitted bandwidth and latency).",
            play.transfers, play.transfer_ms
        );
    } else {
        let _ = writeln!(
            out,
            "The {} hand-overs between ranks are not timed: no link (give --link GB/s,µs, or run `memscope peaks --engine torch --collectives` once).",
            play.transfers
        );
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
