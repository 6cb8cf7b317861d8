//! A PyTorch step's time predicted before it runs: every op the torch trace dispatched, costed
//! by `aten_cost`, timed against the device's roofs as `peaks --engine torch` measured them —
//! max(FLOPs / the matmul rate for its shape and dtype (its median), bytes / triad bandwidth, or a
//! matrix-vector product's for a product of a few rows) plus the fixed cost of one op (a view's
//! for views), plus on the CPU the page faults of an output large enough that glibc maps it
//! afresh (at the measured cost of writing fresh pages over mapped ones) — and summed by phase
//! and by kind. On CUDA the host dispatches while the device runs, so a phase takes the longer of
//! the two: its ops' fixed costs (the host's) summed, or their roof times (the device's) summed.
//! An op's fixed cost is its phase's host cost per op where `peaks` measured the model's own step
//! at the smallest widths (Python, module calls, dispatch, autograd, launches), else one bare op's.
//! Nothing is fitted per model or per workload: the roofs are the only measured inputs.

use super::aten_cost::{cost, Kind};
use crate::record::rates::ShapeRate;
use crate::torch::estimate::TracedOp;
use crate::torch::peaks::TorchPeaks;
use std::collections::BTreeMap;

/// Products with at most this many rows are bound by reading their weight (matrix-vector).
const FEW_ROWS: f64 = 16.0;

/// glibc maps an allocation this large or larger afresh each time (its largest mmap threshold on
/// 64-bit Linux, `DEFAULT_MMAP_THRESHOLD_MAX`), so a CPU op's output this large is new pages
/// whose first write faults them in.
const FRESH_PAGES_FROM: f64 = (32u64 << 20) as f64;

/// Bytes of the op's outputs that are fresh pages on the CPU: outputs of 32 MiB or more of an op
/// that allocates them (not in place, not `out=`, not a view).
fn fresh_bytes(op: &TracedOp, kind: Kind) -> f64 {
    let name = op.op.trim_start_matches("aten.");
    let base = name.split('.').next().unwrap_or(name);
    if kind == Kind::View || base.ends_with('_') || name.contains(".out") {
        return 0.0;
    }
    op.outputs
        .iter()
        .map(|(s, d)| {
            s.iter().map(|&x| x as f64).product::<f64>() * super::aten_cost::elem_bytes(d)
        })
        .filter(|&b| b >= FRESH_PAGES_FROM)
        .sum()
}

/// One kind's share of a step.
#[derive(Clone, Debug, PartialEq)]
pub struct KindTime {
    pub kind: Kind,
    pub calls: f64,
    pub flops: f64,
    pub bytes: f64,
    /// Seconds of the three terms summed over its calls: compute, memory, fixed.
    pub compute_s: f64,
    pub memory_s: f64,
    pub fixed_s: f64,
    pub predicted_s: f64,
}

