//! The scaling analysis of a sweep as Markdown tables (printed after a sweep, by
//! `memscope scaling RESULTS.jsonl`, and into `--markdown`). Pure: rows in, text out; no candle.
//!
//! Peak = heap peak (counting allocator, exact); Avg = mean heap live after each measured step;
//! VmHWM = the worker's own peak RSS. Only `ok` rows enter the fits. When a (batch, seq) point
//! appears with several warm-ups, the row with the most warm-up steps stands for it.

use crate::analysis::scaling::{choose, describe, fit_linear, warmup_axis, Pattern};
use crate::export::table::{escape, MarkdownStyle, Table};
use crate::record::sweep_row::{Row, RowSummary, Status};
use crate::units::{ms, rate};
use std::collections::BTreeMap;
use std::fmt::Write;

/// Bytes as MiB (2^20 bytes, the tool's one convention) with one decimal, for table cells.
fn mib(b: f64) -> String {
    format!("{:.1}", b / 1048576.0)
}

/// Everything after a sweep: every configuration, then per model/mode/dtype the batch and
/// sequence laws, then the warm-up axis.
pub fn render(rows: &[Row]) -> String {
    let mut out = String::new();
    out.push_str(&configurations(rows));
    // Group ok rows by (model, mode, dtype, grad_accum, plan): each plan its own curves.
    type Key = (String, &'static str, &'static str, usize, Option<String>);
    let mut groups: BTreeMap<Key, Vec<&Row>> = BTreeMap::new();
    for r in rows
        .iter()
        .filter(|r| r.status == Status::Ok && r.summary.is_some())
    {
        let s = &r.spec;
        groups
            .entry((
                s.model.clone(),
                s.mode.name(),
                s.dtype.name(),
                s.grad_accum,
                // A pipeline's schedule and micro-batches too: each count its own curves.
                crate::record::sweep_row::plan_label(s),
            ))
            .or_default()
            .push(r);
    }
    // In the sweep's own order (a pipeline's 2, 4, 16 micro-batches so, not as text sorts them).
    let mut groups: Vec<(Key, Vec<&Row>)> = groups.into_iter().collect();
    groups.sort_by_key(|(_, rs)| rs.iter().map(|r| r.index).min());
    for ((model, mode, dtype, ga, plan), rs) in &groups {
        let ga_txt = if *ga > 1 {
            format!(", grad-accum {ga}")
        } else {
            String::new()
        };
        let plan_txt = plan.as_ref().map_or(String::new(), |p| format!(" · {p}"));
        let _ = writeln!(out, "\n## {model} · {mode} · {dtype}{ga_txt}{plan_txt}\n");
        out.push_str(&batch_section(rs));
        out.push_str(&seq_section(rs));
        out.push_str(&warmup_section(rs));
    }
    out
}

fn summary(r: &Row) -> &RowSummary {
    r.summary.as_ref().expect("grouped rows are ok rows")
}

fn configurations(rows: &[Row]) -> String {
    // What the peak column measures: the heap on the CPU, PyTorch's allocated bytes on CUDA.
    let cuda = rows.iter().filter(|r| r.spec.is_cuda()).count();
    let (peak, hwm) = match cuda {
        0 => ("Peak MiB (heap)", "VmHWM MiB"),
        n if n == rows.len() => ("Peak MiB (CUDA allocated)", "host VmHWM MiB"),
        _ => ("Peak MiB (heap; CUDA: allocated)", "host VmHWM MiB"),
    };
    let mut table = Table::new([
        "#",
        "Configuration",
        "Status",
        "Step ms (median)",
        "CV %",
        "tokens/s",
        "samples/s",
        peak,
        hwm,
        "Reason",
    ]);
    for r in rows {
        let s = r.summary.as_ref();
        table.push([
            r.index.to_string(),
            r.label(),
            r.status.name().to_string(),
            s.map_or("".into(), |s| ms(s.step_median_ms)),
            s.and_then(|s| s.step_cv_pct)
                .map_or("".into(), |c| format!("{c:.1}")),
            s.and_then(|s| s.tokens_per_s).map_or("".into(), rate),
            s.and_then(|s| s.samples_per_s).map_or("".into(), rate),
            s.map_or("".into(), peak_cell),
            s.and_then(|s| s.rss_peak_bytes)
                .map_or("".into(), |b| mib(b as f64)),
            escape(r.reason.as_deref().unwrap_or("")),
        ]);
    }
    format!(
        "## Configurations\n\n{}",
        table.markdown(&MarkdownStyle::PLAIN)
    )
}

/// The peak; a data-parallel run's is its worst rank's, with every rank's beside it.
fn peak_cell(s: &RowSummary) -> String {
    let peak = mib(s.heap_peak_bytes as f64);
    let Some(ranks) = &s.ranks else {
        return peak;
    };
    let each: Vec<String> = ranks.iter().map(|f| mib(f.peak_bytes as f64)).collect();
    let worst = ranks.iter().find(|f| f.worst).map_or(0, |f| f.rank);
    format!("{peak} (rank {worst}; ranks {})", each.join(" · "))
}

