//! Tokens per second, MFU and a run's hours from a predicted step: what a planner asks before
//! renting the machines. One rank's tokens over its predicted step; the job's, every
//! data-parallel replica's tokens over the step with its collectives, given as the two bounds
//! `analysis::collective_time` gives (communication hidden behind compute, or not at all); MFU
//! the step's traced FLOPs over the predicted time and the matmul rate `peaks` measured for the
//! dtype (a measured ceiling, not the card's datasheet figure).

use crate::record::torch_estimate::Throughput;
use crate::spec::{Mode, Parallel, ParallelPlan};
use std::collections::BTreeMap;

/// What the step processes and how the job replicates it.
#[derive(Clone, Copy, Debug)]
pub struct Job {
    pub mode: Mode,
    pub batch: usize,
    pub seq: usize,
    pub grad_accum: usize,
    /// Generate: tokens decoded per sequence.
    pub new_tokens: usize,
    pub parallel: Option<Parallel>,
}

impl Job {
    /// Ranks that each process their own batch: the world over the tensor-parallel group (a
    /// pipeline's ranks share one batch, and so count once).
    fn replicas(&self) -> usize {
        match self.parallel {
            None => 1,
            Some(p) if p.plan == ParallelPlan::Pp => 1,
            Some(p) => (p.world / p.tp.max(1)).max(1),
        }
    }

    /// Tokens one replica processes a step, and the phases whose time that takes: a training
    /// step's every micro-batch; an inference forward's; a generation's decoded tokens.
    fn tokens(&self) -> (f64, &'static [&'static str]) {
        let bt = (self.batch * self.seq) as f64;
        match self.mode {
            Mode::Train => (bt * self.grad_accum.max(1) as f64, &[]),
            Mode::Infer => (bt, &[]),
            Mode::Generate => ((self.batch * self.new_tokens) as f64, &["decode"]),
        }
    }
}

/// The collectives' ms a step: in all, and the part the step waits for (`analysis::overlap`);
/// both 0 without a link.
#[derive(Clone, Copy, Debug, Default)]
pub struct Communication {
    pub total_ms: f64,
    pub exposed_ms: f64,
}