impl KindTime {
    /// Which term dominates: compute, memory or overhead (the per-op fixed cost).
    pub fn bound(&self) -> &'static str {
        let m = self.compute_s.max(self.memory_s).max(self.fixed_s);
        if m == self.fixed_s {
            "overhead"
        } else if m == self.compute_s {
            "compute"
        } else {
            "memory"
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Prediction {
    /// Phase → predicted seconds per step (forward, backward, optimizer; prefill, decode).
    pub by_phase: BTreeMap<String, f64>,
    pub by_kind: Vec<KindTime>,
    pub step_s: f64,
    /// CUDA: the phases whose host side (the ops' fixed costs) outlasts their device side, so
    /// that the device waits on the host.
    pub host_bound: Vec<String>,
}

impl Prediction {
    /// ms per phase and for the whole `step`.
    pub fn ms_by_phase(&self) -> BTreeMap<String, f64> {
        self.by_phase
            .iter()
            .map(|(k, v)| (k.clone(), v * 1e3))
            .chain([("step".to_string(), self.step_s * 1e3)])
            .collect()
    }
}

/// The median rate of `dtype`'s (else f32's) square product at the size nearest (m·k·n)^(1/3),
/// or of the model's own shape where `peaks` timed it (on the CPU over operands rotating out of
/// cache, as a step meets them); GFLOP/s. The median, as a step's many calls reach it typically;
/// the best is the ceiling MFU is taken against.
fn matmul_rate(p: &TorchPeaks, dtype: &str, mkn: (f64, f64, f64)) -> f64 {
    let (m, k, n) = mkn;
    if dtype == "f32" {
        // The model's own products (forward and backward) where peaks timed this shape.
        if let Some(s) = p
            .model_shapes
            .iter()
            .find(|s| (s.m as f64, s.k as f64, s.n as f64) == (m, k, n))
        {
            return s.gflops.median;
        }
    }
    let size = (m * k * n).max(1.0).cbrt();
    let rows: Vec<&ShapeRate> = {
        let want: Vec<&ShapeRate> = p.matmul.iter().filter(|r| r.name == dtype).collect();
        if want.is_empty() {
            p.matmul.iter().filter(|r| r.name == "f32").collect()
        } else {
            want
        }
    };
    rows.iter()
        .min_by(|a, b| {
            let d = |r: &ShapeRate| (r.m as f64 / size).ln().abs();
            d(a).total_cmp(&d(b))
        })
        .map_or(1.0, |r| r.gflops.median)
}

/// The best square-product rate `peaks` measured for `dtype` (f32's where it timed none of that
/// dtype), GFLOP/s: the ceiling MFU is taken against.
pub fn peak_gflops(p: &TorchPeaks, dtype: &str) -> f64 {
    let best = |name: &str| {
        p.matmul
            .iter()
            .filter(|r| r.name == name)
            .map(|r| r.gflops.best)
            .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.max(v))))
    };
    best(dtype).or_else(|| best("f32")).unwrap_or(1.0)
}

