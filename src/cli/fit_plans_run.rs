//! `memscope fit --engine torch --nproc N --parallel A,B,…` (without `--predict`): each plan's
//! largest batch (or sequence) measured as `fit` measures one plan's — every trial a real job
//! under torchrun, each rank within `--memory-limit` — then the plans side by side and the one
//! that runs the most tokens a step within the limit named. A plan the job cannot take is a row
//! saying why; SIGINT or SIGTERM keeps the plans searched and the trials run (`--json`, exit
//! 130).

use super::args::Workload;
use super::estimate_plans::{each_plan, plan_workload, sequences};
use crate::export::write_atomic;
use crate::outln;
use crate::record::sweep_row::Row;
use crate::sweep::interrupt::EXIT_INTERRUPTED;
use crate::sweep::largest::{search, FitRequest, FitResult, Searched, Vary};
use crate::units::bytes as fmt_bytes;
use anyhow::Context;
use std::process::ExitCode;
use std::time::Duration;

/// What each plan's search needs beside its workload.
pub struct Measure<'a> {
    pub vary: Vary,
    pub cap: usize,
    pub limit: u64,
    pub timeout: Option<Duration>,
    pub quiet: bool,
    pub json: Option<&'a std::path::Path>,
}

/// One plan's outcome: its search's result, or why the job cannot take it.
#[derive(serde::Serialize)]
struct PlanFit {
    plan: String,
    /// Flags only other plans take, left out of this one's job.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    dropped: Vec<&'static str>,
    /// At the largest size: the sequences the whole job runs a step (every data-parallel group
    /// its own batch, a pipeline one), and its tokens.
    #[serde(skip_serializing_if = "Option::is_none")]
    sequences_per_step: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tokens_per_step: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    fit: Option<FitResult>,
    #[serde(skip_serializing_if = "Option::is_none")]
    refused: Option<String>,
}

impl PlanFit {
    /// The largest batch (or sequence) that fit; 0 where none did or the plan was refused.
    fn largest(&self) -> usize {
        self.fit
            .as_ref()
            .map_or(0, |f| f.max_batch.or(f.max_seq).unwrap_or(0))
    }

    fn refused(plan: String, dropped: Vec<&'static str>, why: &anyhow::Error) -> PlanFit {
        PlanFit {
            plan,
            dropped,
            sequences_per_step: None,
            tokens_per_step: None,
            fit: None,
            refused: Some(format!("{why:#}")),
        }
    }
}

pub fn run(workload: &Workload, how: &Measure) -> anyhow::Result<ExitCode> {
    let plans = workload.variant.engine.parallel.clone();
    let mut rows: Vec<PlanFit> = Vec::new();
    let mut stopped: Option<(String, Vec<Row>)> = None;
    for (plan, micro) in each_plan(workload, plans.as_deref())? {
        let (w, dropped, label) = plan_workload(workload, plan.as_deref(), micro);
        let base = match w.validated() {
            Ok(spec) => spec,
            Err(why) => {
                rows.push(PlanFit::refused(label, dropped, &why));
                continue;
            }
        };
        if !how.quiet {
            eprintln!("memscope fit: plan {label}");
        }
        let (job, batch, seq) = (base.parallel(), base.batch, base.seq);
        let request = FitRequest {
            base,
            vary: how.vary,
            cap: how.cap,
            limit: how.limit,
            timeout: how.timeout,
            quiet: how.quiet,
        };
        // A plan whose job fails at its first size (say, a model without a tensor-parallel
        // plan) is a row saying why; the other plans are still searched.
        match search(&request) {
            Ok(Searched::Done(r)) => {
                let (batch, seq) = match how.vary {
                    Vary::Batch => (r.max_batch.unwrap_or(0), seq),
                    Vary::Seq => (batch, r.max_seq.unwrap_or(0)),
                };
                let seqs = job.map_or(batch, |p| sequences(&p, batch));
                rows.push(PlanFit {
                    plan: label,
                    dropped,
                    sequences_per_step: Some(seqs),
                    tokens_per_step: Some(seqs * seq),
                    fit: Some(r),
                    refused: None,
                });
            }
            Ok(Searched::Interrupted(trials)) => {
                stopped = Some((label, trials));
                break;
            }
            Err(why) => rows.push(PlanFit::refused(label, dropped, &why)),
        }
    }
    if let Some((plan, trials)) = &stopped {
        eprintln!(
            "memscope fit: interrupted in plan {plan} after {} finished trials; the plans searched before it{}",
            trials.len(),
            if how.json.is_some() { " and its trials are in --json" } else { " are below" }
        );
    }
    print_table(&rows, how)?;
    if let Some(p) = how.json {
        let v = serde_json::json!({
            "vary": how.vary.name(),
            "memory_limit_bytes": how.limit,
            "plans": rows,
            "interrupted": stopped.as_ref().map(|(plan, trials)| serde_json::json!({"plan": plan, "trials": trials})),
        });
        write_atomic(p, &serde_json::to_string_pretty(&v)?)
            .with_context(|| format!("--json {}", p.display()))?;
    }
    Ok(match stopped {
        Some(_) => ExitCode::from(EXIT_INTERRUPTED),
        None => ExitCode::SUCCESS,
    })
}

