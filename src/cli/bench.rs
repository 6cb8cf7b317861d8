//! `memscope bench`: run a model and report time per phase and where memory goes.

use super::args::{build_spec, check_outputs, write_outputs, ModelArgs, OutputArgs, WorkloadArgs};
use super::flags::Timeout;
use crate::measure::threads::set_run_threads;
use crate::out;
use crate::progress::Progress;
use crate::report;
use clap::Args;
use std::process::ExitCode;

#[derive(Args, Debug)]
#[command(mut_arg("timeout", |a| a.help(r#"Stop the run after this long (90s, 10m, 1h): it ends after the step under way and keeps the steps it measured; a torch job that cannot stop (a rank stopped or hung) is killed 20 s later"#)))]
pub struct BenchArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub workload: WorkloadArgs,
    #[command(flatten)]
    pub output: OutputArgs,
    #[command(flatten)]
    pub timeout: Timeout,
}

pub fn run(a: BenchArgs) -> anyhow::Result<ExitCode> {
    check_outputs(&a.output, &a.model, &a.workload.data)?;
    let spec = build_spec(&a.model, &a.workload)?;
    if !*a.workload.force {
        crate::runner::check_machine_memory(&spec)?;
    }
    let timeout = a
        .timeout
        .timeout
        .as_deref()
        .map(|t| crate::sweep::limits::parse_timeout(t).map(|d| (t, d)))
        .transpose()?;
    set_run_threads(&spec);
    if let Some((text, limit)) = timeout {
        // Up: the run stops after the step under way and keeps the steps it measured; a torch
        // job that cannot stop (a rank stopped, or blocked in a collective) is killed.
        let cause = format!("--timeout {text}");
        std::thread::spawn(move || {
            std::thread::sleep(limit);
            crate::stop::request(cause);
        });
    }
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
