//! `memscope optimize`'s runs: one workload on the plain path a PyTorch script takes (naive
//! attention, op-by-op kernels, f32, no checkpointing), with each memory-saving technique
//! alone, and with all of them; each in its own worker (an out-of-memory run is a row), and,
//! with a memory budget, the largest batch each one fits (the `fit` search).

use crate::model::variant::{Attention, Fusion, Precision, Variant};
use crate::record::sweep_row::{Row, Status};
use crate::spec::{Dtype, Mode, Spec};
use crate::sweep::interrupt::{install_interrupt_handler, INTERRUPTED};
use crate::sweep::largest::{search, FitRequest, Searched, Vary};
use crate::sweep::limits::Enforcement;
use crate::sweep::scratch::Scratch;
use crate::sweep::spawn::{run_worker, RunOptions, WorkerProgress};
use std::time::Duration;

/// One variant of the workload.
#[derive(Clone, Debug)]
pub struct Candidate {
    /// Short name: `baseline`, `flash attention`, …
    pub name: &'static str,
    pub spec: Spec,
}

/// The variants of `base` (its own variant and dtype are replaced): the baseline, each
/// technique alone, and all together. Checkpointing and mixed precision are training
/// techniques; for inference the half-precision variant is plain bf16.
///
/// On memscope's engine the baseline is what a plain PyTorch script runs (naive attention,
/// op-by-op kernels and optimizer) and the savers are flash attention and fused kernels. On the
/// torch engine they are PyTorch's own features: the baseline is eager attention without
/// `torch.compile` (fused AdamW throughout, as users run it), then SDPA, `torch.compile`, and
/// beside autocast bf16 everything in bf16 (train).
pub fn candidates(base: &Spec) -> Vec<Candidate> {
    let torch = matches!(base.engine(), crate::spec::EngineRef::Torch(_));
    let train = base.mode == Mode::Train;
    // The plain path's fusion, and the one the engine fuses with.
    let (plain_fusion, fused) = if torch {
        (Fusion::Full, Fusion::Compile)
    } else {
        (Fusion::None, Fusion::Full)
    };
    let [baseline, attention, fusion, half_name] = if torch {
        [
            "baseline (eager)",
            "SDPA attention",
            "torch.compile",
            if train { "autocast bf16" } else { "bf16" },
        ]
    } else {
        [
            "baseline",
            "flash attention",
            "fused kernels",
            if train { "mixed precision" } else { "bf16" },
        ]
    };
    let plain = Variant {
        attention: Attention::Naive,
        fusion: plain_fusion,
        checkpoint: false,
        precision: Precision::Pure,
    };
    let with = |name: &'static str, f: &dyn Fn(&mut Spec)| {
        let mut spec = base.clone();
        spec.dtype = Dtype::F32;
        spec.variant = plain;
        f(&mut spec);
        Candidate { name, spec }
    };
    let half = |s: &mut Spec| {
        s.dtype = Dtype::Bf16;
        if train {
            s.variant.precision = Precision::Mixed;
        }
    };
    let mut v = vec![
        with(baseline, &|_| {}),
        with(attention, &|s| s.variant.attention = Attention::Fused),
        with(fusion, &|s| s.variant.fusion = fused),
    ];
    if train {
        v.push(with("checkpointing", &|s| s.variant.checkpoint = true));
    }
    v.push(with(half_name, &half));
    if torch && train {
        v.push(with("pure bf16", &|s| s.dtype = Dtype::Bf16));
    }
    v.push(with("all together", &|s| {
        s.variant.attention = Attention::Fused;
        s.variant.fusion = fused;
        s.variant.checkpoint = train;
        half(s);
    }));
    v
}

/// A variant's outcome: its worker's row, and the largest batch it fits when asked.
#[derive(Clone, Debug)]
pub struct VariantOutcome {
    pub name: &'static str,
    pub row: Row,
    /// With a memory budget: the largest batch that ran within it (0: not even batch 1).
    pub max_batch: Option<usize>,
    /// `memscope estimate`'s heap peak for the run (also for a run that was refused or failed).
    pub estimated_peak_bytes: Option<u64>,
}

/// What to run around the candidates.
pub struct Options {
    pub memory_limit: Option<u64>,
    pub timeout: Option<Duration>,
    /// Largest batch the fit search tries.
    pub max_batch: usize,
    pub quiet: bool,
}

