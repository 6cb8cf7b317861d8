//! Reads a memory series that someone else wrote (for `memscope analyze FILE`): CSV, JSON lines, or a
//! text log read with a regular expression. The caller reads the file; this parses its text.
//!
//! Rules (RELIABILITY.md cases 14–15):
//! - a truncated LAST line (fewer fields, JSON cut off, a number cut short and no final newline) is
//!   dropped with a warning, keeping the data before it;
//! - a corrupt line anywhere else, a NaN, inf, 1e400 or negative value, or a step that goes backwards
//!   or repeats is an error naming the line number and what would be valid;
//! - units convert exactly: `--unit` (wins), else a unit in the line (`12 MB`, a `unit` group), else a
//!   unit in the column name (`rss_mb`, `mem (MiB)`), else bytes (with a warning when values look small).

use crate::analysis::leak::MemorySeries;
use crate::input::series_types::csv_delimiter;
pub use crate::input::series_types::{ParseOptions, SeriesError, SeriesFormat};
pub use crate::units::Unit;

/// Parses a memory series from `text`. Returns the series and warnings (truncated last line, guessed
/// columns, units assumed).
pub fn parse_series(
    text: &str,
    opts: &ParseOptions,
) -> Result<(MemorySeries, Vec<String>), SeriesError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let format = opts
        .format
        .or_else(|| opts.pattern.as_ref().map(|_| SeriesFormat::Log))
        .unwrap_or_else(|| detect_format(text));
    let mut warnings = Vec::new();
    if opts.pattern.is_some() && format != SeriesFormat::Log {
        warnings.push("--pattern is only used for text logs; ignored".to_string());
    }
    let (series, more) = match format {
        SeriesFormat::Csv => crate::input::series_csv::parse(text, opts)?,
        SeriesFormat::Jsonl => crate::input::series_jsonl::parse(text, opts)?,
        SeriesFormat::Log => crate::input::series_log::parse(text, opts)?,
    };
    warnings.extend(more);
    Ok((series, warnings))
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
    let data_like = |f: &String| {
        let l = f.to_ascii_lowercase();
        f.is_empty()
            || f.starts_with(|c: char| c.is_ascii_digit() || c == '-' || c == '+' || c == '.')
            || ["nan", "inf", "infinity"].contains(&l.as_str())
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
            if (head.len() >= 2 || numeric(&head)) && row.len() == head.len() && numeric(&row) {
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
