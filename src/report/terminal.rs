//! The terminal summary of a run: a headline, tables, and warnings.

use crate::record::Record;
use crate::report::summary;
use crate::report::table::Table;
use comfy_table::{presets::UTF8_FULL_CONDENSED, CellAlignment, ContentArrangement};

pub fn render_table(t: &Table) -> String {
    let mut ct = comfy_table::Table::new();
    ct.load_preset(UTF8_FULL_CONDENSED)
        .set_content_arrangement(ContentArrangement::Dynamic)
        .set_header(&t.header);
    for r in &t.rows {
        ct.add_row(r);
    }
    for i in 1..t.header.len() {
        if let Some(col) = ct.column_mut(i) {
            col.set_cell_alignment(CellAlignment::Right);
        }
    }
    format!("{}\n{ct}\n", t.title)
}

pub fn render(r: &Record) -> String {
    let mut out = format!("memscope bench · {}\n\n", summary::headline(r));
    for t in summary::tables(r) {
        if !t.rows.is_empty() {
            out += &render_table(&t);
            out.push('\n');
        }
    }
    for line in [
        summary::peak_line(r),
        summary::throughput_line(r),
        summary::compute_line(r),
        summary::predicted_line(r),
        summary::loss_line(r),
    ]
    .into_iter()
    .flatten()
    {
        out += &line;
        out.push('\n');
    }
    if !r.warnings.is_empty() {
        out += "\nWarnings:\n";
        for w in &r.warnings {
            out += &format!("  ! {w}\n");
        }
    }
    out
}
