//! `memscope roofline`'s report: per op kind and pass, FLOPs, minimum bytes, intensity, time,
//! achieved rates, % of the roof and the class; the step; the biggest loss. Terminal, JSON,
//! CSV and Markdown. Pure: from the analysis' rows to text.

use crate::analysis::op_cost::OpCost;
use crate::analysis::roofline::{self, MeasuredOp};
use crate::export::table::{MarkdownStyle, Table};
use crate::record::roofline::{Head, RooflineFile, Roofs, SectionReport};
use crate::units;
use std::fmt::Write;

impl SectionReport {
    /// `gpu`: the ops' times are their kernels' on a CUDA device, timed apart from a profiled
    /// step the timing slowed, so the step's rates and shares are of the plain step.
    pub fn new(
        name: &str,
        costs: &[OpCost],
        measured: &[MeasuredOp],
        (time_ms, plain_ms): ((f64, f64), (f64, f64)),
        roofs: &Roofs,
        gpu: bool,
    ) -> Self {
        let ops = roofline::op_rows(costs, measured, roofs);
        let step_ms = if gpu { plain_ms.0 } else { time_ms.0 };
        let step = roofline::step_row(&ops, step_ms, roofs);
        SectionReport {
            name: name.into(),
            biggest_loss: roofline::biggest_loss(&ops, step_ms),
            step,
            profiled_ms: time_ms,
            plain_ms,
            ops,
        }
    }
}

fn g(x: f64) -> String {
    format!("{:.3}", x / 1e9)
}

pub fn overhead_line(h: &Head, s: &SectionReport) -> String {
    let (p, ps) = s.profiled_ms;
    let (q, qs) = s.plain_ms;
    if h.gpu {
        return gpu_line(s);
    }
    format!(
        "{}: profiled {} ± {} ms, plain {} ± {} ms (same process): profiling overhead {:+.1}%; \
         attributed to ops {} ms, unattributed {} ms ({:.1}%)",
        s.name,
        units::ms(p),
        units::ms(ps),
        units::ms(q),
        units::ms(qs),
        100.0 * (p / q.max(1e-12) - 1.0),
        units::ms(s.step.attributed_ms),
        units::ms((p - s.step.attributed_ms).max(0.0)),
        100.0 * (p - s.step.attributed_ms).max(0.0) / p.max(1e-12)
    )
}

/// On CUDA the ops' times are the device's: set against the plain step, the rest is the device
/// idle while the host (Python, dispatch, launches) catches up.
pub fn gpu_line(s: &SectionReport) -> String {
    device_busy_line(&s.name, s.profiled_ms, s.plain_ms, s.step.attributed_ms)
}

/// A section on CUDA: its plain and profiled times (mean ± standard deviation), the ops'
/// kernels' share of the plain step (`busy` ms), and the rest, the device idle. `profile`'s
/// tree says the same.
pub fn device_busy_line(name: &str, (p, ps): (f64, f64), (q, qs): (f64, f64), busy: f64) -> String {
    format!(
        "{}: plain {} ± {} ms, profiled {} ± {} ms (same process; every op timed apart on the device); \
         the ops' kernels take {} ms of the plain step ({:.1}%), the device idle {} ms ({:.1}%: waiting on the host's Python, dispatch and launches)",
        name,
        units::ms(q),
        units::ms(qs),
        units::ms(p),
        units::ms(ps),
        units::ms(busy),
        100.0 * busy / q.max(1e-12),
        units::ms((q - busy).max(0.0)),
        100.0 * (q - busy).max(0.0) / q.max(1e-12)
    )
}

