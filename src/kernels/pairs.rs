//! bf16 operands packed the way both bf16 product kernels read them: each inner pair
//! (k, k+1) of a row one u32, the first element in the low half (the pairing of AVX-512 BF16's
//! `vdpbf16ps` and of AMX's `tdpbf16ps`). Two layouts: pair-major panels ([`pair_major`],
//! `[pair][row]`, what `dot_bf16` broadcasts from and both kernels' right-operand strips) and
//! row-major panels ([`row_major`], `[row][pair]`, the rows an AMX tile loads).

use super::product::Strided;
use super::transpose;
use half::bf16;

/// A raw pointer shared by the tasks of one product.
#[derive(Clone, Copy)]
pub struct Shared<T>(pub T);
// SAFETY: the kernels only read their operands, and each task writes only its own part of dst.
unsafe impl<T> Send for Shared<T> {}
unsafe impl<T> Sync for Shared<T> {}

impl<T: Copy> Shared<T> {
    /// The value (a method, so that closures capture the whole `Shared`, not its field).
    pub fn get(self) -> T {
        self.0
    }
}

/// The (row, pair) value of x over rows r0.. and inner elements pc.. (an odd last element
/// paired with zero).
///
/// # Safety
/// x must be valid for that row and the pair's elements below `pc + kc`.
#[inline(always)]
unsafe fn pair_at(x: Strided<bf16>, base: *const u16, rr: usize, p: usize, kc: usize) -> u32 {
    let row = base.add(rr * x.rs);
    let lo = *row.add(2 * p * x.cs) as u32;
    if 2 * p + 1 < kc {
        lo | (*row.add((2 * p + 1) * x.cs) as u32) << 16
    } else {
        lo
    }
}

/// out [pair][R] = rows r0 .. r0 + valid of x (R of them, the rest zeros) over the inner
/// elements pc .. pc + kc, ⌈kc / 2⌉ pairs followed by zero pairs up to `pairs`.
///
/// # Safety
/// x must be valid for those rows and inner elements; out holds `pairs · R` values and
/// `pairs ≥ ⌈kc / 2⌉`.
pub unsafe fn pair_major<const R: usize>(
    x: Strided<bf16>,
    (r0, valid): (usize, usize),
    (pc, kc): (usize, usize),
    pairs: usize,
    out: &mut [u32],
) {
    let (kp, full) = (kc.div_ceil(2), kc / 2);
    let base = (x.ptr as *const u16).add(r0 * x.rs + pc * x.cs);
    if x.cs == 1 {
        // A row's pairs are adjacent u32: the panel is their transpose, eight rows at a time
        // through AVX2 register transposes (the bits moved as f32, never computed on); the
        // lm head's (V, C) weight is packed this way on every bf16 forward.
        let eights = valid - valid % 8;
        for r8 in (0..eights).step_by(8) {
            let rows: [*const f32; 8] =
                std::array::from_fn(|j| base.add((r8 + j) * x.rs) as *const f32);
            transpose::columns8(&rows, full, out.as_mut_ptr().add(r8) as *mut f32, R);
        }
        for rr in eights..valid {
            let row = base.add(rr * x.rs);
            for p in 0..full {
                *out.get_unchecked_mut(p * R + rr) =
                    (row.add(2 * p) as *const u32).read_unaligned();
            }
        }
    } else if x.rs == 1 {
        // The rows are adjacent: each pair of inner elements is two runs of `valid` values,
        // interleaved (a loop the compiler vectorises; the weights of bf16 forward products
        // and dyᵀ of backward ones are packed here, once per product).
        for p in 0..full {
            let lo = std::slice::from_raw_parts(base.add(2 * p * x.cs), valid);
            let hi = std::slice::from_raw_parts(base.add((2 * p + 1) * x.cs), valid);
            let o = &mut out[p * R..p * R + valid];
            for ((o, &l), &h) in o.iter_mut().zip(lo).zip(hi) {
                *o = l as u32 | (h as u32) << 16;
            }
        }
    } else {
        for p in 0..full {
            let o = &mut out[p * R..p * R + valid];
            for (rr, o) in o.iter_mut().enumerate() {
                *o = pair_at(x, base, rr, p, kc);
            }
        }
    }
    if kp > full {
        for rr in 0..valid {
            out[full * R + rr] = pair_at(x, base, rr, full, kc);
        }
    }
    if valid < R {
        for p in 0..kp {
            out[p * R + valid..p * R + R].fill(0);
        }
    }
    out[kp * R..pairs * R].fill(0);
}

