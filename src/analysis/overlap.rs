//! Where a step's collectives run beside its compute, and how much of their time the step
//! waits for (the exposed communication): the critical path of a data-parallel step.
//!
//! A phase's collectives run one unit at a time over one link (a DDP bucket, an FSDP2 block's
//! gather or reduce-scatter), beside that phase's compute split evenly over the same units. Each
//! unit's communication `c` either waits for the compute before it (DDP's bucket all-reduce once
//! its gradients are in, FSDP2's reduce-scatter once its block's backward is done) or is issued
//! one unit ahead (FSDP2's prefetched all-gathers): both ways the first (or last) unit's `c`
//! is exposed, and each of the other `n − 1` adds what it outlasts its unit of compute `d`:
//!
//! exposed = c + (n − 1) · max(0, c − d)
//!
//! Tensor parallelism's all-reduces sit between the ops that need them (on the critical path):
//! all exposed, as is any kind the plan does not place. On the CPU, when the ranks' compute
//! threads fill the cores, gloo's transfers (copies and reductions on those cores) take turns
//! with compute: all exposed.

use super::collective_time::KindTime;
use crate::record::collectives::StepCollectives;
use crate::spec::ParallelPlan;
use std::collections::BTreeMap;

/// The exposed seconds of one phase's `n` units of `c` seconds each beside `compute` seconds.
fn queued(n: f64, c: f64, compute: f64) -> f64 {
    if n < 1.0 || c <= 0.0 {
        return 0.0;
    }
    let d = compute / n;
    c + (n - 1.0) * (c - d).max(0.0)
}

/// One phase's share of the collectives: units and seconds.
#[derive(Default, Clone, Copy)]
struct Share {
    units: f64,
    seconds: f64,
}

