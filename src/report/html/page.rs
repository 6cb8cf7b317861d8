//! The page around the charts: the self-contained HTML skeleton (inline CSS, no script, no
//! network), the run summary (model, spec, environment) and the plain-language verdicts that come
//! first.

use super::svg::{css, esc};
use crate::record::leak::LeakReport;
use crate::record::Record;
use crate::units::{fmt_bytes, ms, thousands};

const STYLE: &str = "body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:24px auto;\
max-width:1140px;color:#222;line-height:1.45}h1{font-size:1.6em;margin-bottom:0}h2{margin-top:2em;\
border-bottom:1px solid #ddd;padding-bottom:4px}table{border-collapse:collapse;margin:8px 0;\
font-size:0.92em}th,td{border:1px solid #ddd;padding:4px 8px;text-align:left;vertical-align:top}\
th{background:#f4f4f4}td.num{text-align:right;font-variant-numeric:tabular-nums}figure{margin:16px 0}\
figcaption{font-size:0.88em;color:#444;margin-top:4px}svg{max-width:100%;height:auto}\
.grid{display:flex;flex-wrap:wrap;gap:8px}.grid figure{flex:0 0 560px}.key{margin-right:12px;\
white-space:nowrap}.sw{display:inline-block;width:12px;height:12px;margin-right:4px;\
vertical-align:middle}ul.verdicts li{margin:4px 0}.muted{color:#666;font-size:0.88em}";

/// The whole document: `sections` are (id, heading, HTML) in order.
pub fn document(title: &str, intro: &str, sections: &[(String, String, String)]) -> String {
    let mut nav = String::new();
    for (id, h, _) in sections {
        nav += &format!("<a href=\"#{id}\">{}</a> · ", esc(h));
    }
    let mut body = String::new();
    for (id, h, html) in sections {
        body += &format!(
            "<section id=\"{id}\">\n<h2>{}</h2>\n{html}</section>\n",
            esc(h)
        );
    }
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>{t}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n<h1>{t}</h1>\n\
         <p class=\"muted\">{intro}</p>\n<nav class=\"muted\">{nav}</nav>\n{body}</body>\n</html>\n",
        t = esc(title)
    )
}

/// A plain table (`report::table`) as HTML: its title as a caption line, numbers right-aligned.
pub fn table(t: &crate::report::table::Table) -> String {
    let mut h = format!("<p class=\"muted\">{}</p>\n<table><tr>", esc(&t.title));
    for c in &t.header {
        h += &format!("<th>{}</th>", esc(c));
    }
    h += "</tr>\n";
    for row in &t.rows {
        h += "<tr>";
        for c in row {
            let num = c.trim().parse::<f64>().is_ok() || c.ends_with(" ms") || c.ends_with("iB");
            // Leading spaces (a tree's indent) kept as non-breaking ones.
            let indent = c.len() - c.trim_start().len();
            let text = format!("{}{}", "&nbsp;".repeat(indent), esc(c.trim_start()));
            h += &if num {
                format!("<td class=\"num\">{text}</td>")
            } else {
                format!("<td>{text}</td>")
            };
        }
        h += "</tr>\n";
    }
    h + "</table>\n"
}

/// The inputs table: one row per file, its colour, what it is.
pub fn inputs_table(rows: &[(usize, String, String)]) -> String {
    let mut h = String::from("<table><tr><th>#</th><th>file</th><th>what</th></tr>\n");
    for (i, name, what) in rows {
        h += &format!(
            "<tr><td><span class=\"sw\" style=\"background:{}\"></span>{}</td><td>{}</td><td>{}</td></tr>\n",
            css(*i),
            i + 1,
            esc(name),
            esc(what)
        );
    }
    h + "</table>\n"
}

