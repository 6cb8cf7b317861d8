//! How the kernels call gemm: row-major f32 products over strided operands, and gemm's
//! per-thread packing buffers.
//!
//! gemm keeps one packing buffer per thread ("L2 slab", the size of the L2 cache), allocated
//! the first time that thread packs a product and kept for the thread's life. Which rayon
//! workers reach that point depends on scheduling: a small attention call may run all its
//! tasks on one worker or spread them over every worker, so the heap figures of two identical
//! runs differed by a slab. [`allocate_slabs_on_every_thread`] packs one product on every
//! thread at start-up, so the count is fixed: the calling thread plus every worker, which
//! `estimate::runtime_buffers` predicts.
//!
//! gemm is slow when the right operand is column-major (unit row stride) and the inner
//! dimension is long: on a 2-core AMD EPYC (AVX-512), x (256, 2048) · Wᵀ with W the
//! (5632, 2048) `nn.Linear` weight ran at 131 GFLOP/s where the same product with a row-major
//! right operand ran at 199, and (256, 3072) · (3072, 768) at 76–92 against 205. A product
//! that qualifies ([`transposed_tile`]) copies its right operand, one (512, 2048) tile at a
//! time, into a buffer and calls gemm on the tile: 150–165 GFLOP/s and 200+ at 1024 rows, the
//! copy included. The buffer is laid out in the strips gemm's microkernel reads in place
//! (`kernels::strips`) where the tile's columns cut into them, so gemm does not pack the tile
//! again (the attention projections' forward ~10% faster), else row-major. The buffer (at
//! most 4 MiB) lives only during the call; the estimator charges it
//! (`estimate::ops::product_scratch`).

use super::half_bits::Widen;
use super::{simd, strips, transpose};
use gemm::Parallelism;
use half::bf16;
use rayon::prelude::*;

/// A row-major operand: pointer to its (0, 0) element and its (row, column) strides.
#[derive(Clone, Copy)]
pub struct Operand {
    pub ptr: *const f32,
    pub rs: usize,
    pub cs: usize,
}

impl Operand {
    /// The transposed view.
    pub fn t(self) -> Self {
        Operand {
            rs: self.cs,
            cs: self.rs,
            ..self
        }
    }
}

/// dst (m, n) with row stride `dst_rs` = beta · lhs (m, k) · rhs (k, n), plus dst when `acc`.
/// `parallel`: let gemm split the product over rayon's threads when it finds it worth it
/// (candle's own matmul does the same); otherwise it runs on the calling thread.
///
/// # Safety
/// Every operand must be valid for the strided (m, k), (k, n) and (m, n) extents it is given,
/// and `dst` must not alias the operands or memory another thread touches meanwhile.
#[allow(clippy::too_many_arguments)]
pub unsafe fn product(
    (m, n, k): (usize, usize, usize),
    dst: *mut f32,
    dst_rs: usize,
    acc: bool,
    lhs: Operand,
    rhs: Operand,
    beta: f32,
    parallel: bool,
) {
    if parallel {
        if let Some((kb, nb)) = transposed_tile((m, n, k), rhs.rs, rhs.cs) {
            let rhs = Strided {
                ptr: rhs.ptr,
                rs: rhs.rs,
                cs: rhs.cs,
            };
            return product_tiled((m, n, k), dst, dst_rs, acc, lhs, rhs, beta, (kb, nb));
        }
    }
    let threads = rayon::current_num_threads();
    let par = if parallel && threads > 1 {
        Parallelism::Rayon(threads)
    } else {
        Parallelism::None
    };
    gemm::gemm(
        m,
        n,
        k,
        dst,
        1,
        dst_rs as isize,
        acc,
        lhs.ptr,
        lhs.cs as isize,
        lhs.rs as isize,
        rhs.ptr,
        rhs.cs as isize,
        rhs.rs as isize,
        1.0,
        beta,
        false,
        false,
        false,
        par,
    )
}

/// Rows of the right operand (inner dimension) per copied tile.
const TILE_K: usize = 512;
/// Columns of the right operand per copied tile.
const TILE_N: usize = 2048;