/// Predicts a step of `ops` on the device `peaks` measured.
pub fn predict(ops: &[TracedOp], peaks: &TorchPeaks) -> Prediction {
    let bw = peaks.triad_gbs.best * 1e9;
    // Products of a few rows (a decode step's) read their weight at matrix-vector speed.
    let gemv_bw = peaks.gemv_gbs.as_ref().map_or(bw, |g| g.best * 1e9);
    let fixed = 1.0 / peaks.small_ops_per_s.best.max(1e-12);
    let view = peaks
        .view_ops_per_s
        .as_ref()
        .map_or(fixed, |r| 1.0 / r.best.max(1e-12));
    let fault = if peaks.device == "cpu" {
        peaks.fault_s_per_byte()
    } else {
        0.0
    };
    let gpu = peaks.device.starts_with("cuda");
    // The host's cost per op of the phase, measured on the model's own step: a forward without
    // a backward after it (inference, prefill, decode) runs under no_grad.
    let no_grad = !ops.iter().any(|o| o.phase == "backward");
    let host = |phase: &str| {
        let key = match phase {
            "forward" if !no_grad => "forward",
            "forward" | "prefill" | "decode" => "forward_no_grad",
            other => other,
        };
        peaks.host_us_per_op.get(key).map(|us| us * 1e-6)
    };
    let mut by_phase: BTreeMap<String, f64> = BTreeMap::new();
    // CUDA: (host, device) seconds per phase.
    let mut sides: BTreeMap<String, (f64, f64)> = BTreeMap::new();
    let mut kinds: BTreeMap<Kind, KindTime> = BTreeMap::new();
    for op in ops {
        let c = cost(op);
        let dtype = op.inputs.last().map_or("f32", |(_, d)| d.as_str());
        let rate = match (c.kind, c.mkn) {
            (Kind::Matmul, Some(mkn)) => matmul_rate(peaks, dtype, mkn),
            // SDPA's products: the rate of square products of its head size's order.
            (Kind::Attention, _) => matmul_rate(peaks, dtype, (256.0, 256.0, 256.0)),
            _ => f64::INFINITY,
        } * 1e9;
        let compute = c.flops / rate;
        let memory = c.bytes
            / match c.mkn {
                Some((m, _, _)) if m <= FEW_ROWS => gemv_bw,
                _ => bw,
            };
        // On the CPU, the page faults of a large fresh output: on top, as the op waits on them.
        let faults = fault * fresh_bytes(op, c.kind);
        let fixed = host(&op.phase).unwrap_or(if c.kind == Kind::View { view } else { fixed });
        let t = compute.max(memory) + fixed + faults;
        if gpu {
            let s = sides.entry(op.phase.clone()).or_default();
            s.0 += fixed * op.calls;
            s.1 += compute.max(memory) * op.calls;
        } else {
            *by_phase.entry(op.phase.clone()).or_default() += t * op.calls;
        }
        let k = kinds.entry(c.kind).or_insert(KindTime {
            kind: c.kind,
            calls: 0.0,
            flops: 0.0,
            bytes: 0.0,
            compute_s: 0.0,
            memory_s: 0.0,
            fixed_s: 0.0,
            predicted_s: 0.0,
        });
        k.calls += op.calls;
        k.flops += c.flops * op.calls;
        k.bytes += c.bytes * op.calls;
        k.compute_s += compute * op.calls;
        k.memory_s += (memory + faults) * op.calls;
        k.fixed_s += fixed * op.calls;
        k.predicted_s += if gpu { compute.max(memory) } else { t } * op.calls;
    }
    let mut host_bound = Vec::new();
    for (phase, (host, device)) in sides {
        if host > device {
            host_bound.push(phase.clone());
        }
        by_phase.insert(phase, host.max(device));
    }
    let mut by_kind: Vec<KindTime> = kinds.into_values().collect();
    by_kind.sort_by(|a, b| b.predicted_s.total_cmp(&a.predicted_s));
    Prediction {
        step_s: by_phase.values().sum(),
        by_phase,
        by_kind,
        host_bound,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::rates::Rate;

    fn rate(best: f64) -> Rate {
        Rate {
            best,
            median: best,
            reps: 3,
        }
    }

    fn op(phase: &str, name: &str, ins: &[&[u64]], outs: &[&[u64]], calls: f64) -> TracedOp {
        let t = |v: &[&[u64]]| v.iter().map(|s| (s.to_vec(), "f32".to_string())).collect();
        TracedOp {
            phase: phase.into(),
            op: name.into(),
            inputs: t(ins),
            outputs: t(outs),
            flags: vec![],
            calls,
        }
    }

    fn test_peaks() -> TorchPeaks {
        TorchPeaks {
            fingerprint: String::new(),
            device: "cpu".into(),
            device_name: "test".into(),
            torch: "x".into(),
            threads: 1,
            matmul: vec![ShapeRate {
                name: "f32".into(),
                m: 1000,
                k: 1000,
                n: 1000,
                gflops: rate(100.0),
            }],
            model_shapes: vec![],
            copy_gbs: rate(10.0),
            triad_gbs: rate(10.0),
            array_bytes: 1,
            small_ops_per_s: rate(1e6),      // 1 µs
            view_ops_per_s: Some(rate(1e7)), // 0.1 µs
            gemv_gbs: None,
            fill_gbs: None,
            fresh_fill_gbs: None,
            host_us_per_op: BTreeMap::new(),
            host_model: String::new(),
            measured_at: 0,
        }
    }

    #[test]
    fn each_op_is_its_slower_roof_plus_the_fixed_cost() {
        let peaks = test_peaks();
        let ops = [
            // 2·1000³ FLOPs at 100 GFLOP/s: 20 ms (its 12 MB at 10 GB/s would be 1.2 ms).
            op(
                "forward",
                "aten.mm.default",
                &[&[1000, 1000], &[1000, 1000]],
                &[&[1000, 1000]],
                1.0,
            ),
            // 3 × 4 MB at 10 GB/s: 1.2 ms, twice.
            op(
                "backward",
                "aten.add.Tensor",
                &[&[1 << 20], &[1 << 20]],
                &[&[1 << 20]],
                2.0,
            ),
            op("backward", "aten.view.default", &[&[4]], &[&[4]], 10.0),
        ];
        let p = predict(&ops, &peaks);
        let close = |a: f64, b: f64| (a - b).abs() < 1e-9;
        assert!(close(p.by_phase["forward"], 0.02 + 1e-6), "{p:?}");
        let add = 3.0 * 4.0 * (1 << 20) as f64 / 10e9 + 1e-6;
        assert!(
            close(p.by_phase["backward"], 2.0 * add + 10.0 * 1e-7),
            "{p:?}"
        );
        assert!(close(p.step_s, p.by_phase.values().sum()));
        assert_eq!(p.by_kind[0].kind, Kind::Matmul);
        assert_eq!(p.by_kind[0].bound(), "compute");
        let view = p.by_kind.iter().find(|k| k.kind == Kind::View).unwrap();
        assert_eq!((view.bound(), view.calls), ("overhead", 10.0));
    }

    #[test]
    fn the_model_s_own_host_cost_per_op_replaces_the_bare_op_s() {
        // 20 µs an op in a training forward, 5 without grad: a view pays its phase's too.
        let mut peaks = test_peaks();
        peaks.host_us_per_op = BTreeMap::from([
            ("forward".to_string(), 20.0),
            ("forward_no_grad".to_string(), 5.0),
        ]);
        let view = |phase: &str| op(phase, "aten.view.default", &[&[4]], &[&[4]], 10.0);
        let close = |a: f64, b: f64| (a - b).abs() < 1e-12;
        let train = predict(&[view("forward"), view("backward")], &peaks);
        assert!(close(train.by_phase["forward"], 10.0 * 20e-6), "{train:?}");
        // No host figure for backward: the bare view's.
        assert!(close(train.by_phase["backward"], 10.0 * 1e-7), "{train:?}");
        let infer = predict(&[view("forward")], &peaks);
        assert!(close(infer.by_phase["forward"], 10.0 * 5e-6), "{infer:?}");
        let decode = predict(&[view("decode")], &peaks);
        assert!(close(decode.by_phase["decode"], 10.0 * 5e-6), "{decode:?}");
    }

    #[test]
    fn a_large_fresh_output_pays_its_page_faults_on_the_cpu() {
        // Writing fresh pages at 5 GB/s against 10 GB/s mapped: 0.1 ns more per byte.
        let mut peaks = test_peaks();
        peaks.fill_gbs = Some(rate(10.0));
        peaks.fresh_fill_gbs = Some(rate(5.0));
        let big: &[u64] = &[16 << 20]; // 64 MiB of f32
        let small: &[u64] = &[1 << 20]; // 4 MiB
        let t = |peaks: &TorchPeaks, name: &str, out: &[u64]| {
            predict(&[op("backward", name, &[out, out], &[out], 1.0)], peaks).step_s
        };
        let bytes = |s: &[u64]| 4.0 * s[0] as f64;
        let plain = |s: &[u64]| 3.0 * bytes(s) / 10e9 + 1e-6;
        let close = |a: f64, b: f64| (a - b).abs() < 1e-12;
        assert!(close(
            t(&peaks, "aten.add.Tensor", big),
            plain(big) + bytes(big) * 1e-10
        ));
        // In place, or under the 32 MiB glibc maps afresh: no faults.
        let in_place = 2.0 * 2.0 * bytes(big) / 10e9 + 1e-6;
        assert!(close(t(&peaks, "aten.add_.Tensor", big), in_place));
        assert!(close(t(&peaks, "aten.add.Tensor", small), plain(small)));
        // On CUDA the caching allocator reuses its blocks, and the host's fixed cost overlaps
        // the device's time.
        peaks.device = "cuda:0".into();
        assert!(close(t(&peaks, "aten.add.Tensor", big), plain(big) - 1e-6));
    }

    #[test]
    fn on_cuda_a_phase_takes_the_longer_of_the_host_and_the_device() {
        let mut peaks = test_peaks();
        peaks.device = "cuda:0".into();
        let mm = |phase: &str, calls: f64| {
            op(
                phase,
                "aten.mm.default",
                &[&[1000, 1000], &[1000, 1000]],
                &[&[1000, 1000]],
                calls,
            )
        };
        // forward: one 20 ms product against 1 µs of host; backward: 100,000 views (0.1 µs
        // each, 10 ms of host) beside nothing on the device.
        let ops = [
            mm("forward", 1.0),
            op("backward", "aten.view.default", &[&[4]], &[&[4]], 1e5),
        ];
        let p = predict(&ops, &peaks);
        let close = |a: f64, b: f64| (a - b).abs() < 1e-9;
        assert!(close(p.by_phase["forward"], 0.02), "{p:?}");
        assert!(close(p.by_phase["backward"], 0.01), "{p:?}");
        assert_eq!(p.host_bound, vec!["backward".to_string()]);
    }
}
