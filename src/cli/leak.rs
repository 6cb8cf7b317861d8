//! The `leak` and `analyze` commands: run a workload for many identical steps (or read a memory
//! log someone else wrote), then state whether live memory keeps growing, and check CI targets.

use super::args::{build_spec, ModelArgs, WorkloadArgs};
use super::flags::{Quiet, TableFiles, TraceOut};
use crate::analysis::leak::{analyze as verdict, cross_check};
use crate::analysis::record_series::{series, steps_per_hour};
use crate::analysis::targets::{all_pass, evaluate, Target, TargetKind};
use crate::export::{check_outputs, write_atomic};
use crate::input::series::{parse_reader, ParseOptions, SeriesFormat};
use crate::measure::threads::set_run_threads;
use crate::progress::Progress;
use crate::record::leak::TargetRow;
use crate::record::leak::{LeakParams, LeakReport};
use crate::report::leak as render;
use crate::units::parse_size;
use crate::units::Unit;
use crate::{out, outln};
use anyhow::Context;
use clap::Args;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Args, Debug, Clone, Default)]
pub struct TargetArgs {
    /// Fail unless growth after warm-up stays under this rate (e.g. 10MB/h or 1MiB/step)
    #[arg(long, value_name = "RATE", allow_hyphen_values = true)]
    pub max_growth: Option<String>,
    /// Fail unless growth after warm-up stays under this many bytes per step (e.g. 1MiB)
    #[arg(long, value_name = "SIZE", allow_hyphen_values = true)]
    pub max_growth_per_step: Option<String>,
    /// Fail unless memory after warm-up stays within this range (max − min, e.g. 500MB)
    #[arg(long, value_name = "SIZE", allow_hyphen_values = true)]
    pub max_post_warmup_range: Option<String>,
    /// Fail unless model load stays under this size (heap live retained by load; bench runs only)
    #[arg(long, value_name = "SIZE", allow_hyphen_values = true)]
    pub max_load: Option<String>,
    /// Fail unless peak memory stays under this size (heap peak for runs; series maximum for logs)
    #[arg(long, value_name = "SIZE", allow_hyphen_values = true)]
    pub max_peak: Option<String>,
    /// Memory budget: report the steps and hours until it is exhausted (e.g. 16GiB)
    #[arg(long, value_name = "SIZE", allow_hyphen_values = true)]
    pub budget: Option<String>,
    /// Steps per hour, for growth per hour (default: from timestamps or the measured step time)
    #[arg(long, value_name = "N")]
    pub steps_per_hour: Option<f64>,
}

impl TargetArgs {
    pub(super) fn targets(&self) -> anyhow::Result<Vec<Target>> {
        let flags = [
            (TargetKind::MaxGrowthPerHour, &self.max_growth),
            (TargetKind::MaxGrowthPerStep, &self.max_growth_per_step),
            (TargetKind::MaxPostWarmupRange, &self.max_post_warmup_range),
            (TargetKind::MaxLoad, &self.max_load),
            (TargetKind::MaxPeak, &self.max_peak),
        ];
        flags
            .into_iter()
            .filter_map(|(k, v)| {
                v.as_deref()
                    .map(|v| Target::parse(k, v).map_err(anyhow::Error::msg))
            })
            .collect()
    }

    pub(super) fn params(
        &self,
        measured_steps_per_hour: Option<f64>,
    ) -> anyhow::Result<LeakParams> {
        let budget_bytes = match &self.budget {
            Some(b) => Some(parse_size(b).map_err(|e| anyhow::anyhow!("--budget: {e}"))?),
            None => None,
        };
        if let Some(s) = self.steps_per_hour {
            // At most one step per microsecond: beyond it growth per hour is not a figure
            // (1e308 made it infinite and silently dropped it).
            anyhow::ensure!(
                s.is_finite() && s > 0.0 && s <= 3.6e9,
                "--steps-per-hour must be a positive number of at most 3.6e9 (a step per microsecond) (got {s:e})"
            );
        }
        Ok(LeakParams {
            budget_bytes,
            steps_per_hour: self.steps_per_hour.or(measured_steps_per_hour),
            ..LeakParams::default()
        })
    }
}

/// A leak report in each format asked for.
fn write_report(files: &TableFiles, r: &LeakReport, rows: &[TargetRow]) -> anyhow::Result<()> {
    files.write(
        || Ok(render::to_json(r, rows)),
        || render::to_csv(r, rows),
        || Ok(render::to_markdown(r, rows)),
    )
}

