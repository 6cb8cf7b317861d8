//! `memscope roofline`: the step measured plain and profiled (`runner::profiled`), each op's
//! time against its FLOPs and minimum bytes and this machine's measured roofs, written in every
//! format asked. `profile.rs` reuses the measurement.

use super::args::{build_spec, ModelArgs, WorkloadArgs};
use super::flags::{Quiet, Roofs, TableFiles};
use crate::export::{check_outputs, write_if_asked};
use crate::out;
use crate::record::roofline::{Head, SectionReport};
use crate::report::roofline as rep;
use crate::report::roofline_chart;
use crate::runner::profiled::{self, Measured};
use clap::Args;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Args, Debug)]
#[command(mut_arg("roofs", |a| a.help(r#"Roofs to use instead of the cached `memscope peaks`: MATMUL_GFLOPS:BANDWIDTH_GBS"#)))]
// One process: --nproc/--parallel are refused by name, not offered.
#[command(mut_arg("nproc", |a| a.hide(true)), mut_arg("parallel", |a| a.hide(true)))]
pub struct RooflineArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub workload: WorkloadArgs,
    #[command(flatten)]
    pub roofs: Roofs,
    #[command(flatten)]
    pub files: TableFiles,
    /// Write the roofline chart (roofs from the measured peaks, a point per op kind and pass) as SVG
    #[arg(long, value_name = "FILE")]
    pub svg: Option<PathBuf>,
    #[command(flatten)]
    pub quiet: Quiet,
}

/// The workload measured plain and profiled (`runner::profiled`), its warm-up and measured
/// steps defaulting per engine: PyTorch's first steps after the first are still slower (its
/// allocator and the system's pages warming up), so two warm-up steps there, one on memscope's.
pub fn measure(
    m: &ModelArgs,
    w: &WorkloadArgs,
    roofs_flag: &Option<String>,
) -> anyhow::Result<Measured> {
    let mut w = w.clone();
    let torch = w.variant.engine.engine == crate::spec::Engine::Torch;
    w.warmup.warmup = Some(w.warmup.unwrap_or(if torch { 2 } else { 1 }));
    w.steps.steps = Some(w.steps.unwrap_or(3));
    let spec = build_spec(m, &w)?;
    profiled::measure(spec, roofs_flag, *w.force)
}

pub fn run(a: RooflineArgs) -> anyhow::Result<ExitCode> {
    a.workload.variant.engine.refuse_parallel("roofline")?;
    check_outputs(
        &[a.files.flags().as_slice(), &[("--svg", a.svg.as_deref())]].concat(),
        &super::args::run_inputs(
            a.model.config.as_deref(),
            a.model.weights.as_deref(),
            a.workload.data.data.as_deref(),
        ),
    )?;
    let p = measure(&a.model, &a.workload, &a.roofs)?;
    let secs = &p.sections;
    let report: Vec<SectionReport> = secs
        .iter()
        .map(|s| {
            SectionReport::new(
                s.name,
                &s.costs,
                &s.measured,
                (s.time_ms, s.plain_ms),
                &p.roofs,
                p.gpu,
            )
        })
        .collect();
    let head = Head {
        model: p.spec.model.clone(),
        mode: p.spec.mode.name().to_string(),
        batch: p.spec.batch,
        seq: p.spec.seq,
        new_tokens: p.spec.new_tokens,
        steps: p.spec.steps,
        threads: p.spec.threads,
        isa: p.isa.clone(),
        roofs: p.roofs,
        weights_bytes: p.weights_bytes,
        engine: p.engine.clone(),
        gpu: p.gpu,
    };
    a.files.write(
        || rep::json(&head, &report),
        || rep::csv(&report),
        || Ok(rep::markdown(&head, &report)),
    )?;
    write_if_asked("--svg", a.svg.as_deref(), || {
        roofline_chart::svg(&head, &report)
    })?;
    out!("{}", rep::terminal(&head, &report))?;
    Ok(ExitCode::SUCCESS)
}
