//! Command-line interface: clap definitions, turned into validated Specs once.

use crate::model::config::ModelConfig;
use crate::model::cost;
use crate::progress::Progress;
use crate::record::Record;
use crate::report::{self, Export};
use crate::spec::{Dtype, Mode, Spec};
use anyhow::{bail, Context};
use clap::{Args, Parser, Subcommand};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Parser, Debug)]
#[command(
    name = "memscope",
    version,
    about = "Benchmark and memory-profile transformer models: exact heap accounting, honest statistics"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run a model (train, infer or generate) and report time per phase and where memory goes
    Bench(BenchArgs),
    /// Predict memory by category, the peak and FLOPs without running (--fits BUDGET: what fits)
    Estimate(crate::estimate::cli::EstimateArgs),
    /// List the built-in model presets with exact parameter counts
    Models(ModelsArgs),
    /// Run every configuration of comma lists / ranges, each in its own worker process
    Sweep(crate::sweep::cli::SweepArgs),
    /// Find the largest batch (or sequence length) that fits in a memory budget
    Fit(crate::sweep::cli::FitArgs),
    /// Print the scaling analysis of a sweep's --jsonl file
    Scaling(crate::sweep::cli::ScalingArgs),
    /// Run identical steps many times and say whether live memory leaks or plateaus
    Leak(crate::leak::LeakArgs),
    /// Give the leak verdict for a memory log written by another program (CSV, JSONL, text)
    Analyze(crate::leak::AnalyzeArgs),
    /// Measure this machine's ceilings: matmul GFLOP/s per dtype and memory bandwidth (cached)
    Peaks(PeaksArgs),
    /// Runs one Spec from stdin (used by sweep and fit)
    #[command(hide = true)]
    Worker(crate::sweep::worker::WorkerArgs),
}

#[derive(Args, Debug)]
pub struct PeaksArgs {
    /// CPU threads (default: all cores); peaks are cached per thread count
    #[arg(long)]
    pub threads: Option<usize>,
    /// Measure again even when this machine's peaks are cached
    #[arg(long)]
    pub refresh: bool,
    /// Also write the peaks as JSON (matmul_gflops.<dtype>, bandwidth_gbs, …)
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Whose linear shapes to time (f32, N = batch × seq rows)
    #[command(flatten)]
    pub model: ModelArgs,
    #[arg(long, default_value_t = 2)]
    pub batch: usize,
    #[arg(long, default_value_t = 128)]
    pub seq: usize,
}

#[derive(Args, Debug, Clone)]
pub struct ModelArgs {
    /// Built-in preset (see `memscope models`)
    #[arg(long, default_value = "gpt2-small", conflicts_with = "config")]
    pub model: String,
    /// Model config JSON: our schema (with `family`) or a Hugging Face config.json
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Load Hugging Face-named weights (a .safetensors file or a model.safetensors.index.json)
    #[arg(long, value_name = "FILE")]
    pub weights: Option<PathBuf>,
}

#[derive(Args, Debug, Clone)]
pub struct WorkloadArgs {
    #[arg(long, value_enum, default_value_t = Mode::Train)]
    pub mode: Mode,
    #[arg(long, default_value_t = 2)]
    pub batch: usize,
    /// Sequence length (train, infer)
    #[arg(long, default_value_t = 128)]
    pub seq: usize,
    #[arg(long, value_enum, default_value_t = Dtype::F32)]
    pub dtype: Dtype,
    /// Unmeasured steps before the measured ones [default: bench 2, leak 0]
    #[arg(long)]
    pub warmup: Option<usize>,
    /// Measured steps [default: bench 10, leak 300]
    #[arg(long)]
    pub steps: Option<usize>,
    /// CPU threads (default: all cores)
    #[arg(long)]
    pub threads: Option<usize>,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Micro-batches per optimizer step (train)
    #[arg(long, default_value_t = 1)]
    pub grad_accum: usize,
    /// Prompt tokens prefilled before decoding (generate; default: --seq)
    #[arg(long)]
    pub prompt_len: Option<usize>,
    /// Tokens decoded per measured step (generate)
    #[arg(long, default_value_t = 32)]
    pub new_tokens: usize,
    /// AdamW learning rate (train)
    #[arg(long, default_value_t = 1e-3)]
    pub lr: f64,
}

#[derive(Args, Debug, Clone)]
pub struct OutputArgs {
    /// Write the Record as JSON
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Write one CSV row per run (units in column names)
    #[arg(long, value_name = "FILE")]
    pub csv: Option<PathBuf>,
    /// Write the summary as Markdown tables
    #[arg(long, value_name = "FILE")]
    pub markdown: Option<PathBuf>,
    /// No progress bar
    #[arg(long, short)]
    pub quiet: bool,
}

