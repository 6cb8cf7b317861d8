//! Reads a memory series that someone else wrote (for `memscope analyze FILE`): CSV, JSON lines, or a
//! text log read with a regular expression, streamed from a file or stdin one line at a time.
//!
//! Rules (docs/reliability.md cases 14–15):
//! - a truncated LAST line (fewer fields, JSON cut off, a number cut short and no final newline) is
//!   dropped with a warning, keeping the data before it;
//! - a corrupt line anywhere else, a NaN, inf or 1e400 value, or a step that goes backwards or repeats
//!   is an error naming the line number and what would be valid; negative values are memory relative
//!   to a baseline (deltas, cumulative changes) and are read as such;
//! - UTF-16, binary data, an empty input or a header without rows are named as such.
//! - units convert exactly: `--unit` (wins), else a unit in the line (`12 MB`, a `unit` group), else a
//!   unit in the column name (`rss_mb`, `mem (MiB)`), else bytes (with a warning when values look small).

use std::io::{BufRead, Read};

use crate::input::series_types::csv_delimiter;
pub use crate::input::series_types::{ParseOptions, SeriesError, SeriesFormat};
use crate::record::leak::MemorySeries;
pub use crate::units::Unit;

/// Bytes read ahead to recognise the encoding and the format.
const HEAD_BYTES: usize = 64 * 1024;

/// Parses a memory series from `text`. Returns the series and warnings (truncated last line, guessed
/// columns, units assumed).
pub fn parse_series(
    text: &str,
    opts: &ParseOptions,
) -> Result<(MemorySeries, Vec<String>), SeriesError> {
    parse_reader(&mut text.as_bytes(), opts)
}

/// Parses a memory series from a byte stream (a file or stdin), one line in memory at a time: the
/// first 64 KiB are read ahead to check the encoding and, without `--format`, to find the format
/// that parses (JSON lines, CSV, then a text log with the default pattern).
pub fn parse_reader(
    r: &mut dyn BufRead,
    opts: &ParseOptions,
) -> Result<(MemorySeries, Vec<String>), SeriesError> {
    let head = read_head(r)?;
    check_encoding(&head)?;
    let head = head.strip_prefix(b"\xef\xbb\xbf").unwrap_or(&head);
    let explicit = opts
        .format
        .or_else(|| opts.pattern.as_ref().map(|_| SeriesFormat::Log));
    let format = match explicit {
        Some(f) => f,
        None => detect_by_parsing(head, opts)?,
    };
    let mut warnings = Vec::new();
    if opts.pattern.is_some() && format != SeriesFormat::Log {
        warnings.push("--pattern is only used for text logs; ignored".to_string());
    }
    // Samples expected: the size over the mean length of the first lines, plus 5%.
    let mut sized = opts.clone();
    if let (Some(size), Some(lines)) = (
        opts.size_hint_bytes,
        std::num::NonZeroUsize::new(head.iter().filter(|&&b| b == b'\n').count()),
    ) {
        let per_line = head.len() as f64 / lines.get() as f64;
        sized.expected_samples = Some((size as f64 / per_line * 1.05) as usize + 16);
    }
    let mut input = head.chain(r);
    let (series, more) = parse_as(format, &mut input, &sized)?;
    warnings.extend(more);
    Ok((series, warnings))
}

fn parse_as(
    format: SeriesFormat,
    r: &mut dyn BufRead,
    opts: &ParseOptions,
) -> Result<(MemorySeries, Vec<String>), SeriesError> {
    match format {
        SeriesFormat::Csv => crate::input::series_csv::parse(r, opts),
        SeriesFormat::Jsonl => crate::input::series_jsonl::parse(r, opts),
        SeriesFormat::Log => crate::input::series_log::parse(r, opts),
    }
}

fn format_name(f: SeriesFormat) -> &'static str {
    match f {
        SeriesFormat::Csv => "CSV",
        SeriesFormat::Jsonl => "JSON lines",
        SeriesFormat::Log => "a text log",
    }
}

/// The first [`HEAD_BYTES`] of the input, extended to the end of the line they stop in.
fn read_head(r: &mut dyn BufRead) -> Result<Vec<u8>, SeriesError> {
    let io = |e: std::io::Error| SeriesError::Io(e.to_string());
    let mut head = Vec::new();
    (&mut *r)
        .take(HEAD_BYTES as u64)
        .read_to_end(&mut head)
        .map_err(io)?;
    if head.len() == HEAD_BYTES && head.last() != Some(&b'\n') {
        (&mut *r)
            .take(crate::input::series_types::MAX_LINE_BYTES as u64)
            .read_until(b'\n', &mut head)
            .map_err(io)?;
    }
    Ok(head)
}

/// UTF-16 (with or without a byte-order mark) and binary data are named as such.
fn check_encoding(head: &[u8]) -> Result<(), SeriesError> {
    let utf16 = |order: &str, from: &str| {
        SeriesError::Input(format!(
            "the file is UTF-16{order} text ({from}), not UTF-8: convert it first, e.g. iconv -f UTF-16{order} -t UTF-8 FILE > FILE.utf8"
        ))
    };
    if head.starts_with(&[0xff, 0xfe]) {
        return Err(utf16("LE", "byte-order mark FF FE"));
    }
    if head.starts_with(&[0xfe, 0xff]) {
        return Err(utf16("BE", "byte-order mark FE FF"));
    }
    let Some(first_nul) = head.iter().position(|&b| b == 0) else {
        return Ok(());
    };
    let (mut odd, mut even) = (0usize, 0usize);
    for (i, &b) in head.iter().enumerate() {
        if b == 0 {
            if i % 2 == 1 {
                odd += 1;
            } else {
                even += 1;
            }
        }
    }
    let half = head.len() / 2;
    if odd * 10 >= half * 8 && even * 10 < half {
        return Err(utf16("LE", "every second byte is zero"));
    }
    if even * 10 >= half * 8 && odd * 10 < half {
        return Err(utf16("BE", "every second byte is zero"));
    }
    Err(SeriesError::Input(format!(
        "binary data (a zero byte at offset {first_nul}), not a text memory log (CSV, JSON lines or a text log)"
    )))
}

