//! Reading and writing a contiguous CPU storage as f32, whatever its float dtype.

use super::half_bits::{narrowed_vec, widened_vec, Narrow, Widen};
use candle_core::backend::BackendStorage;
use candle_core::{bail, CpuStorage, DType, Layout, Result};
use half::{bf16, f16};
use std::borrow::Cow;

/// The elements of `s` under `l` as f32: borrowed when the storage is f32, widened otherwise
/// (on every thread).
/// `op` names the kernel in errors.
pub fn read<'a>(op: &str, s: &'a CpuStorage, l: &Layout) -> Result<Cow<'a, [f32]>> {
    let Some((a, b)) = l.contiguous_offsets() else {
        bail!("{op}: the input must be contiguous (call .contiguous() first)")
    };
    span_f32(op, s, a..b)
}

/// `n` f32 that `fill` makes through the pointer it is given (a product that does not read its
/// destination, a copy), with no zeroing pass first: `vec![0; n]` writes every byte once more
/// (on tiny GPT-2's 32 MiB logits gradient, a full extra pass).
///
/// # Safety
/// `fill` must write all `n` elements, and nothing past them, before it returns.
pub unsafe fn written(n: usize, fill: impl FnOnce(*mut f32)) -> Vec<f32> {
    let mut v = Vec::with_capacity(n);
    fill(v.as_mut_ptr());
    // SAFETY: the caller's `fill` initialised all n elements.
    unsafe { v.set_len(n) };
    v
}

/// f32 results stored as `dtype` (rounded for bf16 and f16). Half types are converted on
/// every thread (one thread took 1–2 ms per (256, 2048) linear output).
pub fn write(op: &str, v: Vec<f32>, dtype: DType) -> Result<CpuStorage> {
    Ok(match dtype {
        DType::F32 => CpuStorage::F32(v),
        DType::BF16 => CpuStorage::BF16(narrowed_vec::<bf16>(&v)),
        DType::F16 => CpuStorage::F16(narrowed_vec::<f16>(&v)),
        DType::F64 => CpuStorage::F64(v.into_iter().map(f64::from).collect()),
        other => bail!("{op}: unsupported dtype {other:?}"),
    })
}

/// An in-place update of a parameter from its gradient, generic over both element types.
pub trait Update {
    fn run<P: Narrow, G: Widen>(&mut self, p: &mut [P], g: &[G]) -> Result<()>;
}

/// Runs `f` on a contiguous parameter (f32, bf16 or f16) and its gradient: read in place when
/// it has the parameter's dtype (widened per element inside the update), otherwise widened to
/// an f32 copy first. `op` names the optimizer in errors.
pub fn update_in_place(
    op: &str,
    (s1, l1): (&mut CpuStorage, &Layout),
    (s2, l2): (&CpuStorage, &Layout),
    mut f: impl Update,
) -> Result<()> {
    let Some((a, b)) = l1.contiguous_offsets() else {
        bail!("{op}: the parameter must be contiguous")
    };
    let own = l2.contiguous_offsets().filter(|(ga, gb)| gb - ga == b - a);
    match (s1, s2, own) {
        (CpuStorage::F32(p), CpuStorage::F32(g), Some((ga, gb))) => f.run(&mut p[a..b], &g[ga..gb]),
        (CpuStorage::BF16(p), CpuStorage::BF16(g), Some((ga, gb))) => {
            f.run(&mut p[a..b], &g[ga..gb])
        }
        (CpuStorage::F16(p), CpuStorage::F16(g), Some((ga, gb))) => f.run(&mut p[a..b], &g[ga..gb]),
        (s1, s2, _) => {
            let g = read(&format!("{op} gradient"), s2, l2)?;
            if g.len() != b - a {
                bail!("{op}: parameter and gradient differ in size");
            }
            match s1 {
                CpuStorage::F32(p) => f.run(&mut p[a..b], &g),
                CpuStorage::BF16(p) => f.run(&mut p[a..b], &g),
                CpuStorage::F16(p) => f.run(&mut p[a..b], &g),
                other => bail!("{op}: unsupported parameter dtype {:?}", other.dtype()),
            }
        }
    }
}

/// All of an f32 storage's elements, for kernels that index strided views themselves with
/// their layouts' offsets and strides. `op` names the kernel in errors.
pub fn all_f32<'a>(op: &str, s: &'a CpuStorage) -> Result<&'a [f32]> {
    match s {
        CpuStorage::F32(x) => Ok(x),
        other => bail!("{op}: expects f32, got {:?}", other.dtype()),
    }
}

