//! `roofline --engine torch` and `profile --engine torch`: the workload run for real by the
//! Python package (`python/memscope/_workers/optime.py`), its measured steps plain and then profiled,
//! every dispatched ATen op timed one by one and charged to the module that ran it (in backward,
//! to the module whose forward made the autograd node). Read here; costed and set against the
//! roofs by `analysis::torch_roofline`.

use super::estimate::{Tensor, TracedOp};
use super::oneshot::answer;
use super::python::Request;
use crate::spec::Spec;
use anyhow::Context;
use serde::Deserialize;
use std::collections::BTreeMap;

/// One op signature's calls and time over the profiled steps, and where it ran.
#[derive(Clone, Debug, PartialEq)]
pub struct TimedOp {
    /// The op by signature; `calls` is per step.
    pub op: TracedOp,
    /// The module's dotted path in the model (`transformer.h.3.attn.c_attn`); empty outside
    /// every module (the loss, the optimizer, the gradients' accumulation).
    pub module: String,
    /// Seconds per step.
    pub seconds: f64,
}

/// What a profiled torch run measured.
#[derive(Clone, Debug, PartialEq)]
pub struct TorchProfile {
    pub device: String,
    /// The GPU's name; empty on the CPU.
    pub device_name: String,
    /// PyTorch's version.
    pub torch: String,
    pub param_bytes: u64,
    pub steps: u64,
    /// Phase (and `step`) → ms of every run, plain and profiled.
    pub plain: BTreeMap<String, Vec<f64>>,
    pub profiled: BTreeMap<String, Vec<f64>>,
    pub ops: Vec<TimedOp>,
}

/// `memscope._workers.optime`'s answer: the plain and profiled runs, every op's time.
#[derive(Deserialize, schemars::JsonSchema)]
#[schemars(rename = "OptimeAnswer")]
pub(crate) struct Answer {
    device: String,
    device_name: String,
    torch: String,
    param_bytes: u64,
    steps: u64,
    plain: BTreeMap<String, Vec<f64>>,
    profiled: BTreeMap<String, Vec<f64>>,
    #[allow(clippy::type_complexity)]
    ops: Vec<(
        String,
        String,
        String,
        Vec<Tensor>,
        Vec<Tensor>,
        Vec<bool>,
        u64,
        f64,
    )>,
}

/// Runs `spec` plain, then profiled, in one Python process.
pub fn profile(spec: &Spec) -> anyhow::Result<TorchProfile> {
    let request = Request::new(spec)?;
    let text = answer(
        "memscope._workers.optime",
        &request,
        "the torch engine's op timer",
    )?;
    parse(text.trim())
}

fn parse(text: &str) -> anyhow::Result<TorchProfile> {
    let a: Answer = serde_json::from_str(text).context("the torch engine's op timer's output")?;
    let steps = a.steps.max(1) as f64;
    let ops = a
        .ops
        .into_iter()
        .map(
            |(phase, module, op, inputs, outputs, flags, calls, secs)| TimedOp {
                op: TracedOp {
                    phase,
                    op,
                    inputs,
                    outputs,
                    flags,
                    calls: calls as f64 / steps,
                },
                module,
                seconds: secs / steps,
            },
        )
        .collect();
    Ok(TorchProfile {
        device: a.device,
        device_name: a.device_name,
        torch: a.torch,
        param_bytes: a.param_bytes,
        steps: a.steps,
        plain: a.plain,
        profiled: a.profiled,
        ops,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_and_seconds_are_per_step() {
        let text = r#"{"device": "cpu", "device_name": "", "torch": "2.15.0", "param_bytes": 8, "steps": 2,
            "plain": {"step": [3.0, 5.0]}, "profiled": {"step": [4.0, 6.0]},
            "ops": [["forward", "h.0.mlp", "aten.mm.default", [[[2, 3], "f32"], [[3, 4], "f32"]],
                     [[[2, 4], "f32"]], [], 4, 0.5]]}"#;
        let p = parse(text).unwrap();
        assert_eq!(p.plain["step"], vec![3.0, 5.0]);
        let o = &p.ops[0];
        assert_eq!(
            (o.op.calls, o.seconds, o.module.as_str()),
            (2.0, 0.25, "h.0.mlp")
        );
        assert_eq!(o.op.inputs[1], (vec![3, 4], "f32".to_string()));
    }
}
