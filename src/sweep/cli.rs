//! `memscope sweep`, `memscope fit` and `memscope scaling`: arguments, the sweep loop (one worker
//! per configuration, a row per outcome, skipping after OOM), interruption, and the fit search.

use crate::cli::{resolve_model, write_atomic, ModelArgs};
use crate::model::cost;
use crate::report::units::bytes as fmt_bytes;
use crate::spec::{Dtype, Mode, Spec};
use crate::sweep::plan::{self, Axes, Point};
use crate::sweep::rows::{self, JsonlWriter, Row, Status};
use crate::sweep::run::{human_duration, run_worker, Enforcement, Live, RunOptions};
use anyhow::{bail, Context};
use clap::{Args, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Exit code of a sweep or fit stopped by SIGINT or SIGTERM.
pub const EXIT_INTERRUPTED: u8 = 130;

#[derive(Args, Debug)]
pub struct SweepArgs {
    /// Presets, comma-separated (see `memscope models`)
    #[arg(long, default_value = "gpt2-small", conflicts_with = "config")]
    pub model: String,
    /// One model config JSON instead of presets
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Hugging Face-named weights for every configuration
    #[arg(long, value_name = "FILE")]
    pub weights: Option<PathBuf>,
    /// Modes, comma-separated: train, infer, generate
    #[arg(long, default_value = "train")]
    pub mode: String,
    /// Batch sizes: a list (1,2,4) or ranges (1-8, 1-64*2, 0-8+2)
    #[arg(long, default_value = "2")]
    pub batch: String,
    /// Sequence lengths (the prompt length for generate): list or ranges (128-1024*2)
    #[arg(long, default_value = "128")]
    pub seq: String,
    /// dtypes, comma-separated: f32, bf16, f16
    #[arg(long, default_value = "f32")]
    pub dtype: String,
    /// Unmeasured steps before the measured ones: list or ranges (0,1,2,5)
    #[arg(long, default_value = "2")]
    pub warmup: String,
    /// Micro-batches per optimizer step (train): list or ranges
    #[arg(long, default_value = "1")]
    pub grad_accum: String,
    /// Measured steps per configuration
    #[arg(long, default_value_t = 10)]
    pub steps: usize,
    /// CPU threads per worker (default: all cores)
    #[arg(long)]
    pub threads: Option<usize>,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Tokens decoded per measured step (generate)
    #[arg(long, default_value_t = 32)]
    pub new_tokens: usize,
    /// AdamW learning rate (train)
    #[arg(long, default_value_t = 1e-3)]
    pub lr: f64,
    /// Memory budget per worker: 512MiB, 8GiB, 2GB, … (cgroup v2 where delegated, else RLIMIT_DATA; plus a PSS watchdog)
    #[arg(long, value_name = "BYTES")]
    pub memory_limit: Option<String>,
    /// Time limit per configuration: 90s, 10m, 1h
    #[arg(long, value_name = "DURATION")]
    pub timeout: Option<String>,
    /// Append one JSON row per configuration, flushed as each one ends
    #[arg(long, value_name = "FILE")]
    pub jsonl: Option<PathBuf>,
    /// Write all rows as CSV at the end
    #[arg(long, value_name = "FILE")]
    pub csv: Option<PathBuf>,
    /// Write the rows and the scaling analysis as Markdown at the end
    #[arg(long, value_name = "FILE")]
    pub markdown: Option<PathBuf>,
    /// Run configurations larger than one that ran out of memory instead of skipping them
    #[arg(long)]
    pub no_skip: bool,
    /// No progress bar or per-configuration lines
    #[arg(long, short)]
    pub quiet: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Vary {
    Batch,
    Seq,
}

#[derive(Args, Debug)]
pub struct FitArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    #[arg(long, value_enum, default_value_t = Mode::Train)]
    pub mode: Mode,
    #[arg(long, value_enum, default_value_t = Dtype::F32)]
    pub dtype: Dtype,
    /// Which size to search for
    #[arg(long, value_enum, default_value_t = Vary::Batch)]
    pub vary: Vary,
    /// Batch size (fixed when --vary seq)
    #[arg(long, default_value_t = 1)]
    pub batch: usize,
    /// Sequence length (fixed when --vary batch)
    #[arg(long, default_value_t = 128)]
    pub seq: usize,
    /// Unmeasured steps per trial (train: the second step holds optimizer state and activations)
    #[arg(long, default_value_t = 1)]
    pub warmup: usize,
    /// Measured steps per trial
    #[arg(long, default_value_t = 1)]
    pub steps: usize,
    #[arg(long)]
    pub threads: Option<usize>,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    #[arg(long, default_value_t = 1)]
    pub grad_accum: usize,
    #[arg(long, default_value_t = 32)]
    pub new_tokens: usize,
    #[arg(long, default_value_t = 1e-3)]
    pub lr: f64,
    /// The memory budget to fit in: 512MiB, 16GiB, …
    #[arg(long, value_name = "BYTES")]
    pub memory_limit: String,
    /// Time limit per trial: 90s, 10m, 1h
    #[arg(long, value_name = "DURATION")]
    pub timeout: Option<String>,
    /// Largest size tried when nothing runs out of memory (default: 65536 for batch, the model's context for seq)
    #[arg(long)]
    pub max: Option<usize>,
    /// Write the result (max_batch or max_seq, peak, headroom, every trial) as JSON
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    #[arg(long, short)]
    pub quiet: bool,
}

#[derive(Args, Debug)]
pub struct ScalingArgs {
    /// A sweep's --jsonl file
    #[arg(value_name = "RESULTS.jsonl")]
    pub file: PathBuf,
}

/// Parses a byte count: a number with an optional unit B, KB, MB, GB, TB (powers of 1000) or
/// KiB, MiB, GiB, TiB (powers of 1024); case-insensitive, spaces allowed, decimals allowed.
pub fn parse_bytes(flag: &str, text: &str) -> anyhow::Result<u64> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = (t[..split].trim(), t[split..].trim());
    let hint = "use a number with B, KB, MB, GB, KiB, MiB or GiB, e.g. 512MiB or 8GiB";
    let value: f64 = num
        .parse()
        .ok()
        .filter(|v: &f64| v.is_finite())
        .with_context(|| format!("{flag} {text}: not a size; {hint}"))?;
    let mult: f64 = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "kb" | "k" => 1e3,
        "mb" | "m" => 1e6,
        "gb" | "g" => 1e9,
        "tb" | "t" => 1e12,
        "kib" => 1024.0,
        "mib" => 1024.0 * 1024.0,
        "gib" => 1024.0 * 1024.0 * 1024.0,
        "tib" => 1024f64.powi(4),
        _ => bail!("{flag} {text}: unknown unit \"{unit}\"; {hint}"),
    };
    let b = (value * mult).round();
    if b < 1.0 || b >= u64::MAX as f64 {
        bail!("{flag} {text}: must be between 1 B and 16 EiB; {hint}");
    }
    Ok(b as u64)
}

