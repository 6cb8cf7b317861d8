//! A recorder Record's profiled steps (`record::op_profile`): the ops costed by `aten_cost` and
//! grouped by op kind and pass (the roofline's rows) and by module (the time tree and the
//! hotspots by time and by memory). Pure.

use super::aten_cost::cost;
use super::roofline::op_rows;
use super::torch_roofline::section_named;
use crate::record::op_profile::{OpProfile, ProfiledOp};
use crate::record::roofline::{OpRow, Roofs};
use crate::record::Record;
use crate::torch::estimate::TracedOp;
use crate::torch::optime::TimedOp;

/// A module's name in the tables: its dotted path, or what an op outside the modules ran in.
pub fn module_label(path: &str, _phase: &str) -> String {
    match path {
        "" => "(outside every module)".into(),
        "(model)" => "(the model's own forward)".into(),
        p => p.into(),
    }
}

fn timed(ops: &[ProfiledOp]) -> Vec<TimedOp> {
    ops.iter()
        .map(|o| TimedOp {
            op: TracedOp {
                phase: o.phase.clone(),
                op: o.op.clone(),
                inputs: o.inputs.clone(),
                outputs: o.outputs.clone(),
                flags: o.flags.clone(),
                calls: o.calls,
            },
            module: o.module.clone(),
            seconds: o.seconds,
        })
        .collect()
}

/// Rows by op kind and pass, per profiled step, against `roofs`; descending time.
pub fn kind_rows(p: &OpProfile, roofs: &Roofs) -> Vec<OpRow> {
    let mut phases: Vec<&str> = p.ops.iter().map(|o| o.phase.as_str()).collect();
    phases.sort_unstable();
    phases.dedup();
    let (costs, measured) = section_named(&timed(&p.ops), &phases, 1.0, &module_label);
    op_rows(&costs, &measured, roofs)
}

/// One module's share of a profiled step.
#[derive(Clone, Debug, PartialEq)]
pub struct ModuleTime {
    pub path: String,
    /// 1 for a top-level module; a list's index counts with its list (`transformer.h.0`).
    pub depth: usize,
    pub fwd_ms: f64,
    pub bwd_ms: f64,
    pub flops: f64,
}

impl ModuleTime {
    pub fn ms(&self) -> f64 {
        self.fwd_ms + self.bwd_ms
    }
}

/// The levels of a module path, outermost first: `transformer.h.0.attn` →
/// [`transformer`, `transformer.h.0`, `transformer.h.0.attn`].
fn levels(path: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut cur = String::new();
    let parts: Vec<&str> = path.split('.').collect();
    for (i, seg) in parts.iter().enumerate() {
        if !cur.is_empty() {
            cur.push('.');
        }
        cur.push_str(seg);
        let next_is_index = parts
            .get(i + 1)
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
        if !next_is_index {
            out.push(cur.clone());
        }
    }
    out
}

/// A sort key that orders `h.2` before `h.10` and a module before what it holds.
fn tree_key(path: &str) -> Vec<(u64, String)> {
    path.split('.')
        .map(|s| match s.parse::<u64>() {
            Ok(n) => (n, String::new()),
            Err(_) => (u64::MAX, s.to_string()),
        })
        .collect()
}

fn add(nodes: &mut Vec<ModuleTime>, path: &str, depth: usize, op: &ProfiledOp, flops: f64) {
    let i = match nodes.iter().position(|n| n.path == path) {
        Some(i) => i,
        None => {
            nodes.push(ModuleTime {
                path: path.to_string(),
                depth,
                fwd_ms: 0.0,
                bwd_ms: 0.0,
                flops: 0.0,
            });
            nodes.len() - 1
        }
    };
    let n = &mut nodes[i];
    if op.phase == "backward" {
        n.bwd_ms += 1e3 * op.seconds;
    } else {
        n.fwd_ms += 1e3 * op.seconds;
    }
    n.flops += flops;
}

