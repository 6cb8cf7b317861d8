//! `memscope diff` as Markdown tables.

use crate::analysis::diff::{MemoryDiff, Pair};
use crate::export::table::{escape, Align, MarkdownStyle, Table};
use crate::units::fmt_bytes;

fn b(v: Option<i64>) -> String {
    v.map_or("—".into(), |x| fmt_bytes(x as f64))
}

fn signed(v: i64) -> String {
    match v.signum() {
        1 => format!("+{}", fmt_bytes(v as f64)),
        -1 => format!("−{}", fmt_bytes(-v as f64)),
        _ => "0 B".into(),
    }
}

fn table(title: &str, what: &str, rows: &[Pair], limit: usize, name: fn(&str) -> String) -> String {
    if rows.is_empty() {
        return String::new();
    }
    // The first header cell is blank: `| | base | new | change |`.
    let mut t = Table::new(["", "base", "new", "change"]);
    for p in rows.iter().take(limit) {
        t.push([
            escape(&name(&p.name)),
            b(p.base),
            b(p.new),
            signed(p.diff()),
        ]);
    }
    let mut out = format!(
        "### {title}\n\n{what}\n\n{}",
        t.markdown(&MarkdownStyle {
            align: &[Align::Left, Align::Right],
            ..MarkdownStyle::PLAIN
        })
    );
    if rows.len() > limit {
        out += &format!("\n({} more not shown)\n", rows.len() - limit);
    }
    out + "\n"
}

pub fn to_markdown(base: &str, new: &str, d: &MemoryDiff) -> String {
    let mut out = format!("## memscope diff\n\nbase: `{base}`  \nnew: `{new}`\n\n");
    out += &format!(
        "**heap peak (whole run)**: {} → {} ({}); the highest phase peak is in {} → {}.\n\n",
        b(d.heap_peak.base),
        b(d.heap_peak.new),
        signed(d.heap_peak.diff()),
        d.peak_phase.0.as_deref().unwrap_or("—"),
        d.peak_phase.1.as_deref().unwrap_or("—"),
    );
    out += &match &d.moved_by {
        Some((kind, p)) => format!(
            "**What moved the peak**: {} ({} → {}, {}), the largest change among what was \
             alive at the steady-step peak.\n\n",
            if p.name == "temporaries" {
                format!(
                    "the bytes {}",
                    crate::report::moment_parts::part_name(&p.name)
                )
            } else {
                format!("{kind} {}", p.name)
            },
            b(p.base),
            b(p.new),
            signed(p.diff())
        ),
        None => {
            "**What moved the peak**: nothing: every figure alive at the peak is unchanged.\n\n"
                .into()
        }
    };
    out += &table(
        "Alive at the steady-step peak, by allocating phase",
        &format!("heap live at the highest phase peak of a steady step, by the phase that allocated it (load = parameters). {}", crate::report::moment_parts::WHY_TWO_FIGURES),
        &d.peak_by_phase,
        usize::MAX,
        crate::report::moment_parts::part_name,
    );
    out += &table(
        "By category (measured)",
        "bytes per category as each Record's own measure attributes them (docs/record.md).",
        &d.categories,
        usize::MAX,
        str::to_string,
    );
    out += &table(
        "Heap peak per phase",
        "the most heap live while each phase ran (over all its runs).",
        &d.phase_peaks,
        usize::MAX,
        str::to_string,
    );
    out += &table(
        "Retained per phase",
        "heap bytes a phase's first run allocated and left alive (forward: saved activations; backward: gradients; optimizer: its state).",
        &d.phase_retained,
        usize::MAX,
        str::to_string,
    );
    out += &table(
        "Alive at the peak by module (largest changes first)",
        "heap live at that moment by model module.",
        &d.peak_by_module,
        10,
        str::to_string,
    );
    out += "Both timelines on one axis: `memscope report BASE NEW -o report.html`.\n";
    out
}
