//! `peaks --engine torch`: the device's roofs as PyTorch reaches them — matmul per dtype over a
//! range of sizes and on the model's linear shapes, memory bandwidth, and the fixed cost of one
//! small op — timed by the Python package (`python/memscope/_workers/peaks.py`, seconds only) and turned
//! into rates here with the one convention `memscope peaks` uses (best, upper-middle median).
//! Cached per machine, device and thread count, as the candle engine's peaks are.

use super::oneshot::answer;
use crate::export::cache_path;
use crate::record::rates::{Rate, ShapeRate};
use anyhow::Context;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// What `peaks --engine torch` measured, as cached and as `--json` writes it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TorchPeaks {
    /// The machine, device and thread count the figures hold for: the cache key.
    pub fingerprint: String,
    /// `cpu` or `cuda:N`.
    pub device: String,
    /// The CPU's or the GPU's model name.
    pub device_name: String,
    /// PyTorch's version.
    pub torch: String,
    pub threads: usize,
    /// Square products per dtype (`name` is the dtype: f32, and on CUDA tf32, bf16, f16).
    pub matmul: Vec<ShapeRate>,
    /// The model's own linear shapes through `F.linear`, each followed by its backward's two
    /// products (`NAME dx`, `NAME dW`, and `NAME dW (Conv1D)` for a weight stored (in, out)), f32.
    pub model_shapes: Vec<ShapeRate>,
    /// GB/s of bytes read plus written: `a = b` and `a = b + s·c`.
    pub copy_gbs: Rate,
    pub triad_gbs: Rate,
    /// Bytes per array in the bandwidth kernels.
    pub array_bytes: u64,
    /// One small op (`x.add_(1)` on one element): calls per second (its cost is 1/rate).
    pub small_ops_per_s: Rate,
    /// One view (`y.view(-1)`): dispatch only. Absent in files written before it was measured.
    #[serde(default)]
    pub view_ops_per_s: Option<Rate>,
    /// A matrix-vector product (one row through a 64 MiB f32 weight), GB/s of the weight read:
    /// the bandwidth a decode step's products reach. Absent in files written before.
    #[serde(default)]
    pub gemv_gbs: Option<Rate>,
    /// GB/s writing an array already in memory (`a.fill_(1)`), and one just allocated
    /// (`torch.empty(n).fill_(1)`): on the CPU its pages fault in as they are first written.
    /// Absent in files written before they were measured.
    #[serde(default)]
    pub fill_gbs: Option<Rate>,
    #[serde(default)]
    pub fresh_fill_gbs: Option<Rate>,
    /// The host's cost per op by phase (`forward`, `backward`, `optimizer`, `forward_no_grad`),
    /// µs: the model's own step at the smallest widths (`memscope._workers.host`), its median
    /// phase time over the ops the phase dispatched. Empty in files written before.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub host_us_per_op: BTreeMap<String, f64>,
    /// The model whose step `host_us_per_op` was measured on.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub host_model: String,
    /// Unix time of the measurement, seconds.
    pub measured_at: u64,
}

impl TorchPeaks {
    /// The fixed cost of one small op, µs: (best, median).
    pub fn small_op_us(&self) -> (f64, f64) {
        let us = |r: f64| 1e6 / r.max(1e-12);
        (
            us(self.small_ops_per_s.best),
            us(self.small_ops_per_s.median),
        )
    }

    fn plausible(&self) -> bool {
        self.implausible_field().is_none()
    }

    /// The first field whose rate is missing or not plausible (each must lie between 1e-6 and
    /// 1e12, its median finite and not negative), by its name in the file: `matmul[2]`,
    /// `triad_gbs`, …; None when every rate is.
    pub fn implausible_field(&self) -> Option<String> {
        if self.matmul.is_empty() {
            return Some("matmul (no rows)".into());
        }
        let rows = |name: &str, v: &[ShapeRate]| {
            v.iter()
                .position(|s| !s.gflops.plausible())
                .map(|i| format!("{name}[{i}].gflops"))
        };
        let optional = [
            ("view_ops_per_s", &self.view_ops_per_s),
            ("gemv_gbs", &self.gemv_gbs),
            ("fill_gbs", &self.fill_gbs),
            ("fresh_fill_gbs", &self.fresh_fill_gbs),
        ];
        rows("matmul", &self.matmul)
            .or_else(|| rows("model_shapes", &self.model_shapes))
            .or_else(|| {
                [
                    ("copy_gbs", &self.copy_gbs),
                    ("triad_gbs", &self.triad_gbs),
                    ("small_ops_per_s", &self.small_ops_per_s),
                ]
                .into_iter()
                .find(|(_, r)| !r.plausible())
                .map(|(n, _)| n.to_string())
            })
            .or_else(|| {
                optional
                    .into_iter()
                    .find(|(_, r)| !r.as_ref().is_some_and(Rate::plausible))
                    .map(|(n, _)| n.to_string())
            })
            .or_else(|| {
                self.host_us_per_op
                    .iter()
                    .find(|(_, us)| !(us.is_finite() && (1e-6..=1e6).contains(*us)))
                    .map(|(phase, _)| format!("host_us_per_op.{phase}"))
            })
    }

