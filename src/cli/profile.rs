//! `memscope profile`: the module tree of a measured step (model → block → attention / MLP /
//! norms → op kinds) with parameters, FLOPs, time per pass, % of the step and achieved
//! FLOP/s, and the profiling overhead (profiled vs plain step time, same process).

use super::args::{ModelArgs, WorkloadArgs};
use super::flags::{Quiet, Roofs, TableFiles};
use super::roofline::measure;
use crate::analysis::profile_tree;
use crate::export::check_outputs;
use crate::model::cost::{module_params, ModuleParams};
use crate::out;
use crate::report::profile as rep;
use anyhow::bail;
use clap::Args;
use std::process::ExitCode;

#[derive(Args, Debug)]
#[command(mut_arg("roofs", |a| a.help(r#"Roofs instead of the cached `memscope peaks` (MATMUL_GFLOPS:BANDWIDTH_GBS)"#)))]
// One process: --nproc/--parallel are refused by name, not offered.
#[command(mut_arg("nproc", |a| a.hide(true)), mut_arg("parallel", |a| a.hide(true)))]
pub struct ProfileArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub workload: WorkloadArgs,
    /// Tree depth: 1 model, 2 blocks, 3 attention / MLP / norms, 4 op kinds
    #[arg(long, default_value_t = 3)]
    pub depth: usize,
    #[command(flatten)]
    pub roofs: Roofs,
    #[command(flatten)]
    pub files: TableFiles,
    #[command(flatten)]
    pub quiet: Quiet,
}

/// Parameters of one module of the tree, from `model::cost`'s exact per-module counts.
fn params_of(m: &ModuleParams, module: &str) -> u64 {
    match (module, module.rsplit(' ').next().unwrap_or("")) {
        ("embedding", _) => m.embedding,
        (x, _) if x.starts_with("lm head") => m.head,
        (_, "attention") => m.attention,
        (_, "mlp") => m.mlp,
        (_, "norms") => m.norms,
        _ => 0,
    }
}

pub fn run(a: ProfileArgs) -> anyhow::Result<ExitCode> {
    a.workload.variant.engine.refuse_parallel("profile")?;
    if !(1..=4).contains(&a.depth) {
        bail!("--depth {}: choose 1 (model) to 4 (op kinds)", a.depth);
    }
    check_outputs(
        &a.files.flags(),
        &super::args::run_inputs(
            a.model.config.as_deref(),
            a.model.weights.as_deref(),
            a.workload.data.data.as_deref(),
        ),
    )?;
    let p = measure(&a.model, &a.workload, &a.roofs)?;
    let counts = module_params(p.spec.arch())
        .map_err(|e| anyhow::anyhow!("--model: the parameter count {e}"))?;
    let params = |m: &str| params_of(&counts, m);
    let trees: Vec<rep::Tree> = p
        .sections
        .iter()
        .map(|s| rep::Tree {
            name: s.name.to_string(),
            time_ms: s.time_ms,
            plain_ms: s.plain_ms,
            nodes: profile_tree::tree(&s.costs, &s.measured, &params, a.depth),
            gpu: p.gpu,
            unattributed: if p.engine == "torch" {
                rep::TORCH_REST
            } else {
                rep::CANDLE_REST
            },
        })
        .collect();
    let title = format!(
        "profile: {} {} batch {} seq {} ({} measured steps, {} threads{})",
        p.spec.model,
        p.spec.mode.name(),
        p.spec.batch,
        p.spec.seq,
        p.spec.steps,
        p.spec.threads,
        if p.engine == "torch" {
            format!(", {}", p.isa)
        } else {
            String::new()
        }
    );
    a.files.write(
        || rep::json(&trees),
        || rep::csv(&trees),
        || Ok(rep::render(&title, &trees, true)),
    )?;
    out!("{}", rep::render(&title, &trees, false))?;
    Ok(ExitCode::SUCCESS)
}
