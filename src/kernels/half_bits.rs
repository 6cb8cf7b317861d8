//! bf16 ↔ f32 as branch-free bit operations, and whole slices converted 8 lanes wide on every
//! thread. `half`'s own conversions branch on NaN per element, which keeps every loop that
//! calls them scalar: with no bf16 dot products (every AVX2-only CPU, or
//! `MEMSCOPE_BF16_DOT=0`) they were 7–8% of a bf16 training step's samples. The results are
//! bit-identical to `half`'s (round to nearest even, NaN kept quiet); the tests check it.

use super::simd::vector;
use half::{bf16, f16};
use rayon::prelude::*;

/// Elements per parallel task (and per `vector` call).
const CHUNK: usize = 16_384;

/// bf16 → f32: the bits moved up 16 (a NaN gets its quiet bit, as `half` does).
#[inline(always)]
pub fn bf16_to_f32(h: bf16) -> f32 {
    let i = h.to_bits() as u32;
    let quiet = if i & 0x7fff > 0x7f80 { 0x0040 } else { 0 };
    f32::from_bits((i | quiet) << 16)
}

/// f32 → bf16, rounded to nearest even (a NaN keeps its top mantissa bits and gets its quiet
/// bit, as `half` does). The rounding sum wraps only for NaN patterns (the largest non-NaN
/// one, -inf, is 0xff80_0000), whose sum is discarded.
#[inline(always)]
pub fn f32_to_bf16(x: f32) -> bf16 {
    let x = x.to_bits();
    let rounded = x.wrapping_add(0x7fff + ((x >> 16) & 1)) >> 16;
    let nan = (x >> 16) | 0x0040;
    bf16::from_bits(if x & 0x7fff_ffff > 0x7f80_0000 {
        nan
    } else {
        rounded
    } as u16)
}

/// An element gemm's f32 products can read once widened: f32 itself, bf16, f16.
pub trait Widen: Copy + Send + Sync + 'static {
    fn widen(self) -> f32;
}

impl Widen for f32 {
    #[inline(always)]
    fn widen(self) -> f32 {
        self
    }
}

impl Widen for bf16 {
    #[inline(always)]
    fn widen(self) -> f32 {
        bf16_to_f32(self)
    }
}

impl Widen for f16 {
    #[inline(always)]
    fn widen(self) -> f32 {
        self.to_f32()
    }
}

/// An element f32 results are stored as: rounded once.
pub trait Narrow: Widen {
    fn narrow(x: f32) -> Self;
}

impl Narrow for f32 {
    #[inline(always)]
    fn narrow(x: f32) -> f32 {
        x
    }
}

impl Narrow for bf16 {
    #[inline(always)]
    fn narrow(x: f32) -> bf16 {
        f32_to_bf16(x)
    }
}

impl Narrow for f16 {
    #[inline(always)]
    fn narrow(x: f32) -> f16 {
        f16::from_f32(x)
    }
}

/// dst = src widened to f32, on every thread (equal lengths).
pub fn widen_into<T: Widen>(src: &[T], dst: &mut [f32]) {
    assert_eq!(src.len(), dst.len(), "widen_into: lengths differ");
    dst.par_chunks_mut(CHUNK)
        .zip(src.par_chunks(CHUNK))
        .for_each(|(d, s)| {
            vector(
                #[inline(always)]
                || d.iter_mut().zip(s).for_each(|(d, s)| *d = s.widen()),
            )
        });
}

/// dst = src rounded to `T`, on every thread (equal lengths).
pub fn narrow_into<T: Narrow>(src: &[f32], dst: &mut [T]) {
    assert_eq!(src.len(), dst.len(), "narrow_into: lengths differ");
    dst.par_chunks_mut(CHUNK)
        .zip(src.par_chunks(CHUNK))
        .for_each(|(d, s)| {
            vector(
                #[inline(always)]
                || d.iter_mut().zip(s).for_each(|(d, &s)| *d = T::narrow(s)),
            )
        });
}

/// `src` widened to a new f32 vector.
pub fn widened_vec<T: Widen>(src: &[T]) -> Vec<f32> {
    let mut out = vec![0f32; src.len()];
    widen_into(src, &mut out);
    out
}

/// `src` rounded to a new vector of `T`.
pub fn narrowed_vec<T: Narrow + Default>(src: &[f32]) -> Vec<T> {
    let mut out = vec![T::default(); src.len()];
    narrow_into(src, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_bf16_widens_to_the_same_bits_as_half() {
        for i in 0..=u16::MAX {
            let h = bf16::from_bits(i);
            assert_eq!(
                bf16_to_f32(h).to_bits(),
                h.to_f32().to_bits(),
                "bf16 {i:#06x}"
            );
        }
    }

    #[test]
    fn f32s_narrow_to_the_same_bf16_as_half() {
        // Every 241st bit pattern (17.8 M of them: all exponents, signs, NaNs), and around the
        // rounding point of every upper half: ties to even and odd, one below, one above.
        let sampled = (0..=u32::MAX).step_by(241);
        let edges = (0..=u16::MAX as u32)
            .flat_map(|hi| [0x0000, 0x7fff, 0x8000, 0x8001, 0xffff].map(move |lo| (hi << 16) | lo));
        for x in sampled.chain(edges) {
            let f = f32::from_bits(x);
            assert_eq!(
                f32_to_bf16(f).to_bits(),
                bf16::from_f32(f).to_bits(),
                "f32 {x:#010x}"
            );
        }
    }

    #[test]
    fn slices_convert_like_elements_at_any_length() {
        for n in [0, 1, 7, 8, 9, CHUNK - 1, CHUNK, CHUNK + 3, 3 * CHUNK + 5] {
            let xs: Vec<f32> = (0..n).map(|i| (i as f32 * 0.731).sin() * 1e3).collect();
            let b: Vec<bf16> = narrowed_vec(&xs);
            let h: Vec<f16> = narrowed_vec(&xs);
            assert!(b.iter().zip(&xs).all(|(b, &x)| *b == bf16::from_f32(x)));
            assert!(h.iter().zip(&xs).all(|(h, &x)| *h == f16::from_f32(x)));
            let back = widened_vec(&b);
            assert!(back.iter().zip(&b).all(|(w, b)| *w == b.to_f32()));
            let back = widened_vec(&h);
            assert!(back.iter().zip(&h).all(|(w, h)| *w == h.to_f32()));
        }
    }
}
