//! A data-parallel run's Records, one per rank, as one Record: the worst rank's (the largest
//! peak: the one that decides whether the job fits), holding every rank's own figures.

use crate::record::ranks::RankFigures;
use crate::record::Record;

/// The figures of `r`, rank `rank`'s Record.
fn figures(rank: usize, r: &Record) -> RankFigures {
    let step = r.timing.get("step");
    RankFigures {
        rank,
        peak_bytes: r.memory.heap_peak_bytes,
        end_bytes: r.memory.heap_live_end_bytes,
        reserved_bytes: r
            .memory
            .series
            .iter()
            .filter_map(|m| m.reserved_bytes)
            .max(),
        parameter_bytes: r
            .memory
            .breakdown
            .get("parameters")
            .map(|b| b.measured_bytes),
        step_median_ms: step.map_or(0.0, |t| t.median_ms),
        step_cv_pct: step.and_then(|t| t.cv_pct),
        collectives: r.collectives.clone(),
        worst: false,
        predicted_peak_bytes: None,
    }
}

/// The rank a Record says it is (its recorder's torch.distributed rank), else `i`.
fn rank_of(i: usize, r: &Record) -> usize {
    r.spec
        .engine
        .as_ref()
        .and_then(|e| e.rank)
        .map_or(i, |k| k as usize)
}

/// Each Record's figures, the worst (the largest peak; the lowest rank among equals) marked;
/// with its index in `records`.
pub fn side_by_side(records: &[&Record]) -> Option<(Vec<RankFigures>, usize)> {
    let mut figs: Vec<RankFigures> = records
        .iter()
        .enumerate()
        .map(|(i, r)| figures(rank_of(i, r), r))
        .collect();
    let worst = figs
        .iter()
        .enumerate()
        .max_by(|(_, a), (_, b)| a.peak_bytes.cmp(&b.peak_bytes).then(b.rank.cmp(&a.rank)))?
        .0;
    figs[worst].worst = true;
    Some((figs, worst))
}

/// Rank `i`'s Record at `records[i]` → the worst rank's Record with `ranks` set; None when
/// there are none. A pipeline's loss is its last stage's: where the worst rank computed none,
/// the losses are the first rank's that did.
pub fn worst_rank(records: Vec<Record>) -> Option<Record> {
    let (figs, worst) = side_by_side(&records.iter().collect::<Vec<_>>())?;
    let loss = records
        .iter()
        .find(|r| !r.loss.is_empty())
        .map(|r| r.loss.clone());
    let mut r = records.into_iter().nth(worst)?;
    if r.loss.is_empty() {
        r.loss = loss.unwrap_or_default();
    }
    r.ranks = Some(figs);
    Some(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(peak: u64) -> Record {
        let mut r: Record =
            serde_json::from_str(include_str!("../../tests/fixtures/pytorch-record.json"))
                .expect("the fixture is a Record");
        r.memory.heap_peak_bytes = peak;
        r
    }

    #[test]
    fn the_largest_peak_is_the_record_and_every_rank_is_kept() {
        let r = worst_rank(vec![record(10), record(30), record(30), record(20)]).unwrap();
        let ranks = r.ranks.as_ref().unwrap();
        assert_eq!(r.memory.heap_peak_bytes, 30);
        assert_eq!(ranks.len(), 4);
        let worst: Vec<usize> = ranks.iter().filter(|f| f.worst).map(|f| f.rank).collect();
        assert_eq!(worst, vec![1]);
        assert_eq!(
            ranks.iter().map(|f| f.peak_bytes).collect::<Vec<_>>(),
            vec![10, 30, 30, 20]
        );
        assert!(worst_rank(vec![]).is_none());
    }

    #[test]
    fn a_pipeline_s_loss_is_its_last_stage_s_where_the_worst_rank_has_none() {
        let mut first = record(30);
        first.loss.clear();
        let mut last = record(10);
        last.loss = vec![2.5, 2.0];
        let r = worst_rank(vec![first, last]).unwrap();
        assert_eq!(r.memory.heap_peak_bytes, 30);
        assert_eq!(r.loss, vec![2.5, 2.0]);
    }
}