    /// Seconds per byte the first write of a fresh allocation costs beyond writing memory
    /// already mapped (page faults; about nothing on CUDA, whose caching allocator reuses).
    pub fn fault_s_per_byte(&self) -> f64 {
        match (&self.fill_gbs, &self.fresh_fill_gbs) {
            (Some(warm), Some(fresh)) => {
                (1.0 / (fresh.best.max(1e-12) * 1e9) - 1.0 / (warm.best.max(1e-12) * 1e9)).max(0.0)
            }
            _ => 0.0,
        }
    }
}

/// What the Python side prints: seconds per run.
#[derive(Deserialize, schemars::JsonSchema)]
pub(crate) struct Timed {
    #[serde(default)]
    dtype: String,
    #[serde(default)]
    name: String,
    m: usize,
    k: usize,
    n: usize,
    secs: Vec<f64>,
}

/// `memscope._workers.peaks`' answer: the seconds of every timed run.
#[derive(Deserialize, schemars::JsonSchema)]
#[schemars(rename = "PeaksAnswer")]
pub(crate) struct Measured {
    device: String,
    device_name: String,
    torch: String,
    threads: usize,
    matmul: Vec<Timed>,
    shapes: Vec<Timed>,
    array_bytes: u64,
    copy_secs: Vec<f64>,
    triad_secs: Vec<f64>,
    fill_secs: Vec<f64>,
    fresh_fill_secs: Vec<f64>,
    small_op_calls: u64,
    small_op_secs: Vec<f64>,
    view_op_secs: Vec<f64>,
    gemv_bytes: u64,
    gemv_secs: Vec<f64>,
    /// The model's own step at the smallest widths: the host's time by phase.
    #[serde(default)]
    host: Option<HostMeasured>,
}

/// `memscope._workers.host`'s figures: the model, and each phase's ops and seconds a step.
#[derive(Deserialize, schemars::JsonSchema)]
pub(crate) struct HostMeasured {
    model: String,
    phases: BTreeMap<String, HostPhase>,
}

#[derive(Deserialize, schemars::JsonSchema)]
pub(crate) struct HostPhase {
    ops: u64,
    secs: Vec<f64>,
}

/// The cache key: this CPU, its cores, the device asked for (and which GPUs the process sees),
/// the thread count and memscope's version. PyTorch's version is in the file, not the key:
/// `--refresh` after upgrading it.
pub fn fingerprint(device: &str, threads: usize) -> String {
    let env = crate::environment::capture(threads);
    let visible = std::env::var("CUDA_VISIBLE_DEVICES").unwrap_or_default();
    format!(
        "torch | {} | {} logical cores | {device} (CUDA_VISIBLE_DEVICES={visible}) | {threads} threads | memscope {}",
        env.cpu_model, env.cores, env.memscope_version
    )
}

/// The cached peaks for `device` and `threads`, if measured before and plausible.
pub fn cached(device: &str, threads: usize) -> Option<TorchPeaks> {
    read_cache(device, threads).ok().flatten()
}

/// Why the cache file for `device` and `threads`, which exists, gives no roofs (unreadable, not
/// a peaks file, another machine's, implausible rates), naming the file; None when there is no
/// file or it is fine.
pub fn cache_problem(device: &str, threads: usize) -> Option<String> {
    read_cache(device, threads).err()
}

