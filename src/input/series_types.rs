//! What the series parsers share: the options and format names, the error, the column chooser
//! and the collector that checks and converts each sample (used by `series.rs` and the three
//! format parsers `series_csv.rs`, `series_jsonl.rs`, `series_log.rs`).

use std::io::{BufRead, Read};

use thiserror::Error;

use crate::input::series_fields::{
    is_relative_name, label_for, score, split_unit, time_factor, Role,
};
use crate::record::leak::MemorySeries;
use crate::units::Unit;

/// The layout of a memory log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SeriesFormat {
    Csv,
    Jsonl,
    Log,
}

/// How to read a memory log. Every field is optional: `None` means detect.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ParseOptions {
    pub format: Option<SeriesFormat>,
    /// CSV column or JSON key of the step (`--step-column`).
    pub step_column: Option<String>,
    /// CSV column or JSON key of the memory value (`--value-column`); nested JSON keys as `a.b`.
    pub value_column: Option<String>,
    /// CSV column or JSON key of the time (`--time-column`): seconds or ISO 8601.
    pub time_column: Option<String>,
    /// Regular expression for text logs with named groups `step`, `value`, optional `unit` and `time`.
    pub pattern: Option<String>,
    /// Unit of the values (`--unit`), overriding any unit written in the file.
    pub unit: Option<Unit>,
    /// The input's size in bytes when known (a file): memory for the samples is reserved once.
    pub size_hint_bytes: Option<u64>,
    /// Samples expected (set by the reader from the size and the first lines).
    pub expected_samples: Option<usize>,
}

/// Why a memory log could not be read.
#[derive(Clone, Debug, PartialEq, Error)]
pub enum SeriesError {
    #[error("line {line}: {message}")]
    Line { line: usize, message: String },
    #[error("{0}")]
    Columns(String),
    #[error("invalid --pattern: {0}")]
    Pattern(String),
    #[error("no samples: {0}")]
    Empty(String),
    /// The input as a whole is not a memory log this tool can read (encoding, layout).
    #[error("{0}")]
    Input(String),
    #[error("read error: {0}")]
    Io(String),
}

/// The CSV delimiter of a line: comma, else tab, else semicolon.
pub(crate) fn csv_delimiter(line: &str) -> u8 {
    if line.contains(',') {
        b','
    } else if line.contains('\t') {
        b'\t'
    } else if line.contains(';') {
        b';'
    } else {
        b','
    }
}

/// Which field holds what, once the header (or the first JSON object) is known.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Columns {
    pub step: Option<String>,
    pub value: String,
    pub time: Option<String>,
    /// Unit from the value column's name.
    pub value_unit: Option<Unit>,
    /// Seconds per unit of the time column.
    pub time_factor: f64,
    pub label: String,
    /// The value's name says it is relative to a baseline (delta, cumulative, change).
    pub relative: bool,
}

