//! `estimate --parallel A,B,…`: one job's plans side by side, each plan's fullest rank against
//! `--fits`, and the plan with the most head-room named; `fit --predict`: each plan at the
//! largest size predicted to fit, and the plan that runs the most sequences a step named.

use crate::record::torch_estimate::TorchPlansFile;
use crate::units::bytes;
use comfy_table::{presets::UTF8_FULL_CONDENSED, CellAlignment, Table};
use std::fmt::Write;

pub fn render(f: &TorchPlansFile) -> String {
    let mut out = String::new();
    let cuda = f.device.starts_with("cuda");
    out += &title(f);
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED);
    let largest = f.vary.as_ref().map(|v| format!("largest {v}"));
    let mut header = vec!["plan"];
    if let Some(l) = &largest {
        header.extend([l.as_str(), "first over"]);
    }
    header.extend(["sequences a step", "rank", "allocated peak"]);
    if cuda {
        header.extend(["reserved peak", "device total"]);
    }
    match (f.budget_bytes.is_some(), largest.is_some()) {
        (true, false) => header.extend(["head-room", "fits"]),
        (true, true) => header.push("head-room"),
        _ => {}
    }
    let pipelines = f.rows.iter().any(|r| r.bubble.is_some());
    if pipelines {
        header.push("bubble");
    }
    if largest.is_some() {
        header.push("sizes traced");
    }
    header.push("took");
    t.set_header(header);
    for r in &f.rows {
        let b = |v: Option<u64>| v.map_or("—".to_string(), |v| bytes(v as f64));
        let mut row = vec![r.plan.clone()];
        if largest.is_some() {
            let l = r.largest.as_ref();
            row.push(l.map_or("—".into(), |l| l.size.to_string()));
            row.push(
                l.and_then(|l| l.first_over)
                    .map_or("—".into(), |n| n.to_string()),
            );
        }
        row.extend([
            r.sequences_per_step.map_or("—".into(), |n| n.to_string()),
            r.fullest_rank.map_or("—".into(), |n| n.to_string()),
            b(r.peak_bytes),
        ]);
        if cuda {
            row.extend([b(r.reserved_peak_bytes), b(r.device_total_bytes)]);
        }
        if let Some(budget) = f.budget_bytes {
            row.push(match r.device_total_bytes {
                Some(total) if total <= budget => bytes((budget - total) as f64),
                Some(total) => format!("−{}", bytes((total - budget) as f64)),
                None => "—".into(),
            });
            if largest.is_none() {
                row.push(match (r.fits, &r.refused) {
                    (_, Some(_)) => "refused".into(),
                    (Some(true), _) => "yes".into(),
                    _ => "no".into(),
                });
            }
        }
        if pipelines {
            row.push(
                r.bubble
                    .map_or("—".into(), |b| format!("{:.0}%", 100.0 * b)),
            );
        }
        if largest.is_some() {
            row.push(
                r.largest
                    .as_ref()
                    .map_or("—".into(), |l| l.tries.to_string()),
            );
        }
        row.push(format!("{:.1} s", r.seconds));
        t.add_row(row);
    }
    for i in 1..t.column_count() {
        if let Some(c) = t.column_mut(i) {
            c.set_cell_alignment(CellAlignment::Right);
        }
    }
    let _ = writeln!(out, "{t}");
    let what = if cuda {
        "the device total (the reserved peak, and what CUDA and NCCL hold outside PyTorch's allocator)"
    } else {
        "the allocated peak"
    };
    let _ = writeln!(
        out,
        "Each row is its plan's fullest rank (a pipeline's every rank traced; the others' ranks are alike), judged by {what}. Sequences a step: the whole job's, as each plan spends --batch (a data-parallel group's batch; a pipeline's whole batch)."
    );
    if pipelines {
        let _ = writeln!(
            out,
            "Bubble: a pipeline's idle share of its work with stages of equal time, from its schedule's own action lists ((P − 1) / (V × M) but for zero-bubble schedules, whose weight backwards fill it); more micro-batches shrink it and each one's activations, and hold more of them in flight under GPipe."
        );
    }
    for r in &f.rows {
        if !r.dropped.is_empty() {
            let _ = writeln!(
                out,
                "{}: {} left out (another plan's flags)",
                r.plan, r.dropped
            );
        }
        if let Some(why) = &r.refused {
            let _ = writeln!(out, "{}: refused: {why}", r.plan);
        }
    }
    if let (Some(vary), Some(b)) = (&f.vary, f.budget_bytes) {
        return out + &largest_lines(f, vary, b);
    }
    let best = f
        .rows
        .iter()
        .filter(|r| r.refused.is_none() && r.fits != Some(false))
        .filter_map(|r| r.device_total_bytes.map(|t| (t, r)))
        .min_by_key(|(t, _)| *t);
    match (best, f.budget_bytes) {
        (Some((t, r)), Some(b)) => {
            let _ = writeln!(
                out,
                "Most head-room under --fits {}: {} ({} left on its fullest rank).",
                bytes(b as f64),
                r.plan,
                bytes((b - t) as f64)
            );
        }
        (Some((t, r)), None) => {
            let _ = writeln!(out, "Smallest: {} ({}).", r.plan, bytes(t as f64));
        }
        (None, Some(b)) => {
            let _ = writeln!(out, "No plan fits --fits {}.", bytes(b as f64));
        }
        (None, None) => {}
    }
    out
}

/// The title line: a comparison at the given sizes, or `fit --predict`'s search.
fn title(f: &TorchPlansFile) -> String {
    let mut out = String::new();
    match (&f.vary, f.budget_bytes) {
        (Some(vary), Some(b)) => {
            let _ = writeln!(
                out,
                "memscope fit --predict --engine torch: {} {}, the largest {vary} each plan is predicted to fit in {} on {}, {} ranks, {} plans (nothing run)",
                f.model,
                f.mode,
                bytes(b as f64),
                f.device,
                f.world,
                f.rows.len()
            );
        }
        _ => {
            let _ = writeln!(
                out,
                "memscope estimate --engine torch: {} {} (batch {}, seq {}) on {}, {} ranks, {} plans",
                f.model,
                f.mode,
                f.batch,
                f.seq,
                f.device,
                f.world,
                f.rows.len()
            );
        }
    }
    out
}

/// `fit --predict`'s lines under the table: what the figures are, and the plan that runs the
/// most tokens a step within the budget `b`.
fn largest_lines(f: &TorchPlansFile, vary: &str, b: u64) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Each row's figures are at its largest {vary} (at the smallest where none fits); a pipeline's batch grows in whole micro-batches. Sizes traced: the estimates the search made, each a trace of the step as `memscope estimate` runs it."
    );
    let most = f
        .rows
        .iter()
        .filter(|r| r.largest.as_ref().is_some_and(|l| l.size > 0))
        .max_by_key(|r| {
            let size = r.largest.as_ref().map_or(0, |l| l.size);
            // Tokens a step: the sequences at the given length, or at the longest.
            let len = if vary == "seq" { size } else { f.seq };
            let room = std::cmp::Reverse(r.device_total_bytes.unwrap_or(u64::MAX));
            (r.sequences_per_step.unwrap_or(0) * len, size, room)
        });
    let _ = match most {
        Some(r) => writeln!(
            out,
            "Most tokens a step within {}: {} ({} {}, {} sequences a step).",
            bytes(b as f64),
            r.plan,
            vary,
            r.largest.as_ref().map_or(0, |l| l.size),
            r.sequences_per_step.unwrap_or(0)
        ),
        None => writeln!(out, "No plan fits {} at {vary} 1.", bytes(b as f64)),
    };
    out
}
