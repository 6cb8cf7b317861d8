//! Text logs read with a regular expression: named groups `step` and `value` (required), `unit` and
//! `time` (optional). Lines that do not match are skipped; a line that matches but holds a bad
//! number is an error with its line number.
//!
//! The default pattern catches common lines such as `step 120 | loss 2.31 | mem 1,234.5 MB` or
//! `2024-05-01 12:00:03 INFO iter=120 allocated: 1.5 GiB`: the first number followed by a size
//! unit after `step` / `iter` / `iteration` / `global_step` and a step number.

use regex::Regex;

use crate::analysis::leak::MemorySeries;
use crate::input::series_fields::{label_for, parse_step, parse_time, parse_value, CellError};
use crate::input::series_types::{last_nonblank_line, Collector, ParseOptions, SeriesError};
use crate::units::Unit;

/// The default log pattern.
pub const DEFAULT_PATTERN: &str = r"(?i)^(?:\[?(?P<time>\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?)\]?)?.*?\b(?:global[_ ]?step|step|iteration|iter|it)\b\s*[:=#]?\s*(?P<step>\d+(?:,\d{3})*)\b.*?(?P<value>\d+(?:,\d{3})*(?:\.\d+)?)\s*(?P<unit>[KMGT]i?B|bytes)\b";

pub(crate) fn parse(
    text: &str,
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
    let last = last_nonblank_line(text);
    let mut c = Collector::new(opts.unit.is_some());
    let mut skipped = 0usize;
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let Some(caps) = re.captures(raw) else {
            if !raw.trim().is_empty() {
                skipped += 1;
            }
            continue;
        };
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
            Err(e) if line == last && !e.fatal => {
                c.warnings.push(format!(
                    "line {line}: {}; it looks truncated and was ignored",
                    e.message
                ));
            }
            Err(e) => {
                return Err(SeriesError::Line {
                    line,
                    message: e.message,
                })
            }
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
    let label = label_for(pattern_label_hint(text, &re));
    c.finish(&label, last, text.ends_with('\n'))
}

/// A word near the value on the first matching line, to name what was measured ("RSS", "heap").
fn pattern_label_hint<'a>(text: &'a str, re: &Regex) -> &'a str {
    text.lines()
        .find_map(|l| {
            let caps = re.captures(l)?;
            let v = caps.name("value")?;
            let before = &l[..v.start()];
            let from = (0..=before.len().saturating_sub(24))
                .rev()
                .find(|&i| before.is_char_boundary(i))
                .unwrap_or(0);
            Some(&before[from..])
        })
        .unwrap_or("")
}
