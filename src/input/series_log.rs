//! Text logs read with a regular expression: named groups `step` and `value` (required), `unit` and
//! `time` (optional). Lines that do not match are skipped; a line that matches but holds a bad
//! number is an error with its line number.
//!
//! The default pattern catches common lines such as `step 120 | loss 2.31 | mem 1,234.5 MB` or
//! `2024-05-01 12:00:03 INFO iter=120 allocated: 1.5 GiB`: the first number followed by a size
//! unit after `step` / `iter` / `iteration` / `global_step` and a step number.

use regex::Regex;

use crate::input::series_fields::{label_for, parse_step, parse_time, parse_value, CellError};
use crate::input::series_types::{Collector, Lines, ParseOptions, SeriesError};
use crate::record::leak::MemorySeries;
use crate::units::Unit;
use std::io::BufRead;

/// The default log pattern.
pub const DEFAULT_PATTERN: &str = r"(?i)^(?:\[?(?P<time>\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?)\]?)?.*?\b(?:global[_ ]?step|step|iteration|iter|it)\b\s*[:=#]?\s*(?P<step>\d+(?:,\d{3})*)\b.*?(?P<value>-?\d+(?:,\d{3})*(?:\.\d+)?(?:[eE][+-]?\d+)?)\s*(?P<unit>[KMGT]i?B|bytes)\b";

pub(crate) fn parse(
    r: &mut dyn BufRead,
    opts: &ParseOptions,
) -> Result<(MemorySeries, Vec<String>), SeriesError> {
    let pattern = opts.pattern.as_deref().unwrap_or(DEFAULT_PATTERN);
    let re = Regex::new(pattern).map_err(|e| SeriesError::Pattern(e.to_string()))?;
    let groups: Vec<&str> = re.capture_names().flatten().collect();
    for g in ["step", "value"] {
        if !groups.contains(&g) {
            return Err(SeriesError::Pattern(format!(
                "no named group '{g}'; write e.g. 'Step (?P<step>\\d+):\\s+(?P<value>[\\d,]+) MB'"
            )));
        }
    }
    let mut lines = Lines::new(r);
    let mut c = Collector::new(opts.unit.is_some(), opts.expected_samples);
    let mut skipped = 0usize;
    let mut label_hint: Option<String> = None;
    // A matching line with a number cut short: an error only if another matching line follows.
    let mut pending: Option<(usize, String)> = None;
    while let Some((line, raw)) = lines.next_line()? {
        let Some(caps) = re.captures(raw) else {
            if !raw.trim().is_empty() {
                skipped += 1;
            }
            continue;
        };
        if let Some((pl, message)) = pending.take() {
            return Err(SeriesError::Line { line: pl, message });
        }
        if label_hint.is_none() {
            label_hint = Some(label_before_value(raw, &caps));
        }
        let read = || -> Result<(u64, f64, Option<Unit>, Option<f64>), CellError> {
            let step = parse_step(caps.name("step").map_or("", |m| m.as_str()))?;
            let unit = match caps
                .name("unit")
                .map(|m| m.as_str().trim())
                .filter(|u| !u.is_empty())
            {
                None => None,
                Some(u) => Some(Unit::parse(u).ok_or_else(|| CellError {
                    message: format!("unknown unit '{u}' (valid: {})", crate::units::UNIT_NAMES),
                    fatal: false,
                })?),
            };
            let (value, _) = parse_value(
                caps.name("value").map_or("", |m| m.as_str()),
                unit.unwrap_or(Unit::B),
                opts.unit,
            )?;
            let time = caps
                .name("time")
                .map(|m| parse_time(m.as_str(), 1.0))
                .transpose()?;
            Ok((step, value, unit, time))
        };
        match read() {
            Ok((step, value, unit, time)) => {
                c.unit_known |= unit.is_some();
                c.note_override(unit, opts.unit, line);
                c.push(line, Some(step), value, time)?;
            }
            Err(e) if !e.fatal => pending = Some((line, e.message)),
            Err(e) => {
                return Err(SeriesError::Line {
                    line,
                    message: e.message,
                })
            }
        }
    }
    if let Some((line, message)) = pending {
        if line == lines.last_nonblank {
            c.warnings.push(format!(
                "line {line}: {message}; it looks truncated and was ignored"
            ));
        } else {
            return Err(SeriesError::Line { line, message });
        }
    }
    if c.is_empty() {
        return Err(SeriesError::Empty(format!(
            "no line matched the pattern {}; pass --pattern with named groups, e.g. 'Step (?P<step>\\d+):\\s+(?P<value>[\\d,]+) MB'",
            if opts.pattern.is_some() { "given" } else { "for 'step N … X MB' lines" }
        )));
    }
    if skipped > 0 {
        c.warnings.push(format!(
            "{skipped} non-empty line(s) did not match the pattern and were skipped"
        ));
    }
    let label = label_for(label_hint.as_deref().unwrap_or(""));
    c.finish(&label, lines.last_nonblank, lines.ends_with_newline)
}

/// Up to 24 bytes before the value on a matching line, to name what was measured ("RSS", "heap").
fn label_before_value(line: &str, caps: &regex::Captures) -> String {
    let Some(v) = caps.name("value") else {
        return String::new();
    };
    let before = &line[..v.start()];
    let from = (0..=before.len().saturating_sub(24))
        .rev()
        .find(|&i| before.is_char_boundary(i))
        .unwrap_or(0);
    before[from..].to_string()
}
