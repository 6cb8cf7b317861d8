//! This machine's ceilings, measured: matmul GFLOP/s per dtype through the engine's own path
//! (candle → gemm), on a large square product and on a model's own shapes, and memory
//! bandwidth (copy and triad over arrays far larger than the last-level cache, counting bytes
//! read plus written, STREAM's convention). Cached in a JSON file keyed by a fingerprint of the
//! machine and the thread count, so `memscope bench` can say what fraction of the peak a step
//! reaches without re-measuring.

use crate::kernels::dot_bf16;
use crate::kernels::product::Strided;
use crate::kernels::strips;
use candle_core::{DType, Device, Tensor};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Instant;

/// The `matmul` entry of the f32 product through weights kept in panels, where inference
/// stores keep them so (machines where gemm runs its AVX-512 or AVX2 kernels).
pub const PANELS: &str = "f32 panels";

/// The `matmul` entry of the AVX-512 BF16 kernel where bf16 products run on AMX tiles (the
/// `bf16` entry then is the tile unit's ceiling).
pub const BF16_VECTOR: &str = "bf16 avx512_bf16";

pub use crate::record::rates::{Rate, ShapeRate};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Peaks {
    /// CPU model, logical cores, cache sizes, memory, memscope version: the cache key.
    pub fingerprint: String,
    pub threads: usize,
    /// Best GFLOP/s of a large square product per dtype (2048³ for f32, 1024³ for bf16/f16);
    /// for f32 the faster of candle → gemm and the panel product ([`PANELS`]) where measured.
    pub matmul_gflops: BTreeMap<String, f64>,
    /// The same products with their median and repetitions.
    pub matmul: BTreeMap<String, ShapeRate>,
    /// A transformer's own linear shapes (f32), N = batch × seq rows.
    pub model_shapes: Vec<ShapeRate>,
    /// Best triad bandwidth (a = b + s·c), GB/s of bytes read plus written.
    pub bandwidth_gbs: f64,
    pub copy_gbs: Rate,
    pub triad_gbs: Rate,
    /// Bytes per array in the bandwidth kernels.
    pub array_bytes: u64,
    /// Unix time of the measurement, seconds.
    pub measured_at: u64,
}

/// Runs `f` `reps` times; returns the seconds of each run.
fn timed(reps: usize, mut f: impl FnMut()) -> Vec<f64> {
    (0..reps)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64()
        })
        .collect()
}

fn matmul_rate(name: &str, m: usize, k: usize, n: usize, dt: DType) -> anyhow::Result<ShapeRate> {
    if dt == DType::BF16 && dot_bf16::available() {
        return dot_rate(name, m, k, n);
    }
    let dev = Device::Cpu;
    let a = Tensor::randn(0f32, 1.0, (m, k), &dev)?.to_dtype(dt)?; // (m, k)
    let b = Tensor::randn(0f32, 1.0, (k, n), &dev)?.to_dtype(dt)?; // (k, n)
    a.matmul(&b)?; // first call: gemm's buffers and the thread pool start
    let flops = 2.0 * m as f64 * k as f64 * n as f64;
    let mut err = None;
    let secs = timed(5, || {
        if let Err(e) = a.matmul(&b) {
            err = Some(e);
        }
    });
    if let Some(e) = err {
        return Err(e.into());
    }
    let mut gflops = Rate::from_secs(flops, &secs);
    gflops.best /= 1e9;
    gflops.median /= 1e9;
    Ok(ShapeRate {
        name: name.into(),
        m,
        k,
        n,
        gflops,
    })
}

/// The bf16 product the engine's linear layers run on this CPU (`kernels::dot_bf16`): (m, k)
/// · (k, n) bf16 row-major operands into f32.
fn dot_rate(name: &str, m: usize, k: usize, n: usize) -> anyhow::Result<ShapeRate> {
    dot_rate_on(dot_bf16::product, name, (m, k, n))
}

/// [`dot_rate`] through `product` (`dot_bf16::product`, AMX where the CPU has it, or
/// `dot_bf16::product_vector`).
fn dot_rate_on(
    product: crate::kernels::product::Bf16Product,
    name: &str,
    (m, k, n): (usize, usize, usize),
) -> anyhow::Result<ShapeRate> {
    let vals = |len: usize| -> Vec<half::bf16> {
        (0..len)
            .map(|i| half::bf16::from_f32(((i * 7 % 23) as f32 - 11.0) / 16.0))
            .collect()
    };
    let (a, b) = (vals(m * k), vals(k * n));
    let mut c = vec![0f32; m * n];
    let (lhs, rhs) = (
        Strided {
            ptr: a.as_ptr(),
            rs: k,
            cs: 1,
        },
        Strided {
            ptr: b.as_ptr(),
            rs: n,
            cs: 1,
        },
    );
    // SAFETY: `available` was checked; a is (m, k), b (k, n), c (m, n), all row-major.
    let mut run = || unsafe { product((m, n, k), c.as_mut_ptr(), n, false, lhs, rhs, 1.0) };
    run(); // first call: the thread pool starts
    let secs = timed(5, &mut run);
    std::hint::black_box(&c);
    let mut gflops = Rate::from_secs(2.0 * m as f64 * k as f64 * n as f64, &secs);
    gflops.best /= 1e9;
    gflops.median /= 1e9;
    Ok(ShapeRate {
        name: name.into(),
        m,
        k,
        n,
        gflops,
    })
}

