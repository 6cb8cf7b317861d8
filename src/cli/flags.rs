//! The flags several commands share, each declared once here (`tests/layout.rs` fails on a flag
//! declared twice): a command flattens the ones it offers, so its `--help` lists exactly those.
//! Where a command's flag means more than the shared help says, the command gives its own help
//! with `#[command(mut_arg("threads", |a| a.help("…")))]`; the flag itself stays one declaration.

use crate::export::write_if_asked;
use crate::spec::{Dtype, Mode};
use clap::Args;
use std::path::{Path, PathBuf};

/// The one help text of each output flag, on every command that has the flag; what a command's
/// file holds is in its docs, not in the flag's help.
const HELP_JSON: &str = "Write the result as JSON";
const HELP_CSV: &str = "Write the result as CSV";
const HELP_MARKDOWN: &str = "Write the result as Markdown";
const HELP_TRACE: &str = "Write a Chrome trace (Perfetto, chrome://tracing)";
/// `-q`, accepted by every command that writes files (where nothing is drawn it changes nothing).
const HELP_QUIET: &str = "No live progress on stderr (bar, status line or per-run lines)";

/// `--json FILE` (`-` is standard output).
#[derive(Args, Debug, Clone, Default)]
pub struct JsonOut {
    #[arg(long, value_name = "FILE", help = HELP_JSON)]
    pub json: Option<PathBuf>,
}

/// `--csv FILE`.
#[derive(Args, Debug, Clone, Default)]
pub struct CsvOut {
    #[arg(long, value_name = "FILE", help = HELP_CSV)]
    pub csv: Option<PathBuf>,
}

/// `--markdown FILE`.
#[derive(Args, Debug, Clone, Default)]
pub struct MarkdownOut {
    #[arg(long, value_name = "FILE", help = HELP_MARKDOWN)]
    pub markdown: Option<PathBuf>,
}

/// `--json`, `--csv`, `--markdown`: a result's three file formats, the group every command with a
/// table to write flattens.
#[derive(Args, Debug, Clone, Default)]
pub struct TableFiles {
    #[command(flatten)]
    pub json: JsonOut,
    #[command(flatten)]
    pub csv: CsvOut,
    #[command(flatten)]
    pub markdown: MarkdownOut,
}