/// Parses a duration: a number with s, m or h (a bare number is seconds), e.g. 90s, 10m, 1.5h.
pub fn parse_duration(flag: &str, text: &str) -> anyhow::Result<Duration> {
    let t = text.trim();
    let hint = "use a number with s, m or h, e.g. 90s, 10m, 1h";
    let (num, mult) = match t.chars().last() {
        Some('s') => (&t[..t.len() - 1], 1.0),
        Some('m') => (&t[..t.len() - 1], 60.0),
        Some('h') => (&t[..t.len() - 1], 3600.0),
        _ => (t, 1.0),
    };
    let v: f64 = num
        .trim()
        .parse()
        .ok()
        .filter(|v: &f64| v.is_finite() && *v > 0.0)
        .with_context(|| format!("{flag} {text}: not a positive duration; {hint}"))?;
    Ok(Duration::from_secs_f64(v * mult))
}

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

/// SIGINT and SIGTERM set a flag; the loop kills the current worker group and stops.
fn install_interrupt_handler() {
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as usize;
        libc::sigemptyset(&mut sa.sa_mask);
        sa.sa_flags = libc::SA_RESTART;
        libc::sigaction(libc::SIGINT, &sa, std::ptr::null_mut());
        libc::sigaction(libc::SIGTERM, &sa, std::ptr::null_mut());
    }
}

