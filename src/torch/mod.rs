//! `--engine torch`: the same Spec run by Hugging Face transformers' own model classes on PyTorch,
//! in a Python process (`python/memscope/_workers/engine.py`, measured by the Python recorder), on the CPU
//! or a CUDA GPU. Its Record has exactly the shape of memscope's own: `runner` adds the estimate
//! and the compute figures as it does for candle.
//!
//! - `python.rs`: starting the Python package with a request on stdin (it dies with memscope);
//!   why it failed.
//! - `watchdog.rs`: the bound on its start, and `leak`'s stop passed on to it.
//! - `process.rs`: starts the engine, streams its per-step memory entries, reads its Record.
//! - `estimate.rs`: `estimate --engine torch`, the workload traced under FakeTensorMode and
//!   replayed: the allocated peak by category, and on CUDA the reserved peak through
//!   `caching_allocator.rs`, PyTorch's CUDA caching allocator's rules.
//! - `peaks.rs`: `peaks --engine torch`, the device's roofs as PyTorch reaches them, cached.
//! - `profile.rs`: a device profile, the roofs `peaks --engine torch --json` wrote, read by
//!   `estimate --profile` (a file, or one memscope ships by name) and checked against the estimate.
//! - `link.rs`: `peaks --engine torch --collectives`, the link between ranks as PyTorch's
//!   all-reduce reaches it under torchrun, cached.
//! - `optime.rs`: `roofline` and `profile --engine torch`, the workload run with every ATen op
//!   timed and charged to its module.
//! - `torchrun_report.rs`: torchrun's report of a failed job, read as the rank that failed and
//!   how.
//! - `describe.rs`: what transformers builds from a config.json of a `model_type` memscope's
//!   engine does not build (its class, widths and exact parameter count).
//! - `oneshot.rs`: a module of the package run once (the trace, the peaks): request in, one
//!   JSON answer out.
//!
//! The line the engine prints when PyTorch runs out of memory is `record::torch_oom`.

pub mod caching_allocator;
pub mod describe;
pub mod estimate;
pub mod link;
pub mod nodes;
pub mod oneshot;
pub mod optime;
pub mod peaks;
pub mod process;
pub mod profile;
pub mod python;
pub mod torchrun_report;
pub mod watchdog;

pub use process::run;
