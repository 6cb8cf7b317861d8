//! The content of a run summary as plain tables (title, header, rows), shared by the terminal
//! and Markdown renderers so both say exactly the same thing.

use crate::record::Record;
use crate::report::phase_meaning;
use crate::report::table::Table;
use crate::units::{bytes, ms, rate, thousands};

fn row(cells: &[&str]) -> Vec<String> {
    cells.iter().map(|s| s.to_string()).collect()
}

/// One line naming what ran: model, size, mode, shape, dtype, threads.
pub fn headline(r: &Record) -> String {
    let s = &r.spec;
    let shape = match s.mode {
        crate::spec::Mode::Generate => format!(
            "batch {} · prompt {} + {} new tokens",
            s.batch, s.prompt_len, s.new_tokens
        ),
        _ if s.grad_accum > 1 => format!("{} × {} micro-batches", r.shape_label(), s.grad_accum),
        _ => r.shape_label(),
    };
    let engine = match &s.engine {
        Some(e) => format!(" · engine {} {} on {}", e.name, e.version, e.device),
        None => String::new(),
    };
    // A data-parallel run: which rank these figures are.
    let job = match (&r.ranks, s.parallel()) {
        (Some(ranks), Some(p)) => ranks.iter().find(|f| f.worst).map_or(String::new(), |w| {
            let nodes = if p.nodes > 1 {
                format!(" on {} nodes", p.nodes)
            } else {
                String::new()
            };
            format!(
                " · {} over {} ranks{nodes}: rank {} (the largest peak)",
                p.flag(),
                p.world,
                w.rank
            )
        }),
        _ => String::new(),
    };
    format!(
        "{} ({}, {} params){engine}{job} · {} · {} · {} · {} thread{}{} · {} warm-up + {} measured steps",
        r.model.name,
        r.model.family,
        thousands(r.model.params),
        s.mode.name(),
        shape,
        s.dtype.name(),
        s.threads,
        if s.threads == 1 { "" } else { "s" },
        match r.environment.isa.as_str() {
            "" => String::new(),
            isa => format!(" · {isa}"),
        },
        s.warmup,
        s.steps
    )
}

pub fn timing_table(r: &Record) -> Table {
    let order = [
        "forward",
        "backward",
        "optimizer",
        "step",
        "prefill",
        "decode",
    ];
    let mut rows = Vec::new();
    for name in order {
        let Some(t) = r.timing.get(name) else {
            continue;
        };
        let label = if name == "decode" {
            "decode (per token)".to_string()
        } else {
            name.to_string()
        };
        let spread = match t.std_ms {
            Some(sd) => format!("{} ± {}", ms(t.mean_ms), ms(sd)),
            None => format!("{} (1 sample)", ms(t.mean_ms)),
        };
        rows.push(vec![
            label,
            ms(t.median_ms),
            spread,
            t.cv_pct
                .map(|c| format!("{c:.1}%"))
                .unwrap_or_else(|| "n/a".into()),
            ms(t.min_ms),
            ms(t.p90_ms),
            ms(t.p99_ms),
            ms(t.max_ms),
            t.outliers.len().to_string(),
        ]);
    }
    Table {
        title: format!(
            "Timing (ms over {} measured steps; outliers flagged by MAD, kept)",
            r.spec.steps
        ),
        header: row(&[
            "phase",
            "median",
            "mean ± std",
            "CV",
            "min",
            "p90",
            "p99",
            "max",
            "outliers",
        ]),
        rows,
    }
}

pub fn throughput_line(r: &Record) -> Option<String> {
    let t = &r.throughput;
    let mut parts = Vec::new();
    if let Some(v) = t.tokens_per_s {
        parts.push(format!("{} tokens/s", rate(v)));
    }
    if let Some(v) = t.samples_per_s {
        let what = if r.spec.seq == 0 {
            "samples"
        } else {
            "sequences"
        };
        parts.push(format!("{} {what}/s", rate(v)));
    }
    if let Some(v) = t.decode_tokens_per_s {
        parts.push(format!("{} decoded tokens/s", rate(v)));
    }
    (!parts.is_empty()).then(|| format!("Throughput (median step): {}", parts.join(", ")))
}

