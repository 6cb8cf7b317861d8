//! What a finished watch writes: the closing text (peaks, how the command ended, GPU, notes), the
//! `--csv` table (one row per sample and process, plus a `total` row) and the `--json` Record.

use crate::export::table::Table;
use crate::record::leak::LeakReport;
use crate::record::leak::TargetRow;
use crate::record::watch::{Peak, WatchFile, WATCH_SCHEMA};
use crate::units::bytes;
use crate::watch::observe::WatchResult;

/// The lines printed after the verdict.
pub fn closing_text(
    r: &WatchResult,
    total: &Option<Peak>,
    per: &[Peak],
    series_note: &str,
) -> String {
    let mut t = String::new();
    let when = |p: &Peak| match p.step {
        Some(s) => format!("at step {s}, {:.2} s", p.time_s),
        None => format!("at {:.2} s", p.time_s),
    };
    t += &format!("Judged: {series_note}\n");
    if let Some(p) = total {
        t += &format!(
            "Peak, all processes: RSS {} (PSS {}) {}\n",
            bytes(p.rss_bytes as f64),
            bytes(p.pss_bytes as f64),
            when(p)
        );
    }
    for p in per {
        t += &format!(
            "  pid {:>7} {:<16} peak RSS {} (PSS {}) {}\n",
            p.pid.unwrap_or(0),
            p.command,
            bytes(p.rss_bytes as f64),
            bytes(p.pss_bytes as f64),
            when(p)
        );
    }
    t += &format!("Processes seen: {}\n", per.len());
    t += &format!("GPU memory: {}\n", r.gpu.describe());
    match (&r.exit, r.interrupted) {
        (Some(e), Some(sig)) => {
            t += &format!(
                "Command: {} (after memscope watch received {} and forwarded it)\n",
                e.description,
                crate::watch::child::signal_name(sig)
            )
        }
        (Some(e), None) => t += &format!("Command: {}\n", e.description),
        (None, Some(sig)) => {
            t += &format!(
                "Stopped watching pid {} on {} (the process was left running)\n",
                r.root_pid,
                crate::watch::child::signal_name(sig)
            )
        }
        (None, None) => t += &format!("Process {} ended\n", r.root_pid),
    }
    let pct = if r.duration_s > 0.0 {
        r.watcher_cpu_s / r.duration_s * 100.0
    } else {
        0.0
    };
    t += &format!(
        "Sampler: {} samples in {:.1} s; memscope watch used {:.2} s CPU ({pct:.2}% of one core)\n",
        r.samples.len(),
        r.duration_s,
        r.watcher_cpu_s
    );
    for n in &r.notes {
        t += &format!("note: {n}\n");
    }
    t
}

/// One row per sample and process, then the `total` row of that sample. GPU columns say
/// `unavailable` when NVML is.
pub fn to_csv(r: &WatchResult) -> anyhow::Result<String> {
    let mut table = Table::new([
        "time_s",
        "step",
        "pid",
        "command",
        "rss_bytes",
        "pss_bytes",
        "uss_bytes",
        "swap_bytes",
        "threads",
        "cpu_percent",
        "gpu_process_bytes",
        "gpu_device_used_bytes",
    ]);
    let opt = |v: Option<u64>| v.map_or(String::new(), |v| v.to_string());
    for s in &r.samples {
        let step = s.step.map_or(String::new(), |v| v.to_string());
        let (gp, gd) = match &s.gpu {
            Some(g) => (opt(g.process_bytes), g.device_used_bytes.to_string()),
            None => ("unavailable".into(), "unavailable".into()),
        };
        for p in &s.processes {
            table.push([
                format!("{:.3}", s.time_s),
                step.clone(),
                p.pid.to_string(),
                p.command.clone(),
                p.rss_bytes.to_string(),
                p.pss_bytes.to_string(),
                p.uss_bytes.to_string(),
                p.swap_bytes.to_string(),
                p.threads.to_string(),
                format!("{:.1}", p.cpu_percent),
                String::new(),
                String::new(),
            ]);
        }
        let t = &s.total;
        table.push([
            format!("{:.3}", s.time_s),
            step,
            "total".into(),
            format!("{} processes", t.processes),
            t.rss_bytes.to_string(),
            t.pss_bytes.to_string(),
            t.uss_bytes.to_string(),
            t.swap_bytes.to_string(),
            t.threads.to_string(),
            format!("{:.1}", t.cpu_percent),
            gp,
            gd,
        ]);
    }
    table.csv()
}

/// The `--json` Record: the verdict (as `analyze --json` writes it), targets, peaks, how the
/// command ended, every sample per process and summed, step markers, values and the environment.
#[allow(clippy::too_many_arguments)]
pub fn to_json(
    r: &WatchResult,
    command: &[String],
    report: &LeakReport,
    rows: &[TargetRow],
    total: &Option<Peak>,
    per: &[Peak],
    series_note: &str,
    interval_s: f64,
) -> String {
    WatchFile {
        schema: WATCH_SCHEMA.into(),
        schema_version: 1,
        command: command.to_vec(),
        root_pid: r.root_pid,
        interval_s,
        verdict: report.clone(),
        judged: series_note.into(),
        targets: rows.to_vec(),
        peak: total.clone(),
        peaks_per_process: per.to_vec(),
        exit: r.exit.clone(),
        interrupted_by: r.interrupted.map(crate::watch::child::signal_name),
        gpu: r.gpu.clone(),
        duration_s: r.duration_s,
        watcher_cpu_s: r.watcher_cpu_s,
        notes: r.notes.clone(),
        step_markers: r.log.markers.clone(),
        values: r.log.values.clone(),
        series: r.samples.clone(),
        environment: crate::environment::capture(0),
    }
    .to_json()
    .unwrap_or_default()
}