/// Every module down to `max_depth` with the time of the ops it ran (its children's included),
/// in tree order; ops outside the modules last, as one node.
pub fn module_tree(p: &OpProfile, max_depth: usize) -> Vec<ModuleTime> {
    let mut nodes: Vec<ModuleTime> = Vec::new();
    for (o, t) in p.ops.iter().zip(timed(&p.ops)) {
        let flops = cost(&t.op).flops * o.calls;
        match o.module.as_str() {
            "" | "(model)" => add(&mut nodes, &module_label(&o.module, ""), 1, o, flops),
            path => {
                for (d, level) in levels(path).iter().enumerate().take(max_depth) {
                    add(&mut nodes, level, d + 1, o, flops);
                }
            }
        }
    }
    nodes.sort_by_key(|n| (n.path.starts_with('('), tree_key(&n.path)));
    nodes
}

/// The `n` modules (as the ops named them: the innermost) that took the most time.
pub fn hotspots(p: &OpProfile, n: usize) -> Vec<ModuleTime> {
    let mut nodes: Vec<ModuleTime> = Vec::new();
    for (o, t) in p.ops.iter().zip(timed(&p.ops)) {
        let flops = cost(&t.op).flops * o.calls;
        add(&mut nodes, &module_label(&o.module, ""), 0, o, flops);
    }
    nodes.sort_by(|a, b| b.ms().total_cmp(&a.ms()));
    nodes.truncate(n);
    nodes
}

/// One module's memory: what autograd saved in its forward for backward (live at the forward's
/// end, the Record's `peak_moments`) and its forward's temporaries (the profiled steps').
#[derive(Clone, Debug, PartialEq)]
pub struct ModuleMemory {
    pub module: String,
    pub saved: u64,
    /// None where the session did not measure them (under RSS).
    pub temporaries: Option<u64>,
}

impl ModuleMemory {
    fn total(&self) -> u64 {
        self.saved + self.temporaries.unwrap_or(0)
    }
}

/// A module's path as the session's memory and the op timer both know it: the session writes
/// an index's class beside it (`h.0 (GPT2Block)`).
fn path_of(name: &str) -> &str {
    name.split(" (").next().unwrap_or(name)
}