/// Scratch directory for the workers' Records and series, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> anyhow::Result<Scratch> {
        let dir = std::env::temp_dir().join(format!("memscope-sweep-{}", std::process::id()));
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("creating {} (set TMPDIR)", dir.display()))?;
        Ok(Scratch(dir))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn default_threads(t: Option<usize>) -> usize {
    t.unwrap_or_else(|| {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    })
}

/// The Spec of one sweep point (not validated: an invalid one becomes an `error` row).
fn spec_for(a: &SweepArgs, p: &Point) -> anyhow::Result<Spec> {
    let (name, config) = resolve_model(&ModelArgs {
        model: p.model.clone(),
        config: a.config.clone(),
        weights: a.weights.clone(),
    })?;
    let mode = Mode::from_str(&p.mode, true)
        .map_err(|_| anyhow::anyhow!("--mode {}: use train, infer or generate", p.mode))?;
    let dtype = Dtype::from_str(&p.dtype, true)
        .map_err(|_| anyhow::anyhow!("--dtype {}: use f32, bf16 or f16", p.dtype))?;
    Ok(Spec {
        model: name,
        config,
        config_path: a.config.clone(),
        weights: a.weights.clone(),
        mode,
        batch: p.batch,
        seq: p.seq,
        dtype,
        threads: default_threads(a.threads),
        seed: a.seed,
        warmup: p.warmup,
        steps: a.steps,
        grad_accum: p.grad_accum,
        prompt_len: p.seq,
        new_tokens: a.new_tokens,
        lr: a.lr,
    })
}

/// Builds every Spec of the sweep, in plan order. Unknown models, modes and dtypes are usage
/// errors (nothing runs); a Spec that fails validation is kept for an `error` row.
pub fn plan_specs(a: &SweepArgs) -> anyhow::Result<Vec<(Point, Spec)>> {
    let models = match &a.config {
        Some(_) => vec![
            resolve_model(&ModelArgs {
                model: String::new(),
                config: a.config.clone(),
                weights: None,
            })?
            .0,
        ],
        None => plan::parse_axis_str("--model", &a.model)?,
    };
    let mut sizes = std::collections::HashMap::new();
    for m in &models {
        let (_, cfg) = resolve_model(&ModelArgs {
            model: m.clone(),
            config: a.config.clone(),
            weights: None,
        })?;
        sizes.insert(m.clone(), cost::param_count(&cfg).unwrap_or(u64::MAX));
    }
    let modes = plan::parse_axis_str("--mode", &a.mode)?;
    let dtypes = plan::parse_axis_str("--dtype", &a.dtype)?;
    for m in &modes {
        Mode::from_str(m, true)
            .map_err(|_| anyhow::anyhow!("--mode {m}: use train, infer or generate"))?;
    }
    for d in &dtypes {
        Dtype::from_str(d, true)
            .map_err(|_| anyhow::anyhow!("--dtype {d}: use f32, bf16 or f16"))?;
    }
    let axes = Axes {
        models,
        modes,
        dtypes,
        batches: plan::parse_axis_usize("--batch", &a.batch, 1)?,
        seqs: plan::parse_axis_usize("--seq", &a.seq, 1)?,
        warmups: plan::parse_axis_usize("--warmup", &a.warmup, 0)?,
        grad_accums: plan::parse_axis_usize("--grad-accum", &a.grad_accum, 1)?,
    };
    let points = plan::plan(&axes, |m| sizes.get(m).copied().unwrap_or(u64::MAX));
    points
        .into_iter()
        .map(|p| spec_for(a, &p).map(|s| (p, s)))
        .collect()
}

