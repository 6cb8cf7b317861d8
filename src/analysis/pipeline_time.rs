//! A pipeline's step time: every rank's schedule (PyTorch's own action list,
//! `pipeline_order[rank]`) played out in order, each action starting when its rank is free and
//! what it needs has arrived — a stage's forward of micro-batch m after the previous stage's
//! forward of m (plus the hidden states' transfer when that stage is on another rank), a
//! backward after the next stage's backward of m (the last stage's after its own forward), a
//! weight backward (`W`) after its input backward (`I`). The step is the latest rank's end plus
//! what that rank runs after its schedule (the optimizer); a rank's idle time is its wait
//! inside the schedule (the bubble).
//!
//! Each action takes its rank's predicted phase time over that phase's actions: a rank's
//! forward time over its `F`s, its backward time over its `B`s (an `I` or a `W` half of one).
//! Stages of one rank (interleaved schedules) share that average.

use crate::record::pipeline_play::{Action, Kind, PipelinePlay, RankPlay};
use anyhow::bail;
use std::collections::HashMap;

/// One rank's predicted time, ms: its forward and backward phases over the whole step (every
/// micro-batch of every stage it holds), and what it runs after them (`after_ms`: the
/// optimizer and the rest of its step).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RankTime {
    pub forward_ms: f64,
    pub backward_ms: f64,
    pub after_ms: f64,
}

/// What an action waits for: the action of the same micro-batch on the stage before (a
/// forward) or after (a backward), or on its own stage (a last stage's backward, a weight
/// backward).
fn needs(a: Action, last_stage: usize) -> Option<(Kind, usize)> {
    match a.kind {
        Kind::Forward => (a.stage > 0).then(|| (Kind::Forward, a.stage - 1)),
        Kind::Backward | Kind::Input if a.stage == last_stage => Some((Kind::Forward, a.stage)),
        // The next stage's input gradient, from a whole backward or an input backward.
        Kind::Backward | Kind::Input => Some((Kind::Input, a.stage + 1)),
        Kind::Weight => Some((Kind::Input, a.stage)),
    }
}

/// A whole backward gives its input's gradient as an input backward does.
fn gives(kind: Kind) -> Kind {
    match kind {
        Kind::Backward => Kind::Input,
        k => k,
    }
}

/// Plays `actions` (rank by rank, in order) with each rank's `times`; `transfer_ms` per hand-over
/// between stages on different ranks.
pub fn play(
    actions: &[Vec<Action>],
    times: &[RankTime],
    transfer_ms: f64,
) -> anyhow::Result<PipelinePlay> {
    if actions.len() != times.len() {
        bail!(
            "internal: {} ranks' schedules but {} ranks' times",
            actions.len(),
            times.len()
        );
    }
    let mut rank_of = HashMap::new();
    for (r, list) in actions.iter().enumerate() {
        for a in list {
            rank_of.insert(a.stage, r);
        }
    }
    let Some(&last_stage) = rank_of.keys().max() else {
        bail!("the pipeline's schedule has no actions");
    };
    // Each rank's duration of an action of each kind.
    let durations: Vec<HashMap<Kind, f64>> = actions
        .iter()
        .zip(times)
        .map(|(list, t)| {
            let count = |k: Kind| list.iter().filter(|a| a.kind == k).count() as f64;
            let whole = count(Kind::Backward) + 0.5 * (count(Kind::Input) + count(Kind::Weight));
            let forward = t.forward_ms / count(Kind::Forward).max(1.0);
            let backward = t.backward_ms / whole.max(1.0);
            HashMap::from([
                (Kind::Forward, forward),
                (Kind::Backward, backward),
                (Kind::Input, backward / 2.0),
                (Kind::Weight, backward / 2.0),
            ])
        })
        .collect();
    // (what it gives, stage, micro-batch) → when it ended.
    let mut done: HashMap<(Kind, usize, usize), f64> = HashMap::new();
    let mut next = vec![0usize; actions.len()];
    let mut clock = vec![0f64; actions.len()];
    let mut busy = vec![0f64; actions.len()];
    let mut transfers = 0;
    loop {
        let mut moved = false;
        for r in 0..actions.len() {
            while let Some(&a) = actions[r].get(next[r]) {
                let ready = match needs(a, last_stage) {
                    None => 0.0,
                    Some((kind, stage)) => match done.get(&(kind, stage, a.micro)) {
                        None => break,
                        Some(&t) if rank_of.get(&stage) == Some(&r) => t,
                        Some(&t) => {
                            transfers += 1;
                            t + transfer_ms
                        }
                    },
                };
                let took = durations[r][&a.kind];
                let start = clock[r].max(ready);
                clock[r] = start + took;
                busy[r] += took;
                done.insert((gives(a.kind), a.stage, a.micro), clock[r]);
                if a.kind == Kind::Backward {
                    done.insert((Kind::Weight, a.stage, a.micro), clock[r]);
                }
                next[r] += 1;
                moved = true;
            }
        }
        if next.iter().zip(actions).all(|(n, l)| *n == l.len()) {
            break;
        }
        if !moved {
            let (r, a) = next
                .iter()
                .zip(actions)
                .enumerate()
                .find_map(|(r, (n, l))| l.get(*n).map(|a| (r, *a)))
                .expect("some rank has actions left");
            bail!(
                "the pipeline's schedule does not play out: rank {r} waits at {:?} of stage {}, micro-batch {}, for an action no rank runs before it",
                a.kind,
                a.stage,
                a.micro
            );
        }
    }
    let ranks: Vec<RankPlay> = (0..actions.len())
        .map(|r| RankPlay {
            rank: r,
            busy_ms: busy[r],
            end_ms: clock[r],
            idle_ms: clock[r] - busy[r],
            step_ms: clock[r] + times[r].after_ms,
        })
        .collect();
    Ok(PipelinePlay {
        step_ms: ranks.iter().map(|r| r.step_ms).fold(0.0, f64::max),
        transfer_ms,
        transfers,
        ranks,
    })
}