/// The (inner, columns) tile a product of `(m, n, k)` copies its right operand through, or
/// `None` when gemm reads it in place: a column-major right operand (`rs == 1`), at least 128
/// rows to reuse each copied element over, and either a long inner dimension (k ≥ 1024) or
/// fewer than 2048 columns. Measured on the AVX-512 machine (GFLOP/s, in place → copied):
/// (256, 768, 768) 107 → 170, (1024, 256, 1024) 153 → 185, (128, 768, 768) 80 → 144; a short
/// inner dimension with many columns is read well in place and left there: (256, 768, 3072)
/// 172 → 150, (1024, 256, 8192) 194 → 187.
pub fn transposed_tile(
    (m, n, k): (usize, usize, usize),
    rs: usize,
    cs: usize,
) -> Option<(usize, usize)> {
    let copy = rs == 1 && cs != 1 && m >= 128 && n >= 64 && k >= 64 && (k >= 1024 || n < 2048);
    copy.then(|| (TILE_K.min(k), TILE_N.min(n)))
}

/// Bytes of the buffer [`product`] allocates for the duration of a product of `(m, n, k)`
/// whose right operand has strides `(rs, cs)` (0 when it reads the operand in place).
pub fn scratch_bytes(mnk: (usize, usize, usize), rs: usize, cs: usize) -> u64 {
    transposed_tile(mnk, rs, cs).map_or(0, |(kb, nb)| (kb * nb * 4) as u64)
}

/// A strided operand of any [`Widen`] element type: pointer to its (0, 0) element and its
/// (row, column) strides.
pub struct Strided<T> {
    pub ptr: *const T,
    pub rs: usize,
    pub cs: usize,
}

impl<T> Clone for Strided<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for Strided<T> {}

impl<T> Strided<T> {
    /// The transposed view.
    pub fn t(self) -> Self {
        Strided {
            rs: self.cs,
            cs: self.rs,
            ..self
        }
    }
}

/// The signature of the bf16 × bf16 → f32 products (`dot_bf16::product`,
/// `dot_bf16::product_vector`, `amx_bf16::product`): (m, n, k), dst, dst's row stride, acc, lhs,
/// rhs, beta.
pub type Bf16Product =
    unsafe fn((usize, usize, usize), *mut f32, usize, bool, Strided<bf16>, Strided<bf16>, f32);

/// dst (m, n) = beta · lhs (m, k) · rhs (k, n) [+ dst when `acc`] with a bf16 or f16 right
/// operand: widened to f32 tile by tile as it is copied ([`TILE_K`] × [`TILE_N`], the same
/// buffer a column-major f32 operand goes through), so the weight is never widened whole.
///
/// # Safety
/// As [`product`].
#[allow(clippy::too_many_arguments)]
pub unsafe fn product_widening<T: Widen>(
    (m, n, k): (usize, usize, usize),
    dst: *mut f32,
    dst_rs: usize,
    acc: bool,
    lhs: Operand,
    rhs: Strided<T>,
    beta: f32,
) {
    let tile = (TILE_K.min(k), TILE_N.min(n));
    product_tiled((m, n, k), dst, dst_rs, acc, lhs, rhs, beta, tile)
}

/// Bytes of the tile buffer [`product_widening`] allocates for the duration of a product.
pub fn widening_scratch_bytes((_, n, k): (usize, usize, usize)) -> u64 {
    (TILE_K.min(k) * TILE_N.min(n) * 4) as u64
}

/// [`product`] through f32 copies of the right operand, tile by tile: for each block of `nb`
/// columns and each block of `kb` inner rows, copy (widening), then gemm-accumulate into dst.
/// A transposed operand (`rs == 1`) is copied into the strips gemm's kernel reads in place
/// (`kernels::strips`) where the block's columns cut into whole strips and `beta` is 1, so gemm
/// does not pack it a second time; otherwise into a row-major tile.
///
/// # Safety
/// As [`product`].
#[allow(clippy::too_many_arguments)]
unsafe fn product_tiled<T: Widen>(
    (m, n, k): (usize, usize, usize),
    dst: *mut f32,
    dst_rs: usize,
    acc: bool,
    lhs: Operand,
    rhs: Strided<T>,
    beta: f32,
    (kb, nb): (usize, usize),
) {
    let mut tile = vec![0f32; kb * nb]; // (kb, nb) row-major, or (nb/w, kb, w) strips
    let strip_width = strips::width().filter(|_| rhs.rs == 1 && beta == 1.0);
    for j in (0..n).step_by(nb) {
        let b = nb.min(n - j);
        let width = strip_width.filter(|&w| b % w == 0);
        for d in (0..k).step_by(kb) {
            let c = kb.min(k - d);
            let src = Strided {
                ptr: rhs.ptr.add(d * rhs.rs + j * rhs.cs),
                ..rhs
            };
            copy_tile(src, (c, b), width, &mut tile[..c * b]);
            let lhs_d = Operand {
                ptr: lhs.ptr.add(d * lhs.cs),
                ..lhs
            };
            if let Some(w) = width {
                // The tile holds the block's c × b values as b/w strips; dst's columns j.. are
                // within the caller's extent.
                let x = (lhs_d.ptr, lhs.rs, lhs.cs);
                let acc = acc || d > 0;
                strips::product((m, c, b), w, (dst.add(j), dst_rs), acc, x, tile.as_ptr());
                continue;
            }
            let tile_op = Operand {
                ptr: tile.as_ptr(),
                rs: b,
                cs: 1,
            };
            product(
                (m, b, c),
                dst.add(j),
                dst_rs,
                acc || d > 0,
                lhs_d,
                tile_op,
                beta,
                true,
            );
        }
    }
}

