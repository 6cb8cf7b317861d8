//! `memscope fit --predict --engine torch [--nproc N --parallel A,B,…]`: the largest batch (or
//! sequence) each plan is predicted to fit in `--memory-limit`, nothing run — each size traced
//! as `estimate` traces it (every rank of a pipeline) and judged by what the device must hold
//! (CUDA: the reserved peak and the memory outside PyTorch's allocator; the CPU: the allocated
//! peak). A pipeline's batch grows in whole micro-batches. The table is `estimate`'s comparison
//! of plans, each row at its largest size.

use super::args::Workload;
use super::estimate_plans::{each_plan, judged, plan_workload, refused_row, said};
use crate::record::torch_estimate::LargestFit;
use crate::sweep::largest::Vary;
use anyhow::{bail, Context};
use std::process::ExitCode;
use std::time::Instant;

/// What the search needs beside the workload: the size it varies, the largest it tries, the
/// budget.
pub struct Predict<'a> {
    pub vary: Vary,
    pub cap: usize,
    pub limit: u64,
    pub json: Option<&'a std::path::Path>,
}

pub fn run(workload: &Workload, how: &Predict) -> anyhow::Result<ExitCode> {
    if workload.variant.engine.engine != crate::spec::Engine::Torch {
        bail!("--predict: the torch estimator's trace predicts each size; add --engine torch (memscope's own engine is measured: drop --predict)");
    }
    let cuda = workload.variant.engine.on_cuda();
    let plans = workload.variant.engine.parallel.clone();
    let mut rows = Vec::new();
    for (plan, micro) in each_plan(workload, plans.as_deref())? {
        let (w, dropped, label) = plan_workload(workload, plan.as_deref(), micro);
        let started = Instant::now();
        // A pipeline's batch in whole micro-batches: its count at the smallest batch.
        let unit = match how.vary {
            Vary::Batch => w
                .variant
                .engine
                .pipeline()
                .ok()
                .flatten()
                .map_or(1, |p| p.micro_batches.max(1)),
            Vary::Seq => 1,
        };
        let at = |k: usize| {
            let mut s = w.clone();
            match how.vary {
                Vary::Batch => s.batch = k * unit,
                Vary::Seq => s.seq = k,
            }
            s
        };
        let found = crate::analysis::largest_fit::search(how.cap / unit, how.limit, |k| {
            let s = at(k);
            let batch = s.batch;
            let spec = s
                .validated()
                .with_context(|| format!("{} {}", how.vary.name(), k * unit))?;
            let j = judged(&spec, cuda)?;
            Ok::<_, anyhow::Error>((j.total, (j, batch)))
        });
        let seconds = started.elapsed().as_secs_f64();
        rows.push(match found {
            Ok(f) => {
                let (j, batch) = f.at_largest;
                let mut row = j.row(label, batch, Some(how.limit), dropped, seconds);
                let size = |k: usize| match how.vary {
                    Vary::Batch => k * unit,
                    Vary::Seq => k,
                };
                row.largest = Some(LargestFit {
                    size: size(f.largest),
                    first_over: f.first_over.map(size),
                    tries: f.tries,
                });
                row
            }
            Err(why) => refused_row(label, dropped, &why, seconds),
        });
    }
    // A plan fits where even its smallest size does.
    said(
        workload,
        Some(how.limit),
        Some(how.vary.name()),
        rows,
        how.json,
        |r| r.largest.as_ref().is_some_and(|l| l.size > 0),
    )
}
