//! bf16 and f16 operands for the f32 kernels: 2-d views widened to row-major f32 copies,
//! half views as strided operands for `product::product_widening`'s tiles, f32 results
//! narrowed back (rounded once per element), and an f32 gradient added into a half one in
//! place.

use super::half_bits::{narrowed_vec, Narrow, Widen};
use super::product::{Operand, Strided};
use super::simd::vector;
use candle_core::backend::BackendStorage;
use candle_core::{bail, CpuStorage, DType, InplaceOp1, Layout, Result, Shape, Tensor};
use rayon::prelude::*;
use std::borrow::Cow;

/// In place: a bf16 / f16 gradient += an f32 one (rounded once per element).
pub struct AddWidened<'a>(pub &'a [f32]);

impl InplaceOp1 for AddWidened<'_> {
    fn name(&self) -> &'static str {
        "memscope-linear-add-widened"
    }

    fn cpu_fwd(&self, s: &mut CpuStorage, l: &Layout) -> Result<()> {
        let op = "linear backward";
        let Some((a, b)) = l.contiguous_offsets() else {
            bail!("{op}: the gradient must be contiguous")
        };
        fn add<T: Narrow>(g: &mut [T], d: &[f32]) {
            g.par_chunks_mut(16_384)
                .zip(d.par_chunks(16_384))
                .for_each(|(g, d)| {
                    vector(
                        #[inline(always)]
                        || {
                            g.iter_mut()
                                .zip(d)
                                .for_each(|(g, &d)| *g = T::narrow(g.widen() + d))
                        },
                    )
                });
        }
        match s {
            CpuStorage::BF16(g) => add(&mut g[a..b], self.0),
            CpuStorage::F16(g) => add(&mut g[a..b], self.0),
            CpuStorage::F32(g) => add(&mut g[a..b], self.0),
            other => bail!("{op}: unsupported dtype {:?}", other.dtype()),
        }
        Ok(())
    }
}

/// The CPU storage behind a tensor's lock guard.
pub fn cpu<'a>(op: &str, s: &'a candle_core::Storage) -> Result<&'a CpuStorage> {
    match s {
        candle_core::Storage::Cpu(s) => Ok(s),
        _ => bail!("{op}: CPU tensors only (memscope's kernels run on the CPU)"),
    }
}

/// The 2-d view `l` of an f32, bf16 or f16 storage as a row-major f32 copy.
pub fn widened(op: &str, s: &CpuStorage, l: &Layout) -> Result<Vec<f32>> {
    let (r, c) = l.shape().dims2()?;
    let &[rs, cs] = l.stride() else {
        bail!("{op}: expects a 2-d operand, strides {:?}", l.stride())
    };
    let off = l.start_offset();
    fn go<T: Widen>(
        v: &[T],
        off: usize,
        (rs, cs): (usize, usize),
        (r, c): (usize, usize),
    ) -> Vec<f32> {
        let mut out = vec![0f32; r * c];
        out.par_chunks_mut(c.max(1))
            .enumerate()
            .for_each(|(row, o)| {
                let base = off + row * rs;
                if cs == 1 {
                    let v = &v[base..base + o.len()];
                    vector(
                        #[inline(always)]
                        || o.iter_mut().zip(v).for_each(|(o, v)| *o = v.widen()),
                    )
                } else {
                    o.iter_mut()
                        .enumerate()
                        .for_each(|(j, o)| *o = v[base + j * cs].widen());
                }
            });
        out
    }
    Ok(match s {
        CpuStorage::F32(v) => go(v, off, (rs, cs), (r, c)),
        CpuStorage::BF16(v) => go(v, off, (rs, cs), (r, c)),
        CpuStorage::F16(v) => go(v, off, (rs, cs), (r, c)),
        other => bail!("{op}: unsupported dtype {:?}", other.dtype()),
    })
}

/// f32 values as a tensor of `shape` in `dt`, rounded once per element on every thread (an
/// owned f32 buffer becomes the tensor as it is).
pub fn narrowed<'a>(
    v: impl Into<Cow<'a, [f32]>>,
    shape: impl Into<Shape>,
    dt: DType,
    dev: &candle_core::Device,
) -> Result<Tensor> {
    let v = v.into();
    match dt {
        DType::BF16 => Tensor::from_vec(narrowed_vec::<half::bf16>(&v), shape, dev),
        DType::F16 => Tensor::from_vec(narrowed_vec::<half::f16>(&v), shape, dev),
        _ => Tensor::from_vec(v.into_owned(), shape, dev),
    }
}

/// A detached copy of the f32 tensor `t` in `dt` (bf16 or f16), converted on every thread:
/// mixed precision's working copy of a weight whose gradient the sink takes. candle's
/// `to_dtype` converts on one thread: 128 M parameters a step.
pub fn cast_copy(t: &Tensor, dt: DType) -> Result<Tensor> {
    let op = "cast";
    if !matches!(dt, DType::BF16 | DType::F16) {
        bail!("{op}: casts to bf16 or f16, not {dt:?}")
    }
    let (s, l) = t.storage_and_layout();
    let CpuStorage::F32(v) = cpu(op, &s)? else {
        bail!("{op}: the master must be f32, not {:?}", t.dtype())
    };
    let Some((a, b)) = l.contiguous_offsets() else {
        bail!("{op}: the master must be contiguous")
    };
    narrowed(&v[a..b], t.dims(), dt, t.device())
}

/// A row-major f32 buffer of `cols` columns as a gemm operand.
pub fn row_major(v: &[f32], cols: usize) -> Operand {
    Operand {
        ptr: v.as_ptr(),
        rs: cols,
        cs: 1,
    }
}

/// A 2-d view of a half storage as a strided operand, checked against the storage.
pub fn strided<T>(op: &str, v: &[T], l: &Layout) -> Result<Strided<T>> {
    let (r, c) = l.shape().dims2()?;
    let &[rs, cs] = l.stride() else {
        bail!("{op}: expects a 2-d operand, strides {:?}", l.stride())
    };
    let off = l.start_offset();
    let last = off + (r.max(1) - 1) * rs + (c.max(1) - 1) * cs;
    if r * c > 0 && last >= v.len() {
        bail!("{op}: the view {:?} reaches past its storage", l.shape())
    }
    Ok(Strided {
        ptr: v[off..].as_ptr(),
        rs,
        cs,
    })
}
