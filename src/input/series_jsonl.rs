//! JSON lines memory logs: one object per line, keys recognised like CSV columns (nested objects are
//! flattened to dotted keys: `{"mem": {"rss": 1}}` has the key `mem.rss`). Values may be numbers or
//! strings with a unit (`"1.5 GiB"`).

use serde_json::{Map, Value};

use crate::input::series_fields::{parse_step, parse_time, parse_value, CellError};
use crate::input::series_types::{
    choose_columns, Collector, Columns, Lines, ParseOptions, SeriesError,
};
use crate::record::leak::MemorySeries;
use crate::units::Unit;
use std::io::BufRead;

pub(crate) fn parse(
    r: &mut dyn BufRead,
    opts: &ParseOptions,
) -> Result<(MemorySeries, Vec<String>), SeriesError> {
    let mut lines = Lines::new(r);
    let mut c = Collector::new(opts.unit.is_some(), opts.expected_samples);
    let mut cols: Option<Columns> = None;
    // A line cut off (JSON ends early): an error only if another line follows.
    let mut pending: Option<(usize, String)> = None;
    while let Some((line, raw)) = lines.next_line()? {
        let l = raw.trim();
        if l.is_empty() {
            continue;
        }
        if let Some((pl, msg)) = pending.take() {
            return Err(SeriesError::Line {
                line: pl,
                message: format!("invalid JSON: {msg}"),
            });
        }
        let obj = match serde_json::from_str::<Value>(l) {
            Ok(Value::Object(o)) => flatten(o),
            Ok(_) => {
                return Err(SeriesError::Line {
                    line,
                    message: "expected a JSON object such as {\"step\": 1, \"rss\": 123}".into(),
                })
            }
            Err(e) if e.is_eof() => {
                pending = Some((line, e.to_string()));
                continue;
            }
            Err(e) => {
                return Err(SeriesError::Line {
                    line,
                    message: format!("invalid JSON: {e}"),
                })
            }
        };
        if cols.is_none() {
            let names: Vec<String> = obj.iter().map(|(k, _)| k.clone()).collect();
            let chosen = choose_columns(&names, opts, "key", &mut c.warnings)?;
            c.unit_known |= chosen.value_unit.is_some();
            c.relative_name = chosen.relative;
            cols = Some(chosen);
        }
        let Some(k) = cols.as_ref() else { continue };
        match read_object(&obj, k, opts) {
            Ok((step, value, stated, time)) => {
                c.unit_known |= stated.is_some();
                c.note_override(stated.or(k.value_unit), opts.unit, line);
                c.push(line, step, value, time)?;
            }
            Err(e) => {
                return Err(SeriesError::Line {
                    line,
                    message: e.message,
                })
            }
        }
    }
    if let Some((line, msg)) = pending {
        c.warnings.push(format!(
            "line {line} is cut off ({msg}); it looks truncated and was ignored"
        ));
    }
    let label = cols
        .as_ref()
        .map_or("value".to_string(), |k| k.label.clone());
    c.finish(&label, lines.last_nonblank, lines.ends_with_newline)
}

type Row = (Option<u64>, f64, Option<Unit>, Option<f64>);

fn read_object(
    obj: &[(String, Value)],
    k: &Columns,
    opts: &ParseOptions,
) -> Result<Row, CellError> {
    let get = |key: &str| -> Result<String, CellError> {
        match obj.iter().find(|(n, _)| n == key).map(|(_, v)| v) {
            None => Err(CellError {
                message: format!("no key '{key}'"),
                fatal: false,
            }),
            Some(Value::Number(n)) => Ok(n.to_string()),
            Some(Value::String(s)) => Ok(s.clone()),
            Some(other) => Err(CellError {
                message: format!("'{key}' is {other}, expected a number"),
                fatal: true,
            }),
        }
    };
    let step = k
        .step
        .as_deref()
        .map(|s| get(s).and_then(|v| parse_step(&v)))
        .transpose()?;
    let (value, stated) = parse_value(&get(&k.value)?, k.value_unit.unwrap_or(Unit::B), opts.unit)?;
    let time = k
        .time
        .as_deref()
        .map(|t| get(t).and_then(|v| parse_time(&v, k.time_factor)))
        .transpose()?;
    Ok((step, value, stated, time))
}

/// Flattens nested objects to dotted keys, in order.
fn flatten(o: Map<String, Value>) -> Vec<(String, Value)> {
    let mut out = Vec::new();
    fn walk(prefix: &str, o: Map<String, Value>, out: &mut Vec<(String, Value)>) {
        for (k, v) in o {
            let key = if prefix.is_empty() {
                k
            } else {
                format!("{prefix}.{k}")
            };
            match v {
                Value::Object(inner) => walk(&key, inner, out),
                v => out.push((key, v)),
            }
        }
    }
    walk("", o, &mut out);
    out
}