#[derive(Args, Debug)]
pub struct BenchArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub workload: WorkloadArgs,
    #[command(flatten)]
    pub output: OutputArgs,
}

#[derive(Args, Debug)]
pub struct ModelsArgs {
    /// Print JSON instead of a table
    #[arg(long)]
    pub json: bool,
}

pub const BENCH_WARMUP: usize = 2;
pub const BENCH_STEPS: usize = 10;

pub fn run() -> anyhow::Result<ExitCode> {
    let cli = Cli::parse();
    match cli.command {
        Command::Bench(a) => bench(a),
        Command::Estimate(a) => crate::estimate::cli::run(a),
        Command::Models(a) => models(a),
        Command::Sweep(a) => crate::sweep::cli::sweep(a),
        Command::Fit(a) => crate::sweep::cli::fit(a),
        Command::Scaling(a) => crate::sweep::cli::scaling(a),
        Command::Leak(a) => crate::leak::leak(a),
        Command::Analyze(a) => crate::leak::analyze(a),
        Command::Peaks(a) => peaks(a),
        Command::Worker(a) => crate::sweep::worker::run(a),
    }
}

/// Resolves --model / --config into a name and a validated config.
pub fn resolve_model(m: &ModelArgs) -> anyhow::Result<(String, ModelConfig)> {
    match &m.config {
        Some(path) => {
            let cfg = ModelConfig::from_file(path)?;
            Ok((cfg.name.clone(), cfg))
        }
        None => {
            let Some(cfg) = ModelConfig::preset(&m.model) else {
                let names: Vec<String> =
                    ModelConfig::presets().into_iter().map(|c| c.name).collect();
                bail!(
                    "--model {}: no such preset; choose one of {} (or pass --config FILE)",
                    m.model,
                    names.join(", ")
                );
            };
            Ok((m.model.clone(), cfg))
        }
    }
}

/// The default `--threads`: every core this process may use.
pub fn all_cores() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

