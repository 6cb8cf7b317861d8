//! Every kind of file memscope writes or reads, typed: one serde struct per kind, with its schema
//! name or version and its reader, and nothing else. Commands build values of these types; the
//! readers (`report`, `compare`, `diff`, `scaling`, `analyze`) read only these types.
//!
//! | kind | type | written by |
//! |---|---|---|
//! | run Record | [`Record`] (`run.rs`) | `bench --json`, `leak --record`, a sweep worker |
//! | sweep row | [`sweep_row::Row`] | `sweep --jsonl`, `fit`, `optimize` |
//! | roofline | [`roofline::RooflineFile`] | `roofline --json` |
//! | optimize | [`optimize::OptimizeFile`] | `optimize --json` |
//! | torch estimate | [`torch_estimate::TorchEstimateFile`] | `estimate --engine torch --json` |
//! | torch engine's OOM line | [`torch_oom::OomFacts`] | `python/memscope/_workers/engine.py` (stderr), in a sweep row |

pub mod collectives;
pub mod detect;
pub mod estimate;
pub mod leak;
pub mod nonfinite;
pub mod op_profile;
pub mod optimize;
pub mod pipeline_play;
pub mod ranks;
pub mod rates;
pub mod roofline;
mod run;
pub mod run_columns;
pub mod sweep_row;
pub mod torch_estimate;
pub mod torch_oom;
pub mod watch;

pub use run::*;
