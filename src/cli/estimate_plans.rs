//! `estimate --engine torch --nproc N --parallel A,B,…` (and a pipeline's `--micro-batches
//! 4,8,16`): one job's plans side by side for a fixed world size, a pipeline's at each count,
//! each traced (every rank of a pipeline, one rank otherwise) and judged
//! against `--fits`: which fit, which leaves the most head-room. A plan the job cannot take is a
//! row saying why, not the end of the comparison.

use super::args::Workload;
use crate::export::write_atomic;
use crate::out;
use crate::record::torch_estimate::{PlanRow, TorchPlansFile};
use crate::spec::{Parallel, ParallelPlan};
use anyhow::{bail, Context};
use std::process::ExitCode;
use std::time::Instant;

pub fn run(
    workload: &Workload,
    plans: &str,
    budget: Option<u64>,
    json: Option<&std::path::Path>,
) -> anyhow::Result<ExitCode> {
    let list: Vec<&str> = plans.split(',').map(str::trim).collect();
    if list.iter().any(|p| p.is_empty()) {
        bail!("--parallel {plans}: an empty plan in the list; give plans separated by commas, as in fsdp,fsdp+tp:2,pp:4");
    }
    let cuda = workload.variant.engine.on_cuda();
    // A pipeline's plans once for each --micro-batches count of a list; the others once.
    let counts = workload.variant.engine.micro_batch_counts()?;
    let mut each = Vec::new();
    for plan in list {
        match counts.as_deref() {
            Some(c) if plan.starts_with("pp:") && c.len() > 1 => {
                each.extend(c.iter().map(|m| (plan, Some(*m))));
            }
            _ => each.push((plan, None)),
        }
    }
    let mut rows = Vec::with_capacity(each.len());
    for (plan, micro) in each {
        let mut w = workload.clone();
        let (mut engine, dropped) = w.variant.engine.for_plan(plan);
        if let Some(m) = micro {
            engine.micro_batches = Some(m.to_string());
        }
        w.variant.engine = engine;
        let label = match micro {
            Some(m) => format!("{plan} × {m} micro-batches"),
            None => plan.to_string(),
        };
        let started = Instant::now();
        let outcome = w.validated().and_then(|spec| {
            let p = spec
                .parallel()
                .context("internal: a plan without its job")?;
            let traced = crate::torch::estimate::estimate_with_ops(&spec)?;
            let actions: Vec<_> = traced.pipeline.iter().map(|w| w.actions.clone()).collect();
            let bubble = (!actions.is_empty())
                .then(|| crate::analysis::pipeline_time::equal_stages_bubble(&actions))
                .transpose()?;
            Ok((traced.estimate, p, bubble))
        });
        let seconds = started.elapsed().as_secs_f64();
        rows.push(match outcome {
            Ok((e, p, bubble)) => {
                let outside = if cuda {
                    crate::analysis::outside_allocator::cuda_rank(&p)
                } else {
                    Vec::new()
                };
                let outside: u64 = outside.iter().map(|l| l.bytes).sum();
                let fullest = e.fullest_rank().unwrap_or(0);
                let total = e.judged_reserved_bytes() + outside;
                PlanRow {
                    plan: label,
                    sequences_per_step: Some(sequences(&p, workload.batch)),
                    fullest_rank: Some(fullest),
                    peak_bytes: Some(e.peak_bytes),
                    reserved_peak_bytes: e.reserved_peak_bytes,
                    device_total_bytes: Some(total),
                    fits: budget.map(|b| total <= b),
                    dropped: dropped.join(", "),
                    refused: None,
                    bubble,
                    seconds,
                }
            }
            Err(why) => PlanRow {
                plan: label,
                sequences_per_step: None,
                fullest_rank: None,
                peak_bytes: None,
                reserved_peak_bytes: None,
                device_total_bytes: None,
                fits: None,
                dropped: dropped.join(", "),
                refused: Some(format!("{why:#}")),
                bubble: None,
                seconds,
            },
        });
    }
    let file = TorchPlansFile {
        kind: TorchPlansFile::KIND.into(),
        model: workload.model.clone(),
        mode: workload.mode.name().into(),
        batch: workload.batch,
        seq: workload.seq,
        world: workload.variant.engine.nproc.unwrap_or(1),
        device: workload
            .variant
            .engine
            .device
            .clone()
            .unwrap_or_else(|| "cpu".into()),
        budget_bytes: budget,
        rows,
    };
    out!("{}", crate::report::torch_plans::render(&file))?;
    if let Some(path) = json {
        write_atomic(path, &file.to_json()?)
            .with_context(|| format!("--json {}", path.display()))?;
    }
    let any_fits = file
        .rows
        .iter()
        .any(|r| r.fits.unwrap_or(r.refused.is_none()));
    Ok(if any_fits {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// Sequences the whole job runs a step: every data-parallel group its own batch, a pipeline one.
fn sequences(p: &Parallel, batch: usize) -> usize {
    match p.plan {
        ParallelPlan::Pp => batch,
        _ => batch * p.data_groups(),
    }
}
