//! Eight adjacent f32 (or bf16) columns copied into row-major f32 order with AVX2: each step
//! loads eight 8-element column pieces (bf16 ones widened in registers), transposes the 8×8
//! block in registers (unpack, shuffle, lane permute) and stores eight 8-element row pieces.
//! `kernels::product` copies a column-major right operand into its tile with it; element by
//! element that copy cost about as much as 15% of the product's own time at 256 rows.

use super::half_bits::bf16_to_f32;
use super::simd::has_avx2;
use half::bf16;

/// out[kk · b + r] = cols[r][kk] for kk < c, r < 8.
///
/// # Safety
/// Each `cols[r]` must be valid for `c` reads (any alignment) and `out` for writes at the
/// offsets above.
pub unsafe fn columns8(cols: &[*const f32; 8], c: usize, out: *mut f32, b: usize) {
    #[cfg(target_arch = "x86_64")]
    if has_avx2() {
        return avx2(cols, c, out, b);
    }
    scalar(cols, 0, c, out, b, |x| x);
}

/// [`columns8`] for bf16 columns, widened to f32 on the way (bit-identical to
/// `half_bits::bf16_to_f32`).
///
/// # Safety
/// As [`columns8`].
pub unsafe fn columns8_bf16(cols: &[*const bf16; 8], c: usize, out: *mut f32, b: usize) {
    #[cfg(target_arch = "x86_64")]
    if has_avx2() {
        return avx2_bf16(cols, c, out, b);
    }
    scalar(cols, 0, c, out, b, bf16_to_f32);
}