#[derive(Args, Debug)]
// One process: --nproc/--parallel are refused by name, not offered.
#[command(mut_arg("nproc", |a| a.hide(true)), mut_arg("parallel", |a| a.hide(true)))]
pub struct LeakArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub workload: WorkloadArgs,
    #[command(flatten)]
    pub targets: TargetArgs,
    #[command(flatten)]
    pub files: TableFiles,
    /// Also write the full benchmark Record (every step's heap live, RSS, PSS) as JSON
    #[arg(long, value_name = "FILE")]
    pub record: Option<PathBuf>,
    #[command(flatten)]
    pub trace: TraceOut,
    #[command(flatten)]
    pub quiet: Quiet,
}

#[derive(Args, Debug)]
pub struct AnalyzeArgs {
    /// A memory log: CSV, JSONL, or a text log (with --pattern or the default "step N … X MB" pattern); - reads stdin
    pub file: PathBuf,
    #[arg(long, value_enum)]
    pub format: Option<FormatArg>,
    /// CSV column / JSON key holding the step
    #[arg(long)]
    pub step_column: Option<String>,
    /// CSV column / JSON key holding the memory value
    #[arg(long)]
    pub value_column: Option<String>,
    /// CSV column / JSON key holding the time (seconds or ISO 8601)
    #[arg(long)]
    pub time_column: Option<String>,
    /// Regex with named groups `step` and `value` (optional `unit`, `time`),
    /// e.g. 'Step (?P<step>\d+):\s+(?P<value>[\d,]+) MB'
    #[arg(long)]
    pub pattern: Option<String>,
    /// Unit of the values: B, KB, MB, GB, TB, KiB, MiB, GiB, TiB (overrides units in the file)
    #[arg(long)]
    pub unit: Option<String>,
    #[command(flatten)]
    pub targets: TargetArgs,
    #[command(flatten)]
    pub files: TableFiles,
    #[command(flatten)]
    pub quiet: Quiet,
}

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum FormatArg {
    Csv,
    Jsonl,
    Log,
}

/// Defaults of `leak`: every step measured (the warm-up is found, not assumed), 300 of them.
pub const LEAK_STEPS: usize = 300;

pub fn leak(mut a: LeakArgs) -> anyhow::Result<ExitCode> {
    a.workload.variant.engine.refuse_parallel("leak")?;
    a.workload.warmup.warmup.get_or_insert(0);
    a.workload.steps.steps.get_or_insert(LEAK_STEPS);
    let spec = build_spec(&a.model, &a.workload)?;
    if !*a.workload.force {
        crate::runner::check_machine_memory(&spec)?;
    }
    let targets = a.targets.targets()?;
    a.targets.params(None)?; // its flags are checked before the run, not after
                             // Every target of `leak` reads heap figures, which counting off does not measure.
    if let Some(t) = targets.first() {
        anyhow::ensure!(
            crate::instrument::alloc::counting(),
            "{} judges heap figures, but counting is off (MEMSCOPE_NO_COUNT is set): unset MEMSCOPE_NO_COUNT, or judge RSS with `memscope watch -- …`",
            t.kind.flag()
        );
    }
    let mut outputs = a.files.flags().to_vec();
    outputs.push(("--record", a.record.as_deref()));
    outputs.push(("--trace", a.trace.as_deref()));
    check_outputs(
        &outputs,
        &super::args::run_inputs(
            a.model.config.as_deref(),
            a.model.weights.as_deref(),
            a.workload.data.data.as_deref(),
        ),
    )?;
    set_run_threads(&spec);
    let progress = Progress::start(
        spec.warmup + spec.steps,
        format!("{} {} leak", spec.model, spec.mode.name()),
        *a.quiet,
    );
    // Ctrl-C ends the run after the step under way; the steps measured are analysed and written.
    crate::stop::stop_on_signals();
    let result = crate::runner::run(&spec, &progress.steps);
    progress.finish();
    let record = result?;
    let stopped = crate::stop::requested();
    if let Some(p) = &a.record {
        let text = record.to_json()?;
        write_atomic(p, &text).with_context(|| format!("--record {}", p.display()))?;
    }
    if let Some(p) = &*a.trace {
        let text = crate::report::trace::to_json(&record)?;
        write_atomic(p, &text).with_context(|| format!("--trace {}", p.display()))?;
    }
    let params = a.targets.params(steps_per_hour(&record))?;
    let (heap, rows) = judge_heap(&record, &params, &targets);
    let rss = verdict(&series(&record, "RSS", |s| s.rss_bytes), &params);
    write_report(&a.files, &heap, &rows)?;
    out!("{}", render::to_text(&heap, &rows))?;
    outln!("\nRSS (what the OS sees): {}", rss.sentence)?;
    if let Some(note) = cross_check(&heap, &rss) {
        outln!("{note}")?;
    }
    if stopped {
        eprintln!(
            "memscope leak: stopped by a signal after {} measured steps; the verdict and the files written cover them",
            record.spec.steps
        );
        return Ok(ExitCode::from(crate::sweep::interrupt::EXIT_INTERRUPTED));
    }
    Ok(exit_for(&rows))
}

