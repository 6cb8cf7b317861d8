//! `roofline` and `profile`'s measurement: a Spec's step run twice in one process (profiling
//! off, then on) on memscope's engine, or by the Python package's op timer on PyTorch
//! (`torch::optime`); each op's measured time joined with its FLOPs and minimum bytes, per
//! section (the train step, the forward, prefill or one decode step), against the roofs.

use crate::analysis::op_cost::{self, Arch, OpCost};
use crate::analysis::roofline::MeasuredOp;
use crate::instrument::alloc::Phase;
use crate::instrument::op_timer::{self, OpTime};
use crate::measure::threads::set_run_threads;
use crate::model::config::Family;
use crate::record::roofline::Roofs;
use crate::record::Record;
use crate::spec::{Mode, Spec};
use anyhow::bail;
use std::sync::atomic::AtomicUsize;

/// A measured run with profiling on, beside a plain one.
pub struct Profiled {
    pub spec: Spec,
    pub plain: Record,
    pub profiled: Record,
    pub ops: Vec<OpTime>,
    pub roofs: Roofs,
    pub arch: Arch,
}

/// The range `--roofs` accepts for each number (GFLOP/s, GB/s): a microcontroller to a
/// thousand of today's largest machines.
const ROOF_MIN: f64 = 1e-3;
const ROOF_MAX: f64 = 1e9;

/// Parses --roofs or reads the peaks cache.
fn roofs(flag: &Option<String>, threads: usize, dtype: &str) -> anyhow::Result<Roofs> {
    if let Some(s) = flag {
        return parse_roofs(s);
    }
    let Some(p) = crate::measure::peaks::cached(threads) else {
        // Peaks are cached per bf16 path too: with the dot products turned off, the peaks
        // measured with them on do not apply.
        let (path, env) =
            if crate::kernels::dot_bf16::cpu_has_it() && !crate::kernels::dot_bf16::available() {
                (" with bf16 products widened", "MEMSCOPE_BF16_DOT=0 ")
            } else {
                ("", "")
            };
        bail!(
            "no measured peaks cached for {threads} threads{path}: run `{env}memscope peaks \
             --threads {threads}` first (about a minute), or pass --roofs GFLOPS:GBS"
        );
    };
    Ok(Roofs {
        matmul_gflops: p.matmul_gflops.get(dtype).copied().unwrap_or(0.0),
        bandwidth_gbs: p.bandwidth_gbs.max(p.copy_gbs.best),
        copy_gbs: p.copy_gbs.best,
    })
}

/// `--roofs MATMUL_GFLOPS:BANDWIDTH_GBS`.
fn parse_roofs(s: &str) -> anyhow::Result<Roofs> {
    let parse = |x: &str| x.trim().parse::<f64>().ok().filter(|v| *v > 0.0);
    let mut it = s.split(':');
    let (Some(p), Some(w), None) = (
        it.next().and_then(parse),
        it.next().and_then(parse),
        it.next(),
    ) else {
        bail!("--roofs {s}: expected MATMUL_GFLOPS:BANDWIDTH_GBS, two positive numbers");
    };
    // Finite ranges: FLOP/s, bytes/s, the ridge and the chart's axes all stay finite (1e308
    // GFLOP/s is infinite FLOP/s, and the chart's axis search never ended).
    let range = ROOF_MIN..=ROOF_MAX;
    if !range.contains(&p) || !range.contains(&w) {
        bail!(
            "--roofs {s}: each number must lie between {ROOF_MIN} and {ROOF_MAX:e} (GFLOP/s, GB/s); a real machine is within"
        );
    }
    Ok(Roofs {
        matmul_gflops: p,
        bandwidth_gbs: w,
        copy_gbs: w,
    })
}

pub fn arch(spec: &Spec, params: u64) -> anyhow::Result<Arch> {
    let c = spec.arch();
    if c.family == Family::Bert {
        bail!(
            "--model {}: roofline and profile cover the gpt2 and llama families",
            spec.model
        );
    }
    Ok(Arch {
        llama: c.family == Family::Llama,
        n_layers: c.n_layers,
        d_model: c.d_model,
        n_heads: c.n_heads,
        n_kv_heads: c.n_kv_heads,
        d_ff: c.d_ff,
        vocab: c.vocab_size,
        elem_bytes: spec.dtype.size_bytes() as f64,
        params,
    })
}

