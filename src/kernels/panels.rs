//! Weights kept in column panels, for whole-sequence forwards on AVX-512.
//!
//! An inference store's weight never changes, so it can be laid out the way gemm's AVX-512
//! microkernel reads it. The product y (N, O) = x (N, I) · W (I, O) is, inside gemm, Wᵀ
//! times xᵀ: each microkernel call multiplies 64 output features by 6 rows over the inner
//! dimension, reading 64 adjacent W values per inner step. From a row-major (I, O) weight
//! those 64 values sit one row of O apart, so gemm first packs the weight into 64-wide strips
//! (every weight element copied once per product, before any arithmetic on it). Here the
//! store keeps the weight as those strips already: a (O/64, I, 64) buffer, panel p holding
//! columns 64·p … 64·p + 63 of W (I, O), row-major. Each panel is one gemm call of at most
//! [`ROWS`] rows, which gemm reads in place with no packing.
//!
//! Measured at 2 threads on the AMD EPYC (Zen 4, AVX-512) machine, GFLOP/s, gemm on the
//! row-major weight → panels: (256, 2048) · (2048, 5632) 197–201 → 218–223; (256, 5632) ·
//! (5632, 2048) 182–199 → 212–224; (256, 2048) · (2048, 32000) 198 → 214–223; (1024, 768) ·
//! (768, 3072) 213–216 → 218. On the AVX2 build (3×8 by 4 microkernel) panels were slower
//! at every width tried (48, 72, 96: 150–200 against 180–200), so they are used only where
//! gemm runs its AVX-512 kernels.
//!
//! The tensor a model holds is a view of the buffer with the weight's logical dims: an
//! `nn.Linear` weight (O, I) as (O/64, 64, I), strides (64·I, 1, 64); a `Conv1D` weight (I, O)
//! as (I, O/64, 64), strides (64, 64·I, 1). `kernels::linear` recognises both by their strides.
//! Shape vocabulary: N rows, I in features, O out features, P = O / 64 panels.

use super::product::Operand;
use candle_core::{Layout, Result, Tensor};
use gemm::Parallelism;
use rayon::prelude::*;

/// Output features per panel: the AVX-512 f32 microkernel's 4 × 16 lanes.
pub const WIDTH: usize = 64;

/// Rows per gemm call. gemm packs its left operand (here the panel) whenever a call's other
/// side exceeds 8 × 6 = 48 columns on one thread (`lhs_packing_threshold_single_thread` × the
/// microkernel's 6), so 48 rows keep every call reading the panel in place.
const ROWS: usize = 48;

/// Whether inference stores keep f32 weights in panels on this machine: when gemm runs its
/// AVX-512 kernels (the CPU has AVX-512F and memscope was built with the `avx512` feature).
pub fn chosen() -> bool {
    #[cfg(all(target_arch = "x86_64", feature = "avx512"))]
    {
        std::arch::is_x86_feature_detected!("avx512f")
    }
    #[cfg(not(all(target_arch = "x86_64", feature = "avx512")))]
    {
        false
    }
}

/// Whether a weight with `o` output features can be cut into whole panels.
pub fn fits(o: usize) -> bool {
    o > 0 && o.is_multiple_of(WIDTH)
}

/// Position of W[i][o] (the weight as (I, O)) in the (O/64, I, 64) buffer of `i_len` inputs.
pub fn index(i: usize, o: usize, i_len: usize) -> usize {
    (o / WIDTH) * i_len * WIDTH + i * WIDTH + o % WIDTH
}

/// The weight view of a contiguous (O/64, I, 64) buffer: (O, I) as (O/64, 64, I) for
/// `nn.Linear` (`out_in`), else (I, O) as (I, O/64, 64) for `Conv1D`.
pub fn view(buffer: Tensor, out_in: bool) -> Result<Tensor> {
    if out_in {
        buffer.transpose(1, 2) // (P, 64, I)
    } else {
        buffer.transpose(0, 1) // (I, P, 64)
    }
}