/// Progress: an indicatif bar on a terminal, one line per finished configuration otherwise.
struct SweepProgress {
    bar: Option<ProgressBar>,
    lines: bool,
    total: usize,
}

impl SweepProgress {
    fn new(total: usize, quiet: bool) -> SweepProgress {
        let tty = std::io::stderr().is_terminal();
        let bar = (!quiet && tty).then(|| {
            let bar = ProgressBar::new(total as u64);
            bar.set_style(
                ProgressStyle::with_template(
                    "{spinner} [{bar:30}] {pos}/{len} configurations · {elapsed} elapsed, ETA {eta} · {msg}",
                )
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
            );
            bar
        });
        SweepProgress {
            bar,
            lines: !quiet && !tty,
            total,
        }
    }

    fn current(&self, label: &str, live: &Live) {
        if let Some(b) = &self.bar {
            let (d, t) = (
                live.done.load(Ordering::Relaxed),
                live.total.load(Ordering::Relaxed),
            );
            b.set_message(format!("{label} · step {d}/{t}"));
            b.tick();
        }
    }

    fn finished(&self, row: &Row) {
        let line = format!(
            "[{}/{}] {:<7} {}{}",
            row.index + 1,
            self.total,
            row.status.name(),
            row.label(),
            row.reason
                .as_ref()
                .map_or(String::new(), |r| format!(" — {r}"))
        );
        if let Some(b) = &self.bar {
            b.println(line);
            b.inc(1);
        } else if self.lines {
            eprintln!("{line}");
        }
    }

    fn done(&self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }
}

/// Why a point is skipped after an earlier OOM, if it is.
fn skip_reason(ooms: &[Point], p: &Point) -> Option<String> {
    ooms.iter()
        .find(|a| plan::strictly_larger(a, p))
        .map(|a| format!("oom at batch {} seq {}", a.batch, a.seq))
}

