//! `memscope peaks`: this machine's matmul and bandwidth ceilings as tables.

use crate::measure::peaks::{Peaks, Rate, ShapeRate, BF16_VECTOR, PANELS};
use crate::report::table::Table;
use crate::report::terminal::render_table;
use crate::torch::peaks::TorchPeaks;
use std::fmt::Write;

fn shape_rows(rates: &[&ShapeRate]) -> Vec<Vec<String>> {
    rates
        .iter()
        .map(|r| {
            vec![
                r.name.clone(),
                format!("({} × {}) @ ({} × {})", r.m, r.k, r.k, r.n),
                format!("{:.1}", r.gflops.best),
                format!("{:.1}", r.gflops.median),
            ]
        })
        .collect()
}

/// What the matmul rows ran through, and which is the f32 ceiling.
fn matmul_title(p: &Peaks) -> String {
    let mut t = String::from("Matmul (5 runs after one warm-up; best is the ceiling): f32 and f16");
    if p.fingerprint.contains("bf16 amx") {
        t += &format!(
            " through candle → gemm, bf16 on AMX tiles (`tdpbf16ps`, what the linear layers \
             run: the AMX ceiling); {BF16_VECTOR}: memscope's AVX-512 BF16 dot-product kernel \
             beside it"
        );
    } else if p.fingerprint.contains("bf16 dot") {
        t += " through candle → gemm, bf16 on memscope's AVX-512 BF16 dot-product kernel (what \
              the linear layers run)";
    } else {
        t += " and bf16 through candle → gemm";
    }
    if p.matmul.contains_key(PANELS) {
        t += &format!(
            "; {PANELS}: gemm reading a weight kept in strips its kernel reads in place, as \
             inference stores keep them on this machine. The f32 ceiling is the faster f32 row: {:.1} GFLOP/s",
            p.matmul_gflops.get("f32").copied().unwrap_or(0.0)
        );
    }
    t
}

pub fn render(p: &Peaks, source: &str) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "memscope peaks · {} · {source}\n", p.fingerprint);
    let mut rows = Vec::new();
    for (dt, r) in &p.matmul {
        let mut row = shape_rows(&[r]).remove(0);
        row[0] = dt.clone();
        rows.push(row);
    }
    out += &render_table(&Table {
        title: matmul_title(p),
        header: header("dtype"),
        rows,
    });
    out.push('\n');
    if !p.model_shapes.is_empty() {
        out += &render_table(&Table {
            title: "The model's own linear shapes, f32".into(),
            header: header("layer"),
            rows: shape_rows(&p.model_shapes.iter().collect::<Vec<_>>()),
        });
        out.push('\n');
    }
    out += &render_table(&bandwidth(p.array_bytes, &p.copy_gbs, &p.triad_gbs));
    out
}

fn header(first: &str) -> Vec<String> {
    vec![
        first.to_string(),
        "product".into(),
        "GFLOP/s best".into(),
        "median".into(),
    ]
}

/// Copy and triad, GB/s.
fn bandwidth(array_bytes: u64, copy: &Rate, triad: &Rate) -> Table {
    let row = |name: &str, r: &Rate| {
        vec![
            name.to_string(),
            format!("{:.1}", r.best),
            format!("{:.1}", r.median),
        ]
    };
    Table {
        title: format!(
            "Memory bandwidth, GB/s of bytes read + written ({:.0} MiB per array)",
            array_bytes as f64 / (1u64 << 20) as f64
        ),
        header: vec!["kernel".into(), "GB/s best".into(), "median".into()],
        rows: vec![row("copy  a = b", copy), row("triad a = b + s·c", triad)],
    }
}

