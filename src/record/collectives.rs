//! The collectives one rank of a data-parallel job runs in one step, by kind (`all_gather`,
//! `reduce_scatter`, `all_reduce`, `broadcast`): measured by the rank's recorder
//! (`python/memscope/_collectives.py`) or predicted by the trace under the fake process group.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Calls of one kind in a step and their bytes: each call's whole tensor (an all-gather's
/// gathered output, a reduce-scatter's unreduced input, an all-reduce's tensor).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
pub struct CollectiveCount {
    pub calls: u64,
    pub bytes: u64,
    /// Ranks in the group these calls ran over (the largest, when calls of one kind ran over
    /// groups of different sizes): the job's world under ddp and fsdp, the tensor-parallel
    /// degree for tp's all-reduces, the number of groups for fsdp+tp's all-gathers. Absent in
    /// Records written before it was counted: the job's world.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<u64>,
}

impl CollectiveCount {
    /// Ranks these calls ran over, `world` when the count does not say.
    pub fn group_or(&self, world: usize) -> usize {
        self.group.map_or(world, |g| g as usize)
    }
}

/// Kind → its calls and bytes in one step.
pub type StepCollectives = BTreeMap<String, CollectiveCount>;
