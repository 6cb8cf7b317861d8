//! bf16 × bf16 → f32 products on AMX tiles (`kernels::amx_tiles`): where the CPU has them,
//! the bf16 linear layers' products run here instead of on `dot_bf16`'s AVX-512 BF16 kernel.
//!
//! Layout: for each block of [`NC`] columns and [`KC`] inner elements the right operand is
//! packed into strips of 32 columns, pair-major (`[pair][32]`, as `dot_bf16` packs them: two
//! B tiles side by side, 128 bytes a pair); for each block of [`MC`] rows the left operand into
//! panels of 32 rows, row-major (`[row][pairs]`: two A tiles, one above the other). Pairs are
//! padded with zeros to a multiple of 16 (a tile's depth), rows and columns to 32. The
//! microkernel holds a 32 × 32 f32 block in four C tiles and, per 16 pairs, loads two A and two
//! B tiles and runs four `tdpbf16ps`. Tasks are (strip, group of panels), enough of them to
//! keep every thread busy; each configures its thread's tiles and releases them at the end.

use super::amx_tiles::{Hardware, Tiles, COLS, ROWS};
use super::pairs::{pair_major, row_major, Shared};
use super::product::Strided;
use half::bf16;
use rayon::prelude::*;

/// Rows of a panel and columns of a strip: two tiles each.
const B: usize = 2 * ROWS;
/// Inner elements per packed block (256 pairs: 16 tile depths).
const KC: usize = 512;
/// Rows of the left operand per packed block.
const MC: usize = 384;
/// Columns of the right operand per packed block.
const NC: usize = 2048;

/// Pairs of a packed block of `kc` inner elements: ⌈kc / 2⌉ rounded up to a tile's depth.
fn padded_pairs(kc: usize) -> usize {
    kc.div_ceil(2).div_ceil(COLS) * COLS
}

/// u32 per row of a left panel holding `kp` pairs: one 64-byte line more than the pairs, so
/// that the 16 rows a tile load reads, 1 KiB apart at a full block, do not all fall on the
/// same few L1 sets.
fn row_pitch(kp: usize) -> usize {
    kp + COLS
}

/// Bytes of the packing buffers [`product`] allocates for the duration of a product of
/// `(m, n, k)` (both alive together).
pub fn scratch_bytes((m, n, k): (usize, usize, usize)) -> u64 {
    let kp = padded_pairs(KC.min(k));
    let cols = NC.min(n).div_ceil(B) * B;
    let rows = MC.min(m).div_ceil(B) * B;
    ((kp * cols + row_pitch(kp) * rows) * 4) as u64
}

/// dst (m, n) with row stride `dst_rs` = beta · lhs (m, k) · rhs (k, n), plus dst when `acc`,
/// on the CPU's tile unit.
///
/// # Safety
/// `amx_tiles::available()` must be true; the operands as `dot_bf16::product` requires.
#[allow(clippy::too_many_arguments)]
pub unsafe fn product(
    mnk: (usize, usize, usize),
    dst: *mut f32,
    dst_rs: usize,
    acc: bool,
    lhs: Strided<bf16>,
    rhs: Strided<bf16>,
    beta: f32,
) {
    assert!(
        super::amx_tiles::available(),
        "AMX products need the tile unit"
    );
    product_on(|| Hardware::start(), mnk, dst, dst_rs, acc, lhs, rhs, beta)
}

