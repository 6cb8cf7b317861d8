//! bf16 × bf16 → f32 products on the CPU's bf16 dot-product instruction (AVX-512 BF16,
//! `vdpbf16ps`: 32 bf16 multiply-adds per instruction into 16 f32 sums, twice an f32 FMA's).
//!
//! gemm 0.19 has no bf16 kernel, so before this a bf16 product widened its operands to f32 and
//! ran at f32's rate: bf16 training could only be slower than f32. On the AVX-512 machine
//! (AMD EPYC, Zen 4, 2 cores) this kernel runs the linear layers' shapes at 260–335 GFLOP/s
//! where gemm's f32 kernel peaks at ~205 (`cargo bench --bench kernels -- bf16`).
//!
//! Layout (BLIS-style): for each block of [`NC`] columns and [`KC`] inner elements, the right
//! operand is packed into strips of [`NR`] columns, each inner pair (k, k+1) of a column one
//! u32 (the first element in the low half, as `vdpbf16ps` pairs them); for each block of
//! [`MC`] rows the left operand is packed into panels of [`MR`] rows the same way. The
//! microkernel keeps an MR × NR f32 tile in 24 registers, broadcasting one pair of the left
//! panel against two 16-column vectors of the right strip per step. Tasks are (strip, group of
//! panels), at least two per thread where the block has that many tiles (strips alone left
//! threads idle: gpt2-small's 768 columns are 24 strips, one and a half rounds of 16 threads).
//! Products accumulate in f32; each sum of a pair is rounded once (the instruction's
//! round-to-nearest-even, denormal inputs read as zero): within bf16's tolerance of the f32
//! product, which the tests check.
//!
//! CPUs without AVX-512 BF16 (every AVX2-only one) keep the widening path
//! (`product::product_widening`); `MEMSCOPE_BF16_DOT=0` forces it, to compare the two.
//! CPUs with AMX (`kernels::amx_tiles`) run [`product`] on the tile unit (`kernels::amx_bf16`)
//! instead; `MEMSCOPE_AMX=0` keeps this kernel there.

use super::pairs::{pair_major, Shared};
use super::product::Strided;
use super::{amx_bf16, amx_tiles};
use half::bf16;
use rayon::prelude::*;
use std::sync::OnceLock;

/// Rows of the left operand per microkernel tile.
const MR: usize = 12;
/// Columns of the right operand per microkernel tile (two 16-lane vectors).
const NR: usize = 32;
/// Inner elements per packed block (even: pairs never straddle two blocks).
const KC: usize = 256;
/// Rows of the left operand per packed block.
const MC: usize = 384;
/// Columns of the right operand per packed block.
const NC: usize = 2048;

/// Whether bf16 products run on the dot-product instruction: the CPU has AVX-512 F and BF16
/// and `MEMSCOPE_BF16_DOT` is not `0` (checked once per process).
pub fn available() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| cpu_has_it() && std::env::var("MEMSCOPE_BF16_DOT").as_deref() != Ok("0"))
}

/// Whether this CPU has the bf16 dot-product instruction and this build may use it (the
/// `avx512` cargo feature, on by default).
pub fn cpu_has_it() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        cfg!(feature = "avx512")
            && std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512bf16")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Bytes of the packing buffers [`product`] allocates for the duration of a product of
/// `(m, n, k)` (both alive together).
pub fn scratch_bytes((m, n, k): (usize, usize, usize)) -> u64 {
    if amx_tiles::available() {
        return amx_bf16::scratch_bytes((m, n, k));
    }
    scratch_bytes_vector((m, n, k))
}

/// Bytes of the packing buffers [`product_vector`] allocates (what [`scratch_bytes`] is on a
/// CPU without AMX tiles).
fn scratch_bytes_vector((m, n, k): (usize, usize, usize)) -> u64 {
    let kp = KC.min(k).div_ceil(2);
    let cols = NC.min(n).div_ceil(NR) * NR;
    let rows = MC.min(m).div_ceil(MR) * MR;
    (kp * (cols + rows) * 4) as u64
}

