//! The largest size that fits a budget when each size costs a prediction (a trace of seconds
//! to a minute): sizes 1 and 2 first, then each next size where the line through the nearest
//! sizes on either side of the budget crosses it (the bytes grow nearly linearly with the
//! batch and the sequence), halving the gap instead where the line stops closing it. A few
//! traces, where halving from 1 to 65,536 would take 16 or more.

use std::collections::BTreeMap;

/// What the search found, and the judged value at the sizes it kept.
#[derive(Debug)]
pub struct Found<T> {
    /// The largest size whose bytes are within the budget; 0 when size 1 is not.
    pub largest: usize,
    /// The smallest size traced that is over the budget; None when `max` fits.
    pub first_over: Option<usize>,
    /// Sizes judged.
    pub tries: usize,
    /// What `judge` gave at `largest` (at size 1 when nothing fits).
    pub at_largest: T,
}

/// Searches sizes `1..=max` for the largest whose bytes (`judge(size)`'s first) are at most
/// `budget`, taking the bytes to grow with the size. `judge`'s error ends the search.
pub fn search<T, E>(
    max: usize,
    budget: u64,
    mut judge: impl FnMut(usize) -> Result<(u64, T), E>,
) -> Result<Found<T>, E> {
    let mut bytes: BTreeMap<usize, u64> = BTreeMap::new();
    let mut kept: BTreeMap<usize, T> = BTreeMap::new();
    let mut tries = 0;
    let mut eval = |k: usize,
                    bytes: &mut BTreeMap<usize, u64>,
                    kept: &mut BTreeMap<usize, T>|
     -> Result<u64, E> {
        tries += 1;
        let (b, t) = judge(k)?;
        bytes.insert(k, b);
        kept.insert(k, t);
        Ok(b)
    };
    let max = max.max(1);
    if eval(1, &mut bytes, &mut kept)? > budget {
        return Ok(Found {
            largest: 0,
            first_over: Some(1),
            tries: 1,
            at_largest: kept.remove(&1).expect("size 1 was judged"),
        });
    }
    let (mut lo, mut hi) = (1usize, None::<usize>);
    // Which side the last two sizes moved: two on one side in a row, and the gap is halved.
    let mut same_side = 0;
    let mut last_low = true;
    while hi.map_or(lo < max, |h| h > lo + 1) {
        let next = if bytes.len() == 1 {
            2
        } else {
            // The line through the nearest sizes below and above the budget (or the two
            // largest below it), where it meets the budget.
            let (a, b) = match hi {
                Some(h) => (lo, h),
                None => {
                    let below: Vec<usize> = bytes.keys().rev().take(2).copied().collect();
                    (below[1], below[0])
                }
            };
            let (ba, bb) = (bytes[&a] as f64, bytes[&b] as f64);
            let slope = (bb - ba) / (b - a) as f64;
            let line = if slope > 0.0 {
                a as f64 + (budget as f64 - ba) / slope
            } else {
                f64::INFINITY
            };
            let upper = hi.map_or(max, |h| h - 1);
            let mid = match hi {
                Some(h) => lo + (h - lo) / 2,
                None => lo.saturating_mul(2).min(max),
            };
            // Inside a bracket, a quarter of the gap from either end at least: the gap
            // shrinks by a quarter a trace even where the bytes step instead of growing.
            let (low_end, high_end) = match hi {
                Some(h) => (lo + ((h - lo) / 4).max(1), h - ((h - lo) / 4).max(1)),
                None => (lo + 1, upper),
            };
            if same_side >= 2 {
                mid.clamp(lo + 1, upper)
            } else {
                (line.floor().min(upper as f64) as usize).clamp(low_end, high_end.max(low_end))
            }
        };
        let low = eval(next, &mut bytes, &mut kept)? <= budget;
        // Counted inside a bracket only: below it, the line alone leads up to the budget.
        same_side = if hi.is_some() && low == last_low {
            same_side + 1
        } else {
            1
        };
        last_low = low;
        if low {
            lo = next;
        } else {
            hi = Some(next);
        }
    }
    Ok(Found {
        largest: lo,
        first_over: hi,
        tries,
        at_largest: kept.remove(&lo).expect("the largest size was judged"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn linear(fixed: u64, per: u64) -> impl FnMut(usize) -> Result<(u64, usize), ()> {
        move |k| Ok((fixed + per * k as u64, k))
    }

    #[test]
    fn a_linear_cost_is_found_in_a_few_tries() {
        // 100 + 7k ≤ 10,000 → k ≤ 1,414.
        let f = search(65_536, 10_000, linear(100, 7)).unwrap();
        assert_eq!((f.largest, f.first_over), (1_414, Some(1_415)));
        assert_eq!(f.at_largest, 1_414);
        assert!(f.tries <= 5, "{} tries", f.tries);
    }

    #[test]
    fn a_step_in_the_cost_still_ends_at_the_exact_size() {
        // Rounded up to 1,000-byte blocks past k = 300: not a line.
        let f = search(4_096, 50_000, |k: usize| {
            let b = 10 * k as u64 + if k > 300 { 20_000 } else { 0 };
            Ok::<_, ()>((b.div_ceil(1_000) * 1_000, ()))
        })
        .unwrap();
        // 10k + 20,000 ≤ 50,000 in blocks of 1,000: k ≤ 3,000.
        assert_eq!((f.largest, f.first_over), (3_000, Some(3_001)));
        assert!(f.tries <= 20, "{} tries", f.tries);
    }

    #[test]
    fn nothing_fits_or_everything_does() {
        let f = search(64, 10, linear(100, 1)).unwrap();
        assert_eq!((f.largest, f.first_over, f.tries), (0, Some(1), 1));
        let f = search(64, 1_000_000, linear(100, 1)).unwrap();
        assert_eq!((f.largest, f.first_over), (64, None));
        assert!(f.tries <= 4, "{} tries", f.tries);
    }

    #[test]
    fn the_judge_s_error_ends_the_search() {
        let e = search(
            64,
            1_000,
            |k: usize| if k > 2 { Err(k) } else { Ok((k as u64, ())) },
        );
        assert!(e.unwrap_err() > 2);
    }
}
