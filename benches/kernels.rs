//! The fused kernels (`src/kernels/`) against the candle ops they replace, on gpt2-small's
//! shapes (batch 2 × seq 128: N = 256 rows, C = 768, F = 3072, V = 50257, 12 heads of 64;
//! attention and linear forward + backward), then each kernel's
//! achieved rate as a fraction of this machine's ceilings (`memscope peaks`): GB/s over the
//! bytes a kernel must read and write for the memory-bound ones, GFLOP/s for the product.
//!
//! `cargo bench --bench kernels` (add `-- gelu` to run a subset). Rates are computed from
//! criterion's median estimate after its report; the peaks come from the cache `memscope
//! peaks` writes, or are measured here (a few seconds) when there is none.

use candle_core::{Device, Tensor, Var};
use candle_nn::ParamsAdamW;
use criterion::{black_box, criterion_group, Criterion, Throughput};
use memscope::kernels::product::{self, Operand, Strided};
use memscope::kernels::unfused;
use memscope::kernels::{
    adamw::AdamW, attention, cross_entropy, dot_bf16, gelu, half_bits, layer_norm, linear,
    rms_norm, swiglu,
};
use std::path::PathBuf;

#[global_allocator]
static GLOBAL: memscope::instrument::alloc::CountingAlloc =
    memscope::instrument::alloc::CountingAlloc;

const N: usize = 256;
const C: usize = 768;
const F: usize = 3072;
const V: usize = 50257;
/// gpt2-small's attention: batch 2, 12 heads of 64, 128 positions.
const B: usize = 2;
const H: usize = 12;
const T: usize = 128;
const D: usize = 64;

/// What a bench's throughput is measured against.
#[derive(Clone, Copy)]
enum Ceiling {
    Bandwidth,
    Matmul,
}

/// (criterion id, work units per iteration — bytes or FLOPs —, ceiling).
fn catalogue() -> Vec<(&'static str, f64, Ceiling)> {
    let f4 = |elems: usize| (elems * 4) as f64;
    vec![
        ("gelu/fused", f4(2 * N * F), Ceiling::Bandwidth),
        ("gelu/candle", f4(2 * N * F), Ceiling::Bandwidth),
        ("swiglu/fused", f4(3 * N * F), Ceiling::Bandwidth),
        ("swiglu/candle", f4(3 * N * F), Ceiling::Bandwidth),
        ("layer_norm/fused", f4(2 * N * C), Ceiling::Bandwidth),
        ("layer_norm/unfused", f4(2 * N * C), Ceiling::Bandwidth),
        ("rms_norm/fused", f4(2 * N * C), Ceiling::Bandwidth),
        ("rms_norm/unfused", f4(2 * N * C), Ceiling::Bandwidth),
        // forward reads the logits, backward reads them and writes their gradient
        (
            "cross_entropy/fused fwd+bwd",
            f4(3 * N * V),
            Ceiling::Bandwidth,
        ),
        (
            "cross_entropy/unfused fwd+bwd",
            f4(3 * N * V),
            Ceiling::Bandwidth,
        ),
        // reads p, g, m, v; writes p, m, v (one gpt2-small block's 7.1 M parameters)
        (
            "adamw/in-place step",
            f4(7 * BLOCK_PARAMS),
            Ceiling::Bandwidth,
        ),
        // Useful products: QKᵀ and PV forward, dV, dP, dQ, dK backward, each over the full
        // T×T (the kernel skips masked blocks and recomputes QKᵀ in backward).
        (
            "attention/fused fwd+bwd",
            6.0 * 2.0 * (B * H * T * T * D) as f64,
            Ceiling::Matmul,
        ),
        (
            "attention/unfused fwd+bwd",
            6.0 * 2.0 * (B * H * T * T * D) as f64,
            Ceiling::Matmul,
        ),
        // y = x·Wᵀ + b, then dx and dW: three products.
        (
            "linear/fused fwd+bwd",
            3.0 * 2.0 * (N * C * F) as f64,
            Ceiling::Matmul,
        ),
        (
            "linear/candle fwd+bwd",
            3.0 * 2.0 * (N * C * F) as f64,
            Ceiling::Matmul,
        ),
        (
            "matmul/(256×768)@(768×3072)",
            2.0 * (N * C * F) as f64,
            Ceiling::Matmul,
        ),
        (
            "bf16 product/dot",
            2.0 * (N * C * F) as f64,
            Ceiling::Matmul,
        ),
        (
            "bf16 product/widened",
            2.0 * (N * C * F) as f64,
            Ceiling::Matmul,
        ),
    ]
}

const BLOCK_PARAMS: usize = 12 * C * C + 13 * C;

fn randn(shape: &[usize]) -> Tensor {
    Tensor::randn(0f32, 1.0, shape, &Device::Cpu).unwrap()
}

