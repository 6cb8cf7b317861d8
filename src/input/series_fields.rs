//! Fields of a memory log: which column or key is the step, the memory value and the time (by name,
//! with a unit read from the name: `rss_mb`, `mem (MiB)`, `time_ms`), and how one cell is read.
//!
//! Invariants: a value is finite bytes (negative values are memory relative to a baseline: deltas,
//! cumulative changes); a step is a non-negative integer; a time is finite seconds. "NaN", "inf" and
//! "1e400" are rejected explicitly (Rust's float parser accepts the first two), as are negative steps.

use crate::units::{check_number, Unit, UNIT_NAMES};

/// What a column or key holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Step,
    Value,
    Time,
}

/// A cell that could not be read. `fatal`: the content is wrong (NaN, inf, negative, overflow) rather
/// than cut short, so it is an error even on the last line.
#[derive(Clone, Debug, PartialEq)]
pub struct CellError {
    pub message: String,
    pub fatal: bool,
}

impl CellError {
    fn new(message: String, fatal: bool) -> Self {
        CellError { message, fatal }
    }
}

/// Splits a column name into its base and the unit written in it: `rss_mb` → (`rss`, MB),
/// `mem (MiB)` → (`mem`, MiB), `heap [GB]` → (`heap`, GB), `bytes` → (`bytes`, B).
pub fn split_unit(name: &str) -> (String, Option<Unit>) {
    let l = name.trim().to_ascii_lowercase();
    if let Some(open) = l.rfind(['(', '[']) {
        let inner = l[open + 1..].trim_end_matches([')', ']']).trim();
        if let Some(u) = Unit::parse(inner) {
            return (
                l[..open]
                    .trim()
                    .trim_end_matches(['_', '-', ' '])
                    .to_string(),
                Some(u),
            );
        }
    }
    for sep in ['_', '-', ' ', '.'] {
        if let Some((base, suffix)) = l.rsplit_once(sep) {
            if let Some(u) = Unit::parse(suffix) {
                if !base.is_empty() {
                    return (base.to_string(), Some(u));
                }
            }
        }
    }
    if l == "bytes" {
        return (l, Some(Unit::B));
    }
    (l, None)
}

/// Seconds per unit of a time column from its name (`time_ms`, `elapsed (s)`), 1 by default.
pub fn time_factor(name: &str) -> f64 {
    let l = name.trim().to_ascii_lowercase();
    let suffix = l
        .rsplit(['_', ' ', '(', '[', '-'])
        .next()
        .unwrap_or("")
        .trim_end_matches([')', ']']);
    match suffix {
        "ms" | "msec" | "millis" => 1e-3,
        "us" | "µs" | "usec" | "micros" => 1e-6,
        "ns" => 1e-9,
        "min" | "mins" | "minutes" => 60.0,
        "h" | "hr" | "hours" => 3600.0,
        _ => 1.0,
    }
}

/// How well a column name fits a role: higher is better, `None` when it does not fit.
pub fn score(name: &str, role: Role) -> Option<u8> {
    let (base, _) = split_unit(name);
    let b = base.as_str();
    let words: Vec<&str> = b
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| !w.is_empty())
        .collect();
    let has = |w: &str| words.contains(&w) || b.contains(w);
    match role {
        Role::Step => match b {
            "step" | "steps" | "global_step" | "global step" | "globalstep" => Some(9),
            "iteration" | "iter" | "it" | "iterations" => Some(8),
            "epoch" | "batch" | "batch_idx" => Some(6),
            "run" | "runs" | "round" => Some(5),
            "n" | "i" | "idx" | "index" | "sample" => Some(4),
            _ => None,
        },
        Role::Value => {
            if has("peak")
                || has("max")
                || has("reserved")
                || has("limit")
                || has("total")
                || has("free")
            {
                return None;
            }
            if has("heap") || words.contains(&"live") {
                Some(9)
            } else if has("allocated") || words.contains(&"alloc") {
                Some(8)
            } else if has("rss") {
                Some(7)
            } else if has("pss") {
                Some(6)
            } else if has("memory")
                || words.contains(&"mem")
                || has("usage")
                || words.contains(&"used")
            {
                Some(5)
            } else if b == "value" || b == "bytes" || b == "size" {
                Some(4)
            } else if is_relative_name(b) {
                Some(3)
            } else {
                None
            }
        }
        Role::Time => match b.trim_end_matches(['_', ' ']) {
            "time" | "timestamp" | "elapsed" | "seconds" | "secs" | "sec" | "wall"
            | "wall_time" | "walltime" | "t" | "ts" | "datetime" | "date" | "elapsed_time"
            | "time_s" | "elapsed_s" | "clock" => Some(5),
            _ if words
                .first()
                .is_some_and(|w| *w == "time" || *w == "elapsed" || *w == "timestamp") =>
            {
                Some(4)
            }
            _ => None,
        },
    }
}