/// The exposed communication of a step, seconds, and where each kind was placed, for `plan`'s
/// collectives (`counts`, their `times` over the link) beside the predicted compute by phase
/// (`phase_s`: forward, backward, seconds). `cores_full`: CPU ranks whose compute threads fill
/// the machine's cores, so that gloo's copies and reductions take turns with compute and
/// nothing overlaps.
pub fn exposed(
    plan: ParallelPlan,
    counts: &StepCollectives,
    times: &[KindTime],
    phase_s: &BTreeMap<String, f64>,
    cores_full: bool,
) -> (f64, Vec<String>) {
    if cores_full {
        return (
            times.iter().map(|t| t.seconds).sum(),
            vec!["none hidden: on the CPU the ranks' compute threads fill the cores that gloo's copies and reductions need, so they take turns".to_string()],
        );
    }
    let calls = |kind: &str| counts.get(kind).map_or(0.0, |c| c.calls as f64);
    let mut forward = Share::default();
    let mut backward = Share::default();
    let mut critical = 0.0;
    let mut said = Vec::new();
    for t in times {
        match (plan, t.kind.as_str()) {
            (ParallelPlan::Ddp, "all_reduce") => {
                backward.units = backward.units.max(calls("all_reduce"));
                backward.seconds += t.seconds;
                said.push("DDP's bucket all-reduces behind backward, each once its bucket's gradients are in".to_string());
            }
            (ParallelPlan::Fsdp | ParallelPlan::FsdpTp, "all_gather") => {
                // Each block is gathered for its forward and again for its backward.
                let n = calls("all_gather");
                let (f, b) = ((n / 2.0).ceil(), n - (n / 2.0).ceil());
                let per = t.seconds / n.max(1.0);
                forward.units = forward.units.max(f);
                forward.seconds += per * f;
                backward.units = backward.units.max(b);
                backward.seconds += per * b;
                said.push(
                    "FSDP2's all-gathers one block ahead, in forward and again in backward"
                        .to_string(),
                );
            }
            (ParallelPlan::Fsdp | ParallelPlan::FsdpTp, "reduce_scatter") => {
                backward.units = backward.units.max(calls("reduce_scatter"));
                backward.seconds += t.seconds;
                said.push("FSDP2's reduce-scatters behind each block's backward".to_string());
            }
            (_, kind) => {
                critical += t.seconds;
                said.push(format!(
                    "{kind} on the critical path ({})",
                    if matches!(plan, ParallelPlan::Tp | ParallelPlan::FsdpTp) {
                        "tensor parallelism's, between the ops that need them"
                    } else {
                        "not placed beside compute"
                    }
                ));
            }
        }
    }
    let phase = |p: &str| phase_s.get(p).copied().unwrap_or(0.0);
    let total = critical
        + queued(
            forward.units,
            forward.seconds / forward.units.max(1.0),
            phase("forward"),
        )
        + queued(
            backward.units,
            backward.seconds / backward.units.max(1.0),
            phase("backward"),
        );
    said.dedup();
    (total, said)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::collectives::CollectiveCount;

    fn counts(v: &[(&str, u64)]) -> StepCollectives {
        v.iter()
            .map(|(k, n)| {
                (
                    k.to_string(),
                    CollectiveCount {
                        calls: *n,
                        bytes: 1,
                        group: None,
                    },
                )
            })
            .collect()
    }

    fn times(v: &[(&str, f64)]) -> Vec<KindTime> {
        v.iter()
            .map(|(k, s)| KindTime {
                kind: k.to_string(),
                seconds: *s,
                formula: "ring",
            })
            .collect()
    }

    fn phases(f: f64, b: f64) -> BTreeMap<String, f64> {
        BTreeMap::from([("forward".to_string(), f), ("backward".to_string(), b)])
    }

    #[test]
    fn ddp_hides_all_but_the_last_bucket_while_the_link_keeps_up() {
        // 4 buckets of 10 ms beside 100 ms of backward (25 ms a bucket): only the last shows.
        let c = counts(&[("all_reduce", 4)]);
        let (e, said) = exposed(
            ParallelPlan::Ddp,
            &c,
            &times(&[("all_reduce", 0.04)]),
            &phases(0.05, 0.1),
            false,
        );
        assert!((e - 0.01).abs() < 1e-12, "{e}");
        assert!(said[0].contains("bucket"), "{said:?}");
        // 4 × 40 ms beside 25 ms units: 40 + 3 · 15 ms.
        let (e, _) = exposed(
            ParallelPlan::Ddp,
            &c,
            &times(&[("all_reduce", 0.16)]),
            &phases(0.05, 0.1),
            false,
        );
        assert!((e - 0.085).abs() < 1e-12, "{e}");
    }

    #[test]
    fn fsdp_places_gathers_in_both_passes_and_tp_exposes_its_all_reduces() {
        // 8 gathers (4 a pass, 5 ms each) and 4 reduce-scatters (5 ms) beside 40 ms of forward
        // and 80 ms of backward: the first gather, then the first gather and the reduce-scatter
        // of backward's first unit (10 ms beside 20 ms units).
        let c = counts(&[("all_gather", 8), ("reduce_scatter", 4)]);
        let (e, _) = exposed(
            ParallelPlan::Fsdp,
            &c,
            &times(&[("all_gather", 0.04), ("reduce_scatter", 0.02)]),
            &phases(0.04, 0.08),
            false,
        );
        assert!((e - (0.005 + 0.01)).abs() < 1e-12, "{e}");
        let (e, said) = exposed(
            ParallelPlan::Tp,
            &counts(&[("all_reduce", 48)]),
            &times(&[("all_reduce", 0.03)]),
            &phases(0.04, 0.08),
            false,
        );
        assert!((e - 0.03).abs() < 1e-12, "{e}");
        assert!(said[0].contains("critical path"), "{said:?}");
        assert_eq!(queued(0.0, 1.0, 1.0), 0.0);
        // CPU ranks that fill the cores: nothing hides.
        let (e, said) = exposed(
            ParallelPlan::Fsdp,
            &c,
            &times(&[("all_gather", 0.04), ("reduce_scatter", 0.02)]),
            &phases(0.04, 0.08),
            true,
        );
        assert!(
            (e - 0.06).abs() < 1e-12 && said[0].contains("take turns"),
            "{said:?}"
        );
    }
}