/// One row per distinct (batch, seq): the one with the most warm-up.
fn representatives<'a>(rs: &[&'a Row]) -> BTreeMap<(usize, usize), &'a Row> {
    let mut m: BTreeMap<(usize, usize), &Row> = BTreeMap::new();
    for r in rs {
        let key = (r.spec.seq, r.spec.batch);
        match m.get(&key) {
            Some(old) if old.spec.warmup >= r.spec.warmup => {}
            _ => {
                m.insert(key, r);
            }
        }
    }
    m
}

/// Peak vs batch at each sequence length: a least-squares line (bytes per sample, fixed cost, R²).
fn batch_section(rs: &[&Row]) -> String {
    let reps = representatives(rs);
    let mut by_seq: BTreeMap<usize, Vec<&Row>> = BTreeMap::new();
    for ((seq, _), r) in &reps {
        by_seq.entry(*seq).or_default().push(r);
    }
    let mut out = String::new();
    for (seq, rows) in by_seq.iter().filter(|(_, v)| v.len() >= 2) {
        let _ = writeln!(
            out,
            "Peak memory vs batch at seq {seq} (Peak MiB: heap peak; Avg MiB: mean heap live after each step; MiB = 2^20 bytes):\n"
        );
        let mut table = Table::new(["Batch", "Peak MiB", "Avg MiB", "samples/s"]);
        for r in rows {
            let s = summary(r);
            table.push([
                r.spec.batch.to_string(),
                mib(s.heap_peak_bytes as f64),
                mib(s.heap_avg_bytes as f64),
                s.samples_per_s.map_or("".into(), rate),
            ]);
        }
        out.push_str(&table.markdown(&MarkdownStyle::PLAIN));
        let xs: Vec<f64> = rows.iter().map(|r| r.spec.batch as f64).collect();
        let ys: Vec<f64> = rows
            .iter()
            .map(|r| summary(r).heap_peak_bytes as f64)
            .collect();
        match fit_linear(&xs, &ys) {
            Some(f) => {
                let _ = writeln!(
                    out,
                    "\nLinear fit: {} MiB per sample (slope), {} MiB fixed (intercept), R² = {:.4}.\n",
                    mib(f.coefficients[1]),
                    mib(f.coefficients[0]),
                    f.r2
                );
            }
            None => out.push_str("\nLinear fit: needs 3 batch sizes.\n\n"),
        }
    }
    out
}

/// Peak vs sequence length at each batch: linear vs quadratic (F-test), memory per token.
fn seq_section(rs: &[&Row]) -> String {
    let reps = representatives(rs);
    let mut by_batch: BTreeMap<usize, Vec<&Row>> = BTreeMap::new();
    for ((_, batch), r) in &reps {
        by_batch.entry(*batch).or_default().push(r);
    }
    let mut out = String::new();
    for (batch, rows) in by_batch.iter_mut().filter(|(_, v)| v.len() >= 2) {
        rows.sort_by_key(|r| r.spec.seq);
        let xs: Vec<f64> = rows.iter().map(|r| r.spec.seq as f64).collect();
        let ys: Vec<f64> = rows
            .iter()
            .map(|r| summary(r).heap_peak_bytes as f64)
            .collect();
        let choice = choose(&xs, &ys);
        let scaling = match &choice {
            Some(c) => describe(&c.pattern),
            None => "needs 3 sequence lengths".into(),
        };
        let fixed = choice.as_ref().map(|c| c.chosen.coefficients[0]);
        let _ = writeln!(
            out,
            "Peak memory vs sequence length at batch {batch} (Peak MiB: heap peak, 2^20 bytes):\n"
        );
        let mut table = Table::new(["Seq", "Batch", "Peak MiB", "Memory per token", "Scaling"]);
        for (i, r) in rows.iter().enumerate() {
            let s = summary(r);
            let tokens = (r.spec.batch * r.spec.seq * r.spec.grad_accum.max(1)) as f64;
            let per_token = match fixed {
                Some(f) => format!("{:.1} KB", (s.heap_peak_bytes as f64 - f) / tokens / 1e3),
                None => format!(
                    "{:.1} KB (incl. fixed)",
                    s.heap_peak_bytes as f64 / tokens / 1e3
                ),
            };
            table.push([
                r.spec.seq.to_string(),
                r.spec.batch.to_string(),
                mib(s.heap_peak_bytes as f64),
                per_token,
                if i == 0 {
                    scaling.clone()
                } else {
                    String::new()
                },
            ]);
        }
        out.push_str(&table.markdown(&MarkdownStyle::PLAIN));
        if let Some(c) = &choice {
            let p = c.p_value.map_or("n/a".into(), |p| {
                if p < 1e-3 {
                    format!("{p:.1e}")
                } else {
                    format!("{p:.3}")
                }
            });
            let _ = writeln!(
                out,
                "\nScaling: {} ({}; p = {p}; linear R² = {:.4}). Memory per token = (peak − fixed {} MiB) / tokens.\n",
                describe(&c.pattern),
                c.method,
                c.linear.r2,
                mib(c.chosen.coefficients[0])
            );
            if let Pattern::Quadratic { .. } = c.pattern {
                out.push_str("The T² term is attention's score matrix (B·H·T² per layer).\n\n");
            }
        } else {
            out.push('\n');
        }
    }
    out
}

