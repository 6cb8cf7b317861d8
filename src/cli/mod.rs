//! Command-line interface: the clap root and the dispatch — a table of contents. Each subcommand
//! has one file here that only glues its arguments → a capability → a report; the argument groups
//! several commands share (model, workload, outputs) and their conversion into a Spec are in
//! `args.rs`. Capabilities never import this module.

mod args;
mod bench;
mod compare;
mod diff;
mod estimate;
mod estimate_plans;
mod fit;
mod fit_plans;
mod fit_plans_run;
mod flags;
mod leak;
mod models;
mod optimize;
mod peaks;
mod pipeline_args;
mod profile;
mod report;
mod roofline;
mod scaling;
mod sweep;
mod sweep_slurm;
mod watch;
mod worker;

pub use args::{build_spec, resolve_model, ModelArgs, OutputArgs, WorkloadArgs};

use clap::{Parser, Subcommand};
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
    Bench(bench::BenchArgs),
    /// Predict memory by category, the peak and FLOPs without running (--fits BUDGET: what fits)
    Estimate(estimate::EstimateArgs),
    /// List the built-in model presets with exact parameter counts
    Models(models::ModelsArgs),
    /// Rank memory-saving variants (flash attention, fused kernels, checkpointing, mixed precision) by running each one
    Optimize(optimize::OptimizeArgs),
    /// Run every configuration of comma lists / ranges, each in its own worker process
    Sweep(sweep::SweepArgs),
    /// Find the largest batch (or sequence length) that fits in a memory budget
    Fit(fit::FitArgs),
    /// Print the scaling analysis of a sweep's --jsonl file
    Scaling(scaling::ScalingArgs),
    /// Run identical steps many times and say whether live memory leaks or plateaus
    Leak(leak::LeakArgs),
    /// Give the leak verdict for a memory log written by another program (CSV, JSONL, text)
    Analyze(leak::AnalyzeArgs),
    /// Start a command (or attach to --pid) and watch its process tree's memory: leak or warm-up?
    Watch(watch::WatchArgs),
    /// Measure this machine's ceilings: matmul GFLOP/s per dtype and memory bandwidth (cached)
    Peaks(peaks::PeaksArgs),
    /// Per op kind: FLOPs, minimum bytes, time, achieved rates against the measured roofs
    Roofline(roofline::RooflineArgs),
    /// The module tree of a measured step: params, FLOPs, time, % of step, forward and backward
    Profile(profile::ProfileArgs),
    /// Compare two Records (or two sweeps): change per phase and memory figure with a bootstrap CI; exit 1 on regression
    Compare(compare::CompareArgs),
    /// Two Records' memory side by side: per category and phase, and what moved the peak
    Diff(diff::DiffArgs),
    /// Draw one self-contained HTML report (charts) from Records, verdicts, estimates and sweeps
    Report(report::ReportArgs),
    /// Runs one Spec from stdin (used by sweep and fit)
    #[command(hide = true)]
    Worker(worker::WorkerArgs),
}

pub fn run() -> anyhow::Result<ExitCode> {
    let cli = Cli::parse();
    match cli.command {
        Command::Bench(a) => bench::run(a),
        Command::Estimate(a) => estimate::run(a),
        Command::Models(a) => models::run(a),
        Command::Optimize(a) => optimize::run_optimize(a),
        Command::Sweep(a) => sweep::run(a),
        Command::Fit(a) => fit::run(a),
        Command::Scaling(a) => scaling::run(a),
        Command::Leak(a) => leak::leak(a),
        Command::Analyze(a) => leak::analyze(a),
        Command::Watch(a) => watch::run(a),
        Command::Peaks(a) => peaks::run(a),
        Command::Roofline(a) => roofline::run(a),
        Command::Profile(a) => profile::run(a),
        Command::Compare(a) => compare::run(a),
        Command::Diff(a) => diff::run(a),
        Command::Report(a) => report::run(a),
        Command::Worker(a) => worker::run(a),
    }
}
