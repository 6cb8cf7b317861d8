//! CSV (or TSV / semicolon-separated) memory logs, with or without a header.
//!
//! With a header, columns are recognised by name (see [`crate::input::series_fields::score`]) or named
//! with `--step-column`, `--value-column`, `--time-column`. Without one, column 1 is the step and
//! column 2 the value (a single column is the value, numbered in file order), or give 1-based column
//! numbers. Lines starting with `#` are comments.

use crate::input::series_fields::{parse_iso8601, parse_step, parse_time, parse_value, CellError};
use crate::input::series_types::{
    choose_columns, csv_delimiter, Collector, Columns, ParseOptions, SeriesError,
};
use crate::record::leak::MemorySeries;
use crate::units::{check_number, Unit};
use std::io::{BufRead, Read};

/// Remembers whether the last byte read was a line break (a cut-off last line has none).
struct TrackLast<'a> {
    r: &'a mut dyn BufRead,
    last: Option<u8>,
}

impl Read for TrackLast<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.r.read(buf)?;
        if n > 0 {
            self.last = Some(buf[n - 1]);
        }
        Ok(n)
    }
}

/// The fields of one CSV row: one string and where each field ends in it.
#[derive(Default)]
struct Row {
    text: String,
    ends: Vec<usize>,
}

impl Row {
    fn len(&self) -> usize {
        self.ends.len()
    }

    fn get(&self, i: usize) -> &str {
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        self.text.get(start..self.ends[i]).unwrap_or("").trim()
    }
}

/// A row that failed in a way a cut-off last line would (too few fields, a number cut short): an
/// error only if another row follows.
struct Pending {
    line: usize,
    message: String,
}

/// The CSV reader and its one reused record.
struct Records<'a, R: Read> {
    rdr: &'a mut ::csv::Reader<R>,
    rec: ::csv::ByteRecord,
}

impl<R: Read> Records<'_, R> {
    /// Reads the next non-empty record into `fields`; its line, or None at the end.
    fn next(&mut self, fields: &mut Row) -> Result<Option<usize>, SeriesError> {
        let rec = &mut self.rec;
        loop {
            let more = self.rdr.read_byte_record(rec).map_err(|e| {
                let line = e.position().map_or(0, |p| p.line() as usize);
                SeriesError::Line {
                    line,
                    message: format!("unreadable CSV: {e}"),
                }
            })?;
            if !more {
                return Ok(None);
            }
            if rec.iter().all(|f| f.trim_ascii().is_empty()) {
                continue;
            }
            let line = rec.position().map_or(0, |p| p.line() as usize);
            let text = std::str::from_utf8(rec.as_slice()).map_err(|e| SeriesError::Line {
                line,
                message: format!(
                    "not UTF-8 text (invalid byte {} bytes into the row's fields); convert the file to UTF-8",
                    e.valid_up_to()
                ),
            })?;
            // Fields as ranges into one reused string (no allocation per field).
            fields.text.clear();
            fields.text.push_str(text);
            fields.ends.clear();
            fields
                .ends
                .extend((0..rec.len()).map(|i| rec.range(i).map_or(0, |r| r.end)));
            return Ok(Some(line));
        }
    }
}