/// Whether a value's name says it is relative to a baseline: `delta`, `cumulative_mb`, `diff`,
/// `change`, `increase`, `growth`.
pub fn is_relative_name(name: &str) -> bool {
    let l = name.to_ascii_lowercase();
    [
        "delta",
        "cumulative",
        "diff",
        "change",
        "increase",
        "growth",
        "relative",
    ]
    .iter()
    .any(|w| l.contains(w))
}

/// What was measured, from the value column's name: "heap live", "RSS", "PSS" or "value".
pub fn label_for(name: &str) -> String {
    let l = name.to_ascii_lowercase();
    if l.contains("heap") || l.contains("live") {
        "heap live".into()
    } else if l.contains("rss") {
        "RSS".into()
    } else if l.contains("pss") {
        "PSS".into()
    } else {
        "value".into()
    }
}

/// Reads a memory value: a number with an optional unit suffix (`1234`, `1,234.5`, `1.5 GiB`,
/// `12MB`), in `unit` when the cell has none. `override_unit` (the `--unit` flag) wins over a unit
/// in the cell. Returns bytes and the unit the cell itself stated.
pub fn parse_value(
    cell: &str,
    unit: Unit,
    override_unit: Option<Unit>,
) -> Result<(f64, Option<Unit>), CellError> {
    let t = cell.trim().trim_matches('"');
    let split = t
        .char_indices()
        .find(|&(_, c)| c.is_ascii_alphabetic() && c != 'e' && c != 'E')
        .map_or(t.len(), |(i, _)| i);
    let (num, suffix) = (t[..split].trim(), t[split..].trim());
    if has_nan_or_inf(t) {
        return Err(CellError::new(
            format!("value '{t}' is not a finite number"),
            true,
        ));
    }
    // Memory relative to a baseline (a delta, a cumulative change) may be negative.
    let (negative, num) = match num.strip_prefix('-') {
        Some(rest) => (true, rest.trim_start()),
        None => (false, num),
    };
    if num.is_empty() || num.starts_with(['-', '+']) {
        return Err(CellError::new(
            format!("value '{t}' is not a number"),
            false,
        ));
    }
    let stated = if suffix.is_empty() {
        None
    } else {
        Some(Unit::parse(suffix).ok_or_else(|| {
            CellError::new(
                format!("value '{t}' has an unknown unit '{suffix}' (valid: {UNIT_NAMES})"),
                false,
            )
        })?)
    };
    let u = override_unit.or(stated).unwrap_or(unit);
    let clean = check_number(num).map_err(|e| CellError::new(format!("value {e}"), false))?;
    let bytes = u
        .to_bytes(&clean)
        .map_err(|e| CellError::new(format!("value {e}"), true))?;
    Ok((if negative { -bytes } else { bytes }, stated))
}

/// Whether a cell spells NaN or infinity (checked before Rust's float parser, which accepts them).
fn has_nan_or_inf(t: &str) -> bool {
    t.bytes().any(|b| matches!(b, b'n' | b'N' | b'i' | b'I')) && {
        let l = t.to_ascii_lowercase();
        l.contains("nan") || l.contains("inf")
    }
}