/// Picks the step, value and time fields among `names`, honouring explicit options. `what` is
/// "column" or "key" for messages.
pub(crate) fn choose_columns(
    names: &[String],
    opts: &ParseOptions,
    what: &str,
    warnings: &mut Vec<String>,
) -> Result<Columns, SeriesError> {
    let find = |wanted: &str, flag: &str| -> Result<String, SeriesError> {
        names
            .iter()
            .find(|n| n.as_str() == wanted)
            .or_else(|| names.iter().find(|n| n.eq_ignore_ascii_case(wanted)))
            .cloned()
            .or_else(|| {
                // By position: a 1-based column number.
                let i: usize = wanted.trim().parse().ok()?;
                names.get(i.checked_sub(1)?).cloned()
            })
            .ok_or_else(|| {
                SeriesError::Columns(format!(
                    "{flag} {wanted}: no such {what}; the {what}s are: {} (or give a {what} number from 1 to {})",
                    names.join(", "),
                    names.len()
                ))
            })
    };
    let best = |role: Role, exclude: &[&String]| -> Vec<(u8, &String)> {
        let mut c: Vec<(u8, &String)> = names
            .iter()
            .filter(|n| !exclude.contains(n))
            .filter_map(|n| score(n, role).map(|s| (s, n)))
            .collect();
        c.sort_by_key(|a| std::cmp::Reverse(a.0));
        c
    };
    let step = match &opts.step_column {
        Some(s) => Some(find(s, "--step-column")?),
        None => best(Role::Step, &[]).first().map(|c| c.1.clone()),
    };
    let value = match &opts.value_column {
        Some(v) => find(v, "--value-column")?,
        None => {
            let excl: Vec<&String> = step.iter().collect();
            let cands = best(Role::Value, &excl);
            let Some(first) = cands.first() else {
                // Two columns, no memory name, but a size unit in the second one's name
                // (`run,total_mb`): the second is the value by position, as without a header.
                if names.len() == 2
                    && what == "column"
                    && step.as_ref() != Some(&names[1])
                    && split_unit(&names[1]).1.is_some()
                {
                    warnings.push(format!(
                        "no memory column recognised by name: '{}' (column 2, a size by its unit) is read as the memory value by position; pass --value-column to choose",
                        names[1]
                    ));
                    return finish_columns(
                        step.or_else(|| Some(names[0].clone())),
                        names[1].clone(),
                        what,
                        find_time(names, opts),
                    );
                }
                if names.len() == 1 {
                    return Err(SeriesError::Columns(format!(
                        "one {what}, '{}', and it is not a memory name; pass --value-column 1 to read it as memory values",
                        names[0]
                    )));
                }
                return Err(SeriesError::Columns(format!(
                    "no memory {what} recognised among: {}; pass --value-column NAME or NUMBER (recognised: heap, live, allocated, rss, pss, memory, mem, used, value, bytes, delta, cumulative, change, with an optional unit as in rss_mb or mem (MiB))",
                    names.join(", ")
                )));
            };
            if cands.len() > 1 {
                let others: Vec<&str> = cands[1..].iter().map(|c| c.1.as_str()).collect();
                warnings.push(format!(
                    "several memory {what}s; using '{}' (also: {}); pass --value-column to choose",
                    first.1,
                    others.join(", ")
                ));
            }
            first.1.clone()
        }
    };
    if step.is_none() {
        warnings.push(format!(
            "no step {what} recognised: samples are numbered 0, 1, 2, … in file order; pass --step-column NAME if there is one"
        ));
    }
    let time = match &opts.time_column {
        Some(t) => Some(find(t, "--time-column")?),
        None => {
            let excl: Vec<&String> = step.iter().chain(std::iter::once(&value)).collect();
            best(Role::Time, &excl).first().map(|c| c.1.clone())
        }
    };
    finish_columns(step, value, what, Ok(time))
}

/// The time field when the value was chosen by position: the flag's, else a recognised name.
fn find_time(names: &[String], opts: &ParseOptions) -> Result<Option<String>, SeriesError> {
    match &opts.time_column {
        Some(t) => names
            .iter()
            .find(|n| n.eq_ignore_ascii_case(t))
            .cloned()
            .map(Some)
            .ok_or_else(|| {
                SeriesError::Columns(format!(
                    "--time-column {t}: no such column; the columns are: {}",
                    names.join(", ")
                ))
            }),
        None => Ok(names
            .iter()
            .filter_map(|n| score(n, Role::Time).map(|s| (s, n)))
            .max_by_key(|c| c.0)
            .map(|c| c.1.clone())),
    }
}

fn finish_columns(
    step: Option<String>,
    value: String,
    what: &str,
    time: Result<Option<String>, SeriesError>,
) -> Result<Columns, SeriesError> {
    let time = time?.filter(|t| *t != value && Some(t) != step.as_ref());
    if step.as_ref() == Some(&value) {
        return Err(SeriesError::Columns(format!(
            "the step and the value are the same {what} '{value}'"
        )));
    }
    Ok(Columns {
        value_unit: split_unit(&value).1,
        time_factor: time.as_deref().map_or(1.0, time_factor),
        label: label_for(&value),
        relative: is_relative_name(&value),
        step,
        value,
        time,
    })
}