/// The bytes of one hand-over between stages: a micro-batch's hidden states (or their
/// gradient), (batch / micro-batches, seq, d_model), in f32 under autocast (the residual
/// stream stays in the master weights' dtype), else the model's dtype.
pub fn transfer_bytes(spec: &crate::spec::Spec) -> u64 {
    let micro = spec
        .torch
        .as_ref()
        .and_then(|t| t.pipeline.as_ref())
        .map_or(1, |p| p.micro_batches.max(1));
    let d_model = spec.config.as_ref().map_or(0, |c| c.d_model) as u64;
    let element = if spec.variant.precision == crate::model::variant::Precision::Mixed {
        4
    } else {
        spec.dtype.size_bytes()
    };
    (spec.batch / micro) as u64 * spec.seq as u64 * d_model * element
}

/// One hand-over's time over `link`, ms: its all-reduce fit's latency and bandwidth
/// (point-to-point transfers are not timed on their own); 0 without a link.
pub fn transfer_ms(spec: &crate::spec::Spec, link: Option<&super::collective_time::Links>) -> f64 {
    link.map_or(0.0, |l| {
        1e3 * (l.all_reduce.latency_s + transfer_bytes(spec) as f64 / l.all_reduce.bytes_per_s)
    })
}

/// The schedule's own bubble: its action lists played out with every stage's forward, input
/// backward and weight backward of equal time (a whole backward two of them) and no transfer
/// time; the most any rank idles (the step's end less its busy time) over its busy time.
/// (P − 1) / (V × M) for GPipe, 1F1B and interleaved 1F1B; less where weight backwards fill it.
pub fn equal_stages_bubble(actions: &[Vec<Action>]) -> anyhow::Result<f64> {
    let times: Vec<RankTime> = actions
        .iter()
        .map(|list| {
            let count = |k: Kind| list.iter().filter(|a| a.kind == k).count() as f64;
            RankTime {
                forward_ms: count(Kind::Forward),
                backward_ms: 2.0 * count(Kind::Backward) + count(Kind::Input) + count(Kind::Weight),
                after_ms: 0.0,
            }
        })
        .collect();
    let play = play(actions, &times, 0.0)?;
    let end = play.ranks.iter().map(|r| r.end_ms).fold(0.0, f64::max);
    Ok(play
        .ranks
        .iter()
        .filter(|r| r.busy_ms > 0.0)
        .map(|r| (end - r.busy_ms) / r.busy_ms)
        .fold(0.0, f64::max))
}

