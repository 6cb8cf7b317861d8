//! Summary tables for where the bytes went: the breakdown (measured beside estimated), the
//! reconciliation of the heap peak, and the hotspots by module at each phase's peak.

use crate::analysis::breakdown::{diff_pct, reconcile};
use crate::instrument::scope::OUTSIDE;
use crate::record::Record;
use crate::report::table::Table;
use crate::units::bytes;

const ORDER: [(&str, &str); 10] = [
    ("parameters", "parameters"),
    ("gradients", "gradients"),
    ("optimizer_state", "optimizer state"),
    ("activations", "activations (saved for backward)"),
    ("kv_cache", "KV cache"),
    ("gradient_buckets", "gradient buckets (DDP)"),
    (
        "gathered_parameters",
        "gathered parameters (FSDP2; measured as the forward ends, estimated at the peak)",
    ),
    ("collective_buffers", "collective buffers (FSDP2)"),
    ("temporaries", "temporaries at the peak"),
    ("unattributed", "unattributed (library buffers)"),
];

/// Categories whose measured and estimated figures are not one moment's (or not measured on
/// their own): no percentage between them.
const NOT_COMPARED: [&str; 2] = ["gathered_parameters", "collective_buffers"];

/// The label every table and chart gives a category key (`optimizer_state` → "optimizer
/// state"); an unknown key as it is.
pub fn category_label(key: &str) -> &str {
    ORDER
        .iter()
        .find(|(k, _)| *k == key)
        .map_or(key, |(_, label)| label)
}

/// Category | measured | estimated | difference.
pub fn breakdown_table(r: &Record) -> Table {
    let b = &r.memory.breakdown;
    let rows = ORDER
        .iter()
        .filter_map(|(key, label)| {
            let e = b.get(*key)?;
            if e.measured_bytes == 0 && e.estimated_bytes.unwrap_or(0) == 0 {
                return None;
            }
            let measured = if *key == "collective_buffers" {
                "— (within temporaries)".into()
            } else {
                bytes(e.measured_bytes as f64)
            };
            // FSDP2's measured temporaries hold its collective buffers and the gathered block,
            // which the estimate names apart.
            let pct = if *key == "temporaries" && b.contains_key("collective_buffers") {
                "— (measured holds the collective buffers)".into()
            } else if NOT_COMPARED.contains(key) {
                "—".into()
            } else {
                diff_pct(e).map_or("—".into(), |d| format!("{d:+.1}%"))
            };
            Some(vec![
                label.to_string(),
                measured,
                e.estimated_bytes.map_or("—".into(), |v| bytes(v as f64)),
                pct,
            ])
        })
        .chain(r.memory.estimate.as_ref().map(|e| {
            let m = r.memory.heap_peak_bytes;
            // A DDP job on CUDA has two predicted peaks, the steady step's and its second
            // step's (the first buckets still held): the run's peak is set against the nearer.
            let (predicted, when) = match &e.ddp_rebuild {
                Some(d) if d.peak_bytes.abs_diff(m) < e.peak_bytes.abs_diff(m) => (
                    d.peak_bytes,
                    "DDP's second step, first buckets held".to_string(),
                ),
                _ => (e.peak_bytes, e.peak_phase.clone()),
            };
            vec![
                format!("{} peak", crate::report::heap_kind::heap_kind(r).0),
                bytes(m as f64),
                format!("{} ({when})", bytes(predicted as f64)),
                if m > 0 {
                    format!("{:+.1}%", 100.0 * (predicted as f64 - m as f64) / m as f64)
                } else {
                    "—".into()
                },
            ]
        }))
        .collect();
    Table {
        title: format!(
            "Breakdown: measured ({}, by phase) beside `memscope estimate`",
            crate::report::heap_kind::heap_kind(r).1
        ),
        header: ["category", "measured", "estimated", "estimate vs measured"]
            .map(String::from)
            .to_vec(),
        rows,
    }
}

/// The heap peak split into what was alive at that moment, and one sentence saying so.
pub fn reconciliation(r: &Record) -> Option<(Table, String)> {
    let rec = reconcile(&r.memory, r.spec.mode)?;
    let rows = rec
        .parts
        .iter()
        .filter(|(_, b)| *b > 0)
        .map(|(n, b)| {
            vec![
                n.clone(),
                bytes(*b as f64),
                format!("{:.1}%", 100.0 * *b as f64 / rec.peak_bytes.max(1) as f64),
            ]
        })
        .collect();
    let temps = rec
        .parts
        .iter()
        .find(|(n, _)| n == "temporaries")
        .map_or(0, |p| p.1);
    let named: Vec<String> = rec
        .parts
        .iter()
        .filter(|(n, b)| *b > 0 && n != "temporaries")
        .map(|(n, b)| format!("{n} {}", bytes(*b as f64)))
        .collect();
    let sentence = format!(
        "The heap peak, {}, falls in {}: {} were alive then, and {} more were that phase's temporaries.",
        bytes(rec.peak_bytes as f64),
        rec.peak_phase,
        named.join(" + "),
        bytes(temps as f64)
    );
    let table = Table {
        title: format!(
            "{} peak reconciled ({} phase)",
            crate::report::heap_kind::capitalized(crate::report::heap_kind::heap_kind(r).0),
            rec.peak_phase
        ),
        header: ["alive at the peak", "bytes", "share"]
            .map(String::from)
            .to_vec(),
        rows,
    };
    Some((table, sentence))
}

/// Live bytes by module at the forward and backward peaks of the last step (parameters and
/// optimizer state, allocated outside the forward, are left out of the "outside" row).
pub fn hotspot_tables(r: &Record, top: usize) -> Vec<Table> {
    let opt_state = r
        .memory
        .phases
        .get("optimizer")
        .map_or(0, |p| p.retained_bytes.max(0) as u64);
    r.memory
        .peak_moments
        .iter()
        .filter(|m| m.phase == "forward" || m.phase == "backward" || m.phase == "prefill")
        .map(|m| {
            let mut mods: Vec<(String, u64)> = m
                .by_module
                .iter()
                .map(|mb| {
                    let b = if mb.module == OUTSIDE {
                        mb.bytes
                            .saturating_sub(r.memory.load_bytes)
                            .saturating_sub(opt_state)
                    } else {
                        mb.bytes
                    };
                    (mb.module.clone(), b)
                })
                .filter(|(_, b)| *b > 0)
                .collect();
            mods.sort_by(|a, b| b.1.cmp(&a.1));
            Table {
                title: format!(
                    "Hotspots: heap live by module at the {} peak ({} total; parameters and optimizer state left out)",
                    m.phase,
                    bytes(m.heap_peak_bytes as f64)
                ),
                header: ["module", "heap live"].map(String::from).to_vec(),
                rows: mods
                    .into_iter()
                    .take(top)
                    .map(|(n, b)| vec![n, bytes(b as f64)])
                    .collect(),
            }
        })
        .collect()
}
