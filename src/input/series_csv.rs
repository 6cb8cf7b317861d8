//! CSV (or TSV / semicolon-separated) memory logs, with or without a header.
//!
//! With a header, columns are recognised by name (see [`crate::input::series_fields::score`]) or named
//! with `--step-column`, `--value-column`, `--time-column`. Without one, column 1 is the step and
//! column 2 the value (a single column is the value, numbered in file order), or give 1-based column
//! numbers. Lines starting with `#` are comments.

use crate::analysis::leak::MemorySeries;
use crate::input::series_fields::{parse_iso8601, parse_step, parse_time, parse_value, CellError};
use crate::input::series_types::{
    choose_columns, csv_delimiter, last_nonblank_line, Collector, Columns, ParseOptions,
    SeriesError,
};
use crate::units::{check_number, Unit};

pub(crate) fn parse(
    text: &str,
    opts: &ParseOptions,
) -> Result<(MemorySeries, Vec<String>), SeriesError> {
    let first = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.starts_with('#'))
        .unwrap_or("");
    let mut rdr = ::csv::ReaderBuilder::new()
        .delimiter(csv_delimiter(first))
        .has_headers(false)
        .flexible(true)
        .comment(Some(b'#'))
        .trim(::csv::Trim::All)
        .from_reader(text.as_bytes());
    let mut records: Vec<(usize, Vec<String>)> = Vec::new();
    for rec in rdr.records() {
        match rec {
            Ok(r) => {
                if r.iter().all(|f| f.is_empty()) {
                    continue;
                }
                let line = r.position().map_or(0, |p| p.line() as usize);
                records.push((line, r.iter().map(str::to_string).collect()));
            }
            Err(e) => {
                let line = e.position().map_or(0, |p| p.line() as usize);
                return Err(SeriesError::Line {
                    line,
                    message: format!("unreadable CSV: {e}"),
                });
            }
        }
    }
    let Some((_, head)) = records.first().cloned() else {
        return Err(SeriesError::Empty("the CSV has no rows".into()));
    };
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
    let mut c = Collector::new(opts.unit.is_some() || cols.value_unit.is_some());
    c.warnings = warnings;
    let data = if has_header {
        &records[1..]
    } else {
        &records[..]
    };
    let last_record_line = data.last().map_or(0, |r| r.0);
    for (line, fields) in data {
        let line = *line;
        let is_last = line == last_record_line;
        if fields.len() > width {
            return Err(SeriesError::Line {
                line,
                message: format!(
                    "{} fields but the header has {width} (a number with an unquoted thousands separator? write 1234 or \"1,234\")",
                    fields.len()
                ),
            });
        }
        if fields.len() < width {
            if is_last {
                c.warnings.push(format!(
                    "line {line} has {} of {width} fields: it looks truncated and was ignored",
                    fields.len()
                ));
                break;
            }
            return Err(SeriesError::Line {
                line,
                message: format!(
                    "{} fields, expected {width} ({})",
                    fields.len(),
                    names.join(", ")
                ),
            });
        }
        match read_row(fields, step_i, value_i, time_i, &cols, opts) {
            Ok((step, value, stated, time)) => {
                c.unit_known |= stated.is_some();
                c.note_override(stated.or(cols.value_unit), opts.unit, line);
                c.push(line, step, value, time)?;
            }
            Err(e) if is_last && !e.fatal => {
                c.warnings.push(format!(
                    "line {line}: {}; it looks truncated and was ignored",
                    e.message
                ));
                break;
            }
            Err(e) => {
                return Err(SeriesError::Line {
                    line,
                    message: e.message,
                })
            }
        }
    }
    c.finish(&cols.label, last_nonblank_line(text), text.ends_with('\n'))
}

type Row = (Option<u64>, f64, Option<Unit>, Option<f64>);

fn read_row(
    fields: &[String],
    step_i: Option<usize>,
    value_i: usize,
    time_i: Option<usize>,
    cols: &Columns,
    opts: &ParseOptions,
) -> Result<Row, CellError> {
    let step = step_i.map(|i| parse_step(&fields[i])).transpose()?;
    let (value, stated) = parse_value(
        &fields[value_i],
        cols.value_unit.unwrap_or(Unit::B),
        opts.unit,
    )?;
    let time = time_i
        .map(|i| parse_time(&fields[i], cols.time_factor))
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
    })
}