/// Elements `r` of a storage as f32: borrowed when it is f32, a copy widened on every thread
/// when bf16 or f16 (converted when f64). [`read`] for a contiguous view; directly for a kernel
/// that indexes a strided view itself (the span its view covers, [`span`]).
pub fn span_f32<'a>(
    op: &str,
    s: &'a CpuStorage,
    r: std::ops::Range<usize>,
) -> Result<Cow<'a, [f32]>> {
    Ok(match s {
        CpuStorage::F32(v) => Cow::Borrowed(&v[r]),
        CpuStorage::BF16(v) => Cow::Owned(widened_vec(&v[r])),
        CpuStorage::F16(v) => Cow::Owned(widened_vec(&v[r])),
        CpuStorage::F64(v) => Cow::Owned(v[r].iter().map(|&x| x as f32).collect()),
        other => bail!("{op}: unsupported dtype {:?}", other.dtype()),
    })
}

/// The element range a layout's view covers in its storage: from its first element to its
/// last (strides are never negative in candle).
pub fn span(l: &Layout) -> std::ops::Range<usize> {
    let start = l.start_offset();
    if l.shape().elem_count() == 0 {
        return start..start;
    }
    let last: usize = l
        .dims()
        .iter()
        .zip(l.stride())
        .map(|(&n, &st)| (n - 1) * st)
        .sum();
    start..start + last + 1
}

/// The same for a tensor's storage, which `storage_and_layout` hands out behind a lock guard.
pub fn all_f32_of<'a>(op: &str, s: &'a candle_core::Storage) -> Result<&'a [f32]> {
    match s {
        candle_core::Storage::Cpu(s) => all_f32(op, s),
        _ => bail!("{op}: CPU tensors only (memscope's kernels run on the CPU)"),
    }
}

/// Rows per parallel task so that each task handles about 16 K elements.
pub fn rows_per_task(row_len: usize) -> usize {
    (16_384 / row_len.max(1)).max(1)
}

/// Runs `f` on a tensor's elements as f32 (CPU tensors only). `op` names the kernel in errors.
pub fn with_f32<T>(
    op: &str,
    t: &candle_core::Tensor,
    f: impl FnOnce(&[f32]) -> Result<T>,
) -> Result<T> {
    let (storage, layout) = t.storage_and_layout();
    match &*storage {
        candle_core::Storage::Cpu(s) => f(&read(op, s, layout)?),
        _ => bail!("{op}: CPU tensors only (memscope's kernels run on the CPU)"),
    }
}

/// Independent accumulators per reduction: a single running f32 sum is a serial chain the
/// compiler may not reorder (float addition is not associative), so it runs one add per
/// ~4 cycles; 16 lanes vectorize and overlap. Measured with `cargo bench --bench kernels`.
const LANES: usize = 16;

/// Σ f(x) over `xs`, summed in [`LANES`] lanes.
#[inline(always)]
pub fn sum_by(xs: &[f32], f: impl Fn(f32) -> f32) -> f32 {
    let mut acc = [0f32; LANES];
    let mut chunks = xs.chunks_exact(LANES);
    for c in &mut chunks {
        for j in 0..LANES {
            acc[j] += f(c[j]);
        }
    }
    let tail: f32 = chunks.remainder().iter().map(|&x| f(x)).sum();
    acc.iter().sum::<f32>() + tail
}

/// Σ f(a, b, c) over three slices of one length, summed in [`LANES`] lanes.
#[inline(always)]
pub fn sum_by3(a: &[f32], b: &[f32], c: &[f32], f: impl Fn(f32, f32, f32) -> f32) -> f32 {
    debug_assert!(a.len() == b.len() && b.len() == c.len());
    let mut acc = [0f32; LANES];
    let n = a.len() / LANES * LANES;
    let chunks = a[..n]
        .chunks_exact(LANES)
        .zip(b[..n].chunks_exact(LANES))
        .zip(c[..n].chunks_exact(LANES));
    for ((ca, cb), cc) in chunks {
        for j in 0..LANES {
            acc[j] += f(ca[j], cb[j], cc[j]);
        }
    }
    let tail: f32 = (n..a.len()).map(|i| f(a[i], b[i], c[i])).sum();
    acc.iter().sum::<f32>() + tail
}

/// Σ a·b over two slices of one length, in [`LANES`] lanes.
#[inline(always)]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    sum_by3(a, b, a, |x, y, _| x * y)
}