/// The f32 product an inference store's linear layers run where weights are kept in panels
/// (`kernels::strips`): x (m, k) row-major · W (k, n) from its strip buffer.
fn panels_rate(name: &str, (m, k, n): (usize, usize, usize), width: usize) -> ShapeRate {
    let vals = |len: usize| -> Vec<f32> {
        (0..len)
            .map(|i| ((i * 7 % 23) as f32 - 11.0) / 16.0)
            .collect()
    };
    let (x, w) = (vals(m * k), vals(k * n)); // (m, k) row-major; (n/w, k, w) strips
    let mut y = vec![0f32; m * n];
    let lhs = (x.as_ptr(), k, 1);
    // SAFETY: x is (m, k) row-major, w holds k·n values, y is (m, n) and initialised.
    let mut run = || unsafe {
        strips::product(
            (m, k, n),
            width,
            (y.as_mut_ptr(), n),
            false,
            lhs,
            w.as_ptr(),
        )
    };
    run(); // first call: the thread pool starts
    let secs = timed(5, &mut run);
    std::hint::black_box(&y);
    let mut gflops = Rate::from_secs(2.0 * m as f64 * k as f64 * n as f64, &secs);
    gflops.best /= 1e9;
    gflops.median /= 1e9;
    ShapeRate {
        name: name.into(),
        m,
        k,
        n,
        gflops,
    }
}

/// Copy and triad over three arrays of `n` f32 each, split across the rayon pool.
fn bandwidth(n: usize) -> (Rate, Rate) {
    let chunk = 1 << 16;
    let mut a = vec![0f32; n];
    let b = vec![1f32; n];
    let c = vec![2f32; n];
    a.par_chunks_mut(chunk).for_each(|x| x.fill(0.5)); // touch every page first
    let bytes = (n * 4) as f64;
    let copy = timed(5, || {
        a.par_chunks_mut(chunk)
            .zip(b.par_chunks(chunk))
            .for_each(|(a, b)| a.copy_from_slice(b));
    });
    let triad = timed(5, || {
        a.par_chunks_mut(chunk)
            .zip(b.par_chunks(chunk).zip(c.par_chunks(chunk)))
            .for_each(|(a, (b, c))| {
                for i in 0..a.len() {
                    a[i] = b[i] + 3.0 * c[i];
                }
            });
    });
    std::hint::black_box(&a);
    let gb = |r: Rate| Rate {
        best: r.best / 1e9,
        median: r.median / 1e9,
        reps: r.reps,
    };
    (
        gb(Rate::from_secs(2.0 * bytes, &copy)),
        gb(Rate::from_secs(3.0 * bytes, &triad)),
    )
}

/// Measures everything (a few seconds). `rows`: N for the model shapes; `shapes`: (name, k, n)
/// of the model's linear layers.
pub fn measure(
    threads: usize,
    rows: usize,
    shapes: &[(String, usize, usize)],
) -> anyhow::Result<Peaks> {
    let mut matmul = BTreeMap::new();
    let mut best = BTreeMap::new();
    for (dt, name, size) in [
        (DType::F32, "f32", 2048),
        (DType::BF16, "bf16", 1024),
        (DType::F16, "f16", 1024),
    ] {
        let r = matmul_rate(&format!("{size}³"), size, size, size, dt)?;
        best.insert(name.to_string(), r.gflops.best);
        matmul.insert(name.to_string(), r);
    }
    if crate::kernels::amx_tiles::available() {
        // `bf16` above ran on AMX tiles; the vector kernel beside it.
        let r = dot_rate_on(dot_bf16::product_vector, "1024³", (1024, 1024, 1024))?;
        matmul.insert(BF16_VECTOR.into(), r);
    }
    if let Some(w) = strips::width() {
        // Inference stores' f32 products; the f32 ceiling is the faster of the two paths.
        let r = panels_rate(
            &format!("2048³, weight in {w}-wide panels"),
            (2048, 2048, 2048),
            w,
        );
        best.entry("f32".into())
            .and_modify(|b| *b = b.max(r.gflops.best));
        matmul.insert(PANELS.into(), r);
    }
    let model_shapes = shapes
        .iter()
        .map(|(name, k, n)| matmul_rate(name, rows, *k, *n, DType::F32))
        .collect::<anyhow::Result<Vec<_>>>()?;
    // 128 MiB per array, 384 MiB streamed a call: more than the last-level caches measured
    // (a 260 MiB Intel Xeon reads 27 GB/s here; PyTorch's triad over 1 GiB arrays, 22-27 GB/s).
    let n = 32 << 20;
    let (copy, triad) = bandwidth(n);
    Ok(Peaks {
        fingerprint: fingerprint(threads),
        threads,
        matmul_gflops: best,
        matmul,
        model_shapes,
        bandwidth_gbs: triad.best,
        copy_gbs: copy,
        triad_gbs: triad,
        array_bytes: (n * 4) as u64,
        measured_at: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
    })
}