/// `(i, o)` when `l` is a [`view`] of a panel buffer for this weight layout.
pub fn recognise(l: &Layout, out_in: bool) -> Option<(usize, usize)> {
    match (l.dims(), l.stride()) {
        (&[p, WIDTH, i], &[sp, 1, si]) if out_in && si == WIDTH && sp == WIDTH * i => {
            Some((i, p * WIDTH))
        }
        (&[i, p, WIDTH], &[si, sp, 1]) if !out_in && si == WIDTH && sp == WIDTH * i => {
            Some((i, p * WIDTH))
        }
        _ => None,
    }
}

/// dst (N, O) row-major = x (N, I) · W [+ dst when `acc`], W from its panel buffer (starting
/// at `w`): panels spread over rayon's threads, each done [`ROWS`] rows per gemm call.
///
/// # Safety
/// `x` must be valid for its strided (N, I) extent, `w` for O·I reads and `dst` for N·O
/// writes (initialised when `acc`), not aliasing the inputs.
pub unsafe fn product(
    (n, i, o): (usize, usize, usize),
    dst: *mut f32,
    acc: bool,
    x: Operand,
    w: *const f32,
) {
    struct Shared(*mut f32, *const f32, *const f32);
    // SAFETY: each task writes only its own panel's columns of dst; the inputs are only read.
    unsafe impl Sync for Shared {}
    let s = Shared(dst, w, x.ptr);
    let s = &s;
    (0..o / WIDTH).into_par_iter().for_each(|p| {
        for r in (0..n).step_by(ROWS) {
            let rows = ROWS.min(n - r);
            // SAFETY: the caller vouches for the extents; (r, p) picks rows r.. of x and dst
            // and panel p (I × 64 row-major) of the buffer.
            unsafe {
                gemm::gemm(
                    rows,
                    WIDTH,
                    i,
                    s.0.add(r * o + p * WIDTH),
                    1,
                    o as isize,
                    acc,
                    s.2.add(r * x.rs),
                    x.cs as isize,
                    x.rs as isize,
                    s.1.add(p * i * WIDTH),
                    1,
                    WIDTH as isize,
                    1.0,
                    1.0,
                    false,
                    false,
                    false,
                    Parallelism::None,
                )
            }
        }
    });
}

/// The (O/64, I, 64) panel buffer of a weight given as (I, O) row-major values, placed by
/// [`index`] (the store places its values the same way as it draws or reads them).
#[cfg(test)]
pub fn panelled(w_io: &[f32], i_len: usize, o_len: usize) -> Tensor {
    let mut buf = vec![0f32; w_io.len()];
    for i in 0..i_len {
        for o in 0..o_len {
            buf[index(i, o, i_len)] = w_io[i * o_len + o];
        }
    }
    Tensor::from_vec(
        buf,
        (o_len / WIDTH, i_len, WIDTH),
        &candle_core::Device::Cpu,
    )
    .unwrap()
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    #[test]
    fn views_hold_the_weight_and_are_recognised_only_for_their_layout() {
        let (i, o) = (5, 128);
        let w: Vec<f32> = (0..i * o).map(|v| v as f32).collect(); // (I, O)
        let buf = panelled(&w, i, o);
        let lin = view(buf.clone(), true).unwrap();
        let conv = view(buf, false).unwrap();
        let w_io = Tensor::from_vec(w, (i, o), &Device::Cpu).unwrap();
        let as_oi = lin.contiguous().unwrap().reshape((o, i)).unwrap();
        assert_eq!(
            as_oi.to_vec2::<f32>().unwrap(),
            w_io.t().unwrap().to_vec2::<f32>().unwrap()
        );
        let as_io = conv.contiguous().unwrap().reshape((i, o)).unwrap();
        assert_eq!(
            as_io.to_vec2::<f32>().unwrap(),
            w_io.to_vec2::<f32>().unwrap()
        );
        assert_eq!(recognise(lin.layout(), true), Some((i, o)));
        assert_eq!(recognise(conv.layout(), false), Some((i, o)));
        assert_eq!(recognise(lin.layout(), false), None);
        assert_eq!(recognise(conv.layout(), true), None);
        assert_eq!(recognise(w_io.layout(), false), None);
    }

    #[test]
    fn only_whole_panels_fit() {
        assert!(fits(64) && fits(32000) && !fits(0) && !fits(50257) && !fits(32));
    }
}
