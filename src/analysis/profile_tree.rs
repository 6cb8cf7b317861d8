//! `memscope profile`'s module tree: model → block i → attention / MLP / norms → op kinds, each
//! node with its parameters, FLOPs and measured time per pass. Pure: from op costs
//! (`op_cost.rs`) and measured op times.

use super::op_cost::OpCost;
use super::roofline::{display_kind, MeasuredOp};
use serde::Serialize;

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Node {
    pub name: String,
    /// 1 the model, 2 a block or top-level module, 3 a module inside a block, 4 an op kind.
    pub depth: usize,
    pub params: u64,
    pub fwd_flops: f64,
    pub fwd_ms: f64,
    pub bwd_flops: f64,
    pub bwd_ms: f64,
}

impl Node {
    pub fn ms(&self) -> f64 {
        self.fwd_ms + self.bwd_ms
    }
    pub fn gflops_per_s(&self) -> f64 {
        let ms = self.ms();
        if ms > 0.0 {
            (self.fwd_flops + self.bwd_flops) / (ms * 1e6)
        } else {
            0.0
        }
    }
}

/// The path of a module: ["layer 3", "layer 3 mlp"] or ["embedding"].
fn path(module: &str) -> Vec<String> {
    let mut w = module.split(' ');
    match (w.next(), w.next(), w.next()) {
        (Some("layer"), Some(i), Some(_)) => vec![format!("layer {i}"), module.to_string()],
        _ => vec![module.to_string()],
    }
}

fn add(nodes: &mut Vec<Node>, name: &str, depth: usize, pass: &str, flops: f64, ms: f64) {
    let i = match nodes
        .iter()
        .position(|n| n.name == name && n.depth == depth)
    {
        Some(i) => i,
        None => {
            nodes.push(Node {
                name: name.into(),
                depth,
                ..Default::default()
            });
            nodes.len() - 1
        }
    };
    let n = &mut nodes[i];
    if pass == "backward" {
        n.bwd_flops += flops;
        n.bwd_ms += ms;
    } else {
        n.fwd_flops += flops;
        n.fwd_ms += ms;
    }
}

/// The tree in display order (each node before its children), down to `max_depth`;
/// `params_of(module)` gives a leaf module's parameter count.
pub fn tree(
    costs: &[OpCost],
    measured: &[MeasuredOp],
    params_of: &dyn Fn(&str) -> u64,
    max_depth: usize,
) -> Vec<Node> {
    // Ordered insertion: (full key path) → node. Keys are "model", then the path, then the op.
    let mut keyed: Vec<(Vec<String>, Node)> = Vec::new();
    let mut visit = |module: &str, kind: &str, pass: &str, flops: f64, ms: f64| {
        let mut p = vec!["model".to_string()];
        p.extend(path(module));
        p.push(format!("{module}\u{1f}{}", display_kind(module, kind)));
        for d in 1..=p.len() {
            let key = p[..d].to_vec();
            let label = if d == p.len() {
                display_kind(module, kind)
            } else {
                p[d - 1].clone()
            };
            let depth = if d == p.len() { 4 } else { d.min(3) };
            let i = match keyed.iter().position(|(k, _)| *k == key) {
                Some(i) => i,
                None => {
                    keyed.push((key.clone(), Node::default()));
                    keyed.len() - 1
                }
            };
            let mut v = vec![std::mem::take(&mut keyed[i].1)];
            add(&mut v, &label, depth, pass, flops, ms);
            keyed[i].1 = v.pop().unwrap_or_default();
            keyed[i].1.name = label;
            keyed[i].1.depth = depth;
        }
    };
    for c in costs {
        visit(&c.module, c.kind, c.pass, c.flops, 0.0);
    }
    for m in measured {
        visit(&m.module, &m.kind, &m.pass, 0.0, m.ms);
    }
    // Parameters: each module's own, summed into its ancestors (op kinds carry none).
    let mut modules: Vec<&str> = costs.iter().map(|c| c.module.as_str()).collect();
    modules.dedup();
    let mut seen = std::collections::HashSet::new();
    for m in modules.into_iter().filter(|m| seen.insert(*m)) {
        let (n, mp) = (params_of(m), path(m));
        for (k, node) in keyed.iter_mut() {
            let op = k.last().is_some_and(|l| l.contains('\u{1f}'));
            if !op && mp.starts_with(&k[1..]) {
                node.params += n;
            }
        }
    }
    keyed.sort_by(|a, b| order(&a.0).cmp(&order(&b.0)));
    keyed
        .into_iter()
        .filter(|(_, n)| n.depth <= max_depth)
        .map(|(_, n)| n)
        .collect()
}

/// Sort key: embedding, layers in numeric order, the head, then the rest; a parent before its children.
fn order(k: &[String]) -> Vec<(u64, String)> {
    k.iter()
        .map(|s| {
            let rank = if s == "model" || s.starts_with("embedding") {
                0
            } else if let Some(r) = s.strip_prefix("layer ") {
                1 + r
                    .split([' ', '\u{1f}'])
                    .next()
                    .and_then(|n| n.parse::<u64>().ok())
                    .unwrap_or(0)
            } else if s.starts_with("lm head") {
                u64::MAX - 1
            } else {
                u64::MAX
            };
            (rank, s.clone())
        })
        .collect()
}