/// out = the (c, b) operand `src` as f32, widened: (c, b) row-major, or with `strip_width`
/// Some(w) (only for `rs == 1`; w a multiple of 16 dividing b) as (b/w, c, w) strips
/// (`kernels::strips`). Adjacent rows (`rs == 1`, a transposed weight): 16 of its columns at a
/// time (16 sequential streams) through register transposes (bf16 widened in registers; f16
/// element by element), written as 16-element row pieces; otherwise row by row (8 lanes wide
/// when a row is contiguous).
///
/// # Safety
/// `src` must be valid for its (c, b) extent.
unsafe fn copy_tile<T: Widen>(
    src: Strided<T>,
    (c, b): (usize, usize),
    strip_width: Option<usize>,
    out: &mut [f32],
) {
    const R: usize = 16;
    struct Src<T>(Strided<T>);
    // SAFETY: only read, and the caller keeps the operand alive for the call.
    unsafe impl<T> Sync for Src<T> {}
    let s = Src(src);
    let s = &s;
    // Element (kk, jj) of the copy, and the distance between its rows.
    let at = |kk: usize, jj: usize| match strip_width {
        Some(w) => (jj / w) * c * w + kk * w + jj % w,
        None => kk * b + jj,
    };
    let stride = strip_width.unwrap_or(b);
    if src.rs != 1 {
        debug_assert!(strip_width.is_none());
        out.par_chunks_mut(b).enumerate().for_each(|(kk, row)| {
            let from = s.0.ptr.add(kk * s.0.rs);
            if s.0.cs == 1 {
                // A row-major half weight: each row widened 8 lanes wide.
                let from = std::slice::from_raw_parts(from, row.len());
                simd::vector(
                    #[inline(always)]
                    || row.iter_mut().zip(from).for_each(|(o, v)| *o = v.widen()),
                );
            } else {
                for (jj, o) in row.iter_mut().enumerate() {
                    *o = (*from.add(jj * s.0.cs)).widen();
                }
            }
        });
        return;
    }
    let out_ptr = OutPtr(out.as_mut_ptr());
    let out_ptr = &out_ptr;
    (0..b.div_ceil(R))
        .into_par_iter()
        .with_min_len(8)
        .for_each(|blk| {
            let j0 = blk * R;
            let cols = R.min(b - j0);
            let o = out_ptr.0;
            if cols == R && std::any::TypeId::of::<T>() == std::any::TypeId::of::<f32>() {
                // f32: eight columns at a time through registers.
                for half in [0, R / 2] {
                    let col: [*const f32; 8] = std::array::from_fn(|r| {
                        s.0.ptr.add((j0 + half + r) * s.0.cs) as *const f32
                    });
                    transpose::columns8(&col, c, o.add(at(0, j0 + half)), stride);
                }
            } else if cols == R && std::any::TypeId::of::<T>() == std::any::TypeId::of::<bf16>() {
                // bf16: widened in registers on the way through the same transposes.
                for half in [0, R / 2] {
                    let col: [*const bf16; 8] = std::array::from_fn(|r| {
                        s.0.ptr.add((j0 + half + r) * s.0.cs) as *const bf16
                    });
                    transpose::columns8_bf16(&col, c, o.add(at(0, j0 + half)), stride);
                }
            } else if cols == R {
                // f16: element by element (a register path for it was never measured).
                let col: [*const T; R] = std::array::from_fn(|r| s.0.ptr.add((j0 + r) * s.0.cs));
                for kk in 0..c {
                    let mut v = [0f32; R];
                    for r in 0..R {
                        v[r] = (*col[r].add(kk)).widen();
                    }
                    std::ptr::copy_nonoverlapping(v.as_ptr(), o.add(at(kk, j0)), R);
                }
            } else {
                for r in 0..cols {
                    let col = s.0.ptr.add((j0 + r) * s.0.cs);
                    for kk in 0..c {
                        *o.add(at(kk, j0 + r)) = (*col.add(kk)).widen();
                    }
                }
            }
        });
}