/// `peaks --engine torch`: the same tables, PyTorch's products, and one small op's fixed cost.
pub fn render_torch(p: &TorchPeaks, source: &str) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "memscope peaks --engine torch · {} ({}) · PyTorch {} · {} threads · {source}\n",
        p.device, p.device_name, p.torch, p.threads
    );
    let mut rows = shape_rows(&p.matmul.iter().collect::<Vec<_>>());
    for (row, r) in rows.iter_mut().zip(&p.matmul) {
        row[0] = r.name.clone();
    }
    out += &render_table(&Table {
        title: format!(
            "Matmul through torch.mm, square sizes doubling while a run would take under 1 s \
             (best is the ceiling{})",
            if p.matmul.iter().any(|r| r.name == "tf32") {
                "; tf32: f32 with TensorFloat-32 allowed"
            } else {
                ""
            }
        ),
        header: header("dtype"),
        rows,
    });
    out.push('\n');
    if !p.model_shapes.is_empty() {
        out += &render_table(&Table {
            title: "The model's own linear shapes through F.linear, f32".into(),
            header: header("layer"),
            rows: shape_rows(&p.model_shapes.iter().collect::<Vec<_>>()),
        });
        out.push('\n');
    }
    let mut bw = bandwidth(p.array_bytes, &p.copy_gbs, &p.triad_gbs);
    if let Some(g) = &p.gemv_gbs {
        bw.rows.push(vec![
            "matrix-vector (1 row, 64 MiB weight read)".into(),
            format!("{:.1}", g.best),
            format!("{:.1}", g.median),
        ]);
    }
    for (name, r) in [
        ("fill  a = 1 (memory already mapped)", &p.fill_gbs),
        ("fill  a new array (fresh pages)", &p.fresh_fill_gbs),
    ] {
        if let Some(r) = r {
            bw.rows.push(vec![
                name.into(),
                format!("{:.1}", r.best),
                format!("{:.1}", r.median),
            ]);
        }
    }
    out += &render_table(&bw);
    out.push('\n');
    let (best, median) = p.small_op_us();
    if let Some(v) = &p.view_ops_per_s {
        let _ = writeln!(
            out,
            "Fixed cost of one view (y.view(-1); dispatch only): {:.2} µs best, {:.2} µs median",
            1e6 / v.best.max(1e-12),
            1e6 / v.median.max(1e-12)
        );
    }
    let what = if p.device.starts_with("cuda") {
        "launch and dispatch, synchronised after a loop of calls"
    } else {
        "dispatch"
    };
    let _ = writeln!(
        out,
        "Fixed cost of one small op (x.add_(1) on one element; {what}): {best:.2} µs best, \
         {median:.2} µs median over {} loops",
        p.small_ops_per_s.reps
    );
    if !p.host_us_per_op.is_empty() {
        let each: Vec<String> = p
            .host_us_per_op
            .iter()
            .map(|(phase, us)| format!("{phase} {us:.2} µs"))
            .collect();
        let _ = writeln!(
            out,
            "The host's cost per op of {}'s own step at the smallest widths (its layers, heads and ops kept; Python, module calls, dispatch, autograd{}), median step over the ops each phase dispatched: {}; the predicted step charges each op its phase's",
            p.host_model,
            if p.device.starts_with("cuda") {
                ", launches"
            } else {
                ""
            },
            each.join(", ")
        );
    }
    out
}

/// The columns every collective's measured calls fill.
const MEASURED: [&str; 5] = [
    "size",
    "calls",
    "median µs",
    "spread (min–max) µs",
    "bus GB/s (median)",
];

/// One size's calls: its bytes, calls, median and spread, and the bus bandwidth its median
/// gives when each rank carries `share` of the bytes.
fn measured_cells(s: &crate::torch::link::LinkSize, share: f64) -> Vec<String> {
    vec![
        crate::units::bytes(s.bytes as f64),
        s.calls.to_string(),
        format!("{:.1}", s.median_s * 1e6),
        format!("{:.1}–{:.1}", s.min_s * 1e6, s.max_s * 1e6),
        format!(
            "{:.3}",
            share * s.bytes as f64 / s.median_s.max(1e-12) / 1e9
        ),
    ]
}

/// `peaks --engine torch --collectives`: each size's all-reduce, measured beside the ring
/// formula fitted to it, and the fit.
pub fn render_link(p: &crate::torch::link::LinkPeaks, source: &str) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "memscope peaks --engine torch --collectives · {} ({}) · {} over {} ranks · PyTorch {} · {source}\n",
        p.device, p.device_name, p.backend, p.world, p.torch
    );
    let Some(link) = crate::analysis::collective_time::Link::of_measured(p) else {
        return out;
    };
    let n = p.world as f64;
    let rows = p
        .sizes
        .iter()
        .map(|s| {
            let model = link.ring_all_reduce_s(p.world, s.bytes);
            let mut row = measured_cells(s, 2.0 * (n - 1.0) / n);
            row.push(format!("{:.1}", model * 1e6));
            row.push(format!(
                "{:+.1}%",
                100.0 * (model / s.median_s.max(1e-12) - 1.0)
            ));
            row
        })
        .collect();
    out += &render_table(&Table {
        title: "All-reduce (torch.distributed.all_reduce, f32, in place), each call timed on rank 0 between barriers".into(),
        header: MEASURED
            .iter()
            .chain(&["ring formula µs", "formula vs median"])
            .map(|h| h.to_string())
            .collect(),
        rows,
    });
    let _ = writeln!(
        out,
        "\nThe link, fitted to the smallest and largest medians by the ring all-reduce's time 2(N−1)/N · B/β + 2(N−1) · α: β = {:.3} GB/s, α = {:.1} µs. `estimate --engine torch --nproc N --parallel PLAN` uses it when no --link is given (as --link {:.3},{:.1}).",
        p.gb_per_s, p.latency_us, p.gb_per_s, p.latency_us
    );
    let Some(links) = crate::analysis::collective_time::Links::of_measured(p) else {
        return out;
    };
    for (kind, sizes, fit) in [
        (
            "All-gather (all_gather_into_tensor)",
            &p.all_gather,
            links.all_gather,
        ),
        (
            "Reduce-scatter (reduce_scatter_tensor)",
            &p.reduce_scatter,
            links.reduce_scatter,
        ),
    ] {
        let Some(fit) = fit else { continue };
        let rows = sizes
            .iter()
            .map(|s| measured_cells(s, (n - 1.0) / n))
            .collect();
        out.push('\n');
        out += &render_table(&Table {
            title: format!("{kind}, FSDP2's, f32; size is the whole tensor, each rank holding 1/N of it; fitted to (N−1)/N · B/β + (N−1) · α: β = {:.3} GB/s, α = {:.1} µs, which `estimate` takes for this kind", fit.bytes_per_s / 1e9, fit.latency_s * 1e6),
            header: MEASURED.map(String::from).to_vec(),
            rows,
        });
    }
    out
}
