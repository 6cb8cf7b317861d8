//! Terminal report of `memscope estimate`: the breakdown (one column per dtype), activations
//! by kind and by layer, FLOPs, hotspots and the `--fits` verdict.

use crate::record::estimate::Estimate;
use crate::record::estimate::FitReport;
use crate::units::{bytes, thousands};
use comfy_table::{presets::UTF8_FULL_CONDENSED, CellAlignment, Table};
use std::collections::BTreeMap;
use std::fmt::Write;

fn table(header: Vec<String>) -> Table {
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED).set_header(header);
    t
}

fn right(t: &mut Table, from: usize) {
    for i in from..t.column_count() {
        if let Some(c) = t.column_mut(i) {
            c.set_cell_alignment(CellAlignment::Right);
        }
    }
}

/// The whole report for one or more dtypes of the same workload.
pub fn render(ests: &[Estimate], top: usize) -> String {
    let mut out = String::new();
    let e0 = &ests[0];
    let shape = match e0.mode {
        crate::spec::Mode::Generate => format!("batch {}, prompt {}", e0.batch, e0.seq),
        _ => format!("batch {}, seq {}", e0.batch, e0.seq),
    };
    let mut accum = if e0.grad_accum > 1 {
        format!(", grad-accum {}", e0.grad_accum)
    } else {
        String::new()
    };
    if e0.checkpoint {
        accum.push_str(", checkpointing");
    }
    if e0.attention == crate::estimate::Attention::Naive {
        accum.push_str(", naive attention");
    }
    if e0.fusion == crate::estimate::Fusion::None {
        accum.push_str(", op-by-op kernels");
    }
    if e0.precision == crate::estimate::Precision::Mixed {
        accum.push_str(", mixed precision");
    }
    let _ = writeln!(
        out,
        "memscope estimate: {} {} ({shape}{accum}), {} parameters (exact)\n",
        e0.model,
        e0.mode.name(),
        thousands(e0.params)
    );
    let mut header = vec!["category".to_string()];
    header.extend(ests.iter().map(|e| e.dtype.name().to_string()));
    let mut t = table(header);
    let rows: [(&str, fn(&Estimate) -> u64); 7] = [
        ("parameters", |e| e.categories.parameters),
        ("gradients", |e| e.categories.gradients),
        ("optimizer state", |e| e.categories.optimizer_state),
        ("activations (saved for backward)", |e| {
            e.categories.activations
        }),
        ("KV cache", |e| e.categories.kv_cache),
        ("temporaries at the peak", |e| e.categories.temporaries),
        ("runtime buffers (gemm)", |e| e.categories.runtime_buffers),
    ];
    for (name, f) in rows {
        if ests.iter().all(|e| f(e) == 0) {
            continue;
        }
        let mut r = vec![name.to_string()];
        r.extend(ests.iter().map(|e| bytes(f(e) as f64)));
        t.add_row(r);
    }
    let mut r = vec!["predicted heap peak".to_string()];
    r.extend(
        ests.iter()
            .map(|e| format!("{} ({})", bytes(e.peak_bytes as f64), e.peak_phase)),
    );
    t.add_row(r);
    right(&mut t, 1);
    let _ = writeln!(out, "{t}");
    let _ = writeln!(
        out,
        "Bytes are heap bytes as memscope's counting allocator measures them for this engine \
         (candle, CPU). \"temporaries at the peak\" is what the peak holds beyond the other rows."
    );

    if !e0.activations.is_empty() {
        out.push_str(&activations(e0));
    }
    let f = &e0.flops;
    let _ = writeln!(
        out,
        "\nMatmul FLOPs per step: forward {}, backward {}, total {} ({:.2} TFLOP)",
        sci(f.forward),
        sci(f.backward),
        sci(f.total),
        f.total as f64 / 1e12
    );
    for (label, hs) in [
        ("forward", &e0.hotspots_forward),
        ("backward", &e0.hotspots_backward),
    ] {
        if hs.is_empty() {
            continue;
        }
        let mut t = table(vec![
            format!(
                "module (heap live at the {label} peak; parameters and optimizer state left out)"
            ),
            "bytes".into(),
        ]);
        for h in hs.iter().take(top) {
            t.add_row(vec![h.module.clone(), bytes(h.bytes as f64)]);
        }
        right(&mut t, 1);
        let _ = writeln!(
            out,
            "\nHotspots at the {label} peak ({} dtype)\n{t}",
            e0.dtype.name()
        );
    }
    for n in &e0.notes {
        let _ = writeln!(out, "note: {n}");
    }
    out
}