/// out [row][pairs] = rows r0 .. r0 + valid of x (R of them, the rest zeros) over the inner
/// elements pc .. pc + kc, each row ⌈kc / 2⌉ pairs followed by zero pairs up to `pairs`.
///
/// # Safety
/// As [`pair_major`]; out holds `R · pairs` values.
pub unsafe fn row_major<const R: usize>(
    x: Strided<bf16>,
    (r0, valid): (usize, usize),
    (pc, kc): (usize, usize),
    pairs: usize,
    out: &mut [u32],
) {
    let kp = kc.div_ceil(2);
    let base = (x.ptr as *const u16).add(r0 * x.rs + pc * x.cs);
    if x.rs == 1 && x.cs != 1 {
        // The rows are adjacent (a transposed operand, dyᵀ of a weight gradient): read each
        // inner element's `valid` rows as one run, scatter the pairs into the rows.
        out[..R * pairs].fill(0);
        for p in 0..kp {
            let lo = std::slice::from_raw_parts(base.add(2 * p * x.cs), valid);
            let hi = (2 * p + 1 < kc)
                .then(|| std::slice::from_raw_parts(base.add((2 * p + 1) * x.cs), valid));
            for (rr, &l) in lo.iter().enumerate() {
                let h = hi.map_or(0, |h| h[rr] as u32);
                *out.get_unchecked_mut(rr * pairs + p) = l as u32 | h << 16;
            }
        }
        return;
    }
    for (rr, o) in out.chunks_exact_mut(pairs).take(R).enumerate() {
        if rr >= valid {
            o.fill(0);
            continue;
        }
        if x.cs == 1 && kc % 2 == 0 {
            let row = base.add(rr * x.rs) as *const u32;
            for (p, o) in o[..kp].iter_mut().enumerate() {
                *o = row.add(p).read_unaligned();
            }
        } else {
            for (p, o) in o[..kp].iter_mut().enumerate() {
                *o = pair_at(x, base, rr, p, kc);
            }
        }
        o[kp..].fill(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_layouts_hold_the_same_pairs_zero_padded() {
        // A (5, 7) matrix row-major, column-major and neither (every other element of a
        // buffer): rows 1..4 of 5 packed into R = 4, inner 1..6 (odd: the last pair's high half
        // is zero).
        let v: Vec<bf16> = (0..70).map(|i| bf16::from_f32(i as f32 + 1.0)).collect();
        for (rs, cs) in [(7, 1), (1, 5), (2, 10)] {
            let x = Strided {
                ptr: v.as_ptr(),
                rs,
                cs,
            };
            let cm = (rs, cs);
            let at = |r: usize, c: usize| v[r * x.rs + c * x.cs].to_bits() as u32;
            let (mut pm, mut rm) = (vec![9u32; 5 * 4], vec![9u32; 4 * 5]);
            // SAFETY: rows 1..4 and inner 1..7 lie in the 5 × 7 view.
            unsafe {
                pair_major::<4>(x, (1, 3), (1, 5), 5, &mut pm);
                row_major::<4>(x, (1, 3), (1, 5), 5, &mut rm);
            }
            for r in 0..4 {
                for p in 0..5 {
                    let want = if r < 3 && p < 3 {
                        let hi = if p < 2 { at(1 + r, 2 + 2 * p) } else { 0 };
                        at(1 + r, 1 + 2 * p) | hi << 16
                    } else {
                        0
                    };
                    assert_eq!(pm[p * 4 + r], want, "pair-major {cm:?} ({r}, {p})");
                    assert_eq!(rm[r * 5 + p], want, "row-major {cm:?} ({r}, {p})");
                }
            }
        }
    }
}