/// The summary table of Records: one column per Record.
pub fn records_table(records: &[(usize, String, &Record)]) -> String {
    let mut rows: Vec<(&str, Vec<String>)> = vec![
        ("model", vec![]),
        ("parameters", vec![]),
        ("workload", vec![]),
        ("steps", vec![]),
        ("step time (median ± MAD, min–max)", vec![]),
        ("throughput", vec![]),
        ("heap peak (whole run)", vec![]),
        ("heap live retained by load", vec![]),
        ("RSS peak (VmHWM)", vec![]),
        ("machine", vec![]),
        ("memscope", vec![]),
    ];
    for (_, _, r) in records {
        let s = &r.spec;
        let step = r
            .timing
            .get("step")
            .or_else(|| r.timing.get("forward"))
            .or_else(|| r.timing.values().next());
        let vals = [
            r.model_label(),
            format!(
                "{} ({})",
                thousands(r.model.params),
                fmt_bytes(r.model.param_bytes as f64)
            ),
            format!(
                "{} {} {} {} threads",
                s.mode.name(),
                r.shape_label(),
                s.dtype.name(),
                s.threads
            ),
            format!("{} measured after {} warm-up", s.steps, s.warmup),
            step.map_or("—".into(), |t| {
                format!(
                    "{} ms ± {} MAD, {}–{} ms (n = {})",
                    ms(t.median_ms),
                    ms(t.mad_ms),
                    ms(t.min_ms),
                    ms(t.max_ms),
                    t.n
                )
            }),
            match (r.throughput.tokens_per_s, r.throughput.samples_per_s) {
                (Some(t), _) => format!("{t:.0} tokens/s"),
                (None, Some(s)) => format!("{s:.0} samples/s"),
                _ => "—".into(),
            },
            if r.memory.counting {
                fmt_bytes(r.memory.heap_peak_bytes as f64)
            } else {
                "not counted: ".to_string() + &r.why_not_counted()
            },
            fmt_bytes(r.memory.load_bytes as f64),
            r.memory
                .rss_peak_bytes
                .map_or("not measured".into(), |b| fmt_bytes(b as f64)),
            format!(
                "{}, {} cores{}, {}",
                r.environment.cpu_model,
                r.environment.cores,
                match r.environment.isa.as_str() {
                    "" => String::new(),
                    isa => format!(", {isa}"),
                },
                r.environment.os
            ),
            format!(
                "{} ({}), candle {}",
                r.environment.memscope_version,
                r.environment.git_commit,
                r.environment.candle_version
            ),
        ];
        for (row, v) in rows.iter_mut().zip(vals) {
            row.1.push(v);
        }
    }
    let mut h = String::from("<table><tr><th></th>");
    for (i, label, _) in records {
        h += &format!(
            "<th><span class=\"sw\" style=\"background:{}\"></span>#{} {}</th>",
            css(*i),
            i + 1,
            esc(label)
        );
    }
    h += "</tr>\n";
    for (name, vals) in rows {
        h += &format!("<tr><th>{}</th>", esc(name));
        for v in vals {
            h += &format!("<td>{}</td>", esc(&v));
        }
        h += "</tr>\n";
    }
    h + "</table>\n"
}

/// The verdicts in plain language: leak verdicts first, then each Record's warnings.
pub fn verdicts(
    leaks: &[(usize, String, LeakReport)],
    records: &[(usize, String, &Record)],
) -> String {
    let mut items = Vec::new();
    for (i, label, v) in leaks {
        items.push(format!(
            "#{} {} — memory ({}): <b>{}</b>. {}",
            i + 1,
            esc(label),
            esc(&v.label),
            v.verdict.as_str().to_uppercase(),
            esc(&v.sentence)
        ));
    }
    for (i, label, r) in records {
        for t in r.timing.iter().filter(|(k, _)| k.as_str() == "step") {
            let cv = t.1.cv_pct.map_or("unknown".into(), |c| format!("{c:.1}%"));
            items.push(format!(
                "#{} {} — step time {} ms median, coefficient of variation {cv}.",
                i + 1,
                esc(label),
                ms(t.1.median_ms)
            ));
        }
        for w in &r.warnings {
            items.push(format!("#{} {} — {}", i + 1, esc(label), esc(w)));
        }
    }
    if items.is_empty() {
        return "<p>No verdicts: the inputs hold no Record or leak verdict.</p>\n".into();
    }
    let mut h = String::from("<ul class=\"verdicts\">\n");
    for it in items {
        h += &format!("<li>{it}</li>\n");
    }
    h + "</ul>\n"
}
