//! A recorder Record's profiled steps drawn as tables (terminal, Markdown, HTML): time by op
//! kind against the device's roofs (`peaks --engine torch`, when cached), the module time tree,
//! and the modules that took the most time.

use crate::analysis::op_profile::{hotspots, kind_rows, memory_hotspots, module_tree, ModuleTime};
use crate::record::op_profile::OpProfile;
use crate::record::Record;
use crate::report::table::Table;
use crate::units;

/// Tree depth drawn: top-level modules, their blocks, and what a block holds.
const DEPTH: usize = 3;

/// The steps, the cost of profiling and the unattributed rest, in one sentence.
pub fn overhead_line(p: &OpProfile) -> String {
    let ops: f64 = p.ops.iter().map(|o| o.seconds * 1e3).sum();
    let cost = p.plain_step_ms.map_or(
        "no unprofiled measured step to set it against".to_string(),
        |q| {
            format!(
                "{} ms plain (median of the other measured steps): profiling cost {:+.1}%",
                units::ms(q),
                100.0 * (p.profiled_step_ms / q.max(1e-12) - 1.0)
            )
        },
    );
    format!(
        "Profiled steps {:?} (every ATen op timed, PyTorch {} on {}): {} ms per step (median) against {cost}; ops {} ms, unattributed {} ms ({:.1}%: PyTorch's autograd engine, Python between the ops, the timing hook)",
        p.steps,
        p.torch,
        p.device,
        units::ms(p.profiled_step_ms),
        units::ms(ops),
        units::ms((p.profiled_step_ms - ops).max(0.0)),
        100.0 * (p.profiled_step_ms - ops).max(0.0) / p.profiled_step_ms.max(1e-12)
    )
}

fn gflops(f: f64) -> String {
    format!("{:.3}", f / 1e9)
}

fn module_row(n: &ModuleTime, step_ms: f64, indent: bool) -> Vec<String> {
    let pad = if indent {
        "  ".repeat(n.depth.saturating_sub(1))
    } else {
        String::new()
    };
    vec![
        format!("{pad}{}", n.path),
        units::ms(n.fwd_ms),
        units::ms(n.bwd_ms),
        format!("{:.1}", 100.0 * n.ms() / step_ms.max(1e-12)),
        gflops(n.flops),
    ]
}

const MODULE_HEAD: [&str; 5] = [
    "module",
    "ms forward & other phases",
    "ms backward",
    "% of step",
    "GFLOP",
];

/// The tables of a Record's `profile` (none without one).
pub fn tables(r: &Record) -> Vec<Table> {
    let Some(p) = &r.profile else {
        return Vec::new();
    };
    let dtype = r.spec.dtype.name();
    let peaks = crate::torch::peaks::cached(&p.device, r.spec.threads);
    let roofs = peaks
        .as_ref()
        .map(|k| crate::analysis::torch_roofline::roofs(k, dtype));
    // Without measured roofs the rows still carry time, FLOPs and bytes; no bound is drawn.
    let rows = kind_rows(
        p,
        &roofs.unwrap_or(crate::record::roofline::Roofs {
            matmul_gflops: 1.0,
            bandwidth_gbs: 1.0,
            copy_gbs: 1.0,
        }),
    );
    let step = p.profiled_step_ms;
    let roof_note = match roofs {
        Some(k) => format!(
            "against `peaks --engine torch`'s roofs, {:.1} GFLOP/s and {:.1} GB/s",
            k.matmul_gflops, k.bandwidth_gbs
        ),
        None => format!(
            "no bound drawn: `memscope peaks --engine torch --device {} --threads {}` measures the roofs once",
            p.device, r.spec.threads
        ),
    };
    let kinds = Table {
        title: format!(
            "{} — time by op kind per step, {roof_note}",
            overhead_line(p)
        ),
        header: [
            "op kind",
            "pass",
            "ms",
            "% of step",
            "GFLOP",
            "min bytes",
            "GFLOP/s",
            "GB/s",
            "% roof",
            "bound",
        ]
        .map(String::from)
        .to_vec(),
        rows: rows
            .iter()
            .map(|o| {
                let (pct, bound) = if roofs.is_some() {
                    (format!("{:.1}", o.roof_pct), o.bound.name().to_string())
                } else {
                    ("—".into(), "—".into())
                };
                vec![
                    o.name.clone(),
                    o.pass.clone(),
                    units::ms(o.time_ms),
                    format!("{:.1}", 100.0 * o.time_ms / step.max(1e-12)),
                    gflops(o.flops),
                    units::bytes(o.bytes),
                    format!("{:.1}", o.achieved_gflops),
                    format!("{:.1}", o.achieved_gbs),
                    pct,
                    bound,
                ]
            })
            .collect(),
    };
    let tree = Table {
        title: "Module time tree per profiled step (a module's ops with its children's; in backward each op charged to the module whose forward made it)".into(),
        header: MODULE_HEAD.map(String::from).to_vec(),
        rows: module_tree(p, DEPTH)
            .iter()
            .map(|n| module_row(n, step, true))
            .collect(),
    };
    let hot = Table {
        title: "Hotspots by time: the modules whose own ops took longest per profiled step".into(),
        header: MODULE_HEAD.map(String::from).to_vec(),
        rows: hotspots(p, 10)
            .iter()
            .map(|n| module_row(n, step, false))
            .collect(),
    };
    vec![kinds, tree, hot, memory_table(r)]
}

/// Hotspots by memory: each module's saved activations and its forward's temporaries.
fn memory_table(r: &Record) -> Table {
    let what = match &r.profile {
        Some(p) if p.device.starts_with("cuda") => "CUDA allocated",
        _ if r.memory.counting => "counted malloc",
        _ => "RSS",
    };
    Table {
        title: format!(
            "Hotspots by memory ({what}): what each module's forward saved for backward (live at the forward's end) and its temporaries (the most live after any of its ops beyond what it held at entry and return)"
        ),
        header: ["module", "saved for backward", "temporaries", "together"]
            .map(String::from)
            .to_vec(),
        rows: memory_hotspots(r, 10)
            .iter()
            .map(|m| {
                vec![
                    m.module.clone(),
                    units::bytes(m.saved as f64),
                    m.temporaries.map_or("— (not measured under RSS)".into(), |t| {
                        units::bytes(t as f64)
                    }),
                    units::bytes((m.saved + m.temporaries.unwrap_or(0)) as f64),
                ]
            })
            .collect(),
    }
}
