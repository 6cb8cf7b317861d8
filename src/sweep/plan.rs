//! Sweep axes → the ordered list of configurations to run. Pure: no processes, no candle, no I/O.
//!
//! Axis syntax (`--batch`, `--seq`, `--warmup`, `--grad-accum`): a comma list of items, each either
//! - a number: `8`;
//! - an arithmetic range `start-end` (step 1) or `start-end+step`: `1-4` → 1 2 3 4, `0-8+2` → 0 2 4 6 8;
//! - a geometric range `start-end*factor`: `128-1024*2` → 128 256 512 1024 (start, ×factor while ≤ end).
//!
//! Items mix freely (`1,2,16-64*2`); whitespace around items and operators is ignored. The result
//! is sorted ascending with duplicates removed. Name axes (`--model`, `--dtype`, `--mode`) are comma
//! lists kept in the user's order, duplicates removed.
//!
//! Invariants:
//! - A parsed numeric axis is non-empty, strictly ascending, every value ≥ the caller's `min`, at most
//!   [`MAX_AXIS_VALUES`] values. A parsed name axis is non-empty, with trimmed, non-empty, distinct items.
//! - [`plan`] is deterministic: the same axes and sizes give the same points in the same order, and
//!   `points[i].index == i`. Its length is the product of the (deduplicated) axis lengths.
//! - Every error names the flag and the offending text, and says what is valid.

use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

/// A numeric axis may hold at most this many values (a typo such as `1-1000000` must not plan a
/// million runs).
pub const MAX_AXIS_VALUES: usize = 10_000;

const RANGE_HINT: &str = "ranges look like 128-1024*2 or 1-8+1";

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    #[error("{flag}: no value given; give a list such as 1,2,4 or a range such as 128-1024*2")]
    Empty { flag: String },
    #[error("{flag}: empty item in \"{text}\" (a doubled or trailing comma?)")]
    EmptyItem { flag: String, text: String },
    #[error("{flag}: \"{token}\"{within} is not a number; {RANGE_HINT}")]
    NotANumber {
        flag: String,
        token: String,
        /// Empty, or ` in "ITEM"` when the bad token is part of a range.
        within: String,
    },
    #[error("{flag}: \"{token}\" is too large (at most {max})", max = usize::MAX)]
    TooLarge { flag: String, token: String },
    #[error("{flag}: \"{token}\": negative values are not allowed; use values ≥ {min}")]
    Negative {
        flag: String,
        token: String,
        min: usize,
    },
    #[error("{flag}: \"{token}\": {value} is below the minimum; {flag} needs values ≥ {min}")]
    BelowMin {
        flag: String,
        token: String,
        value: usize,
        min: usize,
    },
    #[error("{flag}: \"{token}\": the end {end} is below the start {start}; write {end}-{start}")]
    EndBeforeStart {
        flag: String,
        token: String,
        start: usize,
        end: usize,
    },
    #[error("{flag}: \"{token}\": the factor must be at least 2; {RANGE_HINT}")]
    BadFactor { flag: String, token: String },
    #[error("{flag}: \"{token}\": a geometric range cannot start at 0 (0 × factor stays 0); start at 1 or use a step (0-8+2)")]
    GeometricFromZero { flag: String, token: String },
    #[error("{flag}: \"{token}\": the step must be at least 1; {RANGE_HINT}")]
    ZeroStep { flag: String, token: String },
    #[error("{flag}: more than {MAX_AXIS_VALUES} values; use a larger step or a factor (1-10000+100, 128-8192*2)")]
    TooMany { flag: String },
}

/// Parses a numeric axis (see the module docs for the syntax) whose values must be ≥ `min`
/// (`--batch` and `--seq` pass 1, `--warmup` passes 0). Sorted ascending, duplicates removed.
pub fn parse_axis_usize(flag: &str, text: &str, min: usize) -> Result<Vec<usize>, PlanError> {
    if text.trim().is_empty() {
        return Err(PlanError::Empty { flag: flag.into() });
    }
    let mut values = BTreeSet::new();
    for item in text.split(',').map(str::trim) {
        if item.is_empty() {
            return Err(PlanError::EmptyItem {
                flag: flag.into(),
                text: text.into(),
            });
        }
        for v in parse_item(flag, item, min)? {
            if v < min {
                return Err(PlanError::BelowMin {
                    flag: flag.into(),
                    token: item.into(),
                    value: v,
                    min,
                });
            }
            values.insert(v);
            if values.len() > MAX_AXIS_VALUES {
                return Err(PlanError::TooMany { flag: flag.into() });
            }
        }
    }
    Ok(values.into_iter().collect())
}

