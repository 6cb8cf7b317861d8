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
}

/// Kind → its calls and bytes in one step.
pub type StepCollectives = BTreeMap<String, CollectiveCount>;