/// Saved activations by kind (summed over layers) and by layer.
fn activations(e: &Estimate) -> String {
    let mut by_kind: BTreeMap<&str, u64> = BTreeMap::new();
    let mut by_module: Vec<(&str, u64)> = Vec::new();
    for a in &e.activations {
        *by_kind.entry(a.kind.as_str()).or_default() += a.bytes;
        match by_module.iter_mut().find(|(m, _)| *m == a.module) {
            Some(m) => m.1 += a.bytes,
            None => by_module.push((a.module.as_str(), a.bytes)),
        }
    }
    let total: u64 = by_kind.values().sum();
    let mut t = table(vec![
        format!("activation kind ({}, all layers)", e.dtype.name()),
        "bytes".into(),
        "share".into(),
    ]);
    let mut kinds: Vec<_> = by_kind.into_iter().collect();
    kinds.sort_by(|a, b| b.1.cmp(&a.1));
    for (k, b) in kinds {
        t.add_row(vec![
            k.to_string(),
            bytes(b as f64),
            format!("{:.1}%", 100.0 * b as f64 / total.max(1) as f64),
        ]);
    }
    right(&mut t, 1);
    // Per layer: the three modules of a layer together.
    let mut layers: Vec<(String, u64)> = Vec::new();
    for (m, b) in by_module {
        let key = match m.strip_prefix("layer ") {
            Some(rest) => format!("layer {}", rest.split(' ').next().unwrap_or("?")),
            None => m.to_string(),
        };
        match layers.iter_mut().find(|(k, _)| *k == key) {
            Some(l) => l.1 += b,
            None => layers.push((key, b)),
        }
    }
    let mut lt = table(vec!["where".into(), "activations".into()]);
    for (k, b) in &layers {
        lt.add_row(vec![k.clone(), bytes(*b as f64)]);
    }
    right(&mut lt, 1);
    format!("\nActivations saved for backward, by kind\n{t}\nBy layer\n{lt}\n")
}

fn sci(v: u64) -> String {
    if v == 0 {
        return "0".into();
    }
    format!("{:.3e}", v as f64)
}

/// The `--fits` verdict.
pub fn render_fits(f: &FitReport) -> String {
    let mut out = String::new();
    let verdict = if f.fits { "fits" } else { "does NOT fit" };
    let _ = writeln!(
        out,
        "\n--fits {}: predicted peak {} {verdict}; headroom {}",
        bytes(f.budget_bytes as f64),
        bytes(f.peak_bytes as f64),
        bytes(f.headroom_bytes as f64)
    );
    if !f.changes.is_empty() {
        let mut t = table(vec![
            "single change".into(),
            "predicted peak".into(),
            "fits".into(),
        ]);
        for c in &f.changes {
            t.add_row(vec![
                c.change.clone(),
                bytes(c.peak_bytes as f64),
                if c.fits { "yes" } else { "no" }.into(),
            ]);
        }
        right(&mut t, 1);
        let _ = writeln!(out, "{t}");
        if !f.changes.iter().any(|c| c.fits) {
            let _ = writeln!(
                out,
                "No single change is enough: combine them, or use a larger budget."
            );
        }
    } else if !f.fits {
        let _ = writeln!(
            out,
            "None of the single changes memscope tries (smaller batch, bf16, SGD, checkpointing, fused attention, gradient accumulation) lowers this peak: use a larger budget."
        );
    }
    out
}