/// Runs every candidate (then, with a budget, its fit search) → the outcomes in candidate
/// order; `None` when SIGINT/SIGTERM stopped it.
pub fn run(cands: &[Candidate], o: &Options) -> anyhow::Result<Ran> {
    let scratch = Scratch::new()?;
    let opts = RunOptions {
        memory_limit: o.memory_limit,
        enforcement: Enforcement::detect(o.memory_limit),
        timeout: o.timeout,
        scratch: scratch.0.clone(),
        trace_dir: None,
    };
    install_interrupt_handler();
    let live = WorkerProgress::default();
    let mut out = Vec::with_capacity(cands.len());
    for (i, c) in cands.iter().enumerate() {
        if !o.quiet {
            eprintln!("  {} (seq {}): {}", c.name, c.spec.seq, describe(&c.spec));
        }
        // A run this machine's memory could never hold is an error row, not a swapping box.
        let row = match crate::runner::check_machine_memory(&c.spec) {
            Err(e) => Row::not_run(Status::Error, e.to_string(), i, c.spec.clone()),
            Ok(()) => match run_worker(&c.spec, i, &opts, &INTERRUPTED, &live, || {})? {
                Some(row) => row,
                None => return Ok(Ran::Interrupted(out)),
            },
        };
        let max_batch = match o.memory_limit {
            Some(limit) if row.status == Status::Ok || row.status == Status::Oom => {
                match search(&FitRequest {
                    base: c.spec.clone(),
                    vary: Vary::Batch,
                    cap: o.max_batch,
                    limit,
                    timeout: o.timeout,
                    quiet: true,
                })? {
                    Searched::Done(fit) => fit.max_batch,
                    Searched::Interrupted(_) => return Ok(Ran::Interrupted(out)),
                }
            }
            _ => None,
        };
        let req = crate::estimate::Request::for_spec(&c.spec);
        out.push(VariantOutcome {
            name: c.name,
            row,
            max_batch,
            estimated_peak_bytes: crate::estimate::estimate(&req).ok().map(|e| e.peak_bytes),
        });
    }
    Ok(Ran::Done(out))
}

/// How `run` ended: every candidate's outcome, or stopped by SIGINT/SIGTERM with those that
/// finished.
pub enum Ran {
    Done(Vec<VariantOutcome>),
    Interrupted(Vec<VariantOutcome>),
}

/// The flags that run a candidate with `memscope bench`.
pub fn describe(s: &Spec) -> String {
    let mut flags = format!("--dtype {}", s.dtype.name());
    let v = s.variant;
    flags += match v.attention {
        Attention::Naive => " --attention naive",
        Attention::Fused => " --attention fused",
    };
    flags += match v.fusion {
        Fusion::None => " --fusion none",
        Fusion::Full => " --fusion full",
        Fusion::Compile => " --fusion compile",
    };
    if v.checkpoint {
        flags += " --checkpoint";
    }
    if v.precision == Precision::Mixed {
        flags += " --precision mixed";
    }
    flags
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(mode: Mode) -> Spec {
        let config = crate::model::config::ModelConfig::preset("tiny-llama").unwrap();
        Spec {
            model: "tiny-llama".into(),
            config: Some(config),
            config_path: None,
            weights: None,
            mode,
            batch: 2,
            seq: 32,
            dtype: Dtype::F32,
            threads: 1,
            seed: 0,
            warmup: 1,
            steps: 2,
            grad_accum: 1,
            prompt_len: 32,
            new_tokens: 4,
            lr: 1e-3,
            data: None,
            variant: Variant::default(),
            engine: None,
            torch: None,
        }
    }

    #[test]
    fn every_candidate_is_a_valid_run_and_only_the_baseline_is_plain() {
        for mode in [Mode::Train, Mode::Infer] {
            let c = candidates(&spec(mode));
            assert_eq!(c.len(), if mode == Mode::Train { 6 } else { 5 });
            for x in &c {
                x.spec.validate().unwrap();
            }
            assert_eq!(
                describe(&c[0].spec),
                "--dtype f32 --attention naive --fusion none"
            );
            let all = &c.last().unwrap().spec;
            assert_eq!(all.variant.attention, Attention::Fused);
            assert_eq!(all.variant.checkpoint, mode == Mode::Train);
        }
    }
}
