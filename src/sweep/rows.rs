//! Sweep rows (`record::sweep_row`) written: `--jsonl` appended and flushed as each configuration
//! ends, `--csv` and `--markdown` at the end; and a Record's summary figures for its row.

use crate::export::table::Table;
use crate::record::sweep_row::{Row, RowSummary};
use crate::record::Record;
use crate::spec::Mode;

impl RowSummary {
    pub fn from_record(r: &Record) -> RowSummary {
        let samples = step_samples(r);
        let s = crate::analysis::stats::summarize(&samples).ok();
        let measured: Vec<u64> = r
            .memory
            .series
            .iter()
            .filter(|m| !m.warmup)
            .map(|m| m.heap_live_bytes)
            .collect();
        let heap_avg_bytes = if measured.is_empty() {
            0
        } else {
            (measured.iter().map(|&b| b as u128).sum::<u128>() / measured.len() as u128) as u64
        };
        RowSummary {
            step_median_ms: s.as_ref().map_or(0.0, |s| s.median),
            step_cv_pct: s.as_ref().and_then(|s| s.cv_pct),
            step_samples_ms: samples,
            heap_peak_bytes: r.memory.heap_peak_bytes,
            heap_avg_bytes,
            rss_peak_bytes: r.memory.rss_peak_bytes,
            param_bytes: r.memory.param_bytes,
            tokens_per_s: r.throughput.tokens_per_s,
            samples_per_s: r.throughput.samples_per_s,
            load_seconds: r.memory.load_seconds,
            run_seconds: r.wall_seconds,
            counting: r.memory.counting,
            activations_bytes: r
                .memory
                .breakdown
                .get("activations")
                .map(|b| b.measured_bytes),
            loss_last: r.loss.last().copied(),
            estimated_peak_bytes: r.memory.estimate.as_ref().map(|e| e.peak_bytes),
            ranks: r.ranks.clone(),
        }
    }
}

/// The time of one whole step per measured sample, ms.
fn step_samples(r: &Record) -> Vec<f64> {
    let get = |name: &str| r.timing.get(name).map(|t| t.samples_ms.clone());
    match r.spec.mode {
        Mode::Train => get("step").unwrap_or_default(),
        Mode::Infer => get("forward").unwrap_or_default(),
        Mode::Generate => {
            let prefill = get("prefill").unwrap_or_default();
            let decode = get("decode").unwrap_or_default();
            let n = r.spec.new_tokens as f64;
            prefill
                .iter()
                .zip(&decode)
                .map(|(p, d)| p + d * n)
                .collect()
        }
    }
}

const CSV_HEADER: [&str; 24] = [
    "index",
    "status",
    "reason",
    "model",
    "mode",
    "dtype",
    "batch",
    "seq",
    "warmup",
    "steps",
    "grad_accum",
    "threads",
    "exit_code",
    "signal",
    "wall_seconds",
    "step_median_ms",
    "heap_peak_bytes",
    "rss_peak_bytes",
    "tokens_per_s",
    "samples_per_s",
    "worst_rank",
    "rank_peak_bytes",
    "pp_schedule",
    "micro_batches",
];

pub fn to_csv(rows: &[Row]) -> anyhow::Result<String> {
    let mut table = Table::new(
        CSV_HEADER
            .into_iter()
            .chain(crate::record::run_columns::RUN_COLUMNS),
    );
    let opt = |v: Option<String>| v.unwrap_or_default();
    for r in rows {
        let s = r.summary.as_ref();
        let ranks = s.and_then(|s| s.ranks.as_ref());
        let pipe = r.spec.torch.as_ref().and_then(|t| t.pipeline.as_ref());
        let mut row = vec![
            r.index.to_string(),
            r.status.name().to_string(),
            opt(r.reason.clone()),
            r.spec.model.clone(),
            r.spec.mode.name().to_string(),
            r.spec.dtype.name().to_string(),
            r.spec.batch.to_string(),
            r.spec.seq.to_string(),
            r.spec.warmup.to_string(),
            r.spec.steps.to_string(),
            r.spec.grad_accum.to_string(),
            r.spec.threads.to_string(),
            opt(r.exit_code.map(|c| c.to_string())),
            opt(r.signal_name.clone()),
            format!("{:.3}", r.wall_seconds),
            opt(s.map(|s| format!("{:.3}", s.step_median_ms))),
            opt(s.map(|s| s.heap_peak_bytes.to_string())),
            opt(s.and_then(|s| s.rss_peak_bytes).map(|b| b.to_string())),
            opt(s.and_then(|s| s.tokens_per_s).map(|v| format!("{v:.1}"))),
            opt(s.and_then(|s| s.samples_per_s).map(|v| format!("{v:.3}"))),
            // A data-parallel run: the rank the row's figures are, and every rank's peak
            // (`rank:bytes`, space-separated).
            opt(ranks
                .and_then(|f| f.iter().find(|f| f.worst))
                .map(|f| f.rank.to_string())),
            opt(ranks.map(|f| {
                f.iter()
                    .map(|f| format!("{}:{}", f.rank, f.peak_bytes))
                    .collect::<Vec<_>>()
                    .join(" ")
            })),
            // A pipeline: its schedule as --pp-schedule takes it, and its micro-batches.
            opt(pipe.map(|p| p.schedule_flag())),
            opt(pipe.map(|p| p.micro_batches.to_string())),
        ];
        row.extend(crate::record::run_columns::run_columns(&r.spec));
        table.push(row);
    }
    table.csv()
}