/// Longest line read (a file without line breaks is not a memory log).
pub(crate) const MAX_LINE_BYTES: usize = 1 << 20;

/// Reads a byte stream line by line, one line in memory at a time: 1-based line numbers, UTF-8
/// checked per line (the error names the line), the number of the last non-blank line so far and
/// whether the input ended with a line break.
pub(crate) struct Lines<'a> {
    r: &'a mut dyn BufRead,
    buf: Vec<u8>,
    pub number: usize,
    pub last_nonblank: usize,
    pub ends_with_newline: bool,
}

impl<'a> Lines<'a> {
    pub fn new(r: &'a mut dyn BufRead) -> Self {
        Lines {
            r,
            buf: Vec::new(),
            number: 0,
            last_nonblank: 0,
            ends_with_newline: true,
        }
    }

    /// The next line without its line ending, with its number; `None` at the end.
    pub fn next_line(&mut self) -> Result<Option<(usize, &str)>, SeriesError> {
        self.buf.clear();
        let n = (&mut *self.r)
            .take(MAX_LINE_BYTES as u64)
            .read_until(b'\n', &mut self.buf)
            .map_err(|e| SeriesError::Io(e.to_string()))?;
        if n == 0 {
            return Ok(None);
        }
        self.number += 1;
        let line = self.number;
        self.ends_with_newline = self.buf.last() == Some(&b'\n');
        if !self.ends_with_newline && n == MAX_LINE_BYTES {
            return Err(SeriesError::Line {
                line,
                message: format!(
                    "longer than {} MiB without a line break: not a memory log line",
                    MAX_LINE_BYTES >> 20
                ),
            });
        }
        while self.buf.last().is_some_and(|&b| b == b'\n' || b == b'\r') {
            self.buf.pop();
        }
        let s = std::str::from_utf8(&self.buf).map_err(|e| SeriesError::Line {
            line,
            message: format!(
                "not UTF-8 text (invalid byte at column {}); convert the file to UTF-8",
                e.valid_up_to() + 1
            ),
        })?;
        if !s.trim().is_empty() {
            self.last_nonblank = line;
        }
        Ok(Some((line, s)))
    }
}

/// Accumulates samples, checking order, and builds the series. Holds two numbers per sample (step,
/// value) plus a time only while every sample has one: the line numbers are not kept.
#[derive(Debug, Default)]
pub(crate) struct Collector {
    steps: Vec<u64>,
    values: Vec<f64>,
    /// One per sample while every sample so far had a time.
    times: Vec<f64>,
    /// Some sample had a time and some did not.
    time_missing: bool,
    /// The first line whose time is earlier than the previous sample's.
    time_backwards: Option<usize>,
    /// Line of the last sample added.
    last_line: usize,
    pub warnings: Vec<String>,
    /// Set when some line stated a unit and `--unit` overrode it (warned once).
    overridden: bool,
    /// Whether any unit was known (flag, header or a line).
    pub unit_known: bool,
    /// The unit the values came in (the flag, else the first one stated), for reporting.
    unit: Option<Unit>,
    /// The value field's name says it is relative to a baseline (delta, cumulative, change).
    pub relative_name: bool,
}

impl Collector {
    /// A collector; `unit_known` says whether the flag or a header gave a unit; `expected`
    /// samples are reserved (capped: a wrong guess costs nothing but a reallocation).
    pub fn new(unit_known: bool, expected: Option<usize>) -> Self {
        let cap = expected.unwrap_or(0).min(1 << 28);
        Collector {
            unit_known,
            steps: Vec::with_capacity(cap),
            values: Vec::with_capacity(cap),
            ..Default::default()
        }
    }