pub fn analyze(a: AnalyzeArgs) -> anyhow::Result<ExitCode> {
    check_outputs(&a.files.flags(), &[("FILE", &a.file)])?;
    // Nothing is measured here: give freed memory back so a long log costs only what it holds.
    crate::instrument::alloc::return_freed_memory();
    let stdin = a.file.as_os_str() == "-";
    let name = if stdin {
        "stdin".to_string()
    } else {
        a.file.display().to_string()
    };
    let unit = match &a.unit {
        Some(u) => Some(Unit::parse(u).ok_or_else(|| {
            anyhow::anyhow!(
                "--unit {u}: unknown unit; use one of B, KB, MB, GB, TB, KiB, MiB, GiB, TiB"
            )
        })?),
        None => None,
    };
    let opts = ParseOptions {
        format: a.format.map(|f| match f {
            FormatArg::Csv => SeriesFormat::Csv,
            FormatArg::Jsonl => SeriesFormat::Jsonl,
            FormatArg::Log => SeriesFormat::Log,
        }),
        step_column: a.step_column.clone(),
        value_column: a.value_column.clone(),
        time_column: a.time_column.clone(),
        pattern: a.pattern.clone(),
        unit,
        ..Default::default()
    };
    let targets = a.targets.targets()?;
    if !stdin && is_record(&a.file) {
        return analyze_record(&a, &name, &targets);
    }
    let parsed = if stdin {
        parse_reader(&mut std::io::stdin().lock(), &opts)
    } else {
        let f = std::fs::File::open(&a.file).with_context(|| format!("cannot read {name}"))?;
        anyhow::ensure!(
            !f.metadata().is_ok_and(|m| m.is_dir()),
            "{name} is a directory; give a memory log file (or - for stdin)"
        );
        let opts = ParseOptions {
            size_hint_bytes: f.metadata().ok().map(|m| m.len()),
            ..opts.clone()
        };
        parse_reader(&mut std::io::BufReader::with_capacity(1 << 16, f), &opts)
    };
    let (series, warnings) = parsed.map_err(|e| anyhow::anyhow!("{name}: {e}"))?;
    for w in warnings {
        eprintln!("warning: {name}: {w}");
    }
    let report = verdict(&series, &a.targets.params(None)?);
    let peak = series
        .values
        .iter()
        .cloned()
        .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.max(v))));
    let rows = evaluate(&targets, &report, None, peak);
    write_report(&a.files, &report, &rows)?;
    out!("{}", render::to_text(&report, &rows))?;
    Ok(exit_for(&rows))
}

/// The verdict on a Record's per-step heap live series and its CI targets (`leak` on the Record
/// it measured, `analyze` on one read from a file).
fn judge_heap(
    record: &crate::record::Record,
    params: &LeakParams,
    targets: &[crate::analysis::targets::Target],
) -> (LeakReport, Vec<TargetRow>) {
    let heap = verdict(
        &series(record, "heap live", |s| Some(s.heap_live_bytes)),
        params,
    );
    let rows = evaluate(
        targets,
        &heap,
        Some(record.memory.load_bytes as f64),
        Some(record.memory.heap_peak_bytes as f64),
    );
    (heap, rows)
}

/// A memscope Record (`bench --json`, `leak --record`, the Python recorder's `run.json`): one
/// JSON document whose first key is `schema_version`, as memscope writes it.
fn is_record(path: &std::path::Path) -> bool {
    use std::io::Read;
    let mut head = [0u8; 256];
    let n = std::fs::File::open(path)
        .and_then(|mut f| f.read(&mut head))
        .unwrap_or(0);
    let head = String::from_utf8_lossy(&head[..n]);
    head.trim_start().starts_with('{') && head.contains("\"schema_version\"")
}

/// `analyze` on a Record: the verdict on its per-step heap live series, its steps per hour from
/// its own timing, as `leak` gives it.
fn analyze_record(
    a: &AnalyzeArgs,
    name: &str,
    targets: &[crate::analysis::targets::Target],
) -> anyhow::Result<ExitCode> {
    let crate::record::detect::Input::Record(record) = crate::record::detect::load(&a.file)?.input
    else {
        anyhow::bail!("{name}: not a memscope Record");
    };
    eprintln!(
        "note: {name} is a memscope Record: judging its per-step heap live series ({} steps)",
        record.memory.series.len()
    );
    let (report, rows) = judge_heap(
        &record,
        &a.targets.params(steps_per_hour(&record))?,
        targets,
    );
    write_report(&a.files, &report, &rows)?;
    out!("{}", render::to_text(&report, &rows))?;
    Ok(exit_for(&rows))
}

/// 1 when a CI target failed, so a test suite can assert "no leak after warm-up".
fn exit_for(rows: &[TargetRow]) -> ExitCode {
    if all_pass(rows) {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