impl TableFiles {
    /// (flag, path) of each, for `export::check_outputs`.
    pub fn flags(&self) -> [(&'static str, Option<&Path>); 3] {
        [
            ("--json", self.json.as_deref()),
            ("--csv", self.csv.as_deref()),
            ("--markdown", self.markdown.as_deref()),
        ]
    }

    /// Writes each format asked for, its text made only then.
    pub fn write(
        &self,
        json: impl FnOnce() -> anyhow::Result<String>,
        csv: impl FnOnce() -> anyhow::Result<String>,
        markdown: impl FnOnce() -> anyhow::Result<String>,
    ) -> anyhow::Result<()> {
        write_if_asked("--json", self.json.as_deref(), json)?;
        write_if_asked("--csv", self.csv.as_deref(), csv)?;
        write_if_asked("--markdown", self.markdown.as_deref(), markdown)
    }
}

/// `--trace FILE` (sweep: a directory, its own help).
#[derive(Args, Debug, Clone, Default)]
pub struct TraceOut {
    #[arg(long, value_name = "FILE", help = HELP_TRACE)]
    pub trace: Option<PathBuf>,
}

/// `--jsonl FILE`: rows or samples written as they come.
#[derive(Args, Debug, Clone, Default)]
pub struct JsonlOut {
    #[arg(long, value_name = "FILE")]
    pub jsonl: Option<PathBuf>,
}

/// `-q, --quiet`.
#[derive(Args, Debug, Clone, Default)]
pub struct Quiet {
    #[arg(long, short, help = HELP_QUIET)]
    pub quiet: bool,
}

/// `--threads N`.
#[derive(Args, Debug, Clone, Default)]
pub struct Threads {
    /// CPU threads (default: all cores)
    #[arg(long)]
    pub threads: Option<usize>,
}

/// `--seed N`.
#[derive(Args, Debug, Clone, Default)]
pub struct Seed {
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
}

/// `--memory-limit BYTES`.
#[derive(Args, Debug, Clone, Default)]
pub struct MemoryLimit {
    /// Memory budget per worker: 512MiB, 16GiB, …
    #[arg(long, value_name = "BYTES", allow_hyphen_values = true)]
    pub memory_limit: Option<String>,
}

/// `--timeout DURATION`.
#[derive(Args, Debug, Clone, Default)]
pub struct Timeout {
    /// Time limit per run: 90s, 10m, 1h
    #[arg(long, value_name = "DURATION")]
    pub timeout: Option<String>,
}

/// `--roofs GFLOPS:GBS`.
#[derive(Args, Debug, Clone, Default)]
pub struct Roofs {
    #[arg(long, value_name = "GFLOPS:GBS")]
    pub roofs: Option<String>,
}

/// `--mode train|infer|generate`.
#[derive(Args, Debug, Clone)]
pub struct ModeFlag {
    #[arg(long, value_enum, default_value_t = Mode::Train)]
    pub mode: Mode,
}

/// `--batch N` (sweep's is a grid axis: a list).
#[derive(Args, Debug, Clone)]
pub struct Batch {
    #[arg(long, default_value_t = 2)]
    pub batch: usize,
}

/// `--seq N`.
#[derive(Args, Debug, Clone)]
pub struct Seq {
    /// Sequence length (train, infer)
    #[arg(long, default_value_t = 128)]
    pub seq: usize,
}

/// `--dtype f32|bf16|f16`.
#[derive(Args, Debug, Clone)]
pub struct DtypeFlag {
    #[arg(long, value_enum, default_value_t = Dtype::F32)]
    pub dtype: Dtype,
}

/// `--warmup N` (each command's default where it is absent).
#[derive(Args, Debug, Clone, Default)]
pub struct Warmup {
    /// Unmeasured steps before the measured ones
    #[arg(long)]
    pub warmup: Option<usize>,
}

/// `--steps N` (each command's default where it is absent).
#[derive(Args, Debug, Clone, Default)]
pub struct Steps {
    /// Measured steps
    #[arg(long)]
    pub steps: Option<usize>,
}

/// `--grad-accum N`.
#[derive(Args, Debug, Clone)]
pub struct GradAccum {
    /// Micro-batches per optimizer step (train)
    #[arg(long, default_value_t = 1)]
    pub grad_accum: usize,
}

/// `--prompt-len N`.
#[derive(Args, Debug, Clone, Default)]
pub struct PromptLen {
    /// Prompt tokens prefilled before decoding (generate; default: --seq)
    #[arg(long)]
    pub prompt_len: Option<usize>,
}

/// `--new-tokens N`.
#[derive(Args, Debug, Clone)]
pub struct NewTokens {
    /// Tokens decoded per measured step (generate)
    #[arg(long, default_value_t = 32)]
    pub new_tokens: usize,
}

/// `--lr X`.
#[derive(Args, Debug, Clone)]
pub struct Lr {
    /// AdamW learning rate (train)
    #[arg(long, default_value_t = 1e-3)]
    pub lr: f64,
}

/// `--force`.
#[derive(Args, Debug, Clone, Default)]
pub struct Force {
    /// Run even when the parameters or the estimated peak exceed this machine's memory
    #[arg(long)]
    pub force: bool,
}

/// Each struct reads as its one value (`a.json.as_deref()`, `*a.quiet`).
macro_rules! reads_as {
    ($($t:ident.$f:ident: $v:ty),* $(,)?) => {$(
        impl std::ops::Deref for $t {
            type Target = $v;
            fn deref(&self) -> &$v {
                &self.$f
            }
        }
    )*};
}
reads_as!(
    JsonOut.json: Option<PathBuf>,
    CsvOut.csv: Option<PathBuf>,
    MarkdownOut.markdown: Option<PathBuf>,
    TraceOut.trace: Option<PathBuf>,
    JsonlOut.jsonl: Option<PathBuf>,
    Quiet.quiet: bool,
    Threads.threads: Option<usize>,
    Seed.seed: u64,
    MemoryLimit.memory_limit: Option<String>,
    Timeout.timeout: Option<String>,
    Roofs.roofs: Option<String>,
    ModeFlag.mode: Mode,
    Batch.batch: usize,
    Seq.seq: usize,
    DtypeFlag.dtype: Dtype,
    Warmup.warmup: Option<usize>,
    Steps.steps: Option<usize>,
    GradAccum.grad_accum: usize,
    PromptLen.prompt_len: Option<usize>,
    NewTokens.new_tokens: usize,
    Lr.lr: f64,
    Force.force: bool,
);