/// Each rank's phases predicted from its own ops against `peaks`' roofs, and its schedule
/// played out; `transfer_ms` per hand-over between ranks.
pub fn predict(
    work: &[crate::torch::estimate::RankWork],
    peaks: &crate::torch::peaks::TorchPeaks,
    transfer_ms: f64,
) -> anyhow::Result<PipelinePlay> {
    let times: Vec<RankTime> = work
        .iter()
        .map(|w| {
            let p = super::torch_time::predict(&w.ops, peaks);
            let ms = |phase: &str| 1e3 * p.by_phase.get(phase).copied().unwrap_or(0.0);
            let (forward_ms, backward_ms) = (ms("forward"), ms("backward"));
            RankTime {
                forward_ms,
                backward_ms,
                after_ms: (1e3 * p.step_s - forward_ms - backward_ms).max(0.0),
            }
        })
        .collect();
    let actions: Vec<Vec<Action>> = work.iter().map(|w| w.actions.clone()).collect();
    play(&actions, &times, transfer_ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(text: &str) -> Vec<Action> {
        text.split_whitespace()
            .map(|a| {
                let (k, rest) = a.split_at(1);
                let (s, m) = rest.split_once('.').unwrap();
                Action {
                    kind: Kind::of_letter(k).unwrap(),
                    stage: s.parse().unwrap(),
                    micro: m.parse().unwrap(),
                }
            })
            .collect()
    }

    fn even(ranks: usize, f: f64, b: f64) -> Vec<RankTime> {
        vec![
            RankTime {
                forward_ms: f,
                backward_ms: b,
                after_ms: 0.0,
            };
            ranks
        ]
    }

    #[test]
    fn gpipe_on_two_ranks_leaves_each_idle_one_stage_forward_and_backward() {
        // 4 micro-batches; a forward 1 ms, a backward 2 ms each.
        let a = vec![
            list("F0.0 F0.1 F0.2 F0.3 B0.0 B0.1 B0.2 B0.3"),
            list("F1.0 F1.1 F1.2 F1.3 B1.0 B1.1 B1.2 B1.3"),
        ];
        let p = play(&a, &even(2, 4.0, 8.0), 0.0).unwrap();
        // (M + P − 1) forwards then (M + P − 1) backwards: 5 × 1 + 5 × 2 = 15 ms.
        assert_eq!(p.step_ms, 15.0);
        assert_eq!(p.ranks[0].busy_ms, 12.0);
        assert_eq!(p.ranks[0].idle_ms, 3.0);
        // The last stage waits only for the first forward.
        assert_eq!(p.ranks[1].idle_ms, 1.0);
    }

    #[test]
    fn one_f_one_b_ends_as_gpipe_does_with_equal_stages_and_transfers_add_on_each_crossing() {
        let a = vec![
            list("F0.0 F0.1 B0.0 F0.2 B0.1 F0.3 B0.2 B0.3"),
            list("F1.0 B1.0 F1.1 B1.1 F1.2 B1.2 F1.3 B1.3"),
        ];
        let p = play(&a, &even(2, 4.0, 8.0), 0.0).unwrap();
        assert_eq!(p.step_ms, 15.0);
        let t = play(&a, &even(2, 4.0, 8.0), 0.5).unwrap();
        // Every micro-batch crosses twice (its forward, its backward).
        assert_eq!(t.transfers, 8);
        assert!(t.step_ms > 15.0 && t.step_ms <= 15.0 + 8.0 * 0.5, "{t:?}");
    }

    #[test]
    fn what_a_rank_runs_after_its_schedule_adds_to_its_own_end() {
        let a = vec![list("F0.0 B0.0"), list("F1.0 B1.0")];
        let mut t = even(2, 1.0, 2.0);
        t[0].after_ms = 10.0;
        let p = play(&a, &t, 0.0).unwrap();
        // Rank 0 ends at 1 + 1 + 2 + 2 = 6, then its optimizer.
        assert_eq!(p.ranks[0].end_ms, 6.0);
        assert_eq!(p.step_ms, 16.0);
    }

    #[test]
    fn a_schedule_that_cannot_play_out_names_the_rank_and_the_action() {
        // Rank 1's backward of micro-batch 0 before its forward of it.
        let a = vec![list("F0.0 B0.0"), list("B1.0 F1.0")];
        let e = play(&a, &even(2, 1.0, 1.0), 0.0).unwrap_err().to_string();
        assert!(e.contains("rank 0") || e.contains("rank 1"), "{e}");
        assert!(e.contains("does not play out"), "{e}");
    }

    #[test]
    fn the_equal_stages_bubble_of_one_f_one_b_is_p_less_one_over_m() {
        let a = vec![
            list("F0.0 F0.1 B0.0 F0.2 B0.1 F0.3 B0.2 B0.3"),
            list("F1.0 B1.0 F1.1 B1.1 F1.2 B1.2 F1.3 B1.3"),
        ];
        // (P − 1) / (V × M) = 1 / 4.
        assert_eq!(equal_stages_bubble(&a).unwrap(), 0.25);
    }

    #[test]
    fn weight_backwards_filling_the_wait_shrink_the_bubble() {
        // 2 micro-batches: each rank defers its weight halves until its input halves have
        // run, so the last stage hands the first its input gradients sooner.
        let split = vec![
            list("F0.0 F0.1 I0.0 I0.1 W0.0 W0.1"),
            list("F1.0 I1.0 F1.1 I1.1 W1.0 W1.1"),
        ];
        let whole = vec![list("F0.0 F0.1 B0.0 B0.1"), list("F1.0 B1.0 F1.1 B1.1")];
        let (z, b) = (
            equal_stages_bubble(&split).unwrap(),
            equal_stages_bubble(&whole).unwrap(),
        );
        // 1F1B: (P − 1) / M = 1 / 2; split: rank 0 ends at 8 with 6 busy.
        assert_eq!(b, 0.5);
        assert_eq!(z, 2.0 / 6.0);
    }

    #[test]
    fn zero_bubble_halves_wait_on_their_input_backward() {
        let a = vec![list("F0.0 I0.0 W0.0"), list("F1.0 I1.0 W1.0")];
        let p = play(&a, &even(2, 1.0, 2.0), 0.0).unwrap();
        // F0 1, F1 2, I1 3, W1 4 | I0 from 3 to 4, W0 5.
        assert_eq!(p.ranks[1].end_ms, 4.0);
        assert_eq!(p.ranks[0].end_ms, 5.0);
    }
}
