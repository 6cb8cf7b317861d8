//! `memscope profile`'s report: the module tree as an indented table (terminal, Markdown), CSV
//! and JSON, with each section's profiling overhead and unattributed remainder.

use crate::analysis::profile_tree::Node;
use crate::export::table::{MarkdownStyle, Table};
use crate::units;
use serde::Serialize;
use std::fmt::Write;

#[derive(Clone, Debug, Serialize)]
pub struct Tree {
    pub name: String,
    /// Profiled and plain time, (mean, std) ms.
    pub time_ms: (f64, f64),
    pub plain_ms: (f64, f64),
    pub nodes: Vec<Node>,
    /// What the time outside the timed ops is, for the engine that ran.
    #[serde(skip)]
    pub unattributed: &'static str,
    /// PyTorch on a CUDA device: the ops' times are their kernels', set against the plain step.
    #[serde(skip)]
    pub gpu: bool,
}

/// The unattributed remainder on memscope's engine, and on the torch engine.
pub const CANDLE_REST: &str = "candle's autograd, copies, the loop";
pub const TORCH_REST: &str = "PyTorch's autograd engine, Python between the ops, the timing hook";

fn attributed(t: &Tree) -> f64 {
    t.nodes
        .iter()
        .filter(|n| n.depth == 1)
        .map(|n| n.ms())
        .sum()
}

pub fn overhead(t: &Tree) -> String {
    let (p, ps) = t.time_ms;
    let (q, qs) = t.plain_ms;
    let a = attributed(t);
    if t.gpu {
        return crate::report::roofline::device_busy_line(&t.name, t.time_ms, t.plain_ms, a);
    }
    format!(
        "{}: profiled {} ± {} ms, plain {} ± {} ms (same process): profiling overhead {:+.1}%; \
         ops sum to {} ms, unattributed remainder {} ms ({:.1}%: {})",
        t.name,
        units::ms(p),
        units::ms(ps),
        units::ms(q),
        units::ms(qs),
        100.0 * (p / q.max(1e-12) - 1.0),
        units::ms(a),
        units::ms((p - a).max(0.0)),
        100.0 * (p - a).max(0.0) / p.max(1e-12),
        t.unattributed
    )
}

fn cells(n: &Node, step_ms: f64) -> Vec<String> {
    vec![
        format!("{}{}", "  ".repeat(n.depth - 1), n.name),
        units::thousands(n.params),
        format!("{:.3}", n.fwd_flops / 1e9),
        units::ms(n.fwd_ms),
        format!("{:.3}", n.bwd_flops / 1e9),
        units::ms(n.bwd_ms),
        format!("{:.1}", 100.0 * n.ms() / step_ms.max(1e-12)),
        format!("{:.1}", n.gflops_per_s()),
    ]
}

const HEAD: [&str; 8] = [
    "module",
    "params",
    "fwd GFLOP",
    "fwd ms",
    "bwd GFLOP",
    "bwd ms",
    "% step",
    "GFLOP/s",
];

pub fn render(title: &str, trees: &[Tree], md: bool) -> String {
    let mut o = if md {
        format!("# {title}\n")
    } else {
        format!("{title}\n")
    };
    for t in trees {
        let rows: Vec<Vec<String>> = t.nodes.iter().map(|n| cells(n, t.time_ms.0)).collect();
        let _ = write!(o, "\n{}\n\n", overhead(t));
        if md {
            // The tree's indent kept visible: Markdown collapses runs of spaces.
            let mut table = Table::new(HEAD);
            for r in rows {
                table.push(r.iter().map(|c| c.replace("  ", "&nbsp;&nbsp;")));
            }
            o += &table.markdown(&MarkdownStyle::PLAIN);
        } else {
            let w: Vec<usize> = (0..HEAD.len())
                .map(|i| {
                    rows.iter()
                        .map(|r| r[i].chars().count())
                        .chain([HEAD[i].len()])
                        .max()
                        .unwrap_or(0)
                })
                .collect();
            let line = |c: Vec<String>| {
                c.iter()
                    .enumerate()
                    .map(|(i, s)| {
                        if i == 0 {
                            format!("{s:<w$}", w = w[i])
                        } else {
                            format!("{s:>w$}", w = w[i])
                        }
                    })
                    .collect::<Vec<_>>()
                    .join("  ")
            };
            let _ = writeln!(o, "{}", line(HEAD.iter().map(|s| s.to_string()).collect()));
            for r in rows {
                let _ = writeln!(o, "{}", line(r));
            }
        }
    }
    o
}

/// One row per section and module (a module name with a comma or a quote is quoted).
pub fn csv(trees: &[Tree]) -> anyhow::Result<String> {
    let mut table = Table::new([
        "section",
        "depth",
        "module",
        "params",
        "fwd_flops",
        "fwd_ms",
        "bwd_flops",
        "bwd_ms",
        "pct_of_step",
        "achieved_gflops",
    ]);
    for t in trees {
        for n in &t.nodes {
            table.push([
                t.name.clone(),
                n.depth.to_string(),
                n.name.clone(),
                n.params.to_string(),
                n.fwd_flops.to_string(),
                n.fwd_ms.to_string(),
                n.bwd_flops.to_string(),
                n.bwd_ms.to_string(),
                (100.0 * n.ms() / t.time_ms.0.max(1e-12)).to_string(),
                n.gflops_per_s().to_string(),
            ]);
        }
    }
    table.csv()
}

pub fn json(trees: &[Tree]) -> anyhow::Result<String> {
    Ok(serde_json::to_string_pretty(trees)? + "\n")
}