/// The largest element (−∞ for an empty slice), in [`LANES`] lanes.
#[inline(always)]
pub fn max(xs: &[f32]) -> f32 {
    let mut acc = [f32::NEG_INFINITY; LANES];
    let mut chunks = xs.chunks_exact(LANES);
    for c in &mut chunks {
        for j in 0..LANES {
            acc[j] = if c[j] > acc[j] { c[j] } else { acc[j] };
        }
    }
    chunks
        .remainder()
        .iter()
        .chain(&acc)
        .fold(f32::NEG_INFINITY, |m, &x| if x > m { x } else { m })
}

/// exp(x) for f32 with ~2 ulp error, written so that loops over slices vectorize (std's expf
/// is a scalar libm call). Inputs below -87 give 0; above 88, +inf.
#[inline(always)]
pub fn fast_exp(x: f32) -> f32 {
    let x = x.clamp(-87.3, 88.7);
    // x = n·ln2 + r, |r| ≤ ln2/2; exp(r) by a degree-6 polynomial; 2^n by the exponent bits.
    // Round to nearest by adding and subtracting 1.5·2²³: `f32::round` is a libm call
    // (`roundf`) on baseline x86-64 and would keep the loop scalar.
    // The sum t = 1.5·2²³ + n holds n in its low mantissa bits, so 2^n's exponent bits come
    // from t's bits with integer arithmetic: `n as i32` is a saturating conversion, which the
    // compiler turns into a scalar convert-compare-select per element and the loop stays scalar.
    const SHIFT: f32 = 12_582_912.0;
    let t = x * std::f32::consts::LOG2_E + SHIFT;
    let n = t - SHIFT;
    let r = x - n * 0.693_145_75 - n * 1.428_606_8e-6;
    let p = 1.0
        + r * (1.0
            + r * (0.5
                + r * (0.166_666_67
                    + r * (0.041_666_668 + r * (0.008_333_334 + r * 0.001_388_889)))));
    // t's bits are 0x4B40_0000 + n; shifting by 23 drops all but the 9 low bits of
    // 0x40_0000 + n + 127, which leaves n + 127 (1 … 255 after the clamp) as the exponent.
    let bits = t.to_bits().wrapping_add(127) << 23;
    p * f32::from_bits(bits)
}

#[cfg(test)]
mod tests {
    use super::{fast_exp, max, sum_by, sum_by3};
    use crate::kernels::simd::vector;

    #[test]
    fn the_vector_path_gives_the_same_bits_as_the_plain_one() {
        let xs: Vec<f32> = (0..1000).map(|i| (i as f32 * 0.37).sin() * 20.0).collect();
        let plain = sum_by(&xs, |x| fast_exp(x - 20.0));
        let vec = vector(
            #[inline(always)]
            || sum_by(&xs, |x| fast_exp(x - 20.0)),
        );
        assert_eq!(plain.to_bits(), vec.to_bits());
    }

    #[test]
    fn lane_reductions_match_the_plain_ones_at_every_tail_length() {
        for n in [0, 1, 15, 16, 17, 33, 100] {
            let xs: Vec<f32> = (0..n).map(|i| ((i * 37) % 11) as f32 - 5.0).collect();
            let ys: Vec<f32> = (0..n).map(|i| (i % 3) as f32).collect();
            assert_eq!(
                sum_by(&xs, |x| x * x),
                xs.iter().map(|x| x * x).sum::<f32>(),
                "{n}"
            );
            let dot3: f32 = xs.iter().zip(&ys).map(|(a, b)| a * b * a).sum();
            assert_eq!(sum_by3(&xs, &ys, &xs, |a, b, c| a * b * c), dot3, "{n}");
            let m = xs.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            assert_eq!(max(&xs), m, "{n}");
        }
    }

    #[test]
    fn fast_exp_is_within_a_few_ulp_of_exp_over_the_whole_range() {
        let mut worst = 0f64;
        for i in 0..=350_000 {
            let x = -87.0 + i as f32 * 0.0005; // -87 … 88
            let want = (x as f64).exp();
            let rel = ((fast_exp(x) as f64 - want) / want).abs();
            worst = worst.max(rel);
        }
        assert!(worst < 1e-6, "worst relative error {worst}");
        assert_eq!(fast_exp(-200.0), fast_exp(-87.3));
        assert!(fast_exp(-200.0) < 1e-37);
    }
}