unsafe fn scalar<T: Copy>(
    cols: &[*const T; 8],
    from: usize,
    c: usize,
    out: *mut f32,
    b: usize,
    widen: impl Fn(T) -> f32,
) {
    for kk in from..c {
        for (r, col) in cols.iter().enumerate() {
            // Unaligned: `kernels::pairs` passes bf16 rows read as pairs (2-byte aligned).
            *out.add(kk * b + r) = widen(col.add(kk).read_unaligned());
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn avx2(cols: &[*const f32; 8], c: usize, out: *mut f32, b: usize) {
    use std::arch::x86_64::*;
    blocks(
        c,
        out,
        b,
        #[inline(always)]
        |j, kk| _mm256_loadu_ps(cols[j].add(kk)),
    );
    scalar(cols, c - c % 8, c, out, b, |x| x);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn avx2_bf16(cols: &[*const bf16; 8], c: usize, out: *mut f32, b: usize) {
    use std::arch::x86_64::*;
    let (mantissa, inf, quiet) = (
        _mm256_set1_epi32(0x7fff),
        _mm256_set1_epi32(0x7f80),
        _mm256_set1_epi32(0x0040),
    );
    blocks(
        c,
        out,
        b,
        #[inline(always)]
        |j, kk| {
            // 8 bf16 → 8 u32; a NaN gets its quiet bit; moved up 16 bits.
            let i = _mm256_cvtepu16_epi32(_mm_loadu_si128(cols[j].add(kk) as *const __m128i));
            let nan = _mm256_cmpgt_epi32(_mm256_and_si256(i, mantissa), inf);
            let i = _mm256_or_si256(i, _mm256_and_si256(nan, quiet));
            _mm256_castsi256_ps(_mm256_slli_epi32::<16>(i))
        },
    );
    scalar(cols, c - c % 8, c, out, b, bf16_to_f32);
}

/// The whole 8 × 8 blocks: `load(j, kk)` gives column j's elements kk..kk + 8 as f32.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn blocks(
    c: usize,
    out: *mut f32,
    b: usize,
    load: impl Fn(usize, usize) -> std::arch::x86_64::__m256,
) {
    use std::arch::x86_64::*;
    let whole = c - c % 8;
    for kk in (0..whole).step_by(8) {
        // Written out: `array::from_fn`'s closure stays out of line, compiled without AVX2.
        let r: [__m256; 8] = [
            load(0, kk),
            load(1, kk),
            load(2, kk),
            load(3, kk),
            load(4, kk),
            load(5, kk),
            load(6, kk),
            load(7, kk),
        ];
        // Pairs of columns interleaved, then pairs of pairs, then the 128-bit halves.
        let t0 = _mm256_unpacklo_ps(r[0], r[1]);
        let t1 = _mm256_unpackhi_ps(r[0], r[1]);
        let t2 = _mm256_unpacklo_ps(r[2], r[3]);
        let t3 = _mm256_unpackhi_ps(r[2], r[3]);
        let t4 = _mm256_unpacklo_ps(r[4], r[5]);
        let t5 = _mm256_unpackhi_ps(r[4], r[5]);
        let t6 = _mm256_unpacklo_ps(r[6], r[7]);
        let t7 = _mm256_unpackhi_ps(r[6], r[7]);
        let u0 = _mm256_shuffle_ps::<0x44>(t0, t2);
        let u1 = _mm256_shuffle_ps::<0xEE>(t0, t2);
        let u2 = _mm256_shuffle_ps::<0x44>(t1, t3);
        let u3 = _mm256_shuffle_ps::<0xEE>(t1, t3);
        let u4 = _mm256_shuffle_ps::<0x44>(t4, t6);
        let u5 = _mm256_shuffle_ps::<0xEE>(t4, t6);
        let u6 = _mm256_shuffle_ps::<0x44>(t5, t7);
        let u7 = _mm256_shuffle_ps::<0xEE>(t5, t7);
        let rows = [
            _mm256_permute2f128_ps::<0x20>(u0, u4),
            _mm256_permute2f128_ps::<0x20>(u1, u5),
            _mm256_permute2f128_ps::<0x20>(u2, u6),
            _mm256_permute2f128_ps::<0x20>(u3, u7),
            _mm256_permute2f128_ps::<0x31>(u0, u4),
            _mm256_permute2f128_ps::<0x31>(u1, u5),
            _mm256_permute2f128_ps::<0x31>(u2, u6),
            _mm256_permute2f128_ps::<0x31>(u3, u7),
        ];
        for (i, row) in rows.into_iter().enumerate() {
            _mm256_storeu_ps(out.add((kk + i) * b), row);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eight_columns_land_in_rows_at_every_tail_length() {
        for c in [0, 1, 7, 8, 9, 16, 29] {
            let b = 11; // the output row is wider than the eight columns written
            let src: Vec<Vec<f32>> = (0..8)
                .map(|r| (0..c).map(|kk| (r * 100 + kk) as f32).collect())
                .collect();
            let cols: [*const f32; 8] = std::array::from_fn(|r| src[r].as_ptr());
            let mut out = vec![-1f32; c * b];
            // SAFETY: each column has c elements; out has c rows of b ≥ 8.
            unsafe { columns8(&cols, c, out.as_mut_ptr(), b) };
            // The same values rounded to bf16, plus a NaN and an infinity, through the bf16
            // path.
            let mut src16: Vec<Vec<bf16>> = src
                .iter()
                .map(|col| col.iter().map(|&x| bf16::from_f32(x)).collect())
                .collect();
            if c > 3 {
                src16[2][3] = bf16::from_bits(0x7f81); // a signalling NaN
                src16[5][c - 1] = bf16::INFINITY;
            }
            let cols16: [*const bf16; 8] = std::array::from_fn(|r| src16[r].as_ptr());
            let mut out16 = vec![-1f32; c * b];
            // SAFETY: as above.
            unsafe { columns8_bf16(&cols16, c, out16.as_mut_ptr(), b) };
            for kk in 0..c {
                for r in 0..8 {
                    let want = src16[r][kk].to_f32().to_bits();
                    assert_eq!(
                        out16[kk * b + r].to_bits(),
                        want,
                        "bf16 c {c} kk {kk} r {r}"
                    );
                }
            }
            for kk in 0..c {
                for r in 0..b {
                    let want = if r < 8 { (r * 100 + kk) as f32 } else { -1.0 };
                    assert_eq!(out[kk * b + r], want, "c {c} kk {kk} r {r}");
                }
            }
        }
    }
}
