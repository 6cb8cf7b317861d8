//! The contract across the Rust ↔ Python boundary: one JSON Schema for every message the binary
//! and the Python package exchange, generated from the Rust types that read and write them (no
//! second definition). `python/memscope/contract.schema.json` is this schema, checked in and
//! shipped in the wheel; `tests/contract.rs` fails when it drifts from the types, and the package
//! (`memscope/_contract.py`) checks what it receives and sends against it.
//!
//! - `Request`: what the torch engine, its trace and its op timer read on stdin (a Spec and the
//!   model's exact parameter count);
//! - `EngineLine`: each line the engine writes on stdout (its start, a step's memory entry, the
//!   Record last);
//! - `TraceAnswer`: what the estimator's trace prints (`PipelineTraceAnswer`: a pipeline's,
//!   every rank's);
//! - `OomFacts`: the `memscope-oom {…}` line on stderr when PyTorch runs out of memory;
//! - `Record`: a run's Record (the recorder's too, written by `_native.write_record`);
//! - `PeaksRequest`/`PeaksAnswer`: `peaks --engine torch`'s request and the seconds it timed;
//! - `LinkRequest`/`LinkAnswer`: `peaks --collectives`' request and the all-reduces it timed;
//! - `OptimeAnswer`: the op timer's plain and profiled runs (its request is `Request`);
//! - `DescribeRequest`/`BuiltModel`: a config.json transformers builds, and what it built.

use schemars::{generate::SchemaSettings, JsonSchema, Schema};

/// Every message of the contract, by name.
#[derive(JsonSchema)]
#[allow(dead_code)] // only its schema is used
struct Contract<'a> {
    request: crate::torch::python::Request<'a>,
    engine_line: crate::torch::process::Line,
    trace_answer: crate::torch::estimate::Trace,
    pipeline_trace_answer: crate::torch::estimate::PipelineTrace,
    oom_facts: crate::record::torch_oom::OomFacts,
    record: crate::record::Record,
    peaks_request: crate::torch::peaks::PeaksRequest<'a>,
    peaks_answer: crate::torch::peaks::Measured,
    link_request: crate::torch::link::LinkRequest<'a>,
    link_answer: crate::torch::link::Measured,
    optime_answer: crate::torch::optime::Answer,
    describe_request: crate::torch::describe::DescribeRequest<'a>,
    describe_answer: crate::model::config::BuiltModel,
}

/// The contract's JSON Schema (draft 2020-12), pretty-printed with a final newline: what
/// `python/memscope/contract.schema.json` holds.
pub fn schema_json() -> String {
    let schema: Schema = SchemaSettings::draft2020_12()
        .into_generator()
        .into_root_schema_for::<Contract>();
    serde_json::to_string_pretty(&schema).expect("a schema serialises") + "\n"
}