/// What roofline and profile report, measured on either engine.
pub struct Measured {
    pub spec: Spec,
    pub roofs: Roofs,
    pub sections: Vec<Section>,
    pub weights_bytes: u64,
    /// The CPU's vector instructions, or for the torch engine PyTorch's version and the device.
    pub isa: String,
    /// `torch`, or empty for memscope's engine.
    pub engine: String,
    /// PyTorch ran on a CUDA device: each op's time is its kernels' on the device.
    pub gpu: bool,
}

/// The workload measured plain and profiled: by memscope's op timer in this process, or with
/// `--engine torch` by the Python package's (every ATen op timed, `torch::optime`).
pub fn measure(spec: Spec, roofs_flag: &Option<String>, force: bool) -> anyhow::Result<Measured> {
    if let crate::spec::EngineRef::Torch(_) = spec.engine() {
        return measure_torch(spec, roofs_flag);
    }
    let p = run_profiled(spec, roofs_flag, force)?;
    let sections = sections(&p);
    Ok(Measured {
        sections,
        roofs: p.roofs,
        weights_bytes: p.profiled.model.param_bytes,
        isa: crate::environment::isa(),
        engine: String::new(),
        gpu: false,
        spec: p.spec,
    })
}

/// Mean and standard deviation of a phase's runs, ms.
fn mean_std(runs: Option<&Vec<f64>>) -> (f64, f64) {
    let v = runs.map(Vec::as_slice).unwrap_or(&[]);
    let m = crate::analysis::stats::mean(v).unwrap_or(0.0);
    (m, crate::analysis::stats::sample_std(v).unwrap_or(0.0))
}

fn measure_torch(spec: Spec, roofs_flag: &Option<String>) -> anyhow::Result<Measured> {
    use crate::analysis::torch_roofline::{roofs as torch_roofs, section};
    if spec.variant.fusion == crate::model::variant::Fusion::Compile {
        bail!(
            "--fusion compile: roofline and profile time every ATen op PyTorch dispatches, and torch.compile runs fused kernels in their place; drop --fusion compile (bench --engine torch --fusion compile times the compiled step)"
        );
    }
    let device = spec.device().to_string();
    let roofs = match roofs_flag {
        Some(s) => parse_roofs(s)?,
        None => {
            let Some(p) = crate::torch::peaks::cached(&device, spec.threads) else {
                bail!(
                    "no roofs measured for --device {device} at {t} threads: run `memscope peaks --engine torch --device {device} --threads {t}` first (seconds), or pass --roofs GFLOPS:GBS",
                    t = spec.threads
                );
            };
            torch_roofs(&p, spec.dtype.name())
        }
    };
    let p = crate::torch::optime::profile(&spec)?;
    let sec = |name, phases: &[&str], key: &str, runs: f64| {
        let (costs, measured) = section(&p.ops, phases, runs);
        Section {
            name,
            costs,
            measured,
            time_ms: mean_std(p.profiled.get(key)),
            plain_ms: mean_std(p.plain.get(key)),
        }
    };
    let sections = match spec.mode {
        Mode::Train => vec![sec(
            "step",
            &["forward", "backward", "optimizer"],
            "step",
            1.0,
        )],
        Mode::Infer => vec![sec("forward", &["forward"], "forward", 1.0)],
        Mode::Generate => vec![
            sec("prefill", &["prefill"], "prefill", 1.0),
            sec(
                "decode step",
                &["decode"],
                "decode",
                spec.new_tokens.max(1) as f64,
            ),
        ],
    };
    Ok(Measured {
        isa: format!(
            "PyTorch {} on {}{}",
            p.torch,
            p.device,
            if p.device_name.is_empty() {
                String::new()
            } else {
                format!(" ({})", p.device_name)
            }
        ),
        engine: "torch".into(),
        gpu: p.device.starts_with("cuda"),
        weights_bytes: p.param_bytes,
        roofs,
        sections,
        spec,
    })
}

