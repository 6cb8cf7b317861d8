//! `memscope report`: one self-contained HTML file (inline SVG drawn by plotters, inline CSS, no
//! script, no network) from any mix of Records, leak verdicts, estimates and sweeps. Sections
//! appear only when the inputs hold their data; several inputs of one kind share a chart, each in
//! its own colour (the same colour everywhere in the page).
//!
//! Chart ids (`data-chart` on each `<svg>`): `timing-<phase>`, `memory-stacked` (Records whose
//! steps carry phase marks, one panel each), `memory-timeline` (Records without them: older
//! files), `memory-breakdown`, `scaling-batch`, `scaling-seq`, `leak-<input #>`, `roofline-<input #>`,
//! `watch-memory`.

pub mod charts_leak;
pub mod charts_memory;
pub mod charts_memory_stack;
pub mod charts_roofline;
pub mod charts_scaling;
pub mod charts_timing;
pub mod charts_watch;
pub mod page;
pub mod svg;

use crate::record::detect::{record_label, Input, Named};
use crate::record::estimate::EstimateFile;
use crate::record::sweep_row::Row;
use crate::record::torch_estimate::TorchEstimateFile;
use crate::record::Record;
use charts_memory::Bars;
use std::collections::BTreeMap;

/// The ids of the charts `render` draws for these inputs, in page order (tests check each one
/// is in the page and not empty).
pub fn expected_charts(inputs: &[Named]) -> Vec<String> {
    let html = render(inputs).unwrap_or_default();
    chart_ids(&html)
}

/// Every `data-chart` id in a page, in order.
pub fn chart_ids(html: &str) -> Vec<String> {
    html.split("data-chart=\"")
        .skip(1)
        .filter_map(|s| s.split('"').next().map(String::from))
        .collect()
}

/// The page for these inputs.
pub fn render(inputs: &[Named]) -> anyhow::Result<String> {
    let mut records: Vec<(usize, String, &Record)> = Vec::new();
    let mut leaks = Vec::new();
    let mut sweeps: Vec<(usize, String, &[Row])> = Vec::new();
    let mut bars: Vec<Bars> = Vec::new();
    let mut rooflines = Vec::new();
    let mut watches = Vec::new();
    let mut table = Vec::new();
    for (i, n) in inputs.iter().enumerate() {
        match &n.input {
            Input::Record(r) => {
                let label = record_label(r);
                table.push((i, n.name.clone(), format!("Record: {label}")));
                records.push((i, label, r));
            }
            Input::Leak(v) => {
                table.push((i, n.name.clone(), format!("leak verdict ({})", v.label)));
                leaks.push((i, n.name.clone(), (**v).clone()));
            }
            Input::Sweep(rows) => {
                table.push((i, n.name.clone(), format!("sweep: {} rows", rows.len())));
                sweeps.push((i, n.name.clone(), rows));
            }
            Input::Roofline(r) => {
                let h = &r.run;
                let label = format!("{} {} b{} s{}", h.model, h.mode, h.batch, h.seq);
                table.push((i, n.name.clone(), format!("roofline: {label}")));
                rooflines.push((i, &**r));
            }
            Input::Watch(w) => {
                let cmd = w.command.join(" ");
                table.push((i, n.name.clone(), format!("watch: {cmd}")));
                leaks.push((i, format!("watch {cmd}"), w.verdict.clone()));
                watches.push((i, &**w));
            }
            Input::TorchEstimate(v) => {
                for (label, b) in torch_estimate_bars(i, v) {
                    table.push((i, n.name.clone(), format!("estimate: {label}")));
                    bars.push(b);
                }
            }
            Input::Estimate(v) => {
                let label = estimate_label(v);
                table.push((i, n.name.clone(), format!("estimate: {label}")));
                bars.push(Bars {
                    index: i,
                    label: format!("#{} estimated ({label})", i + 1),
                    categories: estimate_categories(v),
                });
            }
        }
    }
    // Records' leak verdicts, recomputed from their series (long runs only).
    for (i, label, r) in &records {
        if r.memory.series.len() >= charts_leak::MIN_STEPS {
            leaks.push((*i, label.clone(), charts_leak::verdict(r)));
        }
    }
    leaks.sort_by_key(|l| l.0);
    let mut measured = record_bars(&records);
    measured.extend(bars);

    let mut sections = vec![(
        "summary".to_string(),
        "Summary and verdicts".to_string(),
        summary(&table, &leaks, &records),
    )];
    let ranks = ranks_section(&records);
    if !ranks.is_empty() {
        sections.push(("ranks".into(), "Ranks side by side".into(), ranks));
    }
    let timing = charts_timing::section(&records)?;
    if !timing.is_empty() {
        sections.push((
            "timing".into(),
            "Step time per phase".into(),
            format!(
                "<p class=\"muted\">Box: quartiles and median; whiskers: min and max; dots: every \
                 measured step (warm-up excluded). Inputs are numbered as in the summary.</p>\n\
                 <div class=\"grid\">{timing}</div>\n"
            ),
        ));
    }
    // Records with phase marks get the stacked chart; older ones the per-step timeline.
    let stacked = charts_memory_stack::section(&records)?;
    let unmarked: Vec<(usize, String, &Record)> = records
        .iter()
        .filter(|(_, _, r)| !charts_memory_stack::has_marks(r))
        .cloned()
        .collect();
    let timeline = charts_memory::timeline(&unmarked)?;
    let breakdown = charts_memory::breakdown(&measured)?;
    if !stacked.is_empty() || !timeline.is_empty() || !breakdown.is_empty() {
        sections.push((
            "memory".into(),
            "Memory".into(),
            stacked + &timeline + &breakdown,
        ));
    }
    let scaling = charts_scaling::section(&sweeps)?;
    if !scaling.is_empty() {
        sections.push(("scaling".into(), "Scaling (sweeps)".into(), scaling));
    }
    let leak = charts_leak::section(&records)?;
    if !leak.is_empty() {
        sections.push(("leak".into(), "Leak check".into(), leak));
    }
    let watch = charts_watch::section(&watches)?;
    if !watch.is_empty() {
        sections.push(("watch".into(), "Watched processes".into(), watch));
    }
    let profiled = profiled_steps(&records);
    if !profiled.is_empty() {
        sections.push(("profile".into(), "Profiled steps".into(), profiled));
    }
    let roofline = charts_roofline::section(&rooflines)?;
    if !roofline.is_empty() {
        sections.push(("roofline".into(), "Roofline".into(), roofline));
    }
    Ok(page::document(
        "memscope report",
        &format!(
            "{} input file(s). All memory in binary units (1 MiB = 2^20 bytes). Self-contained: \
             no script, no network.",
            inputs.len()
        ),
        &sections,
    ))
}

