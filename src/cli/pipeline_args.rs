//! A pipeline job's flags (`--pp-schedule`, `--micro-batches`, `--pp-split`) read into its
//! schedule; `estimate`, `fit` and `sweep` take a list of micro-batch counts, set side by side.

use super::args::EngineArgs;
use crate::spec::{ParallelPlan, Pipeline, PipelineSchedule};
use anyhow::{bail, Context};

impl EngineArgs {
    /// `--micro-batches 4` or a list `4,8,16`, each a whole number.
    pub fn micro_batch_counts(&self) -> anyhow::Result<Option<Vec<usize>>> {
        let Some(text) = self.micro_batches.as_deref() else {
            return Ok(None);
        };
        text.split(',')
            .map(|m| m.trim().parse::<usize>().ok())
            .collect::<Option<Vec<usize>>>()
            .map(Some)
            .with_context(|| {
                format!("--micro-batches {text}: give a whole number of micro-batches, or a comma list of them to `estimate`, `fit` or `sweep` (4,8,16)")
            })
    }

    /// `--pp-schedule` and `--micro-batches` as a pipeline job's schedule (1F1B over as many
    /// micro-batches as the job has stages unless given); either without `--parallel pp:P`
    /// is left to the Spec's validation, which names it.
    pub(super) fn pipeline(&self) -> anyhow::Result<Option<Pipeline>> {
        let pp = self.parallel()?.filter(|p| p.plan == ParallelPlan::Pp);
        if pp.is_none() && self.pp_schedule.is_none() && self.micro_batches.is_none() {
            if let Some(split) = &self.pp_split {
                bail!("--pp-split {split}: a split is a pipeline's stages; add --nproc P --parallel pp:P");
            }
            return Ok(None);
        }
        let counts = self.micro_batch_counts()?;
        if let (Some(text), Some(counts)) = (&self.micro_batches, &counts) {
            if counts.len() > 1 {
                bail!("--micro-batches {text}: a list sets a pipeline's micro-batch counts side by side in `estimate --engine torch --parallel pp:P`, `fit` and `sweep`; give one count here");
            }
        }
        if pp.is_none() && self.pp_schedule.is_none() {
            let m = self.micro_batches.clone().unwrap_or_default();
            bail!("--micro-batches {m}: micro-batches are a pipeline's; add --nproc P --parallel pp:P (for gradient accumulation use --grad-accum)");
        }
        let (schedule, stages_per_rank) = match self.pp_schedule.as_deref() {
            Some(text) => Pipeline::parse_schedule(text)?,
            None => (PipelineSchedule::OneFOneB, 1),
        };
        let world = pp.map_or(1, |p| p.world);
        Ok(Some(Pipeline {
            schedule,
            micro_batches: counts
                .and_then(|c| c.first().copied())
                .unwrap_or(world * stages_per_rank),
            stages_per_rank,
            split: self
                .pp_split
                .as_deref()
                .map(Pipeline::parse_split)
                .transpose()?,
        }))
    }
}