fn table(s: &SectionReport, md: bool) -> String {
    let head = [
        "op kind",
        "pass",
        "GFLOP",
        "min bytes",
        "FLOP/B",
        "time ms",
        "GFLOP/s",
        "GB/s",
        "% roof",
        "class",
    ];
    let rows: Vec<Vec<String>> = s
        .ops
        .iter()
        .map(|r| {
            vec![
                r.name.clone(),
                r.pass.clone(),
                g(r.flops),
                units::bytes(r.bytes),
                format!("{:.1}", r.intensity),
                units::ms(r.time_ms),
                format!("{:.1}", r.achieved_gflops),
                format!("{:.1}", r.achieved_gbs),
                format!("{:.1}", r.roof_pct),
                r.bound.name().to_string(),
            ]
        })
        .collect();
    if md {
        return Table {
            rows,
            ..Table::new(head)
        }
        .markdown(&MarkdownStyle::PLAIN);
    }
    let w: Vec<usize> = (0..head.len())
        .map(|i| {
            rows.iter()
                .map(|r| r[i].len())
                .chain([head[i].len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |cells: Vec<String>| {
        cells
            .iter()
            .enumerate()
            .map(|(i, c)| {
                if i < 2 {
                    format!("{c:<w$}", w = w[i])
                } else {
                    format!("{c:>w$}", w = w[i])
                }
            })
            .collect::<Vec<_>>()
            .join("  ")
    };
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{}",
        line(head.iter().map(|h| h.to_string()).collect())
    );
    for r in rows {
        let _ = writeln!(out, "{}", line(r));
    }
    out
}

fn step_line(h: &Head, s: &SectionReport) -> String {
    let mut l = format!(
        "{}: {} GFLOP, {} minimum bytes, {:.1} GFLOP/s achieved, MFU {:.1}% of the measured {:.1} GFLOP/s matmul peak",
        s.name,
        g(s.step.flops),
        units::bytes(s.step.bytes),
        s.step.achieved_gflops,
        s.step.mfu_pct,
        h.roofs.matmul_gflops
    );
    if s.name.starts_with("decode") {
        let gbs = s.step.bytes / (s.step.time_ms.max(1e-12) * 1e6);
        let _ = write!(
            l,
            "\n  decode reads at least the weights ({}) and the KV cache each token: {:.1} GB/s, \
             {:.0}% of the measured copy bandwidth ({:.1} GB/s)",
            units::bytes(h.weights_bytes as f64),
            gbs,
            100.0 * gbs / h.roofs.copy_gbs,
            h.roofs.copy_gbs
        );
    }
    l
}

const MODEL_NOTE: &str = "Bytes are the minimum: each input read once, each output written once. \
Roofs: matmul peak and best bandwidth from `memscope peaks`; overhead-bound = below 10% of the roof \
at the op's intensity. Ops outside the timed kernels (candle's autograd, copies, the loop) are unattributed.";

const TORCH_NOTE: &str = "Bytes are the minimum: each input read once, each output written once. \
Roofs: the best square product of the dtype and the best bandwidth from `memscope peaks --engine torch`; \
overhead-bound = below 10% of the roof at the op's intensity. Every ATen op PyTorch dispatched is timed \
(CPU: the wall clock around the call; CUDA: its kernels' time on the device, a pair of events on the \
stream with the device kept busy while the host dispatches it, views 0) and costed from its shapes; \
in backward it is charged to the module whose forward made the autograd node. Unattributed (CPU): \
PyTorch's autograd engine and Python between the ops, and the timing hook itself; on CUDA, the \
device's idle time in the plain step.";

/// The note on how the figures were made, for the engine that made them.
fn note(h: &Head) -> &'static str {
    if h.engine == "torch" {
        TORCH_NOTE
    } else {
        MODEL_NOTE
    }
}

/// ", avx2" after the thread count, nothing when the file predates the field.
fn isa_suffix(isa: &str) -> String {
    if isa.is_empty() {
        String::new()
    } else {
        format!(", {isa}")
    }
}

pub fn terminal(h: &Head, secs: &[SectionReport]) -> String {
    let mut o = format!(
        "roofline: {} {} batch {} seq {} ({} measured steps, {} threads{}); roofs {:.1} GFLOP/s, {:.1} GB/s, ridge {:.1} FLOP/B\n{}\n",
        h.model, h.mode, h.batch, h.seq, h.steps, h.threads, isa_suffix(&h.isa), h.roofs.matmul_gflops, h.roofs.bandwidth_gbs, h.roofs.ridge(), note(h)
    );
    for s in secs {
        let _ = write!(
            o,
            "\n{}\n{}\n{}\n{}\n",
            step_line(h, s),
            overhead_line(h, s),
            table(s, false),
            s.biggest_loss
        );
    }
    o
}

pub fn markdown(h: &Head, secs: &[SectionReport]) -> String {
    let mut o = format!("# roofline: {} {}\n\n{}\n", h.model, h.mode, note(h));
    for s in secs {
        let _ = write!(
            o,
            "\n## {}\n\n{}\n\n{}\n\n{}\n{}\n",
            s.name,
            step_line(h, s),
            overhead_line(h, s),
            table(s, true),
            s.biggest_loss
        );
    }
    o
}

/// One row per section and op kind.
pub fn csv(secs: &[SectionReport]) -> anyhow::Result<String> {
    let mut table = Table::new([
        "section",
        "name",
        "pass",
        "flops",
        "bytes",
        "intensity",
        "time_ms",
        "achieved_gflops",
        "achieved_gbs",
        "roof_pct",
        "bound",
    ]);
    for s in secs {
        for r in &s.ops {
            table.push([
                s.name.clone(),
                r.name.clone(),
                r.pass.clone(),
                r.flops.to_string(),
                r.bytes.to_string(),
                r.intensity.to_string(),
                r.time_ms.to_string(),
                r.achieved_gflops.to_string(),
                r.achieved_gbs.to_string(),
                r.roof_pct.to_string(),
                r.bound.name().to_string(),
            ]);
        }
    }
    table.csv()
}

pub fn json(h: &Head, secs: &[SectionReport]) -> anyhow::Result<String> {
    let mut step = secs[0].step.clone();
    if secs.len() == 2 {
        // Generation: prefill plus every decode step.
        let (p, d, n) = (&secs[0].step, &secs[1].step, h.new_tokens as f64);
        step.flops = p.flops + n * d.flops;
        step.bytes = p.bytes + n * d.bytes;
        step.time_ms = p.time_ms + n * d.time_ms;
        step.attributed_ms = p.attributed_ms + n * d.attributed_ms;
        step.achieved_gflops = step.flops / (step.time_ms.max(1e-12) * 1e6);
        step.mfu_pct = 100.0 * step.achieved_gflops / h.roofs.matmul_gflops;
    }
    let ops = secs.iter().flat_map(|s| s.ops.iter().cloned()).collect();
    let file = RooflineFile {
        run: h.clone(),
        step,
        ops,
        sections: secs.to_vec(),
    };
    Ok(file.to_json()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn on_cuda_the_step_is_the_plain_one_and_the_rest_is_the_device_idle() {
        let roofs = Roofs {
            matmul_gflops: 1000.0,
            bandwidth_gbs: 100.0,
            copy_gbs: 100.0,
        };
        // A profiled step of 40 ms (the timing spun the device), a plain one of 10 ms.
        let s = SectionReport::new("step", &[], &[], ((40.0, 1.0), (10.0, 0.5)), &roofs, true);
        assert_eq!(s.step.time_ms, 10.0);
        let cpu = SectionReport::new("step", &[], &[], ((40.0, 1.0), (10.0, 0.5)), &roofs, false);
        assert_eq!(cpu.step.time_ms, 40.0);
        let line = gpu_line(&s);
        assert!(line.contains("plain 10.0"), "{line}");
        assert!(line.contains("the device idle 10.0 ms (100.0%"), "{line}");
    }
}