/// Tries the formats on the head of the input, most likely first, and keeps the first that parses.
/// When none does, the error is the likely format's, with the flags that would help.
fn detect_by_parsing(head: &[u8], opts: &ParseOptions) -> Result<SeriesFormat, SeriesError> {
    let text = String::from_utf8_lossy(head);
    if text.trim().is_empty() {
        return Err(SeriesError::Empty("the input is empty".into()));
    }
    let likely = detect_format(&text);
    let mut order = vec![likely];
    for f in [SeriesFormat::Jsonl, SeriesFormat::Csv, SeriesFormat::Log] {
        if !order.contains(&f) {
            order.push(f);
        }
    }
    let mut errors = Vec::new();
    for f in order {
        match parse_as(f, &mut &head[..], opts) {
            Ok(_) => return Ok(f),
            Err(e) => errors.push((f, e)),
        }
    }
    // The most telling failure: the likely format's own complaint about a line or its columns
    // beats "no line matched the default pattern" and "line 1 is not JSON".
    let first_is_json = text.trim_start().starts_with('{');
    let delimited = text
        .lines()
        .find(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
        .is_some_and(|l| l.contains([',', '\t', ';']));
    let telling = |f: SeriesFormat, e: &SeriesError| -> u8 {
        let likely_bonus = u8::from(f == likely);
        match (f, e) {
            (SeriesFormat::Log, SeriesError::Empty(_)) => 0,
            (SeriesFormat::Jsonl, _) if !first_is_json => 0,
            (SeriesFormat::Csv, _) if likely == SeriesFormat::Log && !delimited => 0,
            (_, SeriesError::Line { .. }) => 2 + likely_bonus,
            _ => 1 + likely_bonus,
        }
    };
    let best = (0..errors.len())
        .max_by_key(|&i| (telling(errors[i].0, &errors[i].1), std::cmp::Reverse(i)))
        .unwrap_or(0);
    let (f, e) = errors.swap_remove(best);
    let hint = format!(
        "read as {}; no format reads this input: choose one with --format csv|jsonl|log, and for a text log give --pattern with groups step and value, e.g. 'Step (?P<step>\\d+):\\s+(?P<value>[\\d,.]+) MB'",
        format_name(f)
    );
    Err(match e {
        SeriesError::Line { line, message } => SeriesError::Line {
            line,
            message: format!("{message} ({hint})"),
        },
        SeriesError::Pattern(m) => SeriesError::Pattern(m),
        SeriesError::Empty(m) => SeriesError::Empty(format!("{m} ({hint})")),
        SeriesError::Columns(m) => SeriesError::Columns(format!("{m} ({hint})")),
        other => SeriesError::Input(format!("{other} ({hint})")),
    })
}

/// Guesses the format: a first data line starting with `{` → JSON lines; lines that split into the
/// same number of fields, the second (or the only) one all numbers → CSV; anything else → text log.
pub fn detect_format(text: &str) -> SeriesFormat {
    let first = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.starts_with('#'))
        .unwrap_or("");
    if first.starts_with('{') {
        return SeriesFormat::Jsonl;
    }
    // The first two records as CSV would read them (quotes and comments honoured).
    let mut rdr = ::csv::ReaderBuilder::new()
        .delimiter(csv_delimiter(first))
        .has_headers(false)
        .flexible(true)
        .comment(Some(b'#'))
        .trim(::csv::Trim::All)
        .from_reader(text.as_bytes());
    let mut records = rdr
        .records()
        .filter_map(Result::ok)
        .filter(|r| !r.iter().all(str::is_empty))
        .map(|r| r.iter().map(str::to_string).collect::<Vec<String>>());
    let Some(head) = records.next() else {
        return SeriesFormat::Log;
    };
    // A number (signed), an ISO 8601 time, or what a number looks like when it is bad (NaN, inf).
    let data_like = |f: &String| {
        let l = f.to_ascii_lowercase();
        let body = f.trim_start_matches(['-', '+']);
        f.is_empty()
            || crate::units::check_number(body).is_ok()
            || crate::input::series_fields::parse_iso8601(f).is_some()
            || ["nan", "inf", "infinity"].contains(&l.trim_start_matches(['-', '+']))
            || (body.starts_with(|c: char| c.is_ascii_digit() || c == '.')
                && !body.contains(char::is_whitespace))
    };
    let numeric = |fields: &[String]| fields.iter().all(data_like);
    match records.next() {
        // A single line: CSV only if it is all numbers.
        None => {
            if numeric(&head) {
                SeriesFormat::Csv
            } else {
                SeriesFormat::Log
            }
        }
        Some(row) => {
            if row.len() == head.len() && numeric(&row) {
                SeriesFormat::Csv
            } else {
                SeriesFormat::Log
            }
        }
    }
}

#[cfg(test)]
#[path = "series_tests.rs"]
mod tests;