/// The product on the tile unit `unit()` makes on each task's thread.
#[allow(clippy::too_many_arguments)]
unsafe fn product_on<T: Tiles>(
    unit: impl Fn() -> T + Sync,
    (m, n, k): (usize, usize, usize),
    dst: *mut f32,
    dst_rs: usize,
    acc: bool,
    lhs: Strided<bf16>,
    rhs: Strided<bf16>,
    beta: f32,
) {
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
    let kp_max = padded_pairs(KC.min(k));
    let mut packed_rhs = vec![0u32; kp_max * NC.min(n).div_ceil(B) * B]; // [strip][pair][B]
    let mut packed_lhs = vec![0u32; row_pitch(kp_max) * MC.min(m).div_ceil(B) * B]; // [panel][B][pitch]
    let (lhs, rhs_t, dst) = (Shared(lhs), Shared(rhs.t()), Shared(dst));
    let threads = rayon::current_num_threads();
    for jc in (0..n).step_by(NC) {
        let nc = NC.min(n - jc);
        let strips = nc.div_ceil(B);
        for pc in (0..k).step_by(KC) {
            let kc = KC.min(k - pc);
            let kp = padded_pairs(kc);
            packed_rhs[..strips * kp * B]
                .par_chunks_mut(kp * B)
                .enumerate()
                .for_each(|(s, out)| {
                    let cols = (jc + s * B, B.min(nc - s * B));
                    pair_major::<B>(rhs_t.get(), cols, (pc, kc), kp, out)
                });
            for ic in (0..m).step_by(MC) {
                let mc = MC.min(m - ic);
                let panels = mc.div_ceil(B);
                let pitch = row_pitch(kp);
                packed_lhs[..panels * pitch * B]
                    .par_chunks_mut(pitch * B)
                    .enumerate()
                    .for_each(|(q, out)| {
                        let rows = (ic + q * B, B.min(mc - q * B));
                        row_major::<B>(lhs.get(), rows, (pc, kc), pitch, out)
                    });
                let (a, b) = (Shared(packed_lhs.as_ptr()), Shared(packed_rhs.as_ptr()));
                let first = pc == 0 && !acc;
                // Enough tasks for every thread: split each strip's panels into groups.
                let per = panels.div_ceil((2 * threads).div_ceil(strips)).max(1);
                let groups = panels.div_ceil(per);
                (0..strips * groups).into_par_iter().for_each(|t| {
                    let (s, g) = (t / groups, t % groups);
                    let mut u = unit();
                    let mut tile = [0f32; B * B];
                    let cols = B.min(nc - s * B);
                    for q in g * per..(g * per + per).min(panels) {
                        micro(
                            &mut u,
                            kp,
                            (a.get().add(q * pitch * B), pitch),
                            b.get().add(s * kp * B),
                            &mut tile,
                        );
                        for (rr, t) in tile.chunks(B).take(B.min(mc - q * B)).enumerate() {
                            let row = dst.get().add((ic + q * B + rr) * dst_rs + jc + s * B);
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

/// tile (32, 32) = panel a (32 rows × kp pairs, row-major, rows `pitch` u32 apart) · strip b (kp pairs × 32 columns):
/// C tiles 0 1 / 2 3, A tiles 4 (rows 0–15) and 5 (rows 16–31), B tiles 6 (columns 0–15) and 7
/// (columns 16–31).
#[inline(always)]
unsafe fn micro<T: Tiles>(
    u: &mut T,
    kp: usize,
    (a, pitch): (*const u32, usize),
    b: *const u32,
    tile: &mut [f32; B * B],
) {
    u.zero::<0>();
    u.zero::<1>();
    u.zero::<2>();
    u.zero::<3>();
    let a_stride = pitch * 4; // bytes per panel row
    let b_stride = B * 4; // bytes per strip pair
    for p in (0..kp).step_by(COLS) {
        u.load::<4>(a.add(p), a_stride);
        u.load::<5>(a.add(ROWS * pitch + p), a_stride);
        u.load::<6>(b.add(p * B), b_stride);
        u.load::<7>(b.add(p * B + COLS), b_stride);
        u.dot::<0, 4, 6>();
        u.dot::<1, 4, 7>();
        u.dot::<2, 5, 6>();
        u.dot::<3, 5, 7>();
    }
    let (o, s) = (tile.as_mut_ptr(), B * 4);
    u.store::<0>(o, s);
    u.store::<1>(o.add(COLS), s);
    u.store::<2>(o.add(ROWS * B), s);
    u.store::<3>(o.add(ROWS * B + COLS), s);
}

#[cfg(test)]
mod tests {
    use super::super::amx_tiles::Model;
    use super::super::check;
    use super::super::product::Bf16Product;
    use super::*;

    #[test]
    fn products_equal_the_exact_sum_on_the_tile_model_and_on_amx_where_the_cpu_has_it() {
        // Odd sizes: partial panels, strips, pairs and tile depths; two inner blocks; two row
        // blocks.
        let mnk = (MC + 29, B * 3 + 5, KC + 37);
        // SAFETY (of the closure's body): the checker passes operands as `product` needs them.
        let on_model: Bf16Product = |mnk, dst, dst_rs, acc, lhs, rhs, beta| unsafe {
            product_on(Model::new, mnk, dst, dst_rs, acc, lhs, rhs, beta)
        };
        check::bf16_product(on_model, "software tile model", mnk);
        if super::super::amx_tiles::available() {
            check::bf16_product(product, "AMX", mnk);
            println!("AMX: the tile path checked on this CPU's tile unit and on the model");
        } else {
            println!(
                "no usable AMX ({}): the tile path checked on the software tile model only",
                super::super::amx_tiles::status().unwrap_or_else(|| "this CPU has none".into())
            );
        }
    }

    #[test]
    fn scratch_is_two_packed_blocks_of_whole_tiles() {
        // k 768 → a first block of 512 elements, 256 pairs; n 768 → 24 strips; m 256 → 8 panels.
        assert_eq!(
            scratch_bytes((256, 768, 768)),
            ((256 * 768 + 272 * 256) * 4) as u64
        );
        // Left panel rows one 16-pair line longer than their pairs.
        assert_eq!(scratch_bytes((1, 1, 1)), ((16 * 32 + 32 * 32) * 4) as u64);
    }
}