/// dst (m, n) with row stride `dst_rs` = beta · lhs (m, k) · rhs (k, n), plus dst when `acc`,
/// both operands bf16, in f32: on AMX tiles where the CPU has them, else on this kernel.
///
/// # Safety
/// [`available`] must be true; every operand must be valid for the strided (m, k), (k, n) and
/// (m, n) extents it is given, and `dst` must not alias the operands.
#[allow(clippy::too_many_arguments)]
pub unsafe fn product(
    (m, n, k): (usize, usize, usize),
    dst: *mut f32,
    dst_rs: usize,
    acc: bool,
    lhs: Strided<bf16>,
    rhs: Strided<bf16>,
    beta: f32,
) {
    if amx_tiles::available() {
        return amx_bf16::product((m, n, k), dst, dst_rs, acc, lhs, rhs, beta);
    }
    product_vector((m, n, k), dst, dst_rs, acc, lhs, rhs, beta)
}

/// [`product`] on this kernel even where the CPU has AMX (`memscope peaks` times both).
///
/// # Safety
/// As [`product`].
#[allow(clippy::too_many_arguments)]
pub unsafe fn product_vector(
    (m, n, k): (usize, usize, usize),
    dst: *mut f32,
    dst_rs: usize,
    acc: bool,
    lhs: Strided<bf16>,
    rhs: Strided<bf16>,
    beta: f32,
) {
    assert!(available(), "bf16 dot products need AVX-512 BF16");
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        if !acc {
            for r in 0..m {
                std::slice::from_raw_parts_mut(dst.add(r * dst_rs), n).fill(0.0);
            }
        }
        return;
    }
    let kp_max = KC.min(k).div_ceil(2);
    let mut packed_rhs = vec![0u32; kp_max * NC.min(n).div_ceil(NR) * NR]; // [strip][pair][NR]
    let mut packed_lhs = vec![0u32; kp_max * MC.min(m).div_ceil(MR) * MR]; // [panel][pair][MR]
    let (lhs, rhs_t, dst) = (Shared(lhs), Shared(rhs.t()), Shared(dst));
    let threads = rayon::current_num_threads();
    for jc in (0..n).step_by(NC) {
        let nc = NC.min(n - jc);
        let strips = nc.div_ceil(NR);
        for pc in (0..k).step_by(KC) {
            let kc = KC.min(k - pc);
            let kp = kc.div_ceil(2);
            packed_rhs[..strips * kp * NR]
                .par_chunks_mut(kp * NR)
                .enumerate()
                .for_each(|(s, out)| {
                    let r0 = jc + s * NR;
                    pair_major::<NR>(rhs_t.get(), (r0, NR.min(nc - s * NR)), (pc, kc), kp, out)
                });
            for ic in (0..m).step_by(MC) {
                let mc = MC.min(m - ic);
                let panels = mc.div_ceil(MR);
                packed_lhs[..panels * kp * MR]
                    .par_chunks_mut(kp * MR)
                    .enumerate()
                    .for_each(|(q, out)| {
                        pair_major::<MR>(
                            lhs.get(),
                            (ic + q * MR, MR.min(mc - q * MR)),
                            (pc, kc),
                            kp,
                            out,
                        )
                    });
                let (a, b) = (Shared(packed_lhs.as_ptr()), Shared(packed_rhs.as_ptr()));
                let first = pc == 0 && !acc;
                let per = panels.div_ceil((2 * threads).div_ceil(strips)).max(1);
                let groups = panels.div_ceil(per);
                (0..strips * groups).into_par_iter().for_each(|t| {
                    let (s, g) = (t / groups, t % groups);
                    let mut tile = [0f32; MR * NR];
                    let cols = NR.min(nc - s * NR);
                    for q in g * per..(g * per + per).min(panels) {
                        micro(
                            kp,
                            a.get().add(q * kp * MR),
                            b.get().add(s * kp * NR),
                            &mut tile,
                        );
                        for (rr, t) in tile.chunks(NR).take(MR.min(mc - q * MR)).enumerate() {
                            let row = dst.get().add((ic + q * MR + rr) * dst_rs + jc + s * NR);
                            let o = std::slice::from_raw_parts_mut(row, cols);
                            if first {
                                o.iter_mut().zip(t).for_each(|(o, &v)| *o = beta * v);
                            } else {
                                o.iter_mut().zip(t).for_each(|(o, &v)| *o += beta * v);
                            }
                        }
                    }
                });
            }
        }
    }
}

