//! `memscope peaks`: this machine's matmul and bandwidth ceilings as tables.

use crate::measure::peaks::{Peaks, ShapeRate};
use crate::report::table::Table;
use crate::report::terminal::render_table;
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

pub fn render(p: &Peaks, source: &str) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "memscope peaks · {} · {source}\n", p.fingerprint);
    let header = |first: &str| {
        vec![
            first.to_string(),
            "product".into(),
            "GFLOP/s best".into(),
            "median".into(),
        ]
    };
    let mut rows = Vec::new();
    for (dt, r) in &p.matmul {
        let mut row = shape_rows(&[r]).remove(0);
        row[0] = dt.clone();
        rows.push(row);
    }
    out += &render_table(&Table {
        title: if p.fingerprint.ends_with("bf16 dot") {
            "Matmul: f32 and f16 through candle → gemm, bf16 on memscope's AVX-512 BF16 dot-product \
             kernel, what the linear layers run (5 runs after one warm-up; best is the ceiling)"
        } else {
            "Matmul through candle → gemm (5 runs after one warm-up; best is the ceiling)"
        }
        .into(),
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
    out += &render_table(&Table {
        title: format!(
            "Memory bandwidth, GB/s of bytes read + written ({:.0} MiB per array)",
            p.array_bytes as f64 / (1u64 << 20) as f64
        ),
        header: vec!["kernel".into(), "GB/s best".into(), "median".into()],
        rows: vec![
            vec![
                "copy  a = b".into(),
                format!("{:.1}", p.copy_gbs.best),
                format!("{:.1}", p.copy_gbs.median),
            ],
            vec![
                "triad a = b + s·c".into(),
                format!("{:.1}", p.triad_gbs.best),
                format!("{:.1}", p.triad_gbs.median),
            ],
        ],
    });
    out
}