/// The copy's destination, written by column blocks that never overlap.
struct OutPtr(*mut f32);
// SAFETY: each task writes only its own columns of the tile.
unsafe impl Sync for OutPtr {}

/// Side of the product that allocates a slab: large enough for gemm's packing path with any
/// SIMD width, small enough to cost nothing (64³ multiply-adds).
const SLAB_N: usize = 64;

/// Makes the calling thread and every worker of rayon's global pool allocate their slab.
/// Call once, after the pool is built.
pub fn allocate_slabs_on_every_thread() {
    rayon::broadcast(|_| pack_one());
    pack_one();
}

fn pack_one() {
    let a = vec![1f32; SLAB_N * SLAB_N];
    let mut c = vec![0f32; SLAB_N * SLAB_N];
    let op = Operand {
        ptr: a.as_ptr(),
        rs: SLAB_N,
        cs: 1,
    };
    // SAFETY: three N×N row-major buffers; dst does not alias the operands.
    unsafe {
        product(
            (SLAB_N, SLAB_N, SLAB_N),
            c.as_mut_ptr(),
            SLAB_N,
            false,
            op,
            op,
            1.0,
            false,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// dst (m, n) = Σ lhs · rhs in f64, for row-major lhs (m, k) and a column-major rhs.
    fn reference(m: usize, n: usize, k: usize, lhs: &[f32], w: &[f32]) -> Vec<f64> {
        let mut out = vec![0f64; m * n];
        for r in 0..m {
            for c in 0..n {
                out[r * n + c] = (0..k)
                    .map(|d| lhs[r * k + d] as f64 * w[c * k + d] as f64)
                    .sum();
            }
        }
        out
    }

    #[test]
    fn a_column_major_right_operand_copied_tile_by_tile_gives_gemms_product() {
        // Odd sizes: a partial tile in both directions, a column block that is not a multiple
        // of 16, and accumulation into what dst holds.
        let (m, n, k) = (130, 2048 + 37, 1100);
        assert_eq!(transposed_tile((m, n, k), 1, k), Some((512, 2048)));
        let lhs: Vec<f32> = (0..m * k)
            .map(|i| ((i * 7 % 13) as f32 - 6.0) / 8.0)
            .collect();
        let w: Vec<f32> = (0..n * k)
            .map(|i| ((i * 5 % 11) as f32 - 5.0) / 4.0)
            .collect();
        let mut dst = vec![1f32; m * n];
        let rhs = Operand {
            ptr: w.as_ptr(),
            rs: 1,
            cs: k,
        }; // (k, n) = wᵀ
        let lhs_op = Operand {
            ptr: lhs.as_ptr(),
            rs: k,
            cs: 1,
        };
        // SAFETY: the buffers have the extents given.
        unsafe { product((m, n, k), dst.as_mut_ptr(), n, true, lhs_op, rhs, 0.5, true) };
        let want = reference(m, n, k, &lhs, &w);
        for (i, (&got, &want)) in dst.iter().zip(&want).enumerate() {
            let want = 1.0 + 0.5 * want;
            assert!(
                (got as f64 - want).abs() <= 1e-4 * want.abs().max(1.0),
                "element {i}: {got} vs {want}"
            );
        }
    }

    #[test]
    fn only_long_column_major_products_with_enough_rows_are_copied() {
        assert_eq!(
            transposed_tile((256, 5632, 2048), 1, 2048),
            Some((512, 2048))
        );
        assert_eq!(transposed_tile((256, 768, 3072), 1, 3072), Some((512, 768)));
        assert_eq!(
            transposed_tile((256, 5632, 2048), 5632, 1),
            None,
            "row-major"
        );
        assert_eq!(
            transposed_tile((64, 5632, 2048), 1, 2048),
            None,
            "too few rows"
        );
        assert_eq!(
            transposed_tile((256, 3072, 768), 1, 768),
            None,
            "short inner"
        );
        assert_eq!(scratch_bytes((256, 5632, 2048), 1, 2048), 512 * 2048 * 4);
        assert_eq!(scratch_bytes((256, 5632, 2048), 5632, 1), 0);
    }
}