/// tile (MR, NR) = Σ over kp pairs of a panel (pair, MR) · b strip (pair, NR).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bf16")]
unsafe fn micro(kp: usize, a: *const u32, b: *const u32, tile: &mut [f32; MR * NR]) {
    use std::arch::x86_64::*;
    let mut lo = [_mm512_setzero_ps(); MR]; // columns 0..16
    let mut hi = [_mm512_setzero_ps(); MR]; // columns 16..32
    for p in 0..kp {
        // SAFETY: 32 u32 of the strip at pair p; __m512i and __m512bh are the same 64 bytes.
        let b0: __m512bh = std::mem::transmute(_mm512_loadu_si512(b.add(p * NR) as *const _));
        let b1: __m512bh = std::mem::transmute(_mm512_loadu_si512(b.add(p * NR + 16) as *const _));
        let ap = a.add(p * MR);
        for r in 0..MR {
            let av: __m512bh = std::mem::transmute(_mm512_set1_epi32(*ap.add(r) as i32));
            lo[r] = _mm512_dpbf16_ps(lo[r], av, b0);
            hi[r] = _mm512_dpbf16_ps(hi[r], av, b1);
        }
    }
    for r in 0..MR {
        _mm512_storeu_ps(tile.as_mut_ptr().add(r * NR), lo[r]);
        _mm512_storeu_ps(tile.as_mut_ptr().add(r * NR + 16), hi[r]);
    }
}

#[cfg(not(target_arch = "x86_64"))]
unsafe fn micro(_: usize, _: *const u32, _: *const u32, _: &mut [f32; MR * NR]) {
    unreachable!("available() is false off x86-64")
}

#[cfg(test)]
mod tests {
    use super::super::check;
    use super::*;

    #[test]
    fn products_equal_the_exact_sum_in_every_layout_or_the_cpu_lacks_the_instruction() {
        let flags = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let has = cfg!(feature = "avx512")
            && flags.contains(" avx512f")
            && flags.contains(" avx512_bf16");
        assert_eq!(
            cpu_has_it(),
            has,
            "feature detection disagrees with /proc/cpuinfo"
        );
        if !available() {
            // The linear kernel then takes the widening path, which its own tests check.
            assert!(!has || std::env::var("MEMSCOPE_BF16_DOT").as_deref() == Ok("0"));
            return;
        }
        // Odd sizes: partial panels, strips and pair, two inner blocks, two row blocks. This
        // kernel, and what the linear layers call (AMX tiles where the CPU has them).
        let mnk = (MC + 29, NR * 3 + 5, KC + 37);
        check::bf16_product(product_vector, "avx512_bf16", mnk);
        check::bf16_product(product, "dispatched", mnk);
    }

    #[test]
    fn scratch_is_two_packed_blocks() {
        assert_eq!(
            scratch_bytes_vector((256, 768, 768)),
            (128 * (768 + 264) * 4) as u64
        );
        assert_eq!(scratch_bytes_vector((1, 1, 1)), (32 + 12) * 4);
        // What the linear layers allocate follows the kernel they run (on an AMX CPU, the tiles').
        let mnk = (256, 768, 768);
        let dispatched = if amx_tiles::available() {
            amx_bf16::scratch_bytes(mnk)
        } else {
            scratch_bytes_vector(mnk)
        };
        assert_eq!(scratch_bytes(mnk), dispatched);
    }
}
