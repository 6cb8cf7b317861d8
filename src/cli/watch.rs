//! The `watch` command: start a command (or attach to a pid), sample its process tree until it ends,
//! then give `analyze`'s leak / warm-up verdict with the same `--max-*` targets.

use super::flags::{CsvOut, JsonOut, JsonlOut, Quiet, TraceOut};
use super::leak::TargetArgs;
use crate::analysis::leak::analyze as verdict;
use crate::analysis::targets::{all_pass, evaluate};
use crate::export::JsonlStream;
use crate::export::{check_outputs, write_atomic};
use crate::report::leak as render;
use crate::units::parse_duration;
use crate::watch::observe::{watch, Target, WatchConfig};
use crate::watch::series::{judged, peaks, Judge};
use crate::watch::steps::Patterns;
use crate::watch::summary;
use anyhow::Context;
use clap::Args;
use std::io::IsTerminal;
use std::process::ExitCode;

#[derive(Args, Debug)]
#[command(
    after_help = "Examples:\n  memscope watch -- python train.py --epochs 1\n  memscope watch --interval 50ms --jsonl mem.jsonl -- ./serve\n  memscope watch --pid 4242 --json watch.json"
)]
#[command(mut_arg("jsonl", |a| a.help(r#"Write one JSON line per sample, flushed as it is taken"#)))]
pub struct WatchArgs {
    /// Attach to this running process (and its descendants) instead of starting a command
    #[arg(long, value_name = "PID", conflicts_with = "command")]
    pub pid: Option<u32>,
    /// Time between samples (e.g. 50ms, 1s)
    #[arg(long, value_name = "DURATION", default_value = "100ms")]
    pub interval: String,
    /// After forwarding Ctrl-C / SIGTERM, wait this long before SIGKILL
    #[arg(long, value_name = "DURATION", default_value = "10s")]
    pub grace: String,
    /// Regex over output lines; each match closes a step (group `step`, else the first group).
    /// Default recognises `step 12`, `Step 12:`, `iter 12`, `it 12/500`
    #[arg(long, value_name = "REGEX")]
    pub step_pattern: Option<String>,
    /// Regex with named groups taken as extra series, unit in the name, e.g.
    /// 'allocated=(?P<allocated_mb>[\d.]+)' (repeatable)
    #[arg(long, value_name = "REGEX")]
    pub value_pattern: Vec<String>,
    /// Series the verdict judges: rss, pss, uss, gpu or a --value-pattern group name
    #[arg(long, value_name = "SERIES", default_value = "rss")]
    pub judge: String,
    #[command(flatten)]
    pub targets: TargetArgs,
    #[command(flatten)]
    pub json: JsonOut,
    #[command(flatten)]
    pub csv: CsvOut,
    #[command(flatten)]
    pub jsonl: JsonlOut,
    #[command(flatten)]
    pub trace: TraceOut,
    #[command(flatten)]
    pub quiet: Quiet,
    /// The command to start and its arguments, after `--`
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

pub fn run(a: WatchArgs) -> anyhow::Result<ExitCode> {
    let target = match (a.pid, a.command.is_empty()) {
        (Some(p), _) => Target::Pid(p),
        (None, false) => Target::Command(a.command.clone()),
        (None, true) => anyhow::bail!(
            "nothing to watch: give a command after `--` (memscope watch -- python train.py) or --pid N"
        ),
    };
    let interval = parse_duration("--interval", &a.interval)?;
    anyhow::ensure!(
        interval.as_millis() >= 1,
        "--interval {}: at least 1ms",
        a.interval
    );
    let grace = parse_duration("--grace", &a.grace)?;
    let patterns = Patterns::new(a.step_pattern.as_deref(), &a.value_pattern)?;
    let judge = Judge::parse(&a.judge);
    // A series that no pattern defines can never be judged: refuse before starting the command.
    if let Judge::Value(name) = &judge {
        let names = patterns.value_names();
        anyhow::ensure!(
            names.contains(&name.as_str()),
            "--judge {}: no such series; use rss, pss, uss, gpu or a --value-pattern group ({})",
            a.judge,
            if names.is_empty() {
                "no --value-pattern given".to_string()
            } else {
                names.join(", ")
            }
        );
    }
    // GPU memory that cannot be read can never be judged: refused before the command starts.
    if judge == Judge::Gpu {
        if let (status, None) = crate::watch::gpu::probe() {
            anyhow::bail!(
                "--judge gpu: GPU memory is {} on this machine; judge rss, pss or uss",
                status.describe()
            );
        }
    }
    let targets = a.targets.targets()?;
    let params = a.targets.params(None)?;
    check_outputs(
        &[
            ("--json", a.json.as_deref()),
            ("--csv", a.csv.as_deref()),
            ("--jsonl", a.jsonl.as_deref()),
            ("--trace", a.trace.as_deref()),
        ],
        &[] as &[(&str, &std::path::Path)],
    )?;
    let jsonl = a
        .jsonl
        .as_deref()
        .map(|p| {
            // Truncated, flushed per sample, not synced (a sample every interval).
            JsonlStream::open(p, false, false)
                .map_err(|e| anyhow::anyhow!("--jsonl {}: cannot create: {e}", p.display()))
        })
        .transpose()?;
    let cfg = WatchConfig {
        target: target.clone(),
        interval,
        grace,
        patterns,
        status: !*a.quiet && std::io::stderr().is_terminal(),
        jsonl,
        smaps_every_sample: matches!(judge, Judge::Pss | Judge::Uss),
    };
    let r = watch(cfg)?;
    let (total, per) = peaks(&r.samples);
    let (report, note, rows) = match judged(&r.samples, &r.log, &judge) {
        Ok((series, note)) => {
            let report = verdict(&series, &params);
            let peak = series.values.iter().cloned().reduce(f64::max);
            let rows = evaluate(&targets, &report, None, peak);
            (Some(report), note, rows)
        }
        Err(e) => (None, e, vec![]),
    };
    let command = match &target {
        Target::Command(c) => c.clone(),
        Target::Pid(p) => vec![format!("--pid {p}")],
    };
    if let Some(p) = &*a.csv {
        write_atomic(p, &summary::to_csv(&r)?).with_context(|| format!("--csv {}", p.display()))?;
    }
    let report_or_empty = report
        .clone()
        .unwrap_or_else(|| crate::record::leak::LeakReport::empty(&judge.label(), params.clone()));
    if let Some(p) = &*a.json {
        let text = summary::to_json(
            &r,
            &command,
            &report_or_empty,
            &rows,
            &total,
            &per,
            &note,
            interval.as_secs_f64(),
        );
        write_atomic(p, &text).with_context(|| format!("--json {}", p.display()))?;
    }
    if let Some(p) = &*a.trace {
        let text = crate::watch::trace::to_json(&r, &command)?;
        write_atomic(p, &text).with_context(|| format!("--trace {}", p.display()))?;
    }
    // The command's own output is passed through on stdout (`watch -- cmd > out.bin` keeps
    // exactly the command's bytes): the report goes to stderr, on a fresh block.
    let mut text = String::from("\n── memscope watch ──\n");
    match &report {
        Some(rep) => text.push_str(&render::to_text(rep, &rows)),
        None => text.push_str(&format!("No verdict: {note}\n")),
    }
    text.push_str(&summary::closing_text(&r, &total, &per, &note));
    crate::export::print_stderr(&text)?;
    if let (Some(e), Some(p)) = (&r.jsonl_error, &*a.jsonl) {
        anyhow::bail!(
            "--jsonl {}: writing failed: {e}; the samples after that are missing from it",
            p.display()
        );
    }
    if !all_pass(&rows) {
        return Ok(ExitCode::from(1));
    }
    // A series that could not be judged (it never appeared) fails the run, so CI sees it: the
    // command's own failure still passes through below.
    if report.is_none() && r.exit.as_ref().is_none_or(|e| e.exit_code() == 0) {
        eprintln!("memscope watch: nothing was judged: {note}");
        return Ok(ExitCode::from(1));
    }
    Ok(match (&target, &r.exit) {
        (Target::Pid(_), _) => ExitCode::SUCCESS,
        (_, Some(e)) => ExitCode::from(e.exit_code()),
        (_, None) => ExitCode::from(1),
    })
}