fn elementwise(c: &mut Criterion) {
    let x = randn(&[N, F]);
    let u = randn(&[N, F]);
    let mut g = c.benchmark_group("gelu");
    g.throughput(Throughput::Bytes((2 * N * F * 4) as u64));
    g.bench_function("fused", |b| b.iter(|| gelu::gelu(black_box(&x)).unwrap()));
    g.bench_function("candle", |b| b.iter(|| black_box(&x).gelu().unwrap()));
    g.finish();
    let mut g = c.benchmark_group("swiglu");
    g.throughput(Throughput::Bytes((3 * N * F * 4) as u64));
    g.bench_function("fused", |b| {
        b.iter(|| swiglu::swiglu(black_box(&x), &u).unwrap())
    });
    g.bench_function("candle", |b| {
        b.iter(|| (black_box(&x).silu().unwrap() * &u).unwrap())
    });
    g.finish();
}

fn norms(c: &mut Criterion) {
    let x = randn(&[N, C]);
    let (w, bias) = (randn(&[C]), randn(&[C]));
    let mut g = c.benchmark_group("layer_norm");
    g.throughput(Throughput::Bytes((2 * N * C * 4) as u64));
    g.bench_function("fused", |b| {
        b.iter(|| layer_norm::layer_norm(black_box(&x), &w, &bias, 1e-5).unwrap())
    });
    g.bench_function("unfused", |b| {
        b.iter(|| unfused::layer_norm(black_box(&x), &w, &bias, 1e-5).unwrap())
    });
    g.finish();
    let mut g = c.benchmark_group("rms_norm");
    g.throughput(Throughput::Bytes((2 * N * C * 4) as u64));
    g.bench_function("fused", |b| {
        b.iter(|| rms_norm::rms_norm(black_box(&x), &w, 1e-5).unwrap())
    });
    g.bench_function("unfused", |b| {
        b.iter(|| unfused::rms_norm(black_box(&x), &w, 1e-5).unwrap())
    });
    g.finish();
}

fn loss(c: &mut Criterion) {
    let logits = Var::from_tensor(&randn(&[N, V])).unwrap();
    let targets: Vec<u32> = (0..N as u32).map(|i| (i * 7919) % V as u32).collect();
    let targets = Tensor::from_vec(targets, N, &Device::Cpu).unwrap();
    let mut g = c.benchmark_group("cross_entropy");
    g.sample_size(20);
    g.throughput(Throughput::Bytes((3 * N * V * 4) as u64));
    g.bench_function("fused fwd+bwd", |b| {
        b.iter(|| {
            let l = cross_entropy::cross_entropy(logits.as_tensor(), &targets).unwrap();
            l.backward().unwrap()
        })
    });
    g.bench_function("unfused fwd+bwd", |b| {
        b.iter(|| {
            let l = unfused::cross_entropy(logits.as_tensor(), &targets).unwrap();
            l.backward().unwrap()
        })
    });
    g.finish();
}

fn optimizer(c: &mut Criterion) {
    let shapes: [&[usize]; 8] = [
        &[C, 3 * C],
        &[3 * C],
        &[C, C],
        &[C],
        &[C, F],
        &[F],
        &[F, C],
        &[C],
    ];
    let vars: Vec<Var> = shapes
        .iter()
        .chain([&[C][..], &[C], &[C], &[C]].iter())
        .map(|s| Var::from_tensor(&randn(s)).unwrap())
        .collect();
    let n: usize = vars.iter().map(|v| v.elem_count()).sum();
    assert_eq!(n, BLOCK_PARAMS, "one gpt2-small block");
    let mut grads = candle_core::backprop::GradStore::default();
    for v in &vars {
        grads.insert(v.as_tensor(), randn(v.dims()));
    }
    let mut opt = AdamW::new(vars, ParamsAdamW::default());
    let mut g = c.benchmark_group("adamw");
    g.throughput(Throughput::Bytes((7 * n * 4) as u64));
    g.bench_function("in-place step", |b| b.iter(|| opt.step(&grads).unwrap()));
    g.finish();
}

fn matmul(c: &mut Criterion) {
    let (x, w) = (randn(&[N, C]), randn(&[C, F]));
    let mut g = c.benchmark_group("matmul");
    g.throughput(Throughput::Elements((2 * N * C * F) as u64));
    g.bench_function("(256×768)@(768×3072)", |b| {
        b.iter(|| black_box(&x).matmul(&w).unwrap())
    });
    g.finish();
    // The linear layer's bf16 product, x (N, C) · W (F, C)ᵀ into f32, both ways the engine can
    // run it: on AVX-512 BF16 dot products (`kernels::dot_bf16`, only where the CPU has them),
    // and x widened to f32 with W read through f32 tiles (every other CPU).
    let bf = |len: usize, k: usize| -> Vec<half::bf16> {
        (0..len)
            .map(|i| half::bf16::from_f32(((i * k % 23) as f32 - 11.0) / 16.0))
            .collect()
    };
    let (xb, wb) = (bf(N * C, 7), bf(F * C, 5)); // x (N, C), W (F, C) row-major
    let x_op = Strided {
        ptr: xb.as_ptr(),
        rs: C,
        cs: 1,
    };
    let w_op = Strided {
        ptr: wb.as_ptr(),
        rs: 1,
        cs: C,
    }; // Wᵀ (C, F)
    let mut y = vec![0f32; N * F];
    let mut g = c.benchmark_group("bf16 product");
    if dot_bf16::available() {
        g.bench_function("dot", |b| {
            // SAFETY: x (N, C), W (F, C) and y (N, F) have the extents given.
            b.iter(|| unsafe {
                dot_bf16::product((N, F, C), y.as_mut_ptr(), F, false, x_op, w_op, 1.0)
            })
        });
    }
    g.bench_function("widened", |b| {
        b.iter(|| {
            let x32 = half_bits::widened_vec(&xb);
            let lhs = Operand {
                ptr: x32.as_ptr(),
                rs: C,
                cs: 1,
            };
            // SAFETY: as above.
            unsafe {
                product::product_widening((N, F, C), y.as_mut_ptr(), F, false, lhs, w_op, 1.0)
            }
        })
    });
    g.finish();
}

