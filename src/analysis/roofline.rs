//! The roofline: measured op times joined with each op's FLOPs and minimum bytes
//! (`op_cost.rs`), against this machine's measured roofs (`memscope peaks`). Pure functions.
//!
//! Model: an op of intensity I = FLOPs / bytes can at best run at min(P, I·W) FLOP/s, P the
//! measured matmul peak and W the measured bandwidth; the ridge is I = P / W. An op reaching
//! less than [`OVERHEAD_BELOW`] of that roof is `overhead-bound` (launch, allocation, threading
//! and cache effects dominate, not arithmetic nor bandwidth); otherwise it is `compute-bound`
//! at or right of the ridge and `memory-bound` left of it. Time lost below the roof = measured
//! time − the time at the roof, max(FLOPs / P, bytes / W).

use super::op_cost::OpCost;
use crate::record::roofline::{Bound, OpRow, Roofs, StepRow};

impl Roofs {
    /// FLOPs per byte where the two roofs meet.
    pub fn ridge(&self) -> f64 {
        self.matmul_gflops / self.bandwidth_gbs
    }
    /// The attainable GFLOP/s at intensity `i`.
    pub fn roof_gflops(&self, i: f64) -> f64 {
        self.matmul_gflops.min(i * self.bandwidth_gbs)
    }
    /// Seconds at the roof for `flops` and `bytes`.
    pub fn ideal_s(&self, flops: f64, bytes: f64) -> f64 {
        (flops / (self.matmul_gflops * 1e9)).max(bytes / (self.bandwidth_gbs * 1e9))
    }
}

/// Below this fraction of its roof an op is `overhead-bound`.
pub const OVERHEAD_BELOW: f64 = 0.10;

impl Bound {
    pub fn name(self) -> &'static str {
        match self {
            Bound::ComputeBound => "compute-bound",
            Bound::MemoryBound => "memory-bound",
            Bound::OverheadBound => "overhead-bound",
        }
    }
}

/// The class of an op that did `flops` and moved `bytes` in `seconds`, and the percentage of
/// the roof that applies at its intensity it reached.
pub fn classify(flops: f64, bytes: f64, seconds: f64, roofs: &Roofs) -> (Bound, f64) {
    let ideal = roofs.ideal_s(flops, bytes);
    let frac = if seconds > 0.0 { ideal / seconds } else { 0.0 };
    let bound = if frac < OVERHEAD_BELOW {
        Bound::OverheadBound
    } else if bytes <= 0.0 || flops / bytes >= roofs.ridge() {
        Bound::ComputeBound
    } else {
        Bound::MemoryBound
    };
    (bound, 100.0 * frac)
}

/// One op's measured time per step (summed over its calls).
#[derive(Clone, Debug, PartialEq)]
pub struct MeasuredOp {
    pub module: String,
    pub kind: String,
    pub pass: String,
    pub ms: f64,
}

/// The optimizer's update as a row names it.
pub const OPTIMIZER_UPDATE: &str = "optimizer update";

/// The kind users read: which projection a linear layer (or, on the torch engine, a matrix
/// product) is, by the module it ran in.
pub fn display_kind(module: &str, kind: &str) -> String {
    let part = module.rsplit(' ').next().unwrap_or("");
    match (kind, part) {
        ("linear" | "matmul", "attention") => "attention projections".into(),
        ("linear" | "matmul", "mlp") => "MLP projections".into(),
        ("linear", _) => "LM head".into(),
        ("matmul", _) if module == super::op_cost::HEAD => "LM head".into(),
        ("layer norm" | "rms norm" | "norm", _) => "norms".into(),
        ("gelu" | "swiglu", _) => "activation".into(),
        ("residual add", _) => "residual adds".into(),
        ("embedding" | "position add", _) => "embedding".into(),
        ("cross-entropy", _) => "loss".into(),
        ("adamw" | "optimizer", _) => OPTIMIZER_UPDATE.into(),
        ("rope", _) => "RoPE".into(),
        (k, _) => k.into(),
    }
}

fn row(name: String, pass: String, flops: f64, bytes: f64, ms: f64, roofs: &Roofs) -> OpRow {
    let s = ms / 1e3;
    let (bound, roof_pct) = classify(flops, bytes, s, roofs);
    let per_s = |x: f64| if s > 0.0 { x / s / 1e9 } else { 0.0 };
    OpRow {
        name,
        pass,
        flops,
        bytes,
        intensity: if bytes > 0.0 { flops / bytes } else { 0.0 },
        time_ms: ms,
        achieved_gflops: per_s(flops),
        achieved_gbs: per_s(bytes),
        roof_pct,
        bound,
        lost_ms: (ms - 1e3 * roofs.ideal_s(flops, bytes)).max(0.0),
    }
}

