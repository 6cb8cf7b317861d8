//! CSV export: one row per run; every column name carries its unit.

use crate::export::table::Table;
use crate::record::Record;
use crate::report::Export;

pub struct Csv;

const PHASES: [&str; 6] = [
    "forward",
    "backward",
    "optimizer",
    "step",
    "prefill",
    "decode",
];

impl Export for Csv {
    fn render(&self, records: &[Record]) -> anyhow::Result<String> {
        let mut header: Vec<String> = [
            "model",
            "family",
            "mode",
            "batch",
            "seq",
            "dtype",
            "threads",
            "warmup",
            "steps",
            "grad_accum",
            "params",
            "param_bytes",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        for p in PHASES {
            for stat in [
                "median_ms",
                "mean_ms",
                "std_ms",
                "cv_pct",
                "min_ms",
                "max_ms",
                "p90_ms",
                "p99_ms",
            ] {
                header.push(format!("{p}_{stat}"));
            }
        }
        header.extend(
            [
                "tokens_per_s",
                "samples_per_s",
                "load_bytes",
                "load_seconds",
                "heap_peak_bytes",
                "heap_live_end_bytes",
                "rss_peak_bytes",
                "kv_cache_bytes",
                "forward_retained_bytes",
                "backward_retained_bytes",
                "optimizer_retained_bytes",
            ]
            .iter()
            .chain(&crate::record::run_columns::RUN_COLUMNS)
            .map(|s| s.to_string()),
        );
        let mut table = Table::new(header);
        for r in records {
            let s = &r.spec;
            let mut row = vec![
                r.model.name.clone(),
                r.model.family.clone(),
                s.mode.name().to_string(),
                s.batch.to_string(),
                s.seq.to_string(),
                s.dtype.name().to_string(),
                s.threads.to_string(),
                s.warmup.to_string(),
                s.steps.to_string(),
                s.grad_accum.to_string(),
                r.model.params.to_string(),
                r.model.param_bytes.to_string(),
            ];
            for p in PHASES {
                match r.timing.get(p) {
                    Some(t) => row.extend(
                        [
                            Some(t.median_ms),
                            Some(t.mean_ms),
                            t.std_ms,
                            t.cv_pct,
                            Some(t.min_ms),
                            Some(t.max_ms),
                            Some(t.p90_ms),
                            Some(t.p99_ms),
                        ]
                        .map(opt),
                    ),
                    None => row.extend(std::iter::repeat_n(String::new(), 8)),
                }
            }
            let m = &r.memory;
            let retained = |p: &str| {
                m.phases
                    .get(p)
                    .map(|x| x.retained_bytes.to_string())
                    .unwrap_or_default()
            };
            row.extend([
                opt(r.throughput.tokens_per_s),
                opt(r.throughput.samples_per_s),
                m.load_bytes.to_string(),
                format!("{:.6}", m.load_seconds),
                m.heap_peak_bytes.to_string(),
                m.heap_live_end_bytes.to_string(),
                m.rss_peak_bytes.map(|v| v.to_string()).unwrap_or_default(),
                m.kv_cache_bytes.map(|v| v.to_string()).unwrap_or_default(),
                retained("forward"),
                retained("backward"),
                retained("optimizer"),
            ]);
            row.extend(crate::record::run_columns::run_columns(s));
            table.push(row);
        }
        table.csv()
    }
}

fn opt(v: Option<f64>) -> String {
    v.map(|x| format!("{x:.6}")).unwrap_or_default()
}