pub fn sweep(a: SweepArgs) -> anyhow::Result<ExitCode> {
    let planned = plan_specs(&a)?;
    if planned.is_empty() {
        bail!("nothing to run: every axis needs at least one value");
    }
    let memory_limit = a
        .memory_limit
        .as_deref()
        .map(|t| parse_bytes("--memory-limit", t))
        .transpose()?;
    let timeout = a
        .timeout
        .as_deref()
        .map(|t| parse_duration("--timeout", t))
        .transpose()?;
    for (flag, path) in [("--csv", &a.csv), ("--markdown", &a.markdown)] {
        if let Some(p) = path {
            let dir = p.parent().filter(|d| !d.as_os_str().is_empty());
            if dir.is_some_and(|d| !d.is_dir()) {
                bail!("{flag} {}: its directory does not exist", p.display());
            }
        }
    }
    let mut jsonl = a.jsonl.as_deref().map(JsonlWriter::open).transpose()?;
    let enforcement = Enforcement::detect(memory_limit);
    let scratch = Scratch::new()?;
    let opts = RunOptions {
        memory_limit,
        enforcement: enforcement.clone(),
        timeout,
        scratch: scratch.0.clone(),
    };
    install_interrupt_handler();
    if !a.quiet {
        eprintln!(
            "memscope sweep: {} configurations; {}{}",
            planned.len(),
            enforcement.describe(memory_limit),
            timeout.map_or(String::new(), |t| format!(
                "; timeout {} per configuration",
                human_duration(t)
            ))
        );
    }
    let progress = SweepProgress::new(planned.len(), a.quiet);
    let started = Instant::now();
    let live = Live::default();
    let mut rows: Vec<Row> = Vec::new();
    let mut ooms: Vec<Point> = Vec::new();
    let mut interrupted = false;
    for (point, spec) in &planned {
        if INTERRUPTED.load(Ordering::SeqCst) {
            interrupted = true;
            break;
        }
        let row = if let Err(e) = spec.validate() {
            Row::not_run(Status::Error, e.to_string(), point.index, spec.clone())
        } else if let Some(reason) = (!a.no_skip).then(|| skip_reason(&ooms, point)).flatten() {
            Row::not_run(Status::Skipped, reason, point.index, spec.clone())
        } else {
            let label = rows::label(spec);
            match run_worker(spec, point.index, &opts, &INTERRUPTED, &live, || {
                progress.current(&label, &live)
            })? {
                Some(row) => row,
                None => {
                    interrupted = true;
                    break;
                }
            }
        };
        if row.status == Status::Oom {
            ooms.push(point.clone());
        }
        if let Some(w) = jsonl.as_mut() {
            w.append(&row)
                .with_context(|| format!("--jsonl {}", a.jsonl.as_ref().unwrap().display()))?;
        }
        progress.finished(&row);
        rows.push(row);
    }
    progress.done();
    let wall = started.elapsed().as_secs_f64();
    if let Some(p) = &a.csv {
        write_atomic(p, &rows::to_csv(&rows)?).with_context(|| format!("--csv {}", p.display()))?;
    }
    let text = crate::report::scaling::render(&rows);
    if let Some(p) = &a.markdown {
        let md = format!(
            "# memscope sweep\n\n{}.\n\n{text}",
            enforcement.describe(memory_limit)
        );
        write_atomic(p, &md).with_context(|| format!("--markdown {}", p.display()))?;
    }
    println!("{}.", enforcement.describe(memory_limit));
    print!("{text}");
    let measured: f64 = rows
        .iter()
        .filter_map(|r| r.summary.as_ref())
        .map(|s| s.step_samples_ms.iter().sum::<f64>() / 1e3)
        .sum();
    println!(
        "\nSweep wall time {wall:.1} s; measured steps {measured:.1} s ({:.0}% of the wall time; the rest is process start, model build, warm-up and analysis).",
        if wall > 0.0 { 100.0 * measured / wall } else { 0.0 }
    );
    if interrupted {
        eprintln!(
            "memscope sweep: interrupted; {} finished configurations kept",
            rows.len()
        );
        return Ok(ExitCode::from(EXIT_INTERRUPTED));
    }
    Ok(ExitCode::SUCCESS)
}

pub fn scaling(a: ScalingArgs) -> anyhow::Result<ExitCode> {
    let rows = rows::read_jsonl(&a.file)?;
    if rows.is_empty() {
        bail!(
            "{}: no rows (was it written by sweep --jsonl?)",
            a.file.display()
        );
    }
    print!("{}", crate::report::scaling::render(&rows));
    Ok(ExitCode::SUCCESS)
}

/// The outcome of `memscope fit`.
#[derive(Debug, serde::Serialize)]
pub struct FitResult {
    pub vary: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_batch: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_seq: Option<usize>,
    /// The smallest size that did not fit (none when the search hit --max).
    pub first_oom: Option<usize>,
    pub memory_limit_bytes: u64,
    pub enforcement: String,
    /// heap peak and worker VmHWM at the largest size that fits.
    pub heap_peak_bytes: Option<u64>,
    pub rss_peak_bytes: Option<u64>,
    /// --memory-limit − the worker's VmHWM at that size.
    pub headroom_bytes: Option<i64>,
    /// Where the search started: the largest size whose estimated heap peak is within the
    /// limit (`memscope estimate`); none when the model could not be estimated.
    pub estimated_start: Option<usize>,
    pub trials: Vec<Row>,
}