    /// True when no sample has been added.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// Adds one sample read on `line`. Steps must strictly increase.
    pub fn push(
        &mut self,
        line: usize,
        step: Option<u64>,
        value: f64,
        time: Option<f64>,
    ) -> Result<(), SeriesError> {
        let step = step.unwrap_or(self.steps.len() as u64);
        if let Some(&prev) = self.steps.last() {
            let prev_line = self.last_line;
            if step < prev {
                return Err(SeriesError::Line {
                    line,
                    message: format!("step {step} goes backwards (step {prev} was on line {prev_line}); steps must increase"),
                });
            }
            if step == prev {
                return Err(SeriesError::Line {
                    line,
                    message: format!(
                        "step {step} repeats (also on line {prev_line}); steps must increase"
                    ),
                });
            }
        }
        match time {
            Some(t) if !self.time_missing && self.times.len() == self.steps.len() => {
                if self.times.last().is_some_and(|&p| t < p) && self.time_backwards.is_none() {
                    self.time_backwards = Some(line);
                }
                self.times.push(t);
            }
            Some(_) if !self.steps.is_empty() && self.times.is_empty() => {
                self.time_missing = true;
            }
            None if !self.times.is_empty() => {
                self.time_missing = true;
                self.times = Vec::new();
            }
            _ => {}
        }
        self.steps.push(step);
        self.values.push(value);
        self.last_line = line;
        Ok(())
    }

    /// Warns once that `--unit` overrides a unit written in the file; remembers the unit the values
    /// came in.
    pub fn note_override(&mut self, stated: Option<Unit>, flag: Option<Unit>, line: usize) {
        if self.unit.is_none() {
            self.unit = flag.or(stated);
        }
        if let (Some(s), Some(f)) = (stated, flag) {
            if s != f && !self.overridden {
                self.overridden = true;
                self.warnings.push(format!(
                    "line {line} says {} but --unit {} was given: values are read as {}",
                    s.name(),
                    f.name(),
                    f.name()
                ));
            }
        }
    }

    /// Builds the series. `last_line` is the number of the input's last non-empty line and
    /// `ends_with_newline` whether the input ends with a line break.
    pub fn finish(
        mut self,
        label: &str,
        last_line: usize,
        ends_with_newline: bool,
    ) -> Result<(MemorySeries, Vec<String>), SeriesError> {
        let n = self.values.len();
        // A number cut short on an unterminated last line: an implausible drop below a tenth (only
        // for absolute memory: values relative to a baseline cross zero).
        if !ends_with_newline
            && n >= 2
            && self.last_line == last_line
            && self.values[n - 2] > 0.0
            && self.values[n - 1] >= 0.0
            && self.values[n - 1] < 0.1 * self.values[n - 2]
        {
            self.warnings.push(format!(
                "line {last_line} has no line ending and its value is under a tenth of the previous one: it looks cut off and was ignored"
            ));
            self.steps.pop();
            self.values.pop();
            if self.times.len() == n {
                self.times.pop();
            }
        }
        if self.values.is_empty() {
            return Err(SeriesError::Empty(
                "no line held a step and a memory value".into(),
            ));
        }
        let n = self.values.len();
        let seconds = if self.time_missing {
            self.warnings
                .push("some lines have no time; the time column is ignored".into());
            None
        } else if self.times.len() == n {
            match self.time_backwards {
                Some(line) => {
                    self.warnings.push(format!(
                        "time goes backwards on line {line}; the time column is ignored"
                    ));
                    None
                }
                None => {
                    let t0 = self.times[0];
                    for t in &mut self.times {
                        *t -= t0;
                    }
                    Some(std::mem::take(&mut self.times))
                }
            }
        } else {
            None
        };
        let max_abs = self.values.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        if !self.unit_known && max_abs < 1e6 {
            self.warnings.push(format!(
                "no unit given: values are read as bytes (the largest is {max_abs}); pass --unit MB (or MiB, GB, …) if they are not"
            ));
        }
        let negative = self.values.iter().any(|v| *v < 0.0);
        let series = MemorySeries {
            steps: self.steps,
            values: self.values,
            seconds,
            label: label.to_string(),
            unit: self.unit,
            relative: negative || self.relative_name,
        };
        Ok((series, self.warnings))
    }
}