/// Reads a step: a non-negative integer (`12`, `1,000`, `12.0`).
pub fn parse_step(cell: &str) -> Result<u64, CellError> {
    let t = cell.trim().trim_matches('"');
    if let Ok(v) = t.parse::<u64>() {
        return Ok(v);
    }
    if has_nan_or_inf(t) || t.starts_with('-') {
        return Err(CellError::new(
            format!("step '{t}' is not a non-negative integer"),
            true,
        ));
    }
    let clean = check_number(t)
        .map_err(|_| CellError::new(format!("step '{t}' is not an integer"), false))?;
    if let Ok(v) = clean.parse::<u64>() {
        return Ok(v);
    }
    match clean.parse::<f64>() {
        Ok(v) if v.is_finite() && v.fract() == 0.0 && v >= 0.0 && v < 2f64.powi(63) => Ok(v as u64),
        Ok(v) if !v.is_finite() || v >= 2f64.powi(63) => {
            Err(CellError::new(format!("step '{t}' is too large"), true))
        }
        _ => Err(CellError::new(
            format!("step '{t}' is not an integer"),
            false,
        )),
    }
}

/// Reads a time in seconds: a number (× `factor`) or an ISO 8601 date-time
/// (`2024-05-01T12:00:03.5Z`, `2024-05-01 12:00:03,123`, `…+02:00`; no zone means UTC).
pub fn parse_time(cell: &str, factor: f64) -> Result<f64, CellError> {
    let t = cell.trim().trim_matches('"');
    if let Some(s) = parse_iso8601(t) {
        return Ok(s);
    }
    let lower = t.to_ascii_lowercase();
    if lower.contains("nan") || lower.contains("inf") {
        return Err(CellError::new(
            format!("time '{t}' is not a finite number"),
            true,
        ));
    }
    let body = t.strip_prefix('-').unwrap_or(t);
    let clean = check_number(body).map_err(|_| {
        CellError::new(
            format!("time '{t}' is neither a number of seconds nor an ISO 8601 date-time"),
            false,
        )
    })?;
    let v: f64 = clean
        .parse()
        .map_err(|_| CellError::new(format!("time '{t}' is not a number"), false))?;
    let v = if t.starts_with('-') { -v } else { v } * factor;
    if !v.is_finite() {
        return Err(CellError::new(format!("time '{t}' is too large"), true));
    }
    Ok(v)
}