/// Runs the spec plain, then profiled, in this process.
pub fn run_profiled(
    spec: Spec,
    roofs_flag: &Option<String>,
    force: bool,
) -> anyhow::Result<Profiled> {
    if !force {
        super::check_machine_memory(&spec)?;
    }
    let roofs = roofs(roofs_flag, spec.threads, spec.dtype.name())?;
    set_run_threads(&spec);
    let progress = AtomicUsize::new(0);
    op_timer::set_enabled(false);
    let plain = super::run(&spec, &progress)?;
    op_timer::reset();
    op_timer::set_enabled(true);
    let profiled = super::run(&spec, &progress);
    op_timer::set_enabled(false);
    let profiled = profiled?;
    let ops = op_timer::take();
    let arch = arch(&spec, profiled.model.params)?;
    Ok(Profiled {
        spec,
        plain,
        profiled,
        ops,
        roofs,
        arch,
    })
}

/// One part of the run reported on its own: the train step, the forward, prefill or one decode step.
pub struct Section {
    pub name: &'static str,
    pub costs: Vec<OpCost>,
    pub measured: Vec<MeasuredOp>,
    /// Mean and standard deviation of the profiled and of the plain time, ms.
    pub time_ms: (f64, f64),
    pub plain_ms: (f64, f64),
}

fn per(ops: &[OpTime], phases: &[Phase], div: f64) -> Vec<MeasuredOp> {
    ops.iter()
        .filter(|o| phases.contains(&o.phase))
        .map(|o| MeasuredOp {
            module: o.module.clone(),
            kind: o.kind.to_string(),
            pass: o.pass.name().to_string(),
            ms: o.total_ms / div,
        })
        .collect()
}

fn scaled(mut v: Vec<OpCost>, k: f64) -> Vec<OpCost> {
    v.iter_mut().for_each(|o| {
        o.flops *= k;
        o.bytes *= k;
    });
    v
}

pub fn sections(p: &Profiled) -> Vec<Section> {
    let (s, a) = (&p.spec, &p.arch);
    let steps = s.steps as f64;
    let t = |r: &Record, n: &str| {
        r.timing
            .get(n)
            .map_or((0.0, 0.0), |t| (t.mean_ms, t.std_ms.unwrap_or(0.0)))
    };
    let sec = |name, phase: &str, costs, measured| Section {
        name,
        costs,
        measured,
        time_ms: t(&p.profiled, phase),
        plain_ms: t(&p.plain, phase),
    };
    match s.mode {
        Mode::Train => {
            let mut costs = scaled(
                op_cost::forward_ops(a, s.batch, s.seq, 0, true, false),
                s.grad_accum as f64,
            );
            costs.push(op_cost::optimizer(a));
            let all = [Phase::Forward, Phase::Backward, Phase::Optimizer];
            vec![sec("step", "step", costs, per(&p.ops, &all, steps))]
        }
        Mode::Infer => {
            let costs = op_cost::forward_ops(a, s.batch, s.seq, 0, false, false);
            vec![sec(
                "forward",
                "forward",
                costs,
                per(&p.ops, &[Phase::Forward], steps),
            )]
        }
        Mode::Generate => {
            let prefill = op_cost::forward_ops(a, s.batch, s.prompt_len, 0, false, true);
            let n = s.new_tokens.max(1);
            let mut decode: Vec<OpCost> = Vec::new();
            for j in 0..n {
                for c in op_cost::forward_ops(a, s.batch, 1, s.prompt_len + j, false, true) {
                    match decode
                        .iter_mut()
                        .find(|d| d.module == c.module && d.kind == c.kind && d.pass == c.pass)
                    {
                        Some(d) => {
                            d.flops += c.flops;
                            d.bytes += c.bytes;
                        }
                        None => decode.push(c),
                    }
                }
            }
            let decode = scaled(decode, 1.0 / n as f64);
            vec![
                sec(
                    "prefill",
                    "prefill",
                    prefill,
                    per(&p.ops, &[Phase::Prefill], steps),
                ),
                sec(
                    "decode step",
                    "decode",
                    decode,
                    per(&p.ops, &[Phase::Decode], steps * n as f64),
                ),
            ]
        }
    }
}
