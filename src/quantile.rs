//! Medians, percentiles and median absolute deviations: the one place memscope computes them.
//!
//! Three definitions of "the middle" are in use, each kept because files memscope writes (and the
//! leak verdict's calibrated rates) depend on its exact bits; they differ only in how an even count
//! settles between the two middle values:
//! - **Type 7** ([`percentile`], [`median`], [`mad`], [`mad_about`]): linear interpolation between
//!   order statistics, Hyndman & Fan (1996) type 7, the default of numpy and R:
//!   `h = (n − 1)·q`, `x[⌊h⌋] + (h − ⌊h⌋)·(x[⌊h⌋+1] − x[⌊h⌋])`, kept inside the two values and free
//!   of overflow. The median is the type-7 50th percentile. The timing statistics (`analysis::stats`),
//!   the bootstrap of a difference of medians and the HTML report's charts use it.
//! - **Midpoint** ([`midpoint_median_sorted`], [`midpoint_median`], [`median_in_place`],
//!   [`median_without_copy`], [`mad_sigma`]): the middle value, or `0.5·(a + b)` of the two middle
//!   values. It can round differently from type 7's `a + 0.5·(b − a)` in the last bit. The leak
//!   verdict (Theil–Sen, the warm-up, the plateau) and `compare`'s noise use it; the three ways
//!   to reach it (sort a copy, select in place, a histogram over a long slice) give the same bits
//!   for finite values.
//! - **Upper middle** ([`upper_median_sorted`], [`upper_median`]): `x[⌊n/2⌋]`, an observed value
//!   (never an average of two): a rate `memscope peaks` measured, a centre for sums of squares.
//!
//! Besides, [`order_statistic`]: an order statistic at a fractional position, as Sen's interval
//! for the Theil–Sen slope takes its bounds.
//!
//! All orders are `f64::total_cmp`. Pure functions, no I/O.

/// The `q`-quantile (`q` in [0, 1]) of an ascending, non-empty slice, by linear interpolation between
/// order statistics (Hyndman–Fan type 7, numpy's default). `q = 0` gives the minimum, `q = 1` the
/// maximum.
///
/// # Panics
/// If `sorted` is empty or `q` is outside [0, 1] (or NaN).
pub fn percentile(sorted: &[f64], q: f64) -> f64 {
    assert!(!sorted.is_empty(), "percentile of an empty sample");
    assert!(
        (0.0..=1.0).contains(&q),
        "percentile: q must lie in [0, 1], got {q}"
    );
    debug_assert!(
        sorted.windows(2).all(|w| w[0] <= w[1]),
        "percentile: input must be sorted ascending"
    );
    let h = (sorted.len() - 1) as f64 * q;
    let lo = h.floor() as usize;
    let frac = h - lo as f64;
    if frac == 0.0 || lo + 1 >= sorted.len() {
        return sorted[lo];
    }
    lerp(sorted[lo], sorted[lo + 1], frac)
}

/// The type-7 median (the 50th [`percentile`]) of any slice (copies); `None` when `xs` is empty or
/// holds a non-finite value.
pub fn median(xs: &[f64]) -> Option<f64> {
    if xs.is_empty() || !xs.iter().all(|x| x.is_finite()) {
        return None;
    }
    Some(percentile(&sorted_copy(xs), 0.5))
}

/// The raw (unscaled) median absolute deviation from the type-7 median; `None` when `xs` is empty
/// or holds a non-finite value.
pub fn mad(xs: &[f64]) -> Option<f64> {
    let m = median(xs)?;
    Some(mad_about(xs, m))
}

/// The type-7 median of |x − m| over a non-empty finite slice (the raw MAD when `m` is its median).
pub fn mad_about(xs: &[f64], m: f64) -> f64 {
    let dev: Vec<f64> = xs.iter().map(|&x| (x - m).abs()).collect();
    percentile(&sorted_copy(&dev), 0.5)
}

/// A copy of `xs`, ascending by `f64::total_cmp`.
pub fn sorted_copy(xs: &[f64]) -> Vec<f64> {
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    v
}

/// `a + t·(b − a)` for `a ≤ b`, `t` in (0, 1), kept inside [a, b] and free of overflow.
fn lerp(a: f64, b: f64, t: f64) -> f64 {
    let d = b - a;
    let r = if d.is_finite() {
        a + d * t
    } else {
        a * (1.0 - t) + b * t
    };
    r.max(a).min(b)
}