/// The ranks of a data-parallel job side by side, the worst (largest peak) marked: the Records
/// the recorder wrote one per rank (`run.rank*.json`), and a Record memscope's engine made of a
/// whole job (its `ranks`).
fn ranks_section(records: &[(usize, String, &Record)]) -> String {
    let mut h = String::new();
    let per_rank: Vec<&Record> = records
        .iter()
        .map(|(_, _, r)| *r)
        .filter(|r| r.spec.engine.as_ref().is_some_and(|e| e.rank.is_some()) && r.ranks.is_none())
        .collect();
    if per_rank.len() >= 2 {
        if let Some((figs, _)) = crate::analysis::ranks::side_by_side(&per_rank) {
            let what = per_rank[0]
                .spec
                .engine
                .as_ref()
                .map_or("heap".to_string(), |e| e.memory.clone());
            h += &page::table(&crate::report::summary::rank_table(&figs, &what));
        }
    }
    for (i, label, r) in records {
        if let Some(t) = crate::report::summary::ranks_table(r) {
            h += &format!(
                "<h3>#{} {}</h3>\n{}",
                i + 1,
                svg::esc(label),
                page::table(&t)
            );
        }
    }
    h
}

/// Records of a recorder session with profiled steps: op kinds, the module tree, hotspots.
fn profiled_steps(records: &[(usize, String, &Record)]) -> String {
    let mut h = String::new();
    for (i, label, r) in records {
        let tables = crate::report::op_profile::tables(r);
        if !tables.is_empty() {
            h += &format!("<h3>#{} {}</h3>\n", i + 1, svg::esc(label));
            for t in &tables {
                h += &page::table(t);
            }
        }
    }
    h
}

fn summary(
    table: &[(usize, String, String)],
    leaks: &[(usize, String, crate::record::leak::LeakReport)],
    records: &[(usize, String, &Record)],
) -> String {
    let mut h = page::inputs_table(table);
    h += "<h3>Verdicts</h3>\n";
    h += &page::verdicts(leaks, records);
    if !records.is_empty() {
        h += "<h3>Runs</h3>\n";
        h += &page::records_table(records);
    }
    h
}

/// Each Record's measured categories as bars, with its estimate's beside them when it has one.
fn record_bars(records: &[(usize, String, &Record)]) -> Vec<Bars> {
    let mut measured: Vec<Bars> = Vec::new();
    for (i, label, r) in records {
        let b = &r.memory.breakdown;
        if b.is_empty() {
            continue;
        }
        measured.push(Bars {
            index: *i,
            label: format!("#{} measured ({label})", i + 1),
            categories: b
                .iter()
                .map(|(k, v)| (k.clone(), v.measured_bytes))
                .collect(),
        });
        let est: BTreeMap<String, u64> = b
            .iter()
            .filter_map(|(k, v)| Some((k.clone(), v.estimated_bytes?)))
            .collect();
        if !est.is_empty() {
            measured.push(Bars {
                index: *i,
                label: format!("#{} estimated ({label})", i + 1),
                categories: est,
            });
        }
    }
    measured
}

/// An `estimate --engine torch --json` file's bars, one per dtype, with their labels.
fn torch_estimate_bars(i: usize, v: &TorchEstimateFile) -> Vec<(String, Bars)> {
    v.by_dtype
        .iter()
        .map(|(dtype, e)| {
            let label = format!(
                "{} {} b{} s{} {dtype} on {}, torch engine",
                v.model, v.mode, v.batch, v.seq, e.device
            );
            let bars = Bars {
                index: i,
                label: format!("#{} estimated ({label})", i + 1),
                categories: e.categories.clone(),
            };
            (label, bars)
        })
        .collect()
}

fn estimate_label(e: &EstimateFile) -> String {
    let e = &e.first;
    format!("{} {} b{} s{}", e.model, e.mode.name(), e.batch, e.seq)
}

fn estimate_categories(e: &EstimateFile) -> BTreeMap<String, u64> {
    let c = &e.first.categories;
    [
        ("activations", c.activations),
        ("gradients", c.gradients),
        ("kv_cache", c.kv_cache),
        ("optimizer_state", c.optimizer_state),
        ("parameters", c.parameters),
        ("runtime_buffers", c.runtime_buffers),
        ("temporaries", c.temporaries),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}