pub fn fit(a: FitArgs) -> anyhow::Result<ExitCode> {
    let limit = parse_bytes("--memory-limit", &a.memory_limit)?;
    let timeout = a
        .timeout
        .as_deref()
        .map(|t| parse_duration("--timeout", t))
        .transpose()?;
    let (name, config) = resolve_model(&a.model)?;
    let base = Spec {
        model: name,
        config: config.clone(),
        config_path: a.model.config.clone(),
        weights: a.model.weights.clone(),
        mode: a.mode,
        batch: a.batch,
        seq: a.seq,
        dtype: a.dtype,
        threads: default_threads(a.threads),
        seed: a.seed,
        warmup: a.warmup,
        steps: a.steps,
        grad_accum: a.grad_accum,
        prompt_len: a.seq,
        new_tokens: a.new_tokens,
        lr: a.lr,
    };
    base.validate()?;
    let cap = match a.vary {
        Vary::Batch => a.max.unwrap_or(65_536),
        Vary::Seq => a.max.unwrap_or(config.max_seq_len).min(match a.mode {
            Mode::Generate => config.max_seq_len.saturating_sub(a.new_tokens),
            _ => config.max_seq_len,
        }),
    };
    if cap == 0 {
        bail!("--max must be at least 1");
    }
    let with = |x: usize| {
        let mut s = base.clone();
        match a.vary {
            Vary::Batch => s.batch = x,
            Vary::Seq => {
                s.seq = x;
                s.prompt_len = x;
            }
        }
        s
    };
    let enforcement = Enforcement::detect(Some(limit));
    let scratch = Scratch::new()?;
    let opts = RunOptions {
        memory_limit: Some(limit),
        enforcement: enforcement.clone(),
        timeout,
        scratch: scratch.0.clone(),
    };
    install_interrupt_handler();
    let vary_name = match a.vary {
        Vary::Batch => "batch",
        Vary::Seq => "seq",
    };
    if !a.quiet {
        eprintln!(
            "memscope fit: largest {vary_name} for {} {} {}; {}",
            base.model,
            base.mode.name(),
            base.dtype.name(),
            enforcement.describe(Some(limit))
        );
    }
    let live = Live::default();
    let mut trials: Vec<Row> = Vec::new();
    let trial = |x: usize, trials: &mut Vec<Row>| -> anyhow::Result<Option<bool>> {
        let spec = with(x);
        let Some(row) = run_worker(&spec, trials.len(), &opts, &INTERRUPTED, &live, || {})? else {
            return Ok(None);
        };
        if !a.quiet {
            eprintln!(
                "  {vary_name} {x}: {}{}",
                row.status.name(),
                row.reason
                    .as_ref()
                    .map_or(String::new(), |r| format!(" — {r}"))
            );
        }
        let fits = match row.status {
            Status::Ok => true,
            Status::Oom => false,
            other => bail!(
                "{vary_name} {x}: the trial ended {} ({}); fix that first (--timeout raises the time limit)",
                other.name(),
                row.reason.clone().unwrap_or_default()
            ),
        };
        trials.push(row);
        Ok(Some(fits))
    };
    // Size 1 first: it measures what the worker holds beyond its heap (code, libraries, the
    // allocator's retention: the limit applies to all of it). Then start where the estimate puts
    // the heap peak at the limit minus that, gallop away from it until the outcome flips,
    // bisect between the last size that fits and the first that does not, and confirm the
    // answer with a second run.
    let (mut lo, mut hi): (Option<usize>, Option<usize>) = (None, None);
    let Some(fits1) = trial(1, &mut trials)? else {
        return Ok(ExitCode::from(EXIT_INTERRUPTED));
    };
    let beyond_heap = trials
        .last()
        .and_then(|r| r.summary.as_ref())
        .and_then(|s| Some(s.rss_peak_bytes?.saturating_sub(s.heap_peak_bytes)))
        .unwrap_or(0);
    let start = fits1
        .then(|| estimated_start(&with, cap, limit.saturating_sub(beyond_heap)))
        .flatten();
    if !a.quiet && fits1 {
        match start {
            Some(x) => eprintln!(
                "  the estimate puts the heap peak at the limit minus the {} measured beyond the heap near {vary_name} {x}: continuing there",
                fmt_bytes(beyond_heap as f64)
            ),
            None => eprintln!("  no estimate for this model: doubling from {vary_name} 1"),
        }
    }
    let x0 = start.unwrap_or(1).clamp(1, cap);
    let fits = if x0 == 1 {
        fits1
    } else {
        let Some(f) = trial(x0, &mut trials)? else {
            return Ok(ExitCode::from(EXIT_INTERRUPTED));
        };
        f
    };
    let mut step = 1usize;
    if fits {
        lo = Some(x0);
        let mut l = x0;
        while l < cap {
            let x = l.saturating_add(step).min(cap);
            let Some(fits) = trial(x, &mut trials)? else {
                return Ok(ExitCode::from(EXIT_INTERRUPTED));
            };
            if !fits {
                hi = Some(x);
                break;
            }
            l = x;
            lo = Some(x);
            step = step.saturating_mul(2);
        }
    } else {
        hi = Some(x0);
        let mut h = x0;
        while h > 1 {
            let x = h.saturating_sub(step).max(1);
            if x == 1 {
                lo = Some(1); // measured first
                break;
            }
            let Some(fits) = trial(x, &mut trials)? else {
                return Ok(ExitCode::from(EXIT_INTERRUPTED));
            };
            if fits {
                lo = Some(x);
                break;
            }
            h = x;
            hi = Some(x);
            step = step.saturating_mul(2);
        }
    }
    if let (Some(mut l), Some(mut h)) = (lo, hi) {
        while h - l > 1 {
            let mid = l + (h - l) / 2;
            let Some(fits) = trial(mid, &mut trials)? else {
                return Ok(ExitCode::from(EXIT_INTERRUPTED));
            };
            if fits {
                l = mid;
            } else {
                h = mid;
            }
        }
        // Near the limit an outcome can vary by a size (allocator and thread timing): confirm the
        // answer with a second run, stepping down until one confirms.
        loop {
            let Some(fits) = trial(l, &mut trials)? else {
                return Ok(ExitCode::from(EXIT_INTERRUPTED));
            };
            if fits {
                break;
            }
            h = l;
            l -= 1;
            if l == 0 {
                break;
            }
        }
        lo = (l > 0).then_some(l);
        hi = Some(h);
    }
    let best = lo.and_then(|l| {
        trials
            .iter()
            .find(|r| r.status == Status::Ok && size_of(&r.spec, a.vary) == l)
    });
    let summary = best.and_then(|r| r.summary.clone());
    let rss = summary.as_ref().and_then(|s| s.rss_peak_bytes);
    let result = FitResult {
        vary: vary_name,
        max_batch: (a.vary == Vary::Batch).then_some(lo.unwrap_or(0)),
        max_seq: (a.vary == Vary::Seq).then_some(lo.unwrap_or(0)),
        first_oom: hi,
        memory_limit_bytes: limit,
        enforcement: enforcement.describe(Some(limit)),
        heap_peak_bytes: summary.as_ref().map(|s| s.heap_peak_bytes),
        rss_peak_bytes: rss,
        headroom_bytes: rss.map(|r| limit as i64 - r as i64),
        estimated_start: start,
        trials,
    };
    match lo {
        None => println!(
            "{vary_name} 1 does not fit in {}: max_{vary_name} = 0",
            fmt_bytes(limit as f64)
        ),
        Some(l) => {
            println!("max_{vary_name} = {l}");
            if let Some(s) = &summary {
                println!(
                    "peak at {vary_name} {l}: heap peak {}, worker VmHWM {}",
                    fmt_bytes(s.heap_peak_bytes as f64),
                    s.rss_peak_bytes
                        .map_or("unavailable".into(), |b| fmt_bytes(b as f64))
                );
            }
            if let Some(h) = result.headroom_bytes {
                println!(
                    "headroom: {} of --memory-limit {} (limit − VmHWM)",
                    fmt_bytes(h as f64),
                    fmt_bytes(limit as f64)
                );
            }
            match hi {
                Some(h) => println!("{vary_name} {h} ran out of memory"),
                None => println!(
                    "no size up to {cap} ran out of memory (raise --max to search further)"
                ),
            }
        }
    }
    println!("{}.", enforcement.describe(Some(limit)));
    if let Some(p) = &a.json {
        write_atomic(p, &serde_json::to_string_pretty(&result)?)
            .with_context(|| format!("--json {}", p.display()))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// The largest size up to `cap` whose estimated heap peak is within `limit` (1 when even size
/// 1 is over), by bisection on the estimate; `None` when the model cannot be estimated.
fn estimated_start(with: &dyn Fn(usize) -> Spec, cap: usize, limit: u64) -> Option<usize> {
    let peak = |x: usize| -> Option<u64> {
        let req = crate::estimate::Request::for_spec(&with(x));
        crate::estimate::estimate(&req).ok().map(|e| e.peak_bytes)
    };
    if peak(1)? > limit {
        return Some(1);
    }
    // A size too large to estimate (its tensors overflow) is over any limit.
    let within = |x: usize| peak(x).is_some_and(|p| p <= limit);
    let (mut l, mut h) = (1usize, cap);
    if within(h) {
        return Some(h);
    }
    while h - l > 1 {
        let mid = l + (h - l) / 2;
        if within(mid) {
            l = mid;
        } else {
            h = mid;
        }
    }
    Some(l)
}

fn size_of(s: &Spec, vary: Vary) -> usize {
    match vary {
        Vary::Batch => s.batch,
        Vary::Seq => s.seq,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_units() {
        assert_eq!(parse_bytes("--m", "512").unwrap(), 512);
        assert_eq!(parse_bytes("--m", "1KB").unwrap(), 1000);
        assert_eq!(parse_bytes("--m", "1KiB").unwrap(), 1024);
        assert_eq!(parse_bytes("--m", "8GiB").unwrap(), 8 << 30);
        assert_eq!(parse_bytes("--m", "2 GB").unwrap(), 2_000_000_000);
        assert_eq!(parse_bytes("--m", "1.5MiB").unwrap(), 1_572_864);
        assert_eq!(parse_bytes("--m", "300mib").unwrap(), 300 << 20);
        let e = parse_bytes("--memory-limit", "8 gigs")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("--memory-limit 8 gigs: unknown unit"), "{e}");
        assert!(parse_bytes("--m", "").is_err());
        assert!(parse_bytes("--m", "0").is_err());
        assert!(parse_bytes("--m", "-1GiB").is_err());
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("--t", "2s").unwrap(), Duration::from_secs(2));
        assert_eq!(
            parse_duration("--t", "10m").unwrap(),
            Duration::from_secs(600)
        );
        assert_eq!(
            parse_duration("--t", "1h").unwrap(),
            Duration::from_secs(3600)
        );
        assert_eq!(
            parse_duration("--t", "90").unwrap(),
            Duration::from_secs(90)
        );
        assert_eq!(
            parse_duration("--t", "0.5s").unwrap(),
            Duration::from_millis(500)
        );
        assert!(parse_duration("--timeout", "soon")
            .unwrap_err()
            .to_string()
            .starts_with("--timeout soon"));
        assert!(parse_duration("--t", "0s").is_err());
    }

    #[test]
    fn skip_only_strictly_larger_on_the_same_model_dtype_mode() {
        let p = |batch, seq| Point {
            model: "m".into(),
            mode: "train".into(),
            dtype: "f32".into(),
            batch,
            seq,
            warmup: 0,
            grad_accum: 1,
            index: 0,
        };
        let ooms = vec![p(8, 128)];
        assert_eq!(
            skip_reason(&ooms, &p(16, 128)).unwrap(),
            "oom at batch 8 seq 128"
        );
        assert_eq!(skip_reason(&ooms, &p(8, 128)), None, "equal is not larger");
        assert_eq!(skip_reason(&ooms, &p(16, 64)), None);
    }
}
