//! gemm over a right operand kept in column strips: the strip width gemm's microkernel reads in
//! place on this machine, and the product.
//!
//! Inside gemm, y (N, O) = x (N, I) · W (I, O) is Wᵀ times xᵀ: each microkernel call multiplies
//! a block of output features (64 with its AVX-512 kernels, 16 with its AVX2 one) by 6 rows over
//! the inner dimension, reading that many adjacent W values per inner step. From a row-major
//! (I, O) weight those values sit one row of O apart, so gemm first packs the weight into strips
//! of that width (every weight element copied once per product, before any arithmetic on it).
//! Kept as those strips already, a (O/w, I, w) buffer whose strip p holds columns
//! w·p … w·p + w − 1 of W (I, O) row-major, the weight is read in place: one gemm call per strip
//! and [`ROWS`] rows, with no packing. Two places keep weights so: an inference store
//! (`kernels::panels`, for its whole life) and the tile a transposed training weight is copied
//! through (`kernels::product`, for one product).
//!
//! Measured at 2 threads on the AMD EPYC (Zen 4, AVX-512) machine, GFLOP/s, gemm on the
//! row-major weight → 64-wide strips: (256, 2048) · (2048, 5632) 197–201 → 218–223; (256,
//! 5632) · (5632, 2048) 182–199 → 212–224; (256, 2048) · (2048, 32000) 198 → 214–223; (1024,
//! 768) · (768, 3072) 213–216 → 218. The AVX2 build (gemm's 16 × 6 FMA microkernel), same
//! machine, tinyllama-1.1b forward 1 × 256 through an inference store, interleaved: transposed
//! weight 3063–3284 ms, 32-wide strips 3103–3234, **16-wide 2830–2923**. Strips wider than 32
//! make gemm pack the rows of x once per strip (it packs its right operand when the left one
//! has over 2 × 16 rows), which is why 48, 72 and 96 wide strips were slower than none.
//! `MEMSCOPE_PANELS=0` turns strips off, for comparisons.
//!
//! Shape vocabulary: N rows, I in features, O out features, w the strip width.

use gemm::Parallelism;
use rayon::prelude::*;
use std::sync::OnceLock;

/// Out features per strip where gemm runs its AVX-512 kernels: the microkernel's 4 × 16 lanes.
pub const AVX512_WIDTH: usize = 64;

/// Out features per strip where gemm runs its AVX2 (FMA) kernel: its microkernel's 2 × 8
/// lanes. Measured faster than 32 wide (above).
pub const AVX2_WIDTH: usize = 16;

/// The strip widths a weight may be kept in.
pub const WIDTHS: [usize; 2] = [AVX2_WIDTH, AVX512_WIDTH];

/// Rows per gemm call. gemm packs its left operand (here the strip) whenever a call's other
/// side exceeds 8 × 6 = 48 columns on one thread (`lhs_packing_threshold_single_thread` × the
/// microkernel's 6 columns, on both ISAs), so 48 rows keep every call reading it in place.
const ROWS: usize = 48;

/// The strip width gemm reads in place on this machine, if any: 64 where gemm runs its AVX-512
/// kernels (the CPU has AVX-512F and memscope was built with the `avx512` feature), 16 where it
/// runs its AVX2 kernel, none elsewhere or when the environment sets `MEMSCOPE_PANELS=0`.
/// Decided once per process (the products inside a measured step ask for it, so it neither
/// reads the environment nor allocates there).
pub fn width() -> Option<usize> {
    static WIDTH: OnceLock<Option<usize>> = OnceLock::new();
    *WIDTH.get_or_init(machine_width)
}

fn machine_width() -> Option<usize> {
    #[cfg(target_arch = "x86_64")]
    {
        if std::env::var_os("MEMSCOPE_PANELS").is_some_and(|v| v == "0") {
            return None;
        }
        #[cfg(feature = "avx512")]
        if std::arch::is_x86_feature_detected!("avx512f") {
            return Some(AVX512_WIDTH);
        }
        // gemm's own test for its AVX2 kernel.
        if std::arch::is_x86_feature_detected!("fma") {
            return Some(AVX2_WIDTH);
        }
        None
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        None
    }
}