/// The warm-up axis: statistics of each measured set, per (batch, seq) with several warm-ups.
fn warmup_section(rs: &[&Row]) -> String {
    let mut by_point: BTreeMap<(usize, usize), Vec<&Row>> = BTreeMap::new();
    for r in rs {
        by_point
            .entry((r.spec.seq, r.spec.batch))
            .or_default()
            .push(r);
    }
    let mut out = String::new();
    for ((seq, batch), rows) in by_point.iter().filter(|(_, v)| v.len() >= 2) {
        let sets: Vec<(usize, Vec<f64>)> = rows
            .iter()
            .map(|r| (r.spec.warmup, summary(r).step_samples_ms.clone()))
            .collect();
        let stats = warmup_axis(&sets);
        if stats.len() < 2 {
            continue;
        }
        let _ = writeln!(
            out,
            "Warm-up axis at batch {batch}, seq {seq} (step times):\n"
        );
        let mut table = Table::new([
            "Warm-up",
            "n",
            "Mean ms",
            "Std ms",
            "CV %",
            "First / median of rest",
            "First-iteration effect",
        ]);
        for w in &stats {
            table.push([
                w.warmup.to_string(),
                w.n.to_string(),
                ms(w.mean),
                w.std.map_or("".into(), ms),
                w.cv_pct.map_or("".into(), |c| format!("{c:.1}")),
                w.first_over_median.map_or("".into(), |r| format!("{r:.2}")),
                if w.first_iteration_effect {
                    "yes"
                } else {
                    "no"
                }
                .to_string(),
            ]);
        }
        out.push_str(&table.markdown(&MarkdownStyle::PLAIN));
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::config::ModelConfig;
    use crate::spec::{Dtype, Mode, Spec};

    fn row(batch: usize, seq: usize, peak: u64) -> Row {
        let spec = Spec {
            model: "tiny-gpt2".into(),
            config: Some(ModelConfig::preset("tiny-gpt2").unwrap()),
            config_path: None,
            weights: None,
            mode: Mode::Train,
            batch,
            seq,
            dtype: Dtype::F32,
            threads: 1,
            seed: 0,
            warmup: 1,
            steps: 3,
            grad_accum: 1,
            prompt_len: seq,
            new_tokens: 1,
            lr: 1e-3,
            data: None,
            variant: Default::default(),
            engine: None,
            torch: None,
        };
        let mut r = Row::not_run(Status::Ok, String::new(), 0, spec);
        r.reason = None;
        r.summary = Some(RowSummary {
            step_median_ms: 10.0,
            step_samples_ms: vec![10.0, 10.0, 10.0],
            heap_peak_bytes: peak,
            heap_avg_bytes: peak / 2,
            samples_per_s: Some(100.0),
            ..RowSummary::default()
        });
        r
    }

    #[test]
    fn batch_table_and_exact_linear_fit() {
        // peak = 100 MiB + 3 MiB × batch.
        let rows: Vec<Row> = [1, 2, 4]
            .iter()
            .map(|&b| row(b, 128, (100 << 20) + (3 << 20) * b as u64))
            .collect();
        let text = render(&rows);
        assert!(
            text.contains("| Batch | Peak MiB | Avg MiB | samples/s |"),
            "{text}"
        );
        assert!(text.contains("| 4 | 112.0 | 56.0 | 100.0 |"), "{text}");
        assert!(
            text.contains("3.0 MiB per sample (slope), 100.0 MiB fixed (intercept), R² = 1.0000"),
            "{text}"
        );
    }

    #[test]
    fn seq_table_says_quadratic() {
        // peak = 50 MiB + 1000·T + 100·T², exactly.
        let rows: Vec<Row> = [64, 128, 192, 256]
            .iter()
            .map(|&t| row(2, t, (50 << 20) + 1000 * t as u64 + 100 * (t * t) as u64))
            .collect();
        let text = render(&rows);
        assert!(
            text.contains("| Seq | Batch | Peak MiB | Memory per token | Scaling |"),
            "{text}"
        );
        assert!(text.contains("quadratic: the T² term is"), "{text}");
    }
}
