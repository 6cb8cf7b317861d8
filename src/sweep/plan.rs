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
    /// `--parallel A,B,…` (with `--nproc`): each plan its own points; empty: the one plan, if
    /// any, every point shares.
    #[serde(default)]
    pub plans: Vec<String>,
    /// `--micro-batches 2,4,8` with a pipeline plan: each count its own points (a pipeline's
    /// only; another plan of `--parallel A,B,…` has one point per size); empty: the count, if
    /// any, every point shares.
    #[serde(default)]
    pub micro_batches: Vec<usize>,
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
    /// The point's plan when the sweep compares plans (`--parallel A,B,…`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<String>,
    /// The point's micro-batch count when the sweep compares counts (`--micro-batches 2,4,8`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub micro_batches: Option<usize>,
    pub index: usize,
}

/// The Cartesian product of the axes in a stable order, smallest first: models by size
/// (`model_size` gives the parameter count; ties by name), then modes, dtypes and plans in the
/// user's order, a pipeline's micro-batch counts ascending, then seq, batch, grad_accum and
/// warmup ascending (the last varies fastest).
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
    let plans: Vec<Option<&str>> = if axes.plans.is_empty() {
        vec![None]
    } else {
        unique_names(&axes.plans).into_iter().map(Some).collect()
    };

    let micro_batches = sorted_unique(&axes.micro_batches);
    // Counts are a pipeline's: a plan of the list that is not one has a single point a size.
    let counts = |plan: Option<&str>| -> Vec<Option<usize>> {
        match plan {
            Some(p) if !p.starts_with("pp:") => vec![None],
            _ if micro_batches.is_empty() => vec![None],
            _ => micro_batches.iter().copied().map(Some).collect(),
        }
    };
    let mut points = Vec::new();
    for &(_, model) in &models {
        for &mode in &modes {
            for (&dtype, plan, micro) in dtypes.iter().flat_map(|d| {
                plans
                    .iter()
                    .flat_map(move |&p| counts(p).into_iter().map(move |m| (d, p, m)))
            }) {
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
                                    plan: plan.map(str::to_string),
                                    micro_batches: micro,
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
/// one) with the same model, dtype, mode, plan and micro-batch count: after `a` ran out of
/// memory, `b` will too, so it is skipped. Warm-up and gradient accumulation are ignored (they do
/// not raise the peak of a step); another plan, or another count of micro-batches (smaller ones,
/// more of them in flight), holds memory otherwise, so it is never skipped for this one's.
pub fn strictly_larger(a: &Point, b: &Point) -> bool {
    a.model == b.model
        && a.dtype == b.dtype
        && a.mode == b.mode
        && a.plan == b.plan
        && a.micro_batches == b.micro_batches
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
#[path = "plan_tests.rs"]
mod tests;