/// dst (N, O), row stride `dst_rs`, = x (N, I) · W [+ dst when `acc`], W a (O/w, I, w) strip
/// buffer starting at `w`; x given by its pointer and (row, column) strides. Strips are spread
/// over rayon's threads, each done [`ROWS`] rows per gemm call.
///
/// # Safety
/// `x` must be valid for its strided (N, I) extent, `w` for O·I reads and `dst` for its
/// strided (N, O) writes (initialised when `acc`), not aliasing the inputs; `o` a multiple of
/// `width`.
pub unsafe fn product(
    (n, i, o): (usize, usize, usize),
    width: usize,
    (dst, dst_rs): (*mut f32, usize),
    acc: bool,
    (x, x_rs, x_cs): (*const f32, usize, usize),
    w: *const f32,
) {
    struct Shared(*mut f32, *const f32, *const f32);
    // SAFETY: each task writes only its own strip's columns of dst; the inputs are only read.
    unsafe impl Sync for Shared {}
    let s = Shared(dst, w, x);
    let s = &s;
    (0..o / width).into_par_iter().for_each(|p| {
        for r in (0..n).step_by(ROWS) {
            let rows = ROWS.min(n - r);
            // SAFETY: the caller vouches for the extents; (r, p) picks rows r.. of x and dst
            // and strip p (I × width row-major) of the buffer.
            unsafe {
                gemm::gemm(
                    rows,
                    width,
                    i,
                    s.0.add(r * dst_rs + p * width),
                    1,
                    dst_rs as isize,
                    acc,
                    s.2.add(r * x_rs),
                    x_cs as isize,
                    x_rs as isize,
                    s.1.add(p * i * width),
                    1,
                    width as isize,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_machine_keeps_strips_its_gemm_kernel_reads_in_place() {
        let off = std::env::var_os("MEMSCOPE_PANELS").is_some_and(|v| v == "0");
        let avx512 = cfg!(feature = "avx512") && std::arch::is_x86_feature_detected!("avx512f");
        let want = if off {
            None
        } else if avx512 {
            Some(AVX512_WIDTH)
        } else if std::arch::is_x86_feature_detected!("fma") {
            Some(AVX2_WIDTH)
        } else {
            None
        };
        assert_eq!(width(), want);
    }

    /// Strips of both widths, 100 rows (two full calls and a partial one), into a wider dst.
    #[test]
    fn the_product_of_strips_is_the_product_of_the_weight() {
        let (n, i, o, dst_rs) = (100, 7, 64, 70);
        let x: Vec<f32> = (0..n * i)
            .map(|v| ((v * 5 % 13) as f32 - 6.0) / 4.0)
            .collect();
        let w_io: Vec<f32> = (0..i * o)
            .map(|v| ((v * 3 % 11) as f32 - 5.0) / 8.0)
            .collect();
        for width in WIDTHS {
            let mut buf = vec![0f32; i * o]; // (O/w, I, w)
            for (k, &v) in w_io.iter().enumerate() {
                let (ii, oo) = (k / o, k % o);
                buf[(oo / width) * i * width + ii * width + oo % width] = v;
            }
            let mut y = vec![1f32; n * dst_rs];
            // SAFETY: x is (n, i) row-major, buf holds i·o values, y is (n, dst_rs) ≥ (n, o).
            unsafe {
                product(
                    (n, i, o),
                    width,
                    (y.as_mut_ptr(), dst_rs),
                    true,
                    (x.as_ptr(), i, 1),
                    buf.as_ptr(),
                )
            };
            for r in 0..n {
                for c in 0..dst_rs {
                    let want = if c < o {
                        1.0 + (0..i).map(|k| x[r * i + k] * w_io[k * o + c]).sum::<f32>()
                    } else {
                        1.0
                    };
                    assert!(
                        (y[r * dst_rs + c] - want).abs() < 1e-4,
                        "width {width} ({r}, {c})"
                    );
                }
            }
        }
    }
}
