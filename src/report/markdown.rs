//! Markdown export: the same tables as the terminal summary, as GitHub pipe tables.

use crate::record::Record;
use crate::report::summary;
use crate::report::table::Table;
use crate::report::Export;

pub struct Markdown;

pub fn table(t: &Table) -> String {
    let esc = |s: &String| s.replace('|', "\\|");
    let mut out = format!(
        "**{}**\n\n| {} |\n|",
        t.title,
        t.header.iter().map(esc).collect::<Vec<_>>().join(" | ")
    );
    for i in 0..t.header.len() {
        out += if i == 0 { "---|" } else { "---:|" };
    }
    out.push('\n');
    for r in &t.rows {
        out += &format!(
            "| {} |\n",
            r.iter().map(esc).collect::<Vec<_>>().join(" | ")
        );
    }
    out
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