/// Parses a comma list of names (models, dtypes, modes): items trimmed, empty items rejected, the
/// user's order kept, later duplicates dropped.
pub fn parse_axis_str(flag: &str, text: &str) -> Result<Vec<String>, PlanError> {
    if text.trim().is_empty() {
        return Err(PlanError::Empty { flag: flag.into() });
    }
    let mut out: Vec<String> = Vec::new();
    for item in text.split(',').map(str::trim) {
        if item.is_empty() {
            return Err(PlanError::EmptyItem {
                flag: flag.into(),
                text: text.into(),
            });
        }
        if !out.iter().any(|s| s == item) {
            out.push(item.to_string());
        }
    }
    Ok(out)
}

/// One comma item: a number or a range. Values come out in ascending order; the caller checks `min`.
fn parse_item(flag: &str, item: &str, min: usize) -> Result<Vec<usize>, PlanError> {
    let Some((start_text, rest)) = item.split_once('-') else {
        return Ok(vec![number(flag, item, item)?]);
    };
    let start_text = start_text.trim();
    if start_text.is_empty() {
        // "-3": a negative number, or garbage such as "-" / "-x".
        let magnitude = rest.trim();
        if !magnitude.is_empty() && magnitude.bytes().all(|b| b.is_ascii_digit()) {
            return Err(PlanError::Negative {
                flag: flag.into(),
                token: item.into(),
                min,
            });
        }
        return Err(not_a_number(flag, item, item));
    }
    let start = number(flag, start_text, item)?;
    enum Kind {
        Step,
        Factor,
    }
    let (end_text, kind, by_text) = match rest.find(['*', '+']) {
        Some(i) => {
            let kind = if rest.as_bytes()[i] == b'*' {
                Kind::Factor
            } else {
                Kind::Step
            };
            (&rest[..i], kind, Some(rest[i + 1..].trim()))
        }
        None => (rest, Kind::Step, None),
    };
    let end = number(flag, end_text.trim(), item)?;
    let by = match by_text {
        Some(t) => number(flag, t, item)?,
        None => 1,
    };
    if end < start {
        return Err(PlanError::EndBeforeStart {
            flag: flag.into(),
            token: item.into(),
            start,
            end,
        });
    }
    let too_many = || PlanError::TooMany { flag: flag.into() };
    let mut out = Vec::new();
    match kind {
        Kind::Step => {
            if by == 0 {
                return Err(PlanError::ZeroStep {
                    flag: flag.into(),
                    token: item.into(),
                });
            }
            // Count first, so a huge range is refused before any work.
            if (end - start) / by >= MAX_AXIS_VALUES {
                return Err(too_many());
            }
            out.extend((start..=end).step_by(by));
        }
        Kind::Factor => {
            if by <= 1 {
                return Err(PlanError::BadFactor {
                    flag: flag.into(),
                    token: item.into(),
                });
            }
            if start == 0 {
                return Err(PlanError::GeometricFromZero {
                    flag: flag.into(),
                    token: item.into(),
                });
            }
            // At most 64 values (factor ≥ 2 on a u64), so no count check is needed.
            let mut v = start;
            while v <= end {
                out.push(v);
                match v.checked_mul(by) {
                    Some(next) => v = next,
                    None => break,
                }
            }
        }
    }
    Ok(out)
}

/// A plain decimal number: ASCII digits only (no sign, no `0x`, no `_`).
fn number(flag: &str, token: &str, item: &str) -> Result<usize, PlanError> {
    if token.is_empty() || !token.bytes().all(|b| b.is_ascii_digit()) {
        return Err(not_a_number(flag, token, item));
    }
    token.parse().map_err(|_| PlanError::TooLarge {
        flag: flag.into(),
        token: token.into(),
    })
}

fn not_a_number(flag: &str, token: &str, item: &str) -> PlanError {
    PlanError::NotANumber {
        flag: flag.into(),
        token: token.into(),
        within: if token == item {
            String::new()
        } else {
            format!(" in \"{item}\"")
        },
    }
}

/// The values of every sweep axis, as parsed from the command line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Axes {
    pub models: Vec<String>,
    pub modes: Vec<String>,
    pub dtypes: Vec<String>,
    pub batches: Vec<usize>,
    pub seqs: Vec<usize>,
    pub warmups: Vec<usize>,
    pub grad_accums: Vec<usize>,
}

