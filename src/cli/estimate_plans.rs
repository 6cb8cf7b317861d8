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
    let cuda = workload.variant.engine.on_cuda();
    let mut rows = Vec::new();
    for (plan, micro) in each_plan(workload, Some(plans))? {
        let (w, dropped, label) = plan_workload(workload, plan.as_deref(), micro);
        let started = Instant::now();
        let outcome = w.validated().and_then(|spec| judged(&spec, cuda));
        let seconds = started.elapsed().as_secs_f64();
        rows.push(match outcome {
            Ok(j) => j.row(label, workload.batch, budget, dropped, seconds),
            Err(why) => refused_row(label, dropped, &why, seconds),
        });
    }
    // A plan fits where its device total is within --fits, or is not refused without one.
    said(workload, budget, None, rows, json, |r| {
        r.fits.unwrap_or(r.refused.is_none())
    })
}

/// The comparison's rows as the `torch-plans` file (`vary`: `fit --predict`'s size), printed
/// and written to `json`; exit 0 when some row `fits`, else 1.
pub(super) fn said(
    workload: &Workload,
    budget: Option<u64>,
    vary: Option<&str>,
    rows: Vec<PlanRow>,
    json: Option<&std::path::Path>,
    fits: impl Fn(&PlanRow) -> bool,
) -> anyhow::Result<ExitCode> {
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
        vary: vary.map(str::to_string),
        rows,
    };
    out!("{}", crate::report::torch_plans::render(&file))?;
    if let Some(path) = json {
        write_atomic(path, &file.to_json()?)
            .with_context(|| format!("--json {}", path.display()))?;
    }
    Ok(if file.rows.iter().any(fits) {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// Each plan of `--parallel A,B,…` (None: the one job without a plan), a pipeline's once for
/// each `--micro-batches` count of a list.
pub(super) fn each_plan(
    workload: &Workload,
    plans: Option<&str>,
) -> anyhow::Result<Vec<(Option<String>, Option<usize>)>> {
    let Some(plans) = plans else {
        return Ok(vec![(None, None)]);
    };
    let list: Vec<&str> = plans.split(',').map(str::trim).collect();
    if list.iter().any(|p| p.is_empty()) {
        bail!("--parallel {plans}: an empty plan in the list; give plans separated by commas, as in fsdp,fsdp+tp:2,pp:4");
    }
    let counts = workload.variant.engine.micro_batch_counts()?;
    let mut each = Vec::new();
    for plan in list {
        match counts.as_deref() {
            Some(c) if plan.starts_with("pp:") && c.len() > 1 => {
                each.extend(c.iter().map(|m| (Some(plan.to_string()), Some(*m))));
            }
            _ => each.push((Some(plan.to_string()), None)),
        }
    }
    Ok(each)
}

/// One plan's workload (its flags, without those only another plan takes, which it names),
/// and its label in the table.
pub(super) fn plan_workload(
    workload: &Workload,
    plan: Option<&str>,
    micro: Option<usize>,
) -> (Workload, Vec<&'static str>, String) {
    let Some(plan) = plan else {
        return (workload.clone(), Vec::new(), "one process".into());
    };
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
    (w, dropped, label)
}

/// One Spec's prediction as a comparison reads it: the estimate, its job, a pipeline's bubble,
/// and what the device must hold (the reserved peak, and on CUDA what is outside PyTorch's
/// allocator; the allocated peak on the CPU).
pub(super) struct Judged {
    pub estimate: crate::record::torch_estimate::TorchEstimate,
    pub job: Option<Parallel>,
    pub bubble: Option<f64>,
    pub total: u64,
}

/// Traces `spec` (every rank of a pipeline) and judges it.
pub(super) fn judged(spec: &crate::spec::Spec, cuda: bool) -> anyhow::Result<Judged> {
    let job = spec.parallel();
    let traced = crate::torch::estimate::estimate_with_ops(spec)?;
    let actions: Vec<_> = traced.pipeline.iter().map(|w| w.actions.clone()).collect();
    let bubble = (!actions.is_empty())
        .then(|| crate::analysis::pipeline_time::equal_stages_bubble(&actions))
        .transpose()?;
    let outside: u64 = match (&job, cuda) {
        (Some(p), true) => crate::analysis::outside_allocator::cuda_rank(p)
            .iter()
            .map(|l| l.bytes)
            .sum(),
        _ => 0,
    };
    let estimate = traced.estimate;
    let total = estimate.judged_reserved_bytes() + outside;
    Ok(Judged {
        estimate,
        job,
        bubble,
        total,
    })
}

impl Judged {
    /// Its row in the table, at `batch` (the Spec's).
    pub(super) fn row(
        &self,
        label: String,
        batch: usize,
        budget: Option<u64>,
        dropped: Vec<&'static str>,
        seconds: f64,
    ) -> PlanRow {
        let e = &self.estimate;
        PlanRow {
            plan: label,
            sequences_per_step: Some(self.job.map_or(batch, |p| sequences(&p, batch))),
            fullest_rank: Some(e.fullest_rank().unwrap_or(0)),
            peak_bytes: Some(e.peak_bytes),
            reserved_peak_bytes: e.reserved_peak_bytes,
            device_total_bytes: Some(self.total),
            fits: budget.map(|b| self.total <= b),
            dropped: dropped.join(", "),
            refused: None,
            bubble: self.bubble,
            largest: None,
            seconds,
        }
    }
}

/// The row of a plan the job cannot take: why.
pub(super) fn refused_row(
    label: String,
    dropped: Vec<&'static str>,
    why: &anyhow::Error,
    seconds: f64,
) -> PlanRow {
    PlanRow {
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
        largest: None,
        seconds,
    }
}

/// Sequences the whole job runs a step: every data-parallel group its own batch, a pipeline one.
pub(super) fn sequences(p: &Parallel, batch: usize) -> usize {
    match p.plan {
        ParallelPlan::Pp => batch,
        _ => batch * p.data_groups(),
    }
}