fn peaks(a: PeaksArgs) -> anyhow::Result<ExitCode> {
    use crate::measure::peaks;
    let threads = a.threads.unwrap_or_else(all_cores);
    if threads == 0 || a.batch == 0 || a.seq == 0 {
        anyhow::bail!("--threads, --batch and --seq must be at least 1");
    }
    set_threads(threads);
    let path = peaks::cache_path(&peaks::fingerprint(threads));
    let (p, source) = match peaks::cached(threads).filter(|_| !a.refresh) {
        Some(p) => (
            p,
            format!("cached in {} (--refresh to measure again)", path.display()),
        ),
        None => {
            let (_, cfg) = resolve_model(&a.model)?;
            let p = peaks::measure(threads, a.batch * a.seq, &linear_shapes(&cfg))?;
            let text = serde_json::to_string_pretty(&p)?;
            let saved = std::fs::create_dir_all(peaks::cache_dir())
                .map_err(anyhow::Error::from)
                .and_then(|()| write_atomic(&path, &text));
            let source = match saved {
                Ok(()) => format!("measured now, cached in {}", path.display()),
                Err(e) => format!("measured now; not cached ({e:#}; set MEMSCOPE_CACHE_DIR)"),
            };
            (p, source)
        }
    };
    print!("{}", crate::report::peaks::render(&p, &source));
    if let Some(j) = &a.json {
        write_atomic(j, &serde_json::to_string_pretty(&p)?)
            .with_context(|| format!("--json {}", j.display()))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// (name, in, out) of a model's linear layers, as `memscope peaks` times them.
fn linear_shapes(cfg: &crate::model::config::ModelConfig) -> Vec<(String, usize, usize)> {
    use crate::model::config::Family;
    let (c, f, v) = (cfg.d_model, cfg.d_ff, cfg.vocab_size);
    let kv = cfg.n_kv_heads * cfg.head_dim();
    let mut s = match cfg.family {
        Family::Gpt2 => vec![("attention qkv", c, 3 * c), ("attention out", c, c)],
        Family::Llama => vec![("attention q / out", c, c), ("attention k / v", c, kv)],
        Family::Bert => vec![("attention q / k / v / out", c, c)],
    };
    s.extend([("mlp up", c, f), ("mlp down", f, c), ("lm head", c, v)]);
    s.into_iter()
        .map(|(n, k, o)| (n.to_string(), k, o))
        .collect()
}

pub fn build_spec(m: &ModelArgs, w: &WorkloadArgs) -> anyhow::Result<Spec> {
    let (name, config) = resolve_model(m)?;
    let threads = w.threads.unwrap_or_else(all_cores);
    let spec = Spec {
        model: name,
        config,
        config_path: m.config.clone(),
        weights: m.weights.clone(),
        mode: w.mode,
        batch: w.batch,
        seq: w
            .prompt_len
            .filter(|_| w.mode == Mode::Generate)
            .unwrap_or(w.seq),
        dtype: w.dtype,
        threads,
        seed: w.seed,
        warmup: w.warmup.unwrap_or(BENCH_WARMUP),
        steps: w.steps.unwrap_or(BENCH_STEPS),
        grad_accum: w.grad_accum,
        prompt_len: w.prompt_len.unwrap_or(w.seq),
        new_tokens: w.new_tokens,
        lr: w.lr,
    };
    spec.validate()?;
    Ok(spec)
}

/// Sets the CPU thread count for rayon and candle's matmuls. Call before any parallel work.
pub fn set_threads(n: usize) {
    // candle's gemm calls read RAYON_NUM_THREADS each time; rayon's pool reads it once.
    std::env::set_var("RAYON_NUM_THREADS", n.to_string());
    let _ = rayon::ThreadPoolBuilder::new()
        .num_threads(n)
        .build_global();
    crate::kernels::product::allocate_slabs_on_every_thread();
}

fn bench(a: BenchArgs) -> anyhow::Result<ExitCode> {
    let spec = build_spec(&a.model, &a.workload)?;
    set_threads(spec.threads);
    check_outputs(&a.output)?;
    let progress = Progress::start(
        spec.warmup + spec.steps,
        format!("{} {}", spec.model, spec.mode.name()),
        a.output.quiet,
    );
    let result = crate::bench::run(&spec, &progress.steps);
    progress.finish();
    let record = result?;
    print!("{}", report::terminal::render(&record));
    write_outputs(&a.output, std::slice::from_ref(&record))?;
    Ok(ExitCode::SUCCESS)
}

/// Fails before measuring when an output file cannot be created, so no run is wasted.
fn check_outputs(o: &OutputArgs) -> anyhow::Result<()> {
    for (flag, path) in [
        ("--json", &o.json),
        ("--csv", &o.csv),
        ("--markdown", &o.markdown),
    ] {
        if let Some(p) = path {
            let dir = p
                .parent()
                .filter(|d| !d.as_os_str().is_empty())
                .unwrap_or(Path::new("."));
            if !dir.is_dir() {
                bail!(
                    "{flag} {}: directory {} does not exist",
                    p.display(),
                    dir.display()
                );
            }
        }
    }
    Ok(())
}

pub fn write_outputs(o: &OutputArgs, records: &[Record]) -> anyhow::Result<()> {
    let exports: [(&str, &Option<PathBuf>, &dyn Export); 3] = [
        ("--json", &o.json, &report::json::Json),
        ("--csv", &o.csv, &report::csv::Csv),
        ("--markdown", &o.markdown, &report::markdown::Markdown),
    ];
    for (flag, path, export) in exports {
        if let Some(p) = path {
            let text = export.render(records)?;
            write_atomic(p, &text).with_context(|| format!("{flag} {}", p.display()))?;
        }
    }
    Ok(())
}

/// Writes to a temporary file beside `path`, then renames it into place.
pub fn write_atomic(path: &Path, text: &str) -> anyhow::Result<()> {
    let tmp = path.with_extension("memscope-tmp");
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, path)?;
    Ok(())
}

fn models(a: ModelsArgs) -> anyhow::Result<ExitCode> {
    let rows: Vec<report::models::ModelRow> = ModelConfig::presets()
        .into_iter()
        .map(|c| {
            let params = cost::param_count(&c).unwrap_or(u64::MAX);
            report::models::ModelRow {
                family: c.family.to_string(),
                n_layers: c.n_layers,
                d_model: c.d_model,
                n_heads: c.n_heads,
                n_kv_heads: c.n_kv_heads,
                d_ff: c.d_ff,
                vocab_size: c.vocab_size,
                max_seq_len: c.max_seq_len,
                params,
                f32_bytes: params.saturating_mul(4),
                name: c.name,
            }
        })
        .collect();
    if a.json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
    } else {
        print!("{}", report::models::render_table(&rows));
    }
    Ok(ExitCode::SUCCESS)
}