/// One configuration of the sweep; `index` is its position in the plan.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Point {
    pub model: String,
    pub mode: String,
    pub dtype: String,
    pub batch: usize,
    pub seq: usize,
    pub warmup: usize,
    pub grad_accum: usize,
    pub index: usize,
}

/// The Cartesian product of the axes in a stable order, smallest first: models by size
/// (`model_size` gives the parameter count; ties by name), then modes and dtypes in the user's
/// order, then seq, batch, grad_accum and warmup ascending (the last varies fastest).
///
/// Axes built by hand are normalised the same way as parsed ones: numbers sorted and deduplicated,
/// names deduplicated keeping the first. An empty axis gives an empty plan.
pub fn plan(axes: &Axes, model_size: impl Fn(&str) -> u64) -> Vec<Point> {
    let mut models: Vec<(u64, &str)> = unique_names(&axes.models)
        .into_iter()
        .map(|m| (model_size(m), m))
        .collect();
    models.sort();
    let modes = unique_names(&axes.modes);
    let dtypes = unique_names(&axes.dtypes);
    let seqs = sorted_unique(&axes.seqs);
    let batches = sorted_unique(&axes.batches);
    let grad_accums = sorted_unique(&axes.grad_accums);
    let warmups = sorted_unique(&axes.warmups);

    let mut points = Vec::new();
    for &(_, model) in &models {
        for &mode in &modes {
            for &dtype in &dtypes {
                for &seq in &seqs {
                    for &batch in &batches {
                        for &grad_accum in &grad_accums {
                            for &warmup in &warmups {
                                points.push(Point {
                                    model: model.to_string(),
                                    mode: mode.to_string(),
                                    dtype: dtype.to_string(),
                                    batch,
                                    seq,
                                    warmup,
                                    grad_accum,
                                    index: points.len(),
                                });
                            }
                        }
                    }
                }
            }
        }
    }
    points
}

/// True when `b` is strictly larger than `a` on batch or sequence length (≥ on both, > on at least
/// one) with the same model, dtype and mode: after `a` ran out of memory, `b` will too, so it is
/// skipped. Warm-up and gradient accumulation are ignored (they do not raise the peak of a step).
pub fn strictly_larger(a: &Point, b: &Point) -> bool {
    a.model == b.model
        && a.dtype == b.dtype
        && a.mode == b.mode
        && b.batch >= a.batch
        && b.seq >= a.seq
        && (b.batch > a.batch || b.seq > a.seq)
}

fn unique_names(xs: &[String]) -> Vec<&str> {
    let mut out: Vec<&str> = Vec::new();
    for x in xs {
        if !out.contains(&x.as_str()) {
            out.push(x);
        }
    }
    out
}

fn sorted_unique(xs: &[usize]) -> Vec<usize> {
    let mut v = xs.to_vec();
    v.sort_unstable();
    v.dedup();
    v
}

