//! `memscope bench`: run a model and report time per phase and where memory goes.

use super::args::{build_spec, check_outputs, write_outputs, ModelArgs, OutputArgs, WorkloadArgs};
use crate::measure::threads::set_run_threads;
use crate::out;
use crate::progress::Progress;
use crate::report;
use clap::Args;
use std::process::ExitCode;

#[derive(Args, Debug)]
pub struct BenchArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub workload: WorkloadArgs,
    #[command(flatten)]
    pub output: OutputArgs,
}

pub fn run(a: BenchArgs) -> anyhow::Result<ExitCode> {
    check_outputs(&a.output, &a.model, &a.workload.data)?;
    let spec = build_spec(&a.model, &a.workload)?;
    if !*a.workload.force {
        crate::runner::check_machine_memory(&spec)?;
    }
    set_run_threads(&spec);
    let progress = Progress::start(
        spec.warmup + spec.steps,
        format!("{} {}", spec.model, spec.mode.name()),
        *a.output.quiet,
    );
    let result = crate::runner::run(&spec, &progress.steps);
    progress.finish();
    let record = result?;
    write_outputs(&a.output, std::slice::from_ref(&record))?;
    out!("{}", report::terminal::render(&record))?;
    Ok(ExitCode::SUCCESS)
}