/// What identifies this machine's ceilings: CPU model, logical cores, cache sizes, memory,
/// the thread count, memscope's version (a new engine may reach a different peak) and the ISA
/// its kernels use.
pub fn fingerprint(threads: usize) -> String {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name")
                .map(|r| r.trim_start_matches([' ', '\t', ':']))
        })
        .unwrap_or("unknown cpu")
        .to_string();
    let cache = |i: u32| {
        std::fs::read_to_string(format!("/sys/devices/system/cpu/cpu0/cache/index{i}/size"))
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|_| "?".into())
    };
    let mem = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .next()
                .map(|l| l.split_whitespace().nth(1).unwrap_or("?").to_string())
        })
        .unwrap_or_else(|| "?".into());
    // bf16 products on AMX tiles, the dot-product kernel, or widened to f32
    // (`MEMSCOPE_AMX=0`, `MEMSCOPE_BF16_DOT=0`).
    let bf16 = if dot_bf16::available() && crate::kernels::amx_tiles::available() {
        "amx"
    } else if dot_bf16::available() {
        "dot"
    } else {
        "widened"
    };
    // Inference stores' f32 weights in panels (measured as a second f32 ceiling).
    let f32_panels = if let Some(w) = strips::width() {
        format!(" | f32 panels {w}")
    } else {
        String::new()
    };
    // The kernels' ISA: a build without the `avx512` feature runs gemm's AVX2 kernels.
    format!(
        "{model} | {} logical cores | L2 {} L3 {} | {mem} kB | {threads} threads | memscope {} | bf16 {bf16}{f32_panels} | {}",
        crate::measure::threads::all_cores(),
        cache(2),
        cache(3),
        env!("CARGO_PKG_VERSION"),
        crate::environment::isa()
    )
}

pub use crate::export::{cache_dir, cache_path};

/// This machine's cached peaks for `threads`, if measured before, readable and plausible: a
/// cache whose rates are not finite and positive (a corrupt or hand-edited file) is ignored, as
/// if never measured, so no ratio against it ("MFU inf%") is ever shown; `memscope peaks`
/// measures again and replaces it.
pub fn cached(threads: usize) -> Option<Peaks> {
    let fp = fingerprint(threads);
    let text = crate::capped::read_capped_string(&cache_path(&fp), 16 << 20, "peaks cache").ok()?;
    let p: Peaks = serde_json::from_str(&text).ok()?;
    (p.fingerprint == fp && p.plausible()).then_some(p)
}

impl Peaks {
    /// Every rate finite and positive.
    pub fn plausible(&self) -> bool {
        let ok = |x: f64| x.is_finite() && x > 0.0;
        self.matmul_gflops.values().all(|&g| ok(g))
            && self.matmul.values().all(|s| s.gflops.plausible())
            && self.model_shapes.iter().all(|s| s.gflops.plausible())
            && ok(self.bandwidth_gbs)
            && self.copy_gbs.plausible()
            && self.triad_gbs.plausible()
    }
}

/// (name, in, out) of a model's linear layers, as `memscope peaks` times them.
pub fn linear_shapes(cfg: &crate::model::config::ModelConfig) -> Vec<(String, usize, usize)> {
    use crate::model::config::Family;
    let (c, f, v) = (cfg.d_model, cfg.d_ff, cfg.vocab_size);
    let kv = cfg.n_kv_heads * cfg.head_dim();
    let mut s = match cfg.family {
        Family::Gpt2 => vec![("attention qkv", c, 3 * c), ("attention out", c, c)],
        Family::Llama => vec![("attention q / out", c, c), ("attention k / v", c, kv)],
        Family::Bert => vec![("attention q / k / v / out", c, c)],
    };
    s.extend([("mlp up", c, f), ("mlp down", f, c), ("lm head", c, v)]);
    s.into_iter()
        .map(|(n, k, o)| (n.to_string(), k, o))
        .collect()
}