/// Groups costs and times by (display kind, pass); rows in descending time.
pub fn op_rows(costs: &[OpCost], measured: &[MeasuredOp], roofs: &Roofs) -> Vec<OpRow> {
    let mut keys: Vec<(String, String)> = Vec::new();
    let mut sums: Vec<[f64; 3]> = Vec::new();
    let mut add = |name: String, pass: &str, f: f64, b: f64, ms: f64| {
        // The optimizer's update runs in neither pass of the model: its own step, whichever
        // pass its op timer or trace filed it under.
        let pass = if name == OPTIMIZER_UPDATE {
            "optimizer step"
        } else {
            pass
        };
        let k = (name, pass.to_string());
        let i = match keys.iter().position(|x| *x == k) {
            Some(i) => i,
            None => {
                keys.push(k);
                sums.push([0.0; 3]);
                keys.len() - 1
            }
        };
        sums[i][0] += f;
        sums[i][1] += b;
        sums[i][2] += ms;
    };
    for c in costs {
        add(
            display_kind(&c.module, c.kind),
            c.pass,
            c.flops,
            c.bytes,
            0.0,
        );
    }
    for m in measured {
        add(display_kind(&m.module, &m.kind), &m.pass, 0.0, 0.0, m.ms);
    }
    let mut rows: Vec<OpRow> = keys
        .into_iter()
        .zip(sums)
        .map(|((n, p), [f, b, ms])| row(n, p, f, b, ms, roofs))
        .collect();
    rows.sort_by(|a, b| b.time_ms.total_cmp(&a.time_ms));
    rows
}

pub fn step_row(rows: &[OpRow], time_ms: f64, roofs: &Roofs) -> StepRow {
    let flops: f64 = rows.iter().map(|r| r.flops).sum();
    let gflops = if time_ms > 0.0 {
        flops / (time_ms * 1e6)
    } else {
        0.0
    };
    StepRow {
        flops,
        bytes: rows.iter().map(|r| r.bytes).sum(),
        time_ms,
        attributed_ms: rows.iter().map(|r| r.time_ms).sum(),
        achieved_gflops: gflops,
        mfu_pct: 100.0 * gflops / roofs.matmul_gflops,
    }
}

/// One sentence: the op kinds that lose the most time below their roof.
pub fn biggest_loss(rows: &[OpRow], step_ms: f64) -> String {
    let mut r: Vec<&OpRow> = rows.iter().filter(|r| r.lost_ms > 0.0).collect();
    r.sort_by(|a, b| b.lost_ms.total_cmp(&a.lost_ms));
    let parts: Vec<String> = r
        .iter()
        .take(3)
        .map(|r| {
            format!(
                "{} {} ({:.1} ms, {:.0}% of the step, at {:.0}% of its roof, {})",
                r.name,
                r.pass,
                r.lost_ms,
                100.0 * r.lost_ms / step_ms.max(1e-12),
                r.roof_pct,
                r.bound.name()
            )
        })
        .collect();
    if parts.is_empty() {
        return "Every op runs at its roof.".into();
    }
    format!("Most time below the roofs is lost in {}.", parts.join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;

    const R: Roofs = Roofs {
        matmul_gflops: 100.0,
        bandwidth_gbs: 10.0,
        copy_gbs: 8.0,
    };

    #[test]
    fn ridge_and_roof() {
        assert_eq!(R.ridge(), 10.0);
        assert_eq!(R.roof_gflops(2.0), 20.0);
        assert_eq!(R.roof_gflops(50.0), 100.0);
    }

    #[test]
    fn classification_either_side_of_the_ridge() {
        // Right of the ridge (I = 100), at 80 GFLOP/s: compute-bound, 80% of the roof.
        let (b, pct) = classify(80e9, 0.8e9, 1.0, &R);
        assert_eq!(b, Bound::ComputeBound);
        assert!((pct - 80.0).abs() < 1e-9);
        // Left of it (I = 1), at 8 GB/s: memory-bound, 80% of the 10 GFLOP/s roof there.
        let (b, pct) = classify(8e9, 8e9, 1.0, &R);
        assert_eq!(b, Bound::MemoryBound);
        assert!((pct - 80.0).abs() < 1e-9);
        // Just left of the ridge (I = 9.9) still memory-bound; at it, compute-bound.
        assert_eq!(classify(9.9e9, 1e9, 1.0, &R).0, Bound::MemoryBound);
        assert_eq!(classify(10e9, 1e9, 1.0, &R).0, Bound::ComputeBound);
        // 5% of either roof: overhead-bound.
        assert_eq!(classify(5e9, 0.05e9, 1.0, &R).0, Bound::OverheadBound);
        assert_eq!(classify(0.05e9, 0.05e9, 1.0, &R).0, Bound::OverheadBound);
    }

    #[test]
    fn rows_group_by_display_kind_and_pass() {
        let costs = [
            OpCost {
                module: "layer 0 attention".into(),
                kind: "linear",
                pass: "forward",
                flops: 1e9,
                bytes: 1e8,
            },
            OpCost {
                module: "layer 1 attention".into(),
                kind: "linear",
                pass: "forward",
                flops: 1e9,
                bytes: 1e8,
            },
        ];
        let m = [MeasuredOp {
            module: "layer 0 attention".into(),
            kind: "linear".into(),
            pass: "forward".into(),
            ms: 40.0,
        }];
        let rows = op_rows(&costs, &m, &R);
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].name, "attention projections");
        assert_eq!(rows[0].flops, 2e9);
        assert!((rows[0].achieved_gflops - 50.0).abs() < 1e-9);
        // 2e9 / 100e9 = 20 ms at the roof: 20 ms lost.
        assert!((rows[0].lost_ms - 20.0).abs() < 1e-9);
    }
}