/// Matmul FLOPs per step, the rate reached (median step, with the slowest–fastest range) and
/// its fraction of this machine's matmul peak.
pub fn compute_line(r: &Record) -> Option<String> {
    let c = &r.compute;
    let a = c.achieved_gflops?;
    let range = c.achieved_gflops_range.map_or(String::new(), |[lo, hi]| {
        format!(" (slowest–fastest step {lo:.1}–{hi:.1})")
    });
    // The torch engine's runs (and the recorder's) against PyTorch's own roofs.
    let peaks = if matches!(r.spec.engine(), crate::spec::EngineRef::Torch(_))
        || r.spec.engine.as_ref().is_some_and(|e| e.name == "pytorch")
    {
        "memscope peaks --engine torch"
    } else {
        "memscope peaks"
    };
    let peak = match (c.matmul_peak_gflops, c.fraction_of_peak) {
        (Some(p), Some(f)) => format!(
            " = {:.0}% of this machine's {} matmul peak ({p:.1} GFLOP/s, `{peaks}`)",
            f * 100.0,
            r.spec.dtype.name()
        ),
        _ => format!("; run `{peaks}` once to see it against this machine's matmul peak"),
    };
    // A job's figures are one rank's: its share of the products, against one rank's peak.
    let rank = if r.ranks.is_some() { " a rank" } else { "" };
    Some(format!(
        "Compute: {:.3e} matmul FLOPs per step{rank}, {a:.1} GFLOP/s achieved (median step){range}{peak}",
        c.matmul_flops_per_step as f64
    ))
}

/// The torch engine: the step time predicted before the run (`estimate --engine torch` from
/// `peaks --engine torch`'s roofs) beside the measured median, per phase.
pub fn predicted_line(r: &Record) -> Option<String> {
    let p = &r.memory.estimate.as_ref()?.predicted_ms;
    let step = match r.spec.mode {
        crate::spec::Mode::Train => "step",
        crate::spec::Mode::Infer => "forward",
        crate::spec::Mode::Generate => "prefill",
    };
    let parts: Vec<String> = std::iter::once(step)
        .chain(
            ["forward", "backward", "optimizer", "decode"]
                .into_iter()
                .filter(|k| *k != step),
        )
        .filter_map(|k| {
            let (pred, m) = (p.get(k)?, r.timing.get(k)?.median_ms);
            Some(format!(
                "{k} {} ms predicted, {} ms measured median ({:+.0}%)",
                crate::units::ms(*pred),
                crate::units::ms(m),
                100.0 * (pred / m.max(1e-12) - 1.0)
            ))
        })
        .collect();
    (!parts.is_empty()).then(|| {
        format!(
            "Predicted before the run (the traced ops at `peaks --engine torch`'s roofs): {}",
            parts.join("; ")
        )
    })
}