/// Forward, then backward of Σ y, for the fused kernel and the candle ops it replaces.
fn with_backward(f: impl Fn() -> Tensor) -> impl FnMut() {
    move || {
        let y = f();
        black_box(y.sum_all().unwrap().backward().unwrap());
    }
}

fn products(c: &mut Criterion) {
    let qkv = Var::from_tensor(&randn(&[B, T, 3 * H * D])).unwrap();
    let mask = unfused::causal_mask(T, 0, candle_core::DType::F32, &Device::Cpu).unwrap();
    let mut g = c.benchmark_group("attention");
    g.sample_size(30);
    g.bench_function("fused fwd+bwd", |b| {
        b.iter(with_backward(|| attention::packed(&qkv, H, true).unwrap()))
    });
    g.bench_function("unfused fwd+bwd", |b| {
        b.iter(with_backward(|| {
            let p = qkv.reshape((B, T, 3, H, D)).unwrap();
            let p = p.permute((2, 0, 3, 1, 4)).unwrap(); // (3, B, H, T, D)
            let part = |i| p.get(i).unwrap().contiguous().unwrap();
            let y = unfused::attention(&part(0), &part(1), &part(2), Some(&mask)).unwrap();
            y.transpose(1, 2).unwrap().reshape((B, T, H * D)).unwrap()
        }))
    });
    g.finish();
    let x = Var::from_tensor(&randn(&[N, C])).unwrap();
    let w = Var::from_tensor(&randn(&[F, C])).unwrap();
    let bias = Var::from_tensor(&randn(&[F])).unwrap();
    let mut g = c.benchmark_group("linear");
    g.sample_size(30);
    g.bench_function("fused fwd+bwd", |b| {
        b.iter(with_backward(|| {
            linear::linear(&x, &w, Some(&bias)).unwrap()
        }))
    });
    g.bench_function("candle fwd+bwd", |b| {
        b.iter(with_backward(|| {
            x.matmul(&w.t().unwrap())
                .unwrap()
                .broadcast_add(&bias)
                .unwrap()
        }))
    });
    g.finish();
}

fn out_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("criterion")
}

fn config() -> Criterion {
    Criterion::default()
        .output_directory(&out_dir())
        .configure_from_args()
}

criterion_group! {
    name = kernels;
    config = config();
    targets = elementwise, norms, loss, optimizer, products, matmul
}

/// criterion's median time per iteration (ns) for `id`, from its estimates file.
fn median_ns(id: &str) -> Option<f64> {
    let path = out_dir().join(id).join("new").join("estimates.json");
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()?;
    v["median"]["point_estimate"].as_f64()
}

fn main() {
    memscope::instrument::alloc::keep_freed_memory(); // as the memscope binary runs
    kernels();
    config().final_summary();
    let threads = rayon::current_num_threads();
    let peaks = match memscope::measure::peaks::cached(threads) {
        Some(p) => p,
        None => {
            eprintln!("no cached peaks for {threads} threads: measuring (run `memscope peaks` to cache them)");
            memscope::measure::peaks::measure(threads, N, &[]).expect("measuring the peaks")
        }
    };
    let (bw, mm) = (peaks.bandwidth_gbs, peaks.matmul_gflops["f32"]);
    println!(
        "\nagainst this machine's ceilings ({threads} threads, {}): triad {bw:.1} GB/s, f32 matmul {mm:.0} GFLOP/s",
        memscope::environment::isa()
    );
    println!(
        "{:<34} {:>12} {:>14} {:>9}",
        "kernel", "median", "achieved", "of peak"
    );
    for (id, work, ceiling) in catalogue() {
        let Some(ns) = median_ns(id) else { continue }; // filtered out on this run
        let rate = work / ns; // bytes/ns = GB/s, FLOP/ns = GFLOP/s
        let (unit, peak) = match ceiling {
            Ceiling::Bandwidth => ("GB/s", bw),
            Ceiling::Matmul => ("GFLOP/s", mm),
        };
        println!(
            "{id:<34} {:>9.3} ms {:>7.1} {unit:<7} {:>8.0}%",
            ns / 1e6,
            rate,
            100.0 * rate / peak
        );
    }
}