/// The order statistic at fractional 0-based position `pos` (clamped to the slice) of an
/// ascending, non-empty slice: `x[i] + f·(x[i+1] − x[i])`, `i = ⌊pos⌋`, `f = pos − i`; Sen's
/// interval for the Theil–Sen slope takes its bounds so. Unlike [`percentile`], the result is not
/// clamped between the two values nor guarded against overflow.
pub fn order_statistic(sorted: &[f64], pos: f64) -> f64 {
    let last = sorted.len() - 1;
    let p = pos.clamp(0.0, last as f64);
    let i = p.floor() as usize;
    let f = p - i as f64;
    if i >= last {
        sorted[last]
    } else {
        sorted[i] + f * (sorted[i + 1] - sorted[i])
    }
}

/// The midpoint median of an ascending, non-empty slice: the middle value, or `0.5·(a + b)` of the
/// two middle ones.
pub fn midpoint_median_sorted(v: &[f64]) -> f64 {
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        0.5 * (v[n / 2 - 1] + v[n / 2])
    }
}

/// The midpoint median of any slice (sorts a copy); `None` when empty.
pub fn midpoint_median(v: &[f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    let mut w = v.to_vec();
    w.sort_unstable_by(f64::total_cmp);
    Some(midpoint_median_sorted(&w))
}

/// Robust σ: 1.4826 × the median absolute deviation from the midpoint median (consistent for
/// normal noise); `None` when empty.
pub fn mad_sigma(v: &[f64]) -> Option<f64> {
    let m = midpoint_median(v)?;
    let dev: Vec<f64> = v.iter().map(|x| (x - m).abs()).collect();
    midpoint_median(&dev).map(|d| 1.4826 * d)
}

/// The midpoint median, reordering `v` (O(n) selection); `None` when empty.
pub fn median_in_place(v: &mut [f64]) -> Option<f64> {
    let n = v.len();
    if n == 0 {
        return None;
    }
    let (_, hi, _) = v.select_nth_unstable_by(n / 2, f64::total_cmp);
    let hi = *hi;
    if n % 2 == 1 {
        return Some(hi);
    }
    let lo = v[..n / 2].iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    Some(0.5 * (lo + hi))
}

/// The exact midpoint median of a long slice without copying it: a histogram pass finds the bins
/// that hold the middle order statistics, a second pass selects among the few values in them. O(n)
/// time, O(bins + one bin) memory. Short slices are copied and selected directly
/// ([`median_in_place`]).
pub fn median_without_copy(v: &[f64]) -> Option<f64> {
    const BINS: usize = 4096;
    let n = v.len();
    if n <= 4 * BINS {
        return median_in_place(&mut v.to_vec());
    }
    let lo = v.iter().cloned().fold(f64::INFINITY, f64::min);
    let hi = v.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    // One value throughout (or nothing but NaN): no range to bin.
    if hi.partial_cmp(&lo) != Some(std::cmp::Ordering::Greater) {
        return lo.is_finite().then_some(lo);
    }
    let width = (hi - lo) / BINS as f64;
    let bin = |x: f64| (((x - lo) / width) as usize).min(BINS - 1);
    let mut counts = vec![0usize; BINS];
    for &x in v {
        counts[bin(x)] += 1;
    }
    // The k-th smallest (0-based) among all values.
    let kth = |k: usize| -> Option<f64> {
        let mut below = 0;
        for (b, &c) in counts.iter().enumerate() {
            if below + c > k {
                let mut inside: Vec<f64> = v.iter().cloned().filter(|&x| bin(x) == b).collect();
                let (_, x, _) = inside.select_nth_unstable_by(k - below, f64::total_cmp);
                return Some(*x);
            }
            below += c;
        }
        None
    };
    if n % 2 == 1 {
        kth(n / 2)
    } else {
        Some(0.5 * (kth(n / 2 - 1)? + kth(n / 2)?))
    }
}

/// The upper middle `x[⌊n/2⌋]` of an ascending, non-empty slice (the median for odd n).
///
/// # Panics
/// If `sorted` is empty.
pub fn upper_median_sorted(sorted: &[f64]) -> f64 {
    sorted[sorted.len() / 2]
}

/// The upper middle `x[⌊n/2⌋]` of any slice in ascending order (selects in a copy); `None` when
/// empty.
pub fn upper_median(xs: &[f64]) -> Option<f64> {
    if xs.is_empty() {
        return None;
    }
    let mut w = xs.to_vec();
    let n = w.len();
    let (_, m, _) = w.select_nth_unstable_by(n / 2, f64::total_cmp);
    Some(*m)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(got: f64, want: f64) -> bool {
        (got - want).abs() <= 1e-12 * want.abs().max(1.0)
    }

    #[test]
    fn percentile_is_type_7() {
        let x = [1.0, 2.0, 3.0, 4.0];
        // h = 3q: q = 0.25 → 1.75; 0.5 → 2.5; 0.9 → 3.7 (numpy.percentile defaults).
        assert_eq!(percentile(&x, 0.0), 1.0);
        assert!(close(percentile(&x, 0.25), 1.75));
        assert!(close(percentile(&x, 0.5), 2.5));
        assert!(close(percentile(&x, 0.9), 3.7));
        assert_eq!(percentile(&x, 1.0), 4.0);
        assert_eq!(percentile(&[7.0], 0.37), 7.0);
        // Exact order statistic when h is an integer: n = 5, q = 0.75 → h = 3 → x[3].
        assert_eq!(percentile(&[1.0, 2.0, 3.0, 4.0, 50.0], 0.75), 4.0);
        // Odd and even medians.
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
    }

    #[test]
    #[should_panic(expected = "empty")]
    fn percentile_of_nothing_panics() {
        percentile(&[], 0.5);
    }

    #[test]
    #[should_panic(expected = "q must lie in [0, 1]")]
    fn percentile_rejects_q_above_one() {
        percentile(&[1.0, 2.0], 1.5);
    }

    #[test]
    fn type_7_refuses_nothing_and_non_finite_values() {
        assert_eq!(median(&[]), None);
        assert_eq!(mad(&[]), None);
        assert_eq!(median(&[1.0, f64::NAN]), None);
        assert_eq!(mad(&[f64::INFINITY]), None);
        // median 3, deviations 2, 1, 0, 1, 97 → MAD 1.
        assert_eq!(mad(&[1.0, 2.0, 3.0, 4.0, 100.0]), Some(1.0));
    }

    #[test]
    fn mad_sigma_hand_computed() {
        // median 3, deviations 2,1,0,1,97 -> MAD 1 -> σ 1.4826.
        assert!((mad_sigma(&[1.0, 2.0, 3.0, 4.0, 100.0]).unwrap() - 1.4826).abs() < 1e-12);
        assert!(mad_sigma(&[]).is_none());
    }

    #[test]
    fn the_midpoint_median_is_one_value_however_it_is_reached() {
        let mut state = 0x9e37_79b9_7f4a_7c15_u64;
        for n in [1usize, 2, 3, 4, 7, 10, 16_384, 16_385, 40_000, 40_001] {
            let v: Vec<f64> = (0..n)
                .map(|_| {
                    state = state
                        .wrapping_mul(6_364_136_223_846_793_005)
                        .wrapping_add(1_442_695_040_888_963_407);
                    (state >> 11) as f64 / (1u64 << 53) as f64 * 1e9 - 3e8
                })
                .collect();
            let want = midpoint_median(&v).unwrap();
            assert_eq!(
                median_in_place(&mut v.clone()).unwrap().to_bits(),
                want.to_bits()
            );
            assert_eq!(median_without_copy(&v).unwrap().to_bits(), want.to_bits());
        }
        assert_eq!(midpoint_median(&[]), None);
        assert_eq!(median_in_place(&mut []), None);
        assert_eq!(median_without_copy(&[]), None);
        assert_eq!(median_without_copy(&[5.0; 20_000]), Some(5.0));
    }

    #[test]
    fn order_statistics_interpolate_and_clamp() {
        let x = [1.0, 2.0, 4.0];
        assert_eq!(order_statistic(&x, 0.5), 1.5);
        assert_eq!(order_statistic(&x, 1.25), 2.5);
        assert_eq!(order_statistic(&x, -3.0), 1.0);
        assert_eq!(order_statistic(&x, 9.0), 4.0);
    }

    #[test]
    fn the_upper_middle_is_an_observed_value() {
        assert_eq!(upper_median(&[4.0, 1.0, 3.0, 2.0]), Some(3.0));
        assert_eq!(upper_median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(upper_median_sorted(&[1.0, 2.0]), 2.0);
        assert_eq!(upper_median(&[]), None);
    }
}