/// Why a point is skipped after an earlier OOM, if it is.
pub fn skip_reason(ooms: &[Point], p: &Point) -> Option<String> {
    ooms.iter()
        .find(|a| strictly_larger(a, p))
        .map(|a| format!("oom at batch {} seq {}", a.batch, a.seq))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(text: &str) -> Result<Vec<usize>, PlanError> {
        parse_axis_usize("--batch", text, 1)
    }

    fn p0(text: &str) -> Result<Vec<usize>, PlanError> {
        parse_axis_usize("--warmup", text, 0)
    }

    fn err(text: &str) -> String {
        p(text).unwrap_err().to_string()
    }

    #[test]
    fn comma_lists() {
        assert_eq!(p("1,2,4,8").unwrap(), vec![1, 2, 4, 8]);
        assert_eq!(p("8").unwrap(), vec![8]);
        assert_eq!(p("8,4,1,2").unwrap(), vec![1, 2, 4, 8], "sorted ascending");
        assert_eq!(p("4,4,1,4").unwrap(), vec![1, 4], "duplicates removed");
    }

    #[test]
    fn geometric_ranges() {
        assert_eq!(
            parse_axis_usize("--seq", "128-1024*2", 1).unwrap(),
            vec![128, 256, 512, 1024]
        );
        // The end need not be on the sequence: ×3 from 1 while ≤ 100.
        assert_eq!(p("1-100*3").unwrap(), vec![1, 3, 9, 27, 81]);
        assert_eq!(p("5-5*2").unwrap(), vec![5]);
        // Stops before usize overflows instead of wrapping.
        let big = format!("1-{}*2", usize::MAX);
        assert_eq!(p(&big).unwrap().len(), usize::BITS as usize);
    }

    #[test]
    fn arithmetic_ranges() {
        assert_eq!(p("1-4").unwrap(), vec![1, 2, 3, 4]);
        assert_eq!(p("1-8+1").unwrap(), (1..=8).collect::<Vec<_>>());
        assert_eq!(p0("0-8+2").unwrap(), vec![0, 2, 4, 6, 8]);
        assert_eq!(
            p("1-8+3").unwrap(),
            vec![1, 4, 7],
            "the end need not be hit"
        );
        assert_eq!(p("3-3").unwrap(), vec![3]);
    }

    #[test]
    fn mixtures_whitespace_and_duplicates() {
        assert_eq!(p("1,2,16-64*2").unwrap(), vec![1, 2, 16, 32, 64]);
        assert_eq!(p(" 1 , 2,\t16 - 64 * 2 ").unwrap(), vec![1, 2, 16, 32, 64]);
        assert_eq!(p("1-4,2-8*2,4").unwrap(), vec![1, 2, 3, 4, 8]);
        assert_eq!(p0("0, 1, 2, 5").unwrap(), vec![0, 1, 2, 5]);
    }

    #[test]
    fn not_a_number_names_flag_token_and_the_valid_forms() {
        assert_eq!(
            err("0x"),
            "--batch: \"0x\" is not a number; ranges look like 128-1024*2 or 1-8+1"
        );
        assert_eq!(
            err("1-0x"),
            "--batch: \"0x\" in \"1-0x\" is not a number; ranges look like 128-1024*2 or 1-8+1"
        );
        for bad in [
            "x", "1.5", "+4", "1e3", "1 2", "4*2", "1-8*2+1", "1--4", "1-", "-", "-x", "1-8*",
        ] {
            assert!(
                matches!(p(bad), Err(PlanError::NotANumber { .. })),
                "{bad:?} gave {:?}",
                p(bad)
            );
        }
        assert_eq!(
            err("99999999999999999999999"),
            format!(
                "--batch: \"99999999999999999999999\" is too large (at most {})",
                usize::MAX
            )
        );
    }

    #[test]
    fn empty_values_and_items() {
        assert_eq!(
            err(""),
            "--batch: no value given; give a list such as 1,2,4 or a range such as 128-1024*2"
        );
        assert_eq!(
            p("  "),
            Err(PlanError::Empty {
                flag: "--batch".into()
            })
        );
        assert_eq!(
            err("1,,2"),
            "--batch: empty item in \"1,,2\" (a doubled or trailing comma?)"
        );
        assert!(matches!(p("1,2,"), Err(PlanError::EmptyItem { .. })));
        assert!(matches!(p(",1"), Err(PlanError::EmptyItem { .. })));
    }

    #[test]
    fn zero_and_negative_values_are_refused_where_the_flag_needs_at_least_one() {
        assert_eq!(
            err("0,1"),
            "--batch: \"0\": 0 is below the minimum; --batch needs values ≥ 1"
        );
        assert_eq!(
            err("0-8+2"),
            "--batch: \"0-8+2\": 0 is below the minimum; --batch needs values ≥ 1"
        );
        assert_eq!(
            err("-1"),
            "--batch: \"-1\": negative values are not allowed; use values ≥ 1"
        );
        assert!(matches!(p0("-2,1"), Err(PlanError::Negative { .. })));
        // The same values are fine where 0 is allowed.
        assert_eq!(p0("0").unwrap(), vec![0]);
        // A larger minimum is honoured too.
        assert_eq!(
            parse_axis_usize("--seq", "8,16", 16)
                .unwrap_err()
                .to_string(),
            "--seq: \"8\": 8 is below the minimum; --seq needs values ≥ 16"
        );
    }

    #[test]
    fn reversed_ranges_bad_factors_and_zero_steps() {
        assert_eq!(
            parse_axis_usize("--seq", "1024-128*2", 1)
                .unwrap_err()
                .to_string(),
            "--seq: \"1024-128*2\": the end 128 is below the start 1024; write 128-1024"
        );
        assert!(matches!(
            p("8-1"),
            Err(PlanError::EndBeforeStart {
                start: 8,
                end: 1,
                ..
            })
        ));
        assert_eq!(
            err("1-8*1"),
            "--batch: \"1-8*1\": the factor must be at least 2; ranges look like 128-1024*2 or 1-8+1"
        );
        assert!(matches!(p("1-8*0"), Err(PlanError::BadFactor { .. })));
        assert_eq!(
            err("1-8+0"),
            "--batch: \"1-8+0\": the step must be at least 1; ranges look like 128-1024*2 or 1-8+1"
        );
        assert!(matches!(
            p0("0-8*2"),
            Err(PlanError::GeometricFromZero { .. })
        ));
    }

    #[test]
    fn more_than_ten_thousand_values_is_refused() {
        assert_eq!(p("1-10000").unwrap().len(), 10_000);
        assert_eq!(
            err("1-10001"),
            "--batch: more than 10000 values; use a larger step or a factor (1-10000+100, 128-8192*2)"
        );
        // A huge range is refused up front (no billions of iterations).
        assert!(matches!(
            p("1-1000000000000"),
            Err(PlanError::TooMany { .. })
        ));
        // The limit is on the whole axis, after duplicates are removed.
        assert_eq!(p("1-10000,5000-10000").unwrap().len(), 10_000);
        assert!(matches!(p("1-10000,20000"), Err(PlanError::TooMany { .. })));
    }

    #[test]
    fn name_lists_keep_order_trim_and_drop_duplicates() {
        assert_eq!(
            parse_axis_str("--model", " cs336-small , cs336-medium,cs336-small ").unwrap(),
            vec!["cs336-small", "cs336-medium"]
        );
        assert_eq!(
            parse_axis_str("--dtype", "f32,bf16").unwrap(),
            vec!["f32", "bf16"]
        );
        assert_eq!(
            parse_axis_str("--dtype", "f32,,bf16")
                .unwrap_err()
                .to_string(),
            "--dtype: empty item in \"f32,,bf16\" (a doubled or trailing comma?)"
        );
        assert!(matches!(
            parse_axis_str("--mode", "train, "),
            Err(PlanError::EmptyItem { .. })
        ));
        assert_eq!(
            parse_axis_str("--mode", ""),
            Err(PlanError::Empty {
                flag: "--mode".into()
            })
        );
    }

    fn sizes(model: &str) -> u64 {
        match model {
            "big" => 1_000,
            "small" => 10,
            "tiny-b" | "tiny-a" => 1,
            _ => 500,
        }
    }

    fn axes() -> Axes {
        Axes {
            models: vec!["big".into(), "small".into()],
            modes: vec!["train".into(), "infer".into()],
            dtypes: vec!["f32".into(), "bf16".into()],
            batches: vec![4, 1],
            seqs: vec![256, 128],
            warmups: vec![0, 2],
            grad_accums: vec![1],
        }
    }

    #[test]
    fn plan_is_the_cartesian_product_smallest_first() {
        let pts = plan(&axes(), sizes);
        assert_eq!(pts.len(), 2 * 2 * 2 * 2 * 2 * 2);
        assert!(pts.iter().enumerate().all(|(i, q)| q.index == i));
        let key = |q: &Point| {
            format!(
                "{} {} {} s{} b{} g{} w{}",
                q.model, q.mode, q.dtype, q.seq, q.batch, q.grad_accum, q.warmup
            )
        };
        let first: Vec<String> = pts.iter().take(10).map(key).collect();
        assert_eq!(
            first,
            [
                "small train f32 s128 b1 g1 w0",
                "small train f32 s128 b1 g1 w2",
                "small train f32 s128 b4 g1 w0",
                "small train f32 s128 b4 g1 w2",
                "small train f32 s256 b1 g1 w0",
                "small train f32 s256 b1 g1 w2",
                "small train f32 s256 b4 g1 w0",
                "small train f32 s256 b4 g1 w2",
                "small train bf16 s128 b1 g1 w0",
                "small train bf16 s128 b1 g1 w2",
            ]
        );
        assert_eq!(key(&pts[16]), "small infer f32 s128 b1 g1 w0");
        assert_eq!(key(&pts[32]), "big train f32 s128 b1 g1 w0");
        assert_eq!(key(&pts[63]), "big infer bf16 s256 b4 g1 w2");
        // Stable: the same input gives the same plan.
        assert_eq!(plan(&axes(), sizes), pts);
    }

    #[test]
    fn plan_breaks_size_ties_by_name_and_grad_accum_varies_before_warmup() {
        let a = Axes {
            models: vec!["tiny-b".into(), "tiny-a".into()],
            modes: vec!["train".into()],
            dtypes: vec!["f32".into()],
            batches: vec![2],
            seqs: vec![64],
            warmups: vec![1, 0],
            grad_accums: vec![2, 1],
        };
        let got: Vec<(String, usize, usize)> = plan(&a, sizes)
            .into_iter()
            .map(|q| (q.model, q.grad_accum, q.warmup))
            .collect();
        let want = [
            ("tiny-a", 1, 0),
            ("tiny-a", 1, 1),
            ("tiny-a", 2, 0),
            ("tiny-a", 2, 1),
            ("tiny-b", 1, 0),
            ("tiny-b", 1, 1),
            ("tiny-b", 2, 0),
            ("tiny-b", 2, 1),
        ];
        assert_eq!(got, want.map(|(m, g, w)| (m.to_string(), g, w)).to_vec());
    }

    #[test]
    fn plan_of_hand_made_axes_dedups_and_empty_axis_gives_nothing() {
        let mut a = axes();
        a.models = vec!["small".into(), "small".into()];
        a.batches = vec![1, 1, 4];
        assert_eq!(plan(&a, sizes).len(), 2 * 2 * 2 * 2 * 2);
        a.warmups.clear();
        assert!(plan(&a, sizes).is_empty());
    }

    fn point(model: &str, mode: &str, dtype: &str, batch: usize, seq: usize) -> Point {
        Point {
            model: model.into(),
            mode: mode.into(),
            dtype: dtype.into(),
            batch,
            seq,
            warmup: 0,
            grad_accum: 1,
            index: 0,
        }
    }

    #[test]
    fn strictly_larger_needs_ge_on_both_and_gt_on_one() {
        let oom = point("m", "train", "f32", 8, 256);
        let larger = |b, s| strictly_larger(&oom, &point("m", "train", "f32", b, s));
        assert!(larger(16, 256));
        assert!(larger(8, 512));
        assert!(larger(16, 512));
        assert!(!larger(8, 256), "the same size is not strictly larger");
        assert!(!larger(16, 128), "smaller on seq");
        assert!(!larger(4, 512), "smaller on batch");
        assert!(!larger(4, 128));
        // Warm-up and gradient accumulation do not matter.
        let mut b = point("m", "train", "f32", 16, 256);
        b.warmup = 5;
        b.grad_accum = 4;
        assert!(strictly_larger(&oom, &b));
    }

    #[test]
    fn strictly_larger_needs_the_same_model_dtype_and_mode() {
        let oom = point("m", "train", "f32", 8, 256);
        assert!(!strictly_larger(
            &oom,
            &point("other", "train", "f32", 16, 512)
        ));
        assert!(!strictly_larger(&oom, &point("m", "infer", "f32", 16, 512)));
        assert!(!strictly_larger(
            &oom,
            &point("m", "train", "bf16", 16, 512)
        ));
    }

    #[test]
    fn skipping_after_an_oom_in_a_planned_sweep() {
        let a = Axes {
            models: vec!["m".into()],
            modes: vec!["train".into()],
            dtypes: vec!["f32".into()],
            batches: parse_axis_usize("--batch", "1-8*2", 1).unwrap(),
            seqs: parse_axis_usize("--seq", "128-256*2", 1).unwrap(),
            warmups: vec![1],
            grad_accums: vec![1],
        };
        let pts = plan(&a, |_| 1);
        let oom = pts.iter().find(|q| q.batch == 4 && q.seq == 128).unwrap();
        let skipped: Vec<(usize, usize)> = pts
            .iter()
            .filter(|q| strictly_larger(oom, q))
            .map(|q| (q.seq, q.batch))
            .collect();
        assert_eq!(skipped, vec![(128, 8), (256, 4), (256, 8)]);
    }

    #[test]
    fn skip_only_strictly_larger_on_the_same_model_dtype_mode() {
        let p = |batch, seq| Point {
            model: "m".into(),
            mode: "train".into(),
            dtype: "f32".into(),
            batch,
            seq,
            warmup: 0,
            grad_accum: 1,
            index: 0,
        };
        let ooms = vec![p(8, 128)];
        assert_eq!(
            skip_reason(&ooms, &p(16, 128)).unwrap(),
            "oom at batch 8 seq 128"
        );
        assert_eq!(skip_reason(&ooms, &p(8, 128)), None, "equal is not larger");
        assert_eq!(skip_reason(&ooms, &p(16, 64)), None);
    }
}