pub(crate) fn parse(
    r: &mut dyn BufRead,
    opts: &ParseOptions,
) -> Result<(MemorySeries, Vec<String>), SeriesError> {
    // The delimiter from the first data line (the caller's reader holds the start of the input).
    let peek = r.fill_buf().map_err(|e| SeriesError::Io(e.to_string()))?;
    let first = String::from_utf8_lossy(&peek[..peek.len().min(1 << 16)])
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.starts_with('#'))
        .unwrap_or("")
        .to_string();
    let mut src = TrackLast { r, last: None };
    let mut rdr = ::csv::ReaderBuilder::new()
        .delimiter(csv_delimiter(&first))
        .has_headers(false)
        .flexible(true)
        .comment(Some(b'#'))
        .from_reader(&mut src); // fields are trimmed by `Row::get` (csv's trim allocates per row)
    let mut records = Records {
        rdr: &mut rdr,
        rec: ::csv::ByteRecord::new(),
    };
    let mut fields = Row::default();
    let mut next = |fields: &mut Row| records.next(fields);
    let Some(head_line) = next(&mut fields)? else {
        return Err(SeriesError::Empty("the CSV has no rows".into()));
    };
    let head: Vec<String> = (0..fields.len())
        .map(|i| fields.get(i).to_string())
        .collect();
    let data_like =
        |f: &str| check_number(f).is_ok() || parse_iso8601(f).is_some() || f.starts_with('-');
    let has_header = !head.iter().all(|f| data_like(f));
    let mut warnings = Vec::new();
    let names: Vec<String> = if has_header {
        head.clone()
    } else {
        (1..=head.len()).map(|i| i.to_string()).collect()
    };
    let cols = if has_header {
        choose_columns(&names, opts, "column", &mut warnings)?
    } else {
        positional_columns(&names, opts, &mut warnings)?
    };
    let index = |name: &String| names.iter().position(|n| n == name).unwrap_or(0);
    let (step_i, value_i, time_i) = (
        cols.step.as_ref().map(index),
        index(&cols.value),
        cols.time.as_ref().map(index),
    );
    let width = names.len();
    let mut c = Collector::new(
        opts.unit.is_some() || cols.value_unit.is_some(),
        opts.expected_samples,
    );
    c.warnings = warnings;
    c.relative_name = cols.relative;
    let mut pending: Option<Pending> = None;
    let mut last_line = head_line;
    let mut have_row = !has_header;
    loop {
        let line = if have_row {
            have_row = false;
            head_line
        } else {
            match next(&mut fields)? {
                Some(l) => l,
                None => break,
            }
        };
        last_line = line;
        if let Some(p) = pending.take() {
            return Err(SeriesError::Line {
                line: p.line,
                message: p.message,
            });
        }
        if fields.len() > width {
            return Err(SeriesError::Line {
                line,
                message: format!(
                    "{} fields but the {} has {width} ({}); a ragged file, or a number with an unquoted thousands separator? write 1234 or \"1,234\"",
                    fields.len(),
                    if has_header { "header" } else { "first row" },
                    names.join(", ")
                ),
            });
        }
        if fields.len() < width {
            pending = Some(Pending {
                line,
                message: format!(
                    "{} fields, expected {width} ({}); a ragged file: every row needs the same columns",
                    fields.len(),
                    names.join(", ")
                ),
            });
            continue;
        }
        match read_row(&fields, step_i, value_i, time_i, &cols, opts) {
            Ok((step, value, stated, time)) => {
                c.unit_known |= stated.is_some();
                c.note_override(stated.or(cols.value_unit), opts.unit, line);
                c.push(line, step, value, time)?;
            }
            Err(e) if !e.fatal => {
                pending = Some(Pending {
                    line,
                    message: e.message,
                })
            }
            Err(e) => {
                return Err(SeriesError::Line {
                    line,
                    message: e.message,
                })
            }
        }
    }
    drop(rdr);
    if let Some(p) = pending {
        c.warnings.push(format!(
            "line {}: {}; it looks truncated and was ignored",
            p.line, p.message
        ));
    }
    if has_header && c.is_empty() && pending_free(&c) {
        return Err(SeriesError::Empty(format!(
            "the CSV has a header ({}) but no data rows",
            names.join(", ")
        )));
    }
    let ends_with_newline = src.last.is_none_or(|b| b == b'\n' || b == b'\r');
    c.finish(&cols.label, last_line, ends_with_newline)
}

/// Nothing was collected and nothing was dropped as truncated.
fn pending_free(c: &Collector) -> bool {
    c.warnings.iter().all(|w| !w.contains("looks truncated"))
}

type Sample = (Option<u64>, f64, Option<Unit>, Option<f64>);

fn read_row(
    fields: &Row,
    step_i: Option<usize>,
    value_i: usize,
    time_i: Option<usize>,
    cols: &Columns,
    opts: &ParseOptions,
) -> Result<Sample, CellError> {
    let step = step_i.map(|i| parse_step(fields.get(i))).transpose()?;
    let (value, stated) = parse_value(
        fields.get(value_i),
        cols.value_unit.unwrap_or(Unit::B),
        opts.unit,
    )?;
    let time = time_i
        .map(|i| parse_time(fields.get(i), cols.time_factor))
        .transpose()?;
    Ok((step, value, stated, time))
}

/// Columns of a headerless CSV: 1-based numbers from the options, else step = 1 and value = 2
/// (value = 1 when there is a single column).
fn positional_columns(
    names: &[String],
    opts: &ParseOptions,
    warnings: &mut Vec<String>,
) -> Result<Columns, SeriesError> {
    let n = names.len();
    let pick = |spec: &Option<String>, flag: &str| -> Result<Option<String>, SeriesError> {
        match spec {
            None => Ok(None),
            Some(s) => match s.trim().parse::<usize>() {
                Ok(i) if (1..=n).contains(&i) => Ok(Some(i.to_string())),
                _ => Err(SeriesError::Columns(format!(
                    "{flag} {s}: the CSV has no header, so give a column number from 1 to {n}"
                ))),
            },
        }
    };
    let (step, value, time) = (
        pick(&opts.step_column, "--step-column")?,
        pick(&opts.value_column, "--value-column")?,
        pick(&opts.time_column, "--time-column")?,
    );
    let (step, value) = match (step, value) {
        (s, Some(v)) => (s, v),
        (Some(s), None) => {
            let v = if s == "1" && n >= 2 {
                "2".to_string()
            } else {
                "1".to_string()
            };
            (Some(s), v)
        }
        (None, None) if n >= 2 => {
            warnings.push(
                "no header: column 1 is read as the step and column 2 as the memory value".into(),
            );
            (Some("1".to_string()), "2".to_string())
        }
        (None, None) => {
            warnings.push("no header and one column: it is read as the memory value, samples numbered 0, 1, 2, …".into());
            (None, "1".to_string())
        }
    };
    Ok(Columns {
        step,
        value,
        time,
        value_unit: None,
        time_factor: 1.0,
        label: "value".into(),
        relative: false,
    })
}