/// The cache file's peaks: `Ok(None)` when there is none, `Err` saying why the file there gives
/// no roofs.
fn read_cache(device: &str, threads: usize) -> Result<Option<TorchPeaks>, String> {
    let fp = fingerprint(device, threads);
    let path = cache_path(&fp);
    if !path.exists() {
        return Ok(None);
    }
    let why = match crate::capped::read_capped_string(&path, 16 << 20, "peaks cache") {
        Err(e) => format!("{e:#}"),
        Ok(text) => match serde_json::from_str::<TorchPeaks>(&text) {
            Err(e) => format!("not a peaks file ({e})"),
            Ok(p) if p.fingerprint != fp => "measured on another machine or set-up".into(),
            Ok(p) if !p.plausible() => format!(
                "its rates are not plausible ({}; each must lie between 1e-6 and 1e12)",
                p.implausible_field().unwrap_or_default()
            ),
            Ok(p) => return Ok(Some(p)),
        },
    };
    Err(format!(
        "the cache file {} gives no roofs: {why}",
        path.display()
    ))
}

/// What `memscope._workers.peaks` reads on stdin.
#[derive(serde::Serialize, schemars::JsonSchema)]
pub(crate) struct PeaksRequest<'a> {
    /// `cpu`, `cuda` or `cuda:N`.
    device: &'a str,
    /// CPU threads PyTorch may use.
    threads: usize,
    /// The model's products to time as well: (name, rows, in, out).
    shapes: Vec<(String, usize, usize, usize)>,
    /// The model whose own step, at the smallest widths, gives the host's cost per op.
    model: Option<&'a crate::model::config::ModelConfig>,
}

/// Measures the roofs on `device` (`cpu`, `cuda`, `cuda:N`) with `threads` CPU threads, timing
/// `shapes` ((name, rows, in, out)) too.
pub fn measure(
    device: &str,
    threads: usize,
    shapes: &[(String, usize, usize, usize)],
    model: Option<&crate::model::config::ModelConfig>,
) -> anyhow::Result<TorchPeaks> {
    let request = serde_json::to_string(&PeaksRequest {
        device,
        threads,
        shapes: shapes.to_vec(),
        model,
    })?;
    let text = answer(
        "memscope._workers.peaks",
        &request,
        "the torch engine's peaks",
    )?;
    let m: Measured =
        serde_json::from_str(text.trim()).context("the torch engine's peaks output")?;
    let rates = |v: &[Timed], by_dtype: bool| -> Vec<ShapeRate> {
        v.iter()
            .map(|t| {
                let name = if by_dtype { &t.dtype } else { &t.name };
                ShapeRate::from_secs(name, t.m, t.k, t.n, &t.secs)
            })
            .collect()
    };
    let gb = |work: f64, secs: &[f64]| Rate::from_secs(work / 1e9, secs);
    let bytes = m.array_bytes as f64;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    Ok(TorchPeaks {
        fingerprint: fingerprint(device, threads),
        device: m.device,
        // The GPU's name from PyTorch; the CPU's as every Record names it.
        device_name: if m.device_name.is_empty() {
            crate::environment::capture(threads).cpu_model
        } else {
            m.device_name
        },
        torch: m.torch,
        threads: m.threads,
        matmul: rates(&m.matmul, true),
        model_shapes: rates(&m.shapes, false),
        copy_gbs: gb(2.0 * bytes, &m.copy_secs),
        triad_gbs: gb(3.0 * bytes, &m.triad_secs),
        array_bytes: m.array_bytes,
        small_ops_per_s: Rate::from_secs(m.small_op_calls as f64, &m.small_op_secs),
        view_ops_per_s: Some(Rate::from_secs(m.small_op_calls as f64, &m.view_op_secs)),
        gemv_gbs: Some(gb(m.gemv_bytes as f64, &m.gemv_secs)),
        fill_gbs: Some(gb(bytes, &m.fill_secs)),
        fresh_fill_gbs: Some(gb(bytes, &m.fresh_fill_secs)),
        host_us_per_op: m.host.as_ref().map_or_else(BTreeMap::new, |h| {
            h.phases
                .iter()
                .filter(|(_, p)| p.ops > 0 && !p.secs.is_empty())
                .map(|(phase, p)| {
                    let median = crate::quantile::upper_median(&p.secs).unwrap_or(0.0);
                    (phase.clone(), median / p.ops as f64 * 1e6)
                })
                .collect()
        }),
        host_model: m.host.map(|h| h.model).unwrap_or_default(),
        measured_at: now,
    })
}
