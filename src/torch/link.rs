//! `peaks --engine torch --collectives`: the link between this machine's ranks, measured by
//! PyTorch's own all-reduce (and FSDP2's all-gather and reduce-scatter) under torchrun (gloo on the CPU, NCCL on CUDA; timed by
//! `python/memscope/_workers/link.py`, seconds only); its latency and bandwidth are the ring formula's
//! fitted to them (`analysis::collective_time::Link::of_measured`; `peaks` writes the fit in).
//! Cached per machine and device; `estimate --parallel` takes it when no `--link` is given.

use super::oneshot::answer_from;
use crate::export::cache_path;
use anyhow::Context;
use serde::{Deserialize, Serialize};

/// The sizes one measurement all-reduces: 8 B (latency) to 64 MiB (bandwidth).
pub const SIZES: [u64; 7] = [8, 1 << 10, 64 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20];

/// What `peaks --collectives` measured, as cached and as `--json` writes it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LinkPeaks {
    /// The machine and device the figures hold for: the cache key.
    pub fingerprint: String,
    /// `cpu` or `cuda:N` (rank 0's).
    pub device: String,
    pub device_name: String,
    /// `gloo` or `nccl`.
    pub backend: String,
    /// Ranks that took part.
    pub world: usize,
    /// PyTorch's version.
    pub torch: String,
    /// Each size's all-reduce: its bytes and the seconds of each call (rank 0's clock).
    pub sizes: Vec<LinkSize>,
    /// FSDP2's collectives at the smallest and largest size (bytes: the whole tensor, the
    /// gathered output or the unreduced input), timed the same way; absent in files written
    /// before they were measured.
    #[serde(default)]
    pub all_gather: Vec<LinkSize>,
    #[serde(default)]
    pub reduce_scatter: Vec<LinkSize>,
    /// The ring formula's bandwidth, GB/s (10⁹ B/s), fitted to the medians: written for the
    /// reader of the file (`Link::of_measured` fits them again from `sizes`); 0 until fitted.
    pub gb_per_s: f64,
    /// The ring formula's latency per hop, µs.
    pub latency_us: f64,
    /// Seconds since the Unix epoch.
    pub measured_at: u64,
}

/// One size's all-reduce calls, seconds on rank 0's clock: the fastest, the median and the
/// slowest, of `calls`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LinkSize {
    pub bytes: u64,
    pub calls: usize,
    pub min_s: f64,
    pub median_s: f64,
    pub max_s: f64,
}

impl LinkSize {
    fn from_secs(bytes: u64, secs: &[f64]) -> LinkSize {
        let mut s = secs.to_vec();
        s.sort_by(f64::total_cmp);
        LinkSize {
            bytes,
            calls: s.len(),
            min_s: s.first().copied().unwrap_or(0.0),
            median_s: crate::quantile::upper_median_sorted(&s),
            max_s: s.last().copied().unwrap_or(0.0),
        }
    }
}

/// `memscope._workers.link`'s answer (rank 0's): the seconds of every all-reduce it timed.
#[derive(Deserialize, schemars::JsonSchema)]
#[schemars(rename = "LinkAnswer")]
pub(crate) struct Measured {
    device: String,
    device_name: String,
    backend: String,
    world: usize,
    torch: String,
    sizes: Vec<MeasuredSize>,
    #[serde(default)]
    all_gather: Vec<MeasuredSize>,
    #[serde(default)]
    reduce_scatter: Vec<MeasuredSize>,
}

#[derive(Deserialize, schemars::JsonSchema)]
pub(crate) struct MeasuredSize {
    bytes: u64,
    secs: Vec<f64>,
}

impl LinkPeaks {
    /// How `estimate` names it: `0.86 GB/s, 227.7 µs, measured by `peaks --collectives` (gloo,
    /// 2 ranks on this machine)`.
    pub fn describe(&self) -> String {
        format!(
            "{:.2} GB/s, {:.1} µs, measured by `peaks --collectives` ({}, {} ranks on this machine)",
            self.gb_per_s, self.latency_us, self.backend, self.world
        )
    }
}

/// The cache key: this CPU, its cores, the device (and which GPUs the process sees), memscope's
/// version. The number of ranks is in the file: the link is the machine's, not the job's.
pub fn fingerprint(device: &str) -> String {
    let env = crate::environment::capture(1);
    let visible = std::env::var("CUDA_VISIBLE_DEVICES").unwrap_or_default();
    let kind = if device.starts_with("cuda") {
        "cuda"
    } else {
        "cpu"
    };
    format!(
        "torch link | {} | {} logical cores | {kind} (CUDA_VISIBLE_DEVICES={visible}) | memscope {}",
        env.cpu_model, env.cores, env.memscope_version
    )
}

/// The link cached for `device`, if measured before.
pub fn cached(device: &str) -> Option<LinkPeaks> {
    let fp = fingerprint(device);
    let text = crate::capped::read_capped_string(&cache_path(&fp), 1 << 20, "link cache").ok()?;
    let p: LinkPeaks = serde_json::from_str(&text).ok()?;
    (p.fingerprint == fp && p.gb_per_s > 0.0).then_some(p)
}

/// What `memscope._workers.link` reads (in `MEMSCOPE_REQUEST`: torchrun's ranks share no stdin).
#[derive(serde::Serialize, schemars::JsonSchema)]
pub(crate) struct LinkRequest<'a> {
    /// `cpu` or `cuda`.
    device: &'a str,
    /// The all-reduce sizes to time, bytes.
    sizes: Vec<u64>,
}

/// Measures the link between `world` ranks on `device` (`cpu` or `cuda`); the fit is left to
/// the caller (0 GB/s until then).
pub fn measure(device: &str, world: usize) -> anyhow::Result<LinkPeaks> {
    let request = serde_json::to_string(&LinkRequest {
        device,
        sizes: SIZES.to_vec(),
    })?;
    let ranks = world.to_string();
    let args = [
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        ranks.as_str(),
        "-m",
        "memscope._workers.link",
    ];
    let env = [
        ("MEMSCOPE_REQUEST", request.as_str()),
        ("OMP_NUM_THREADS", "1"),
    ];
    let what = "the torch engine's link measurement";
    let text = answer_from(&args, &request, &env, what)?;
    let m: Measured =
        serde_json::from_str(text.trim()).with_context(|| format!("{what}'s output"))?;
    let sizes = |v: &[MeasuredSize]| -> Vec<LinkSize> {
        v.iter()
            .map(|s| LinkSize::from_secs(s.bytes, &s.secs))
            .collect()
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    Ok(LinkPeaks {
        fingerprint: fingerprint(device),
        device: m.device,
        device_name: if m.device_name.is_empty() {
            crate::environment::capture(1).cpu_model
        } else {
            m.device_name
        },
        backend: m.backend,
        world: m.world,
        torch: m.torch,
        sizes: sizes(&m.sizes),
        all_gather: sizes(&m.all_gather),
        reduce_scatter: sizes(&m.reduce_scatter),
        gb_per_s: 0.0,
        latency_us: 0.0,
        measured_at: now,
    })
}
