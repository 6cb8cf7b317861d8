//! Markdown export: the same tables as the terminal summary, as GitHub pipe tables (drawn by
//! `export::table`, the one Markdown table writer).

use crate::export::table::{Align, MarkdownStyle};
use crate::record::Record;
use crate::report::summary;
use crate::report::table::Table;
use crate::report::Export;

pub struct Markdown;

/// A summary table as Markdown: its title in bold, `|` escaped in the header and cells, the
/// first column `---` and the figures `---:`.
pub fn table(t: &Table) -> String {
    t.markdown(&MarkdownStyle {
        title: true,
        align: &[Align::Left, Align::Right],
        escape: true,
    })
}

impl Export for Markdown {
    fn render(&self, records: &[Record]) -> anyhow::Result<String> {
        let mut out = String::new();
        for r in records {
            out += &format!("## {}\n\n", summary::headline(r));
            for t in summary::tables(r) {
                if !t.rows.is_empty() {
                    out += &table(&t);
                    out.push('\n');
                }
            }
            for line in [
                summary::throughput_line(r),
                summary::compute_line(r),
                summary::predicted_line(r),
                summary::loss_line(r),
            ]
            .into_iter()
            .flatten()
            {
                out += &format!("{line}\n\n");
            }
            for w in &r.warnings {
                out += &format!("> ⚠ {w}\n");
            }
        }
        Ok(out)
    }
}