/// The `n` modules holding the most: saved for backward plus their forward's temporaries.
pub fn memory_hotspots(r: &Record, n: usize) -> Vec<ModuleMemory> {
    fn row<'a>(rows: &'a mut Vec<ModuleMemory>, module: &str) -> &'a mut ModuleMemory {
        let key = path_of(module);
        let i = match rows.iter().position(|m| m.module == key) {
            Some(i) => i,
            None => {
                rows.push(ModuleMemory {
                    module: key.to_string(),
                    saved: 0,
                    temporaries: None,
                });
                rows.len() - 1
            }
        };
        &mut rows[i]
    }
    let mut rows: Vec<ModuleMemory> = Vec::new();
    let forward = ["forward", "prefill"];
    for m in r
        .memory
        .peak_moments
        .iter()
        .filter(|m| forward.contains(&m.phase.as_str()))
    {
        for mb in m.by_module.iter().filter(|mb| !mb.module.starts_with('(')) {
            let m = row(&mut rows, &mb.module);
            m.saved = m.saved.max(mb.bytes);
        }
    }
    if let Some(temps) = r.profile.as_ref().and_then(|p| p.temporaries.as_ref()) {
        for t in temps {
            let m = row(&mut rows, &t.module);
            m.temporaries = Some(m.temporaries.unwrap_or(0).max(t.bytes));
        }
        for m in rows.iter_mut() {
            m.temporaries.get_or_insert(0);
        }
    }
    rows.sort_by(|a, b| b.total().cmp(&a.total()).then(a.module.cmp(&b.module)));
    rows.truncate(n);
    rows
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(phase: &str, module: &str, secs: f64) -> ProfiledOp {
        ProfiledOp {
            phase: phase.into(),
            module: module.into(),
            op: "aten.mm.default".into(),
            inputs: vec![(vec![4, 8], "f32".into()), (vec![8, 2], "f32".into())],
            outputs: vec![(vec![4, 2], "f32".into())],
            flags: vec![],
            calls: 1.0,
            seconds: secs,
        }
    }

    fn profile(ops: Vec<ProfiledOp>) -> OpProfile {
        OpProfile {
            steps: vec![2, 3],
            asked: vec![2, 3],
            device: "cpu".into(),
            torch: "2".into(),
            profiled_step_ms: 10.0,
            plain_step_ms: Some(9.0),
            ops,
            temporaries: None,
        }
    }

    #[test]
    fn memory_hotspots_join_saved_and_temporaries_by_module_path() {
        use crate::record::op_profile::ModuleTemporaries;
        use crate::record::{ModuleBytes, PeakMoment};
        let mut r: Record =
            serde_json::from_str(include_str!("../../tests/fixtures/pytorch-record.json")).unwrap();
        let mb = |m: &str, b| ModuleBytes {
            module: m.into(),
            bytes: b,
        };
        r.memory.peak_moments = vec![PeakMoment {
            phase: "forward".into(),
            by_module: vec![
                mb("h.0 (Block)", 100),
                mb("h.1 (Block)", 10),
                mb("(outside)", 5),
            ],
            ..Default::default()
        }];
        let mut p = profile(vec![]);
        p.temporaries = Some(vec![
            ModuleTemporaries {
                module: "h.1".into(),
                bytes: 500,
            },
            ModuleTemporaries {
                module: "lm_head".into(),
                bytes: 50,
            },
        ]);
        r.profile = Some(p);
        let rows = memory_hotspots(&r, 10);
        let got: Vec<(&str, u64, Option<u64>)> = rows
            .iter()
            .map(|m| (m.module.as_str(), m.saved, m.temporaries))
            .collect();
        assert_eq!(
            got,
            vec![
                ("h.1", 10, Some(500)),
                ("h.0", 100, Some(0)),
                ("lm_head", 0, Some(50))
            ]
        );
        // Without measured temporaries: saved alone, the temporaries unknown.
        r.profile.as_mut().unwrap().temporaries = None;
        let rows = memory_hotspots(&r, 1);
        assert_eq!(
            (rows[0].module.as_str(), rows[0].temporaries),
            ("h.0", None)
        );
    }

    #[test]
    fn a_list_index_counts_with_its_list() {
        assert_eq!(
            levels("transformer.h.10.attn.c_attn"),
            [
                "transformer",
                "transformer.h.10",
                "transformer.h.10.attn",
                "transformer.h.10.attn.c_attn"
            ]
        );
        assert_eq!(levels("0"), ["0"]);
    }

    #[test]
    fn the_tree_sums_children_into_parents_in_order() {
        let p = profile(vec![
            op("forward", "net.h.10.mlp", 0.004),
            op("forward", "net.h.2.mlp", 0.001),
            op("backward", "net.h.2.mlp", 0.002),
            op("optimizer", "", 0.003),
        ]);
        let t = module_tree(&p, 2);
        let names: Vec<&str> = t.iter().map(|n| n.path.as_str()).collect();
        assert_eq!(
            names,
            ["net", "net.h.2", "net.h.10", "(outside every module)"]
        );
        assert!((t[0].fwd_ms - 5.0).abs() < 1e-9 && (t[0].bwd_ms - 2.0).abs() < 1e-9);
        assert_eq!(t[0].flops, 3.0 * 2.0 * 4.0 * 8.0 * 2.0);
        let h = hotspots(&p, 1);
        assert_eq!((h[0].path.as_str(), h[0].ms()), ("net.h.10.mlp", 4.0));
        let rows = kind_rows(
            &p,
            &Roofs {
                matmul_gflops: 1.0,
                bandwidth_gbs: 1.0,
                copy_gbs: 1.0,
            },
        );
        assert!(rows
            .iter()
            .any(|r| r.name == "matmul" && r.pass == "backward"));
    }
}