/// Throughput from the predicted ms by phase (`step` the whole step), the step's FLOPs by phase,
/// the collectives' time, the dtype's measured matmul peak in GFLOP/s, and the tokens of a run
/// (`--run-tokens`). None without a predicted step.
pub fn throughput(
    job: &Job,
    predicted_ms: &BTreeMap<String, f64>,
    flops: &BTreeMap<String, u64>,
    comm: Communication,
    peak_gflops: f64,
    run_tokens: Option<f64>,
) -> Option<Throughput> {
    let (tokens, phases) = job.tokens();
    let (ms, flop) = if phases.is_empty() {
        (*predicted_ms.get("step")?, flops.get("total").copied()?)
    } else {
        let ms: f64 = phases.iter().filter_map(|p| predicted_ms.get(*p)).sum();
        let f: u64 = phases.iter().filter_map(|p| flops.get(*p)).sum();
        (ms, f)
    };
    if ms <= 0.0 || tokens <= 0.0 {
        return None;
    }
    let s = ms / 1e3;
    let (total, exposed) = (comm.total_ms.max(0.0) / 1e3, comm.exposed_ms.max(0.0) / 1e3);
    let replicas = job.replicas() as f64;
    // Fastest: the collectives hidden behind compute; slowest: after it.
    let bounds = (
        replicas * tokens / s.max(total),
        replicas * tokens / (s + total),
    );
    let job_rate = replicas * tokens / (s + exposed);
    let hours = |rate: f64| run_tokens.map(|n| n / rate / 3600.0);
    Some(Throughput {
        tokens_per_step: tokens,
        tokens_per_s: tokens / s,
        job_tokens_per_s: job_rate,
        job_tokens_per_s_bounds: bounds,
        mfu: flop as f64 / s / (peak_gflops * 1e9),
        peak_gflops,
        run_tokens,
        run_hours: hours(job_rate),
        run_hours_bounds: hours(bounds.0).zip(hours(bounds.1)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(v: &[(&str, f64)]) -> BTreeMap<String, f64> {
        v.iter().map(|(k, x)| (k.to_string(), *x)).collect()
    }

    fn job(mode: Mode, parallel: Option<Parallel>) -> Job {
        Job {
            mode,
            batch: 2,
            seq: 128,
            grad_accum: 2,
            new_tokens: 16,
            parallel,
        }
    }

    #[test]
    fn a_training_step_counts_every_micro_batch_and_its_flops_against_the_peak() {
        // 2 × 128 × 2 tokens in 100 ms; 10 GFLOP in 0.1 s at a 200 GFLOP/s peak: 50%.
        let flops = BTreeMap::from([("total".to_string(), 10_000_000_000u64)]);
        let t = throughput(
            &job(Mode::Train, None),
            &map(&[("step", 100.0)]),
            &flops,
            Communication::default(),
            200.0,
            Some(1.8432e7),
        )
        .unwrap();
        assert_eq!(t.tokens_per_step, 512.0);
        assert!((t.tokens_per_s - 5120.0).abs() < 1e-9);
        assert_eq!(t.job_tokens_per_s, 5120.0);
        assert_eq!(t.job_tokens_per_s_bounds, (5120.0, 5120.0));
        assert!((t.mfu - 0.5).abs() < 1e-12);
        // 1.8432e7 tokens at 5,120 a second: one hour.
        assert!((t.run_hours.unwrap() - 1.0).abs() < 1e-9);
        let (lo, hi) = t.run_hours_bounds.unwrap();
        assert!((lo - 1.0).abs() < 1e-9 && (hi - 1.0).abs() < 1e-9);
    }

    #[test]
    fn a_job_counts_its_replicas_and_brackets_its_collectives() {
        let p = |plan, world, tp| Parallel {
            plan,
            world,
            tp,
            nodes: 1,
        };
        let flops = BTreeMap::from([("total".to_string(), 1u64)]);
        let step = map(&[("step", 100.0)]);
        // 8 FSDP ranks, 50 ms of collectives of which 10 exposed: 8 replicas at 110 ms, and
        // at 100 ms (hidden) or 150 ms (not).
        let comm = Communication {
            total_ms: 50.0,
            exposed_ms: 10.0,
        };
        let t = throughput(
            &job(Mode::Train, Some(p(ParallelPlan::Fsdp, 8, 1))),
            &step,
            &flops,
            comm,
            1.0,
            None,
        )
        .unwrap();
        assert!((t.job_tokens_per_s - 8.0 * 512.0 / 0.11).abs() < 1e-6);
        assert!((t.job_tokens_per_s_bounds.0 - 8.0 * 5120.0).abs() < 1e-6);
        assert!((t.job_tokens_per_s_bounds.1 - 8.0 * 512.0 / 0.15).abs() < 1e-6);
        // fsdp+tp:4 over 8: two replicas; a pipeline: one.
        let tp = throughput(
            &job(Mode::Train, Some(p(ParallelPlan::FsdpTp, 8, 4))),
            &step,
            &flops,
            Communication::default(),
            1.0,
            None,
        )
        .unwrap();
        assert!((tp.job_tokens_per_s - 2.0 * 5120.0).abs() < 1e-6);
        let pp = throughput(
            &job(Mode::Train, Some(p(ParallelPlan::Pp, 4, 1))),
            &step,
            &flops,
            Communication::default(),
            1.0,
            None,
        )
        .unwrap();
        assert!((pp.job_tokens_per_s - 5120.0).abs() < 1e-6);
    }

    #[test]
    fn a_generation_is_its_decoded_tokens_over_decode() {
        let flops = BTreeMap::from([
            ("decode".to_string(), 4_000_000_000u64),
            ("total".to_string(), 9_000_000_000u64),
        ]);
        let t = throughput(
            &job(Mode::Generate, None),
            &map(&[("prefill", 50.0), ("decode", 200.0), ("step", 250.0)]),
            &flops,
            Communication::default(),
            100.0,
            None,
        )
        .unwrap();
        // 2 × 16 tokens in 0.2 s; 4 GFLOP in 0.2 s of a 100 GFLOP/s peak.
        assert!((t.tokens_per_s - 160.0).abs() < 1e-9);
        assert!((t.mfu - 0.2).abs() < 1e-12);
        assert!(throughput(
            &job(Mode::Train, None),
            &BTreeMap::new(),
            &flops,
            Communication::default(),
            1.0,
            None
        )
        .is_none());
    }
}