pub fn memory_table(r: &Record) -> Table {
    let m = &r.memory;
    let (heap, counted_by) = crate::report::heap_kind::heap_kind(r);
    let mut rows = vec![
        vec!["parameters".into(), bytes(m.param_bytes as f64), {
            use crate::spec::ParallelPlan;
            let part = match r.spec.parallel().map(|p| p.plan) {
                None | Some(ParallelPlan::Ddp) => "",
                Some(ParallelPlan::Pp) => "this rank's stages of ",
                Some(_) => "this rank's shards of ",
            };
            format!(
                "exact: {part}{} params × {} B ({})",
                thousands(r.model.params),
                r.spec.dtype.size_bytes(),
                r.spec.dtype.name()
            )
        }],
        vec![
            "model load".into(),
            bytes(m.load_bytes as f64),
            format!(
                "{heap} live retained by load, in {:.2} s ({heap} peak during load {})",
                m.load_seconds,
                bytes(m.load_peak_bytes as f64)
            ),
        ],
        vec![
            format!("{heap} peak"),
            bytes(m.heap_peak_bytes as f64),
            format!("{counted_by}, whole run"),
        ],
        vec![
            format!("{heap} live at end"),
            bytes(m.heap_live_end_bytes as f64),
            format!("{counted_by}, after the last step"),
        ],
    ];
    if let Some(kv) = m.kv_cache_bytes {
        rows.push(vec![
            "KV cache".into(),
            bytes(kv as f64),
            "exact: preallocated K and V buffers".into(),
        ]);
    }
    if let Some(v) = m.rss_peak_bytes {
        rows.push(vec![
            "RSS peak".into(),
            bytes(v as f64),
            "VmHWM from /proc: heap + code + allocator retention".into(),
        ]);
    }
    if let Some(v) = m.rss_end_bytes {
        rows.push(vec![
            "RSS at end".into(),
            bytes(v as f64),
            "/proc/self/statm".into(),
        ]);
    }
    if !m.counting {
        rows.push(vec![
            "(counting off)".into(),
            "".into(),
            r.why_not_counted(),
        ]);
    }
    Table {
        title: "Memory".into(),
        header: row(&["figure", "size", "what it measures"]),
        rows,
    }
}

pub fn phase_memory_table(r: &Record) -> Table {
    let order = [
        "load",
        "forward",
        "backward",
        "optimizer",
        "prefill",
        "decode",
        "other",
    ];
    let rows = order
        .iter()
        .filter_map(|p| {
            let pm = r.memory.phases.get(*p)?;
            Some(vec![
                p.to_string(),
                bytes(pm.peak_bytes as f64),
                bytes(pm.retained_bytes as f64),
                bytes(pm.retained_bytes_last as f64),
                thousands(pm.allocations_last),
                phase_meaning(r.spec.mode.name(), p).to_string(),
            ])
        })
        .collect();
    Table {
        title: format!(
            "{} by phase (peak while it ran; bytes it allocated still live at its end)",
            crate::report::heap_kind::capitalized(crate::report::heap_kind::heap_kind(r).0)
        ),
        header: row(&[
            "phase",
            "heap peak",
            "retained (1st run)",
            "retained (last run)",
            "allocations (last run)",
            "retained is",
        ]),
        rows,
    }
}

pub fn micro_step_table(r: &Record) -> Option<Table> {
    let micro = &r.memory.micro_steps;
    let last_step = micro.last()?.step;
    let rows = micro
        .iter()
        .filter(|m| m.step == last_step)
        .map(|m| {
            vec![
                m.micro_step.to_string(),
                bytes(m.heap_live_bytes as f64),
                bytes(m.heap_peak_bytes as f64),
            ]
        })
        .collect();
    Some(Table {
        title: format!(
            "Gradient accumulation, step {last_step} (heap after each micro-step's backward){}",
            accum_vs_single(r)
        ),
        header: row(&["micro-step", "heap live", "heap peak"]),
        rows,
    })
}

/// A data-parallel run's ranks side by side, the worst marked (its figures are the Record's).
pub fn ranks_table(r: &Record) -> Option<Table> {
    let ranks = r.ranks.as_ref()?;
    let cuda = r.spec.is_cuda();
    Some(rank_table(
        ranks,
        if cuda { "CUDA allocated" } else { "heap" },
    ))
}