/// Seconds since 1970-01-01T00:00:00Z of an ISO 8601 date-time, or `None` if `s` is not one.
pub fn parse_iso8601(s: &str) -> Option<f64> {
    let b = s.as_bytes();
    if b.len() < 19
        || b[4] != b'-'
        || b[7] != b'-'
        || !(b[10] == b'T' || b[10] == b' ')
        || b[13] != b':'
        || b[16] != b':'
    {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let p = s.get(r)?;
        p.bytes()
            .all(|c| c.is_ascii_digit())
            .then(|| p.parse().ok())?
    };
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, se) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || se > 60 {
        return None;
    }
    let mut rest = &s[19..];
    let mut frac = 0.0;
    if rest.starts_with(['.', ',']) {
        let digits: String = rest[1..]
            .chars()
            .take_while(|c| c.is_ascii_digit())
            .collect();
        if digits.is_empty() {
            return None;
        }
        frac = format!("0.{digits}").parse().ok()?;
        rest = &rest[1 + digits.len()..];
    }
    let offset = match rest {
        "" | "Z" | "z" => 0,
        _ => {
            let sign = match rest.as_bytes()[0] {
                b'+' => 1,
                b'-' => -1,
                _ => return None,
            };
            let z = rest[1..].replace(':', "");
            if z.len() != 4 || !z.bytes().all(|c| c.is_ascii_digit()) {
                return None;
            }
            sign * (z[..2].parse::<i64>().ok()? * 3600 + z[2..].parse::<i64>().ok()? * 60)
        }
    };
    // Days from civil (Howard Hinnant's algorithm), proleptic Gregorian calendar.
    let yy = if mo <= 2 { y - 1 } else { y };
    let era = yy.div_euclid(400);
    let yoe = yy - era * 400;
    let mp = (mo + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146097 + doe - 719468;
    Some((days * 86400 + h * 3600 + mi * 60 + se - offset) as f64 + frac)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_in_column_names() {
        assert_eq!(split_unit("rss_mb"), ("rss".into(), Some(Unit::MB)));
        assert_eq!(split_unit("mem (MiB)"), ("mem".into(), Some(Unit::MiB)));
        assert_eq!(split_unit("Heap [GB]"), ("heap".into(), Some(Unit::GB)));
        assert_eq!(
            split_unit("heap_live_bytes"),
            ("heap_live".into(), Some(Unit::B))
        );
        assert_eq!(split_unit("memory"), ("memory".into(), None));
        assert_eq!(time_factor("time_ms"), 1e-3);
        assert_eq!(time_factor("elapsed (s)"), 1.0);
        assert_eq!(time_factor("elapsed"), 1.0);
    }

    #[test]
    fn roles_from_names() {
        assert_eq!(score("step", Role::Step), Some(9));
        assert_eq!(score("Iteration", Role::Step), Some(8));
        assert_eq!(score("rss_mb", Role::Value), Some(7));
        assert_eq!(score("heap_live_bytes", Role::Value), Some(9));
        assert_eq!(score("max_memory_allocated", Role::Value), None);
        assert_eq!(score("mem (MiB)", Role::Value), Some(5));
        assert_eq!(score("timestamp", Role::Time), Some(5));
        assert_eq!(score("time_ms", Role::Time), Some(4));
        assert_eq!(score("loss", Role::Value), None);
        assert_eq!(label_for("rss_mb"), "RSS");
        assert_eq!(label_for("heap_live"), "heap live");
        assert_eq!(label_for("memory"), "value");
    }

    #[test]
    fn values_steps_and_times() {
        assert_eq!(
            parse_value("1,234", Unit::MB, None).unwrap(),
            (1234e6, None)
        );
        assert_eq!(
            parse_value("1.5 GiB", Unit::B, None).unwrap(),
            (1.5 * 1073741824.0, Some(Unit::GiB))
        );
        assert_eq!(
            parse_value("12MB", Unit::B, Some(Unit::MiB)).unwrap().0,
            12.0 * 1048576.0
        );
        for (bad, fatal) in [
            ("NaN", true),
            ("inf", true),
            ("1e400", true),
            ("12,3", false),
            ("", false),
            ("5 XB", false),
        ] {
            let e = parse_value(bad, Unit::B, None).unwrap_err();
            assert_eq!(e.fatal, fatal, "{bad}: {e:?}");
        }
        assert_eq!(parse_step("1,000").unwrap(), 1000);
        assert_eq!(parse_step("12.0").unwrap(), 12);
        assert!(
            parse_step("12.5").is_err()
                && parse_step("-1").unwrap_err().fatal
                && parse_step("1e30").unwrap_err().fatal
        );
        assert_eq!(parse_time("1500", 1e-3).unwrap(), 1.5);
        assert_eq!(parse_iso8601("1970-01-01T00:00:00Z"), Some(0.0));
        assert_eq!(parse_iso8601("2000-03-01 00:00:00"), Some(951868800.0));
        assert_eq!(
            parse_iso8601("2024-05-01T12:00:03.5+02:00"),
            Some(1714557603.5)
        );
        assert_eq!(
            parse_iso8601("2024-05-01 12:00:03,250"),
            Some(1714564803.25)
        );
        assert!(parse_iso8601("2024-13-01T00:00:00").is_none());
        assert!(parse_time("NaN", 1.0).unwrap_err().fatal);
    }
}
