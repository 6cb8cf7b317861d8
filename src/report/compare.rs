//! `memscope compare` as Markdown (the terminal prints the same) and JSON.

use crate::analysis::compare::{Change, Comparison, Unit, Verdict};
use crate::export::table::{escape, Align, MarkdownStyle, Table};
use crate::units::{fmt_bytes, ms};

fn value(u: Unit, v: f64) -> String {
    match u {
        Unit::Ms => format!("{} ms", ms(v)),
        Unit::Bytes => fmt_bytes(v),
    }
}

fn signed(u: Unit, v: f64) -> String {
    let s = value(u, v.abs());
    if v > 0.0 {
        format!("+{s}")
    } else if v < 0.0 {
        format!("−{s}")
    } else {
        s
    }
}

fn pct(r: f64) -> String {
    if r.is_infinite() {
        return if r > 0.0 { "+∞%" } else { "−∞%" }.into();
    }
    let v = r * 100.0;
    if v > 0.0 {
        format!("+{v:.1}%")
    } else if v < 0.0 {
        format!("−{:.1}%", -v)
    } else {
        "0.0%".into()
    }
}

/// One figure's cells: figure, base, new, change (relative), CI of change, n, verdict.
fn row(c: &Change, confidence: f64, threshold: f64) -> [String; 7] {
    let ci = match c.ci {
        Some([lo, hi]) => format!(
            "{} to {} ({:.0}%)",
            signed(c.unit, lo),
            signed(c.unit, hi),
            confidence * 100.0
        ),
        None if c.n_base == 1 && c.tolerance > threshold + 1e-12 => {
            format!("single reading (±{:.1}% noise)", c.tolerance * 100.0)
        }
        None if c.n_base == 1 => "single value".into(),
        None => "—".into(),
    };
    let mark = match c.verdict {
        Verdict::Regressed => "**regressed**",
        Verdict::Improved => "improved",
        Verdict::NoChange => "no change",
    };
    let n = if c.n_base == 1 && c.n_new == 1 {
        "1".into()
    } else {
        format!("{} / {}", c.n_base, c.n_new)
    };
    [
        escape(&c.figure),
        value(c.unit, c.base),
        value(c.unit, c.new),
        format!("{} ({})", signed(c.unit, c.diff), pct(c.relative)),
        ci,
        n,
        mark.to_string(),
    ]
}

/// The Markdown report: what was compared, the table, the verdict line.
pub fn to_markdown(base: &str, new: &str, c: &Comparison) -> String {
    let mut out = format!(
        "## memscope compare\n\nbase: `{base}`  \nnew: `{new}`\n\nNoise threshold {:.1}%: a \
         figure regressed (or improved) when it changed by more than that and, for sampled \
         figures, the {:.0}% bootstrap interval of the difference of medians excludes 0 ({} \
         resamples, seed {}). Timing medians are over measured steps; heap figures are exact \
         counts.\n\n",
        c.threshold * 100.0,
        c.bootstrap.confidence * 100.0,
        c.bootstrap.resamples,
        c.bootstrap.seed
    );
    if !c.workloads_differ.is_empty() {
        out += "**DIFFERENT WORKLOADS (--allow-different)**: these runs did not do the same work; \
                every change below includes the workloads' difference.\n\n";
        for m in &c.workloads_differ {
            out += &format!("- {m}\n");
        }
        out += "\n";
    }
    if !c.machines_differ.is_empty() {
        out += "**The two runs come from different machines or settings**: timing changes below \
                include the machine's, not only the code's.\n\n";
        for m in &c.machines_differ {
            out += &format!("- {m}\n");
        }
        out += "\n";
    }
    let mut table = Table::new([
        "figure",
        "base",
        "new",
        "change",
        "CI of change",
        "n (base / new)",
        "verdict",
    ]);
    for ch in &c.changes {
        table.push(row(ch, c.bootstrap.confidence, c.threshold));
    }
    out += &table.markdown(&MarkdownStyle {
        align: &[
            Align::Left,
            Align::Right,
            Align::Right,
            Align::Right,
            Align::Right,
            Align::Right,
            Align::Left,
        ],
        ..MarkdownStyle::PLAIN
    });
    if !c.unmatched.is_empty() {
        out += "\nNot compared:\n\n";
        for u in &c.unmatched {
            out += &format!("- {u}\n");
        }
    }
    let loose: Vec<String> = c
        .changes
        .iter()
        .filter(|x| x.gates && x.tolerance > c.threshold + 1e-12)
        .map(|x| format!("{} (±{:.1}%)", x.figure, x.tolerance * 100.0))
        .collect();
    out += &format!(
        "\nExit status 1 when any figure above regresses: sampled figures and exact heap counts \
         beyond {:.1}%{}.\n",
        c.threshold * 100.0,
        if loose.is_empty() {
            String::new()
        } else {
            format!("; single readings beyond their noise: {}", loose.join(", "))
        }
    );
    let count = |v: Verdict| c.changes.iter().filter(|x| x.verdict == v).count();
    out += &format!(
        "\n{} regressed, {} improved, {} no change.{}\n",
        count(Verdict::Regressed),
        count(Verdict::Improved),
        count(Verdict::NoChange),
        if c.regressed() {
            " Exit status 1 (regression beyond the threshold)."
        } else {
            ""
        }
    );
    out
}

/// The comparison as JSON (every field of [`Comparison`], plus the two file names).
pub fn to_json(base: &str, new: &str, c: &Comparison) -> anyhow::Result<String> {
    let mut v = serde_json::to_value(c)?;
    if let Some(o) = v.as_object_mut() {
        o.insert("base".into(), base.into());
        o.insert("new".into(), new.into());
        o.insert("regressed".into(), c.regressed().into());
    }
    Ok(serde_json::to_string_pretty(&v)? + "\n")
}