/// Ranks side by side (`what`: what their memory figures measure), the worst marked.
pub fn rank_table(ranks: &[crate::record::ranks::RankFigures], what: &str) -> Table {
    // CUDA's reserved bytes where a rank has them.
    let reserved = ranks.iter().any(|f| f.reserved_bytes.is_some());
    // A pipeline's ranks, each beside the peak predicted for it.
    let predicted = ranks.iter().any(|f| f.predicted_peak_bytes.is_some());
    let rows = ranks
        .iter()
        .map(|f| {
            let mut cells = vec![
                format!("{}{}", f.rank, if f.worst { " (worst)" } else { "" }),
                bytes(f.peak_bytes as f64),
                bytes(f.end_bytes as f64),
            ];
            if reserved {
                cells.push(f.reserved_bytes.map_or("n/a".into(), |b| bytes(b as f64)));
            }
            cells.push(f.parameter_bytes.map_or("n/a".into(), |b| bytes(b as f64)));
            if predicted {
                cells.push(f.predicted_peak_bytes.map_or("n/a".into(), |p| {
                    let err = 100.0 * (p as f64 - f.peak_bytes as f64) / f.peak_bytes.max(1) as f64;
                    format!("{} ({err:+.1}%)", bytes(p as f64))
                }));
            }
            cells.push(match f.step_cv_pct {
                Some(cv) => format!("{} (CV {cv:.1}%)", ms(f.step_median_ms)),
                None => ms(f.step_median_ms),
            });
            cells
        })
        .collect();
    let (peak, end) = (format!("{what} peak"), format!("{what} at end"));
    let mut header = vec!["rank", &peak, &end];
    if reserved {
        header.push("reserved after a step, max");
    }
    let predicted_peak = format!("predicted {what} peak (vs measured)");
    header.push("its parameters");
    if predicted {
        header.push(&predicted_peak);
    }
    header.push("step median, ms");
    Table {
        title: format!(
            "Ranks ({what}; every other table is the worst rank's, the one with the largest peak)"
        ),
        header: row(&header),
        rows,
    }
}

/// The reconciliation's sentence.
pub fn peak_line(r: &Record) -> Option<String> {
    crate::report::breakdown::reconciliation(r).map(|(_, s)| s)
}

/// "; peak over the step X vs Y estimated for one step on a single micro-batch".
fn accum_vs_single(r: &Record) -> String {
    let single = r
        .memory
        .estimate
        .as_ref()
        .and_then(|e| e.single_micro_batch_peak_bytes);
    let step_peak = r.memory.series.last().map_or(0, |s| s.heap_peak_bytes);
    match single {
        Some(one) => format!(
            "; heap peak over the whole step {} vs {} estimated for one step on a single micro-batch",
            bytes(step_peak as f64),
            bytes(one as f64)
        ),
        None => String::new(),
    }
}

/// The loss in one sentence: train's first → last step; infer's mean next-token loss per batch.
pub fn loss_line(r: &Record) -> Option<String> {
    let first = r.loss.first()?;
    let last = r.loss.last()?;
    let n = r.loss.len();
    let source = match &r.data {
        Some(d) => format!(
            "{} of {} ({} tokens)",
            if n == 1 { "a batch" } else { "seeded batches" },
            d.path.display(),
            d.tokens
        ),
        None => "random ids, same batch every step".into(),
    };
    let what = if r.model.family == "bert" {
        "masked-LM loss, every position predicts its own token"
    } else {
        "next-token loss"
    };
    Some(match r.spec.mode {
        crate::spec::Mode::Infer => {
            let mean = r.loss.iter().sum::<f64>() / n as f64;
            format!(
                "Loss (infer, {what}, no update): mean {mean:.6} over {n} batches, first {first:.6}, last {last:.6} ({source})"
            )
        }
        _ => format!(
            "Loss ({what}): {first:.4} at the first step → {last:.4} after {n} steps ({source})"
        ),
    })
}

/// Every table of a run summary, in reading order.
pub fn tables(r: &Record) -> Vec<Table> {
    let mut t = vec![timing_table(r)];
    t.extend(ranks_table(r));
    t.extend([memory_table(r), phase_memory_table(r)]);
    t.push(crate::report::breakdown::breakdown_table(r));
    if let Some((rec, _)) = crate::report::breakdown::reconciliation(r) {
        t.push(rec);
    }
    t.extend(micro_step_table(r));
    t.extend(crate::report::breakdown::hotspot_tables(r, 8));
    t.extend(crate::report::op_profile::tables(r));
    t
}
