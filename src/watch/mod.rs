//! `memscope watch`: sampling an external process tree (procfs, NVML) while relaying its output.
//! One idea per file: `tree` (which processes), `sample` (one reading of them), `child` (spawn,
//! signals, how it ended), `passthrough` (its output, byte for byte, scanned for markers), `steps`
//! (step markers and values), `gpu` (NVML at run time), `status` (the live line), `jsonl` (samples as
//! taken), `series` (what the verdict judges, peaks), `outputs` (closing text, CSV, JSON), `trace` (`--trace`), `run`
//! (the loop).

pub mod child;
pub mod gpu;
pub mod observe;
pub mod passthrough;
pub mod sample;
pub mod series;
pub mod status;
pub mod steps;
pub mod summary;
pub mod trace;
