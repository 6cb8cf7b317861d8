//! What the series parsers share: the options and format names, the error, the column chooser
//! and the collector that checks and converts each sample (used by `series.rs` and the three
//! format parsers `series_csv.rs`, `series_jsonl.rs`, `series_log.rs`).

use thiserror::Error;

use crate::analysis::leak::MemorySeries;
use crate::input::series_fields::{label_for, score, split_unit, time_factor, Role};
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
            .ok_or_else(|| {
                SeriesError::Columns(format!(
                    "{flag} {wanted}: no such {what}; the {what}s are: {}",
                    names.join(", ")
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
                return Err(SeriesError::Columns(format!(
                    "no memory {what} recognised among: {}; pass --value-column NAME (recognised: heap, live, allocated, rss, pss, memory, mem, used, value, bytes, with an optional unit as in rss_mb or mem (MiB))",
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
    if step.as_ref() == Some(&value) {
        return Err(SeriesError::Columns(format!(
            "the step and the value are the same {what} '{value}'"
        )));
    }
    Ok(Columns {
        value_unit: split_unit(&value).1,
        time_factor: time.as_deref().map_or(1.0, time_factor),
        label: label_for(&value),
        step,
        value,
        time,
    })
}

/// Accumulates samples, checking order, and builds the series.
#[derive(Debug, Default)]
pub(crate) struct Collector {
    steps: Vec<u64>,
    values: Vec<f64>,
    times: Vec<Option<f64>>,
    lines: Vec<usize>,
    pub warnings: Vec<String>,
    /// Set when some line stated a unit and `--unit` overrode it (warned once).
    overridden: bool,
    /// Whether any unit was known (flag, header or a line).
    pub unit_known: bool,
}

impl Collector {
    /// A collector; `unit_known` says whether the flag or a header gave a unit.
    pub fn new(unit_known: bool) -> Self {
        Collector {
            unit_known,
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
        if let (Some(&prev), Some(&prev_line)) = (self.steps.last(), self.lines.last()) {
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
        self.steps.push(step);
        self.values.push(value);
        self.times.push(time);
        self.lines.push(line);
        Ok(())
    }

    /// Warns once that `--unit` overrides a unit written in the file.
    pub fn note_override(&mut self, stated: Option<Unit>, flag: Option<Unit>, line: usize) {
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

    /// Builds the series. `last_line` is the number of the file's last non-empty line and
    /// `ends_with_newline` whether the text ends with a line break.
    pub fn finish(
        mut self,
        label: &str,
        last_line: usize,
        ends_with_newline: bool,
    ) -> Result<(MemorySeries, Vec<String>), SeriesError> {
        let n = self.values.len();
        // A number cut short on an unterminated last line: an implausible drop below a tenth.
        if !ends_with_newline
            && n >= 2
            && self.lines[n - 1] == last_line
            && self.values[n - 1] < 0.1 * self.values[n - 2]
        {
            self.warnings.push(format!(
                "line {last_line} has no line ending and its value is under a tenth of the previous one: it looks cut off and was ignored"
            ));
            self.steps.pop();
            self.values.pop();
            self.times.pop();
            self.lines.pop();
        }
        if self.values.is_empty() {
            return Err(SeriesError::Empty(
                "no line held a step and a memory value".into(),
            ));
        }
        let seconds =
            if self.times.iter().all(Option::is_some) && self.times.iter().any(Option::is_some) {
                let t: Vec<f64> = self.times.iter().map(|t| t.unwrap_or(0.0)).collect();
                match t.windows(2).position(|w| w[1] < w[0]) {
                    Some(i) => {
                        self.warnings.push(format!(
                            "time goes backwards on line {}; the time column is ignored",
                            self.lines[i + 1]
                        ));
                        None
                    }
                    None => Some(t.iter().map(|v| v - t[0]).collect()),
                }
            } else {
                if self.times.iter().any(Option::is_some) {
                    self.warnings
                        .push("some lines have no time; the time column is ignored".into());
                }
                None
            };
        let max = self.values.iter().cloned().fold(0.0, f64::max);
        if !self.unit_known && max < 1e6 {
            self.warnings.push(format!(
                "no unit given: values are read as bytes (the largest is {max}); pass --unit MB (or MiB, GB, …) if they are not"
            ));
        }
        let series = MemorySeries {
            steps: self.steps,
            values: self.values,
            seconds,
            label: label.to_string(),
        };
        Ok((series, self.warnings))
    }
}

/// Number of the last line of `text` that is not blank (1-based; 0 for empty text).
pub(crate) fn last_nonblank_line(text: &str) -> usize {
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, _)| i + 1)
        .last()
        .unwrap_or(0)
}