/// The plans side by side: each one's largest size, the first that did not fit, the sequences
/// a step there, the worst rank's heap peak there; and the plan that runs the most tokens a step
/// within the limit (of plans that run as many, the lowest peak: the most head-room).
fn print_table(rows: &[PlanFit], how: &Measure) -> anyhow::Result<()> {
    let vary = how.vary.name();
    let limit = fmt_bytes(how.limit as f64);
    outln!("Measured per plan, each rank within --memory-limit {limit}:")?;
    outln!("| plan | largest {vary} | first over | sequences a step | heap peak there (worst rank) | trials |")?;
    outln!("|---|--:|--:|--:|--:|--:|")?;
    let peak = |r: &PlanFit| r.fit.as_ref().and_then(|f| f.heap_peak_bytes);
    for r in rows {
        match (&r.fit, &r.refused) {
            (Some(f), _) => outln!(
                "| {} | {} | {} | {} | {} | {} |",
                r.plan,
                r.largest(),
                f.first_oom
                    .map_or_else(|| "none up to --max".to_string(), |h| h.to_string()),
                r.sequences_per_step.unwrap_or(0),
                peak(r).map_or_else(|| "—".to_string(), |b| fmt_bytes(b as f64)),
                f.trials.len()
            )?,
            (None, why) => outln!(
                "| {} | refused: {} | | | | |",
                r.plan,
                why.as_deref().unwrap_or("")
            )?,
        }
        if !r.dropped.is_empty() {
            outln!(
                "  ({} left out of {}: only other plans take it)",
                r.dropped.join(", "),
                r.plan
            )?;
        }
    }
    let tokens = |r: &PlanFit| {
        if r.largest() > 0 {
            r.tokens_per_step.unwrap_or(0)
        } else {
            0
        }
    };
    let best = rows
        .iter()
        .filter(|r| tokens(r) > 0)
        .min_by_key(|r| (std::cmp::Reverse(tokens(r)), peak(r).unwrap_or(u64::MAX)));
    let tied = best.map_or(0, |b| {
        rows.iter().filter(|r| tokens(r) == tokens(b)).count()
    });
    match best {
        Some(b) => outln!(
            "Most tokens a step within {limit}: {} ({vary} {}, {} sequences a step{}).",
            b.plan,
            b.largest(),
            b.sequences_per_step.unwrap_or(0),
            if tied > 1 {
                "; of the plans that run as many, the lowest heap peak"
            } else {
                ""
            }
        )?,
        None => outln!("No plan fits {vary} 1 in {limit}.")?,
    }
    if let Some(f) = rows.iter().find_map(|r| r.fit.as_ref()) {
        outln!("{}.", f.enforcement)?;
    }
    Ok(())
}
