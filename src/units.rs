//! Units for the whole tool: byte quantities (exact parsing of sizes such as "1.5GiB", "500 MB",
//! "12,345"; the size flags; human formatting) and durations (the duration flags; short forms).
//!
//! Invariants: decimal units are powers of 1000 (KB … EB), binary units powers of 1024 (KiB …
//! EiB). A parsed size is finite and ≥ 0: "NaN", "inf", "1e400" and negative numbers are errors
//! (Rust's `f64::from_str` accepts "NaN" and "inf", so the grammar is checked before parsing).
//! Conversion is exact up to the one rounding of the final `f64`: a decimal unit shifts the decimal
//! exponent of the text before the (correctly rounded) parse, a binary unit multiplies by a power of two.
//! Formatting: reports print binary units; [`bytes`] with fixed decimals for table columns,
//! [`fmt_bytes`] with three significant figures for sentences.

use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// A unit of memory size.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Unit {
    B,
    KB,
    MB,
    GB,
    TB,
    PB,
    EB,
    KiB,
    MiB,
    GiB,
    TiB,
    PiB,
    EiB,
}

/// The spellings accepted for units, for error messages.
pub const UNIT_NAMES: &str = "B, KB, MB, GB, TB, PB, EB, KiB, MiB, GiB, TiB, PiB, EiB";

impl Unit {
    /// `(decimal exponent, binary exponent)`: the unit is 10^dec × 2^bin bytes.
    fn exponents(self) -> (i32, i32) {
        match self {
            Unit::B => (0, 0),
            Unit::KB => (3, 0),
            Unit::MB => (6, 0),
            Unit::GB => (9, 0),
            Unit::TB => (12, 0),
            Unit::PB => (15, 0),
            Unit::EB => (18, 0),
            Unit::KiB => (0, 10),
            Unit::MiB => (0, 20),
            Unit::GiB => (0, 30),
            Unit::TiB => (0, 40),
            Unit::PiB => (0, 50),
            Unit::EiB => (0, 60),
        }
    }

    /// Bytes in one unit.
    pub fn factor(self) -> f64 {
        let (d, b) = self.exponents();
        10f64.powi(d) * 2f64.powi(b)
    }

    pub fn name(self) -> &'static str {
        match self {
            Unit::B => "B",
            Unit::KB => "KB",
            Unit::MB => "MB",
            Unit::GB => "GB",
            Unit::TB => "TB",
            Unit::PB => "PB",
            Unit::EB => "EB",
            Unit::KiB => "KiB",
            Unit::MiB => "MiB",
            Unit::GiB => "GiB",
            Unit::TiB => "TiB",
            Unit::PiB => "PiB",
            Unit::EiB => "EiB",
        }
    }

    /// Parses a unit name, case-insensitively ("MB", "mb", "MiB", "mib", "bytes", "kB").
    pub fn parse(s: &str) -> Option<Unit> {
        let l = s.trim().to_ascii_lowercase();
        Some(match l.as_str() {
            "b" | "byte" | "bytes" => Unit::B,
            "kb" => Unit::KB,
            "mb" => Unit::MB,
            "gb" => Unit::GB,
            "tb" => Unit::TB,
            "pb" => Unit::PB,
            "eb" => Unit::EB,
            "kib" => Unit::KiB,
            "mib" => Unit::MiB,
            "gib" => Unit::GiB,
            "tib" => Unit::TiB,
            "pib" => Unit::PiB,
            "eib" => Unit::EiB,
            _ => return None,
        })
    }

    /// Converts `number` (the text of a plain decimal number, already validated by [`check_number`])
    /// in this unit to bytes, with a single rounding.
    pub(crate) fn to_bytes(self, number: &str) -> Result<f64, String> {
        let (d, b) = self.exponents();
        let v: f64 = if d == 0 {
            number
                .parse()
                .map_err(|_| format!("'{number}' is not a number"))?
        } else {
            // "1.5" MB -> "1.5e6" -> correctly rounded parse; an existing exponent is added to.
            let (mant, exp) = match number.find(['e', 'E']) {
                Some(i) => (
                    &number[..i],
                    number[i + 1..].parse::<i64>().unwrap_or(i64::MAX / 2),
                ),
                None => (number, 0),
            };
            // Written on the stack when it fits (one value per line of a long log).
            let mut buf = [0u8; 64];
            let mut w = std::io::Cursor::new(&mut buf[..]);
            let fits = std::io::Write::write_fmt(
                &mut w,
                format_args!("{mant}e{}", exp.saturating_add(d as i64)),
            )
            .is_ok();
            let len = w.position() as usize;
            let text = if fits {
                std::str::from_utf8(&buf[..len])
                    .ok()
                    .map(std::borrow::Cow::Borrowed)
            } else {
                None
            }
            .unwrap_or_else(|| {
                std::borrow::Cow::Owned(format!("{mant}e{}", exp.saturating_add(d as i64)))
            });
            text.parse()
                .map_err(|_| format!("'{number}' is not a number"))?
        };
        let v = v * 2f64.powi(b);
        if !v.is_finite() {
            return Err(format!("'{number}' is too large"));
        }
        Ok(v)
    }
}

/// Validates the grammar of a plain non-negative decimal number and removes thousands separators:
/// `123`, `1.5`, `.5`, `1e9`, `12,345,678.9` (commas must group exactly three digits). Rejects
/// `NaN`, `inf`, hex, empty text and negative numbers with a message saying what is valid.
pub fn check_number(s: &str) -> Result<std::borrow::Cow<'_, str>, String> {
    let t = s.trim();
    let t = t.strip_prefix('+').unwrap_or(t);
    // Fast path: plain digits with at most one point (no allocation).
    if !t.is_empty()
        && t.bytes().any(|c| c.is_ascii_digit())
        && t.bytes().all(|c| c.is_ascii_digit() || c == b'.')
        && t.bytes().filter(|&c| c == b'.').count() <= 1
    {
        return Ok(std::borrow::Cow::Borrowed(t));
    }
    if t.starts_with('-') {
        return Err(format!("'{s}' is negative; memory sizes must be ≥ 0"));
    }
    let lower = t.to_ascii_lowercase();
    if lower.contains("nan") || lower.contains("inf") {
        return Err(format!("'{s}' is not a finite number"));
    }
    let (mant, exp) = match t.find(['e', 'E']) {
        Some(i) => (&t[..i], Some(&t[i + 1..])),
        None => (t, None),
    };
    let (int, frac) = match mant.find('.') {
        Some(i) => (&mant[..i], Some(&mant[i + 1..])),
        None => (mant, None),
    };
    let int_clean: String = if int.contains(',') {
        let groups: Vec<&str> = int.split(',').collect();
        let ok = !groups[0].is_empty()
            && groups[0].len() <= 3
            && groups.iter().all(|g| g.bytes().all(|c| c.is_ascii_digit()))
            && groups[1..].iter().all(|g| g.len() == 3);
        if !ok {
            return Err(format!(
                "'{s}' is not a number (thousands separators must group exactly three digits, e.g. 12,345,678)"
            ));
        }
        groups.concat()
    } else {
        int.to_string()
    };
    let digits = |x: &str| x.bytes().all(|c| c.is_ascii_digit());
    let frac_ok = frac.is_none_or(digits);
    let exp_ok = exp.is_none_or(|e| {
        let e = e.strip_prefix(['+', '-']).unwrap_or(e);
        !e.is_empty() && digits(e)
    });
    let has_digits = !int_clean.is_empty() || frac.is_some_and(|f| !f.is_empty());
    if !(digits(&int_clean) && frac_ok && exp_ok && has_digits) {
        return Err(format!(
            "'{s}' is not a number (expected digits such as 1234, 1.5 or 2e9)"
        ));
    }
    let mut out = int_clean;
    if let Some(f) = frac {
        out.push('.');
        out.push_str(f);
    }
    if let Some(e) = exp {
        out.push('e');
        out.push_str(e);
    }
    Ok(std::borrow::Cow::Owned(out))
}

/// Converts a number written in `unit` to bytes, exactly (one rounding). Errors on NaN, inf, overflow
/// (e.g. `1e400`) and negative numbers.
pub fn number_to_bytes(number: &str, unit: Unit) -> Result<f64, String> {
    let clean = check_number(number)?;
    unit.to_bytes(&clean)
}

/// What is wrong with a size, before it is phrased for a flag or a value.
enum SizeError {
    Empty,
    Negative,
    UnknownUnit(String),
    Number(String),
}

/// The one size grammar of memscope's flags (`--memory-limit`, `--fits`, `--budget`, `--max-peak`,
/// …): a plain non-negative number as [`check_number`] reads it (`1.5`, `.5`, `1e9`, `12,345`),
/// then an optional unit: B, KB, MB, GB, TB, PB, EB (powers of 1000; `K`, `M`, `G`, `T` alone mean
/// the same) or KiB, MiB, GiB, TiB, PiB, EiB (powers of 1024), any case, spaces allowed. A bare
/// number is bytes.
fn size_in_bytes(s: &str) -> Result<f64, SizeError> {
    let t = s.trim();
    // An `e` is the number's exponent when a digit or a sign follows it (`1e9`), else the
    // unit's first letter (`1EiB`, `2EB`).
    let exponent = |i: usize| {
        t[i + 1..]
            .chars()
            .next()
            .is_some_and(|n| n.is_ascii_digit() || n == '+' || n == '-')
    };
    let split = t
        .char_indices()
        .find(|&(i, c)| c.is_ascii_alphabetic() && !(matches!(c, 'e' | 'E') && exponent(i)))
        .map(|(i, _)| i)
        .unwrap_or(t.len());
    let (num, unit) = (t[..split].trim(), t[split..].trim());
    if num.starts_with('-') {
        return Err(SizeError::Negative);
    }
    if num.is_empty() {
        return Err(SizeError::Empty);
    }
    let unit = match unit.to_ascii_lowercase().as_str() {
        "" => Unit::B,
        "k" => Unit::KB,
        "m" => Unit::MB,
        "g" => Unit::GB,
        "t" => Unit::TB,
        u => Unit::parse(u).ok_or_else(|| SizeError::UnknownUnit(unit.to_string()))?,
    };
    number_to_bytes(num, unit).map_err(SizeError::Number)
}

/// Parses a size such as `500MB`, `2GB`, `1.5GiB`, `1 MiB`, `4096` or `4096B` into bytes (the
/// grammar of [`size_in_bytes`]); errors quote the text.
pub fn parse_size(s: &str) -> Result<f64, String> {
    let expected =
        format!("expected a number followed by one of {UNIT_NAMES} (e.g. 500MB, 1.5GiB)");
    size_in_bytes(s).map_err(|e| match e {
        SizeError::Empty => format!("invalid size '{s}': {expected}"),
        SizeError::Negative => format!("invalid size '{s}': negative; sizes are positive"),
        SizeError::UnknownUnit(u) => format!("invalid size '{s}': unknown unit '{u}'; {expected}"),
        SizeError::Number(e) => format!("invalid size '{s}': {e}"),
    })
}

/// Formats bytes in binary units with three significant figures: `512 B`, `1.50 KiB`, `17.4 GiB`.
pub fn fmt_bytes(b: f64) -> String {
    if !b.is_finite() {
        return "unknown".into();
    }
    let sign = if b < 0.0 { "-" } else { "" };
    let a = b.abs();
    let units = [
        ("B", 1.0),
        ("KiB", 1024.0),
        ("MiB", 1048576.0),
        ("GiB", 1073741824.0),
        ("TiB", 1099511627776.0),
        ("PiB", 1125899906842624.0),
        ("EiB", 1152921504606846976.0),
    ];
    let mut idx = 0;
    for (i, (_, f)) in units.iter().enumerate() {
        if a >= *f {
            idx = i;
        }
    }
    let (name, f) = units[idx];
    if idx == 0 {
        return format!("{sign}{} B", a.round() as u64);
    }
    format!("{sign}{} {name}", sig3(a / f))
}

/// Formats bytes in the unit a log was written in when that is a decimal unit (KB, MB, GB, TB), with
/// binary units beside it: `3,450 MB (3.21 GiB)`; otherwise as [`fmt_bytes`].
pub fn fmt_bytes_in(b: f64, unit: Option<Unit>) -> String {
    match decimal(unit) {
        Some(u) if b.is_finite() => format!("{} {} ({})", in_unit(b, u), u.name(), fmt_bytes(b)),
        _ => fmt_bytes(b),
    }
}

/// [`fmt_range`] in the log's decimal unit, binary beside it: `3,240–3,270 MB (3.02–3.05 GiB)`.
pub fn fmt_range_in(lo: f64, hi: f64, unit: Option<Unit>) -> String {
    match decimal(unit) {
        Some(u) if lo.is_finite() && hi.is_finite() => format!(
            "{}–{} {} ({})",
            in_unit(lo, u),
            in_unit(hi, u),
            u.name(),
            fmt_range(lo, hi)
        ),
        _ => fmt_range(lo, hi),
    }
}

fn decimal(unit: Option<Unit>) -> Option<Unit> {
    unit.filter(|u| matches!(u, Unit::KB | Unit::MB | Unit::GB | Unit::TB))
}

/// A number of `u` with three significant figures (thousands grouped above 1,000).
fn in_unit(b: f64, u: Unit) -> String {
    let v = b / u.factor();
    let a = v.abs();
    let sign = if v < 0.0 { "-" } else { "" };
    if a >= 1000.0 {
        format!("{sign}{}", thousands(a.round() as u64))
    } else if a >= 100.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else if a >= 1.0 || a == 0.0 {
        format!("{v:.2}")
    } else {
        let decimals = (2 - a.log10().floor() as i32).clamp(2, 12) as usize;
        format!("{v:.decimals$}")
    }
}

/// Formats a range `lo–hi` in the unit of `hi` so that both ends are comparable: `17.0–17.7 GiB`.
pub fn fmt_range(lo: f64, hi: f64) -> String {
    let hi_s = fmt_bytes(hi);
    let unit = hi_s.rsplit(' ').next().unwrap_or("B").to_string();
    let f = match unit.as_str() {
        "KiB" => 1024.0,
        "MiB" => 1048576.0,
        "GiB" => 1073741824.0,
        "TiB" => 1099511627776.0,
        _ => 1.0,
    };
    let decimals = hi_s
        .split(' ')
        .next()
        .and_then(|n| n.split('.').nth(1))
        .map_or(0, |d| d.len());
    let decimals = if f == 1.0 { 0 } else { decimals.max(1) };
    format!("{:.*}–{:.*} {unit}", decimals, lo / f, decimals, hi / f)
}

/// Three significant figures, without exponent notation.
fn sig3(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// Bytes in binary units with one decimal: "512 B", "1.5 KiB", "474.7 MiB", "2.31 GiB".
pub fn bytes(b: f64) -> String {
    let sign = if b < 0.0 { "-" } else { "" };
    let a = b.abs();
    const K: f64 = 1024.0;
    if a < K {
        format!("{sign}{a:.0} B")
    } else if a < K * K {
        format!("{sign}{:.1} KiB", a / K)
    } else if a < K * K * K {
        format!("{sign}{:.1} MiB", a / (K * K))
    } else if a < K.powi(4) {
        format!("{sign}{:.2} GiB", a / K.powi(3))
    } else if a < K.powi(5) {
        format!("{sign}{:.2} TiB", a / K.powi(4))
    } else if a < K.powi(6) {
        format!("{sign}{:.2} PiB", a / K.powi(5))
    } else {
        format!("{sign}{:.2} EiB", a / K.powi(6))
    }
}

/// Milliseconds with precision that suits their size: "0.042", "3.17", "41.2", "1234".
pub fn ms(v: f64) -> String {
    let a = v.abs();
    if a < 1.0 {
        format!("{v:.3}")
    } else if a < 10.0 {
        format!("{v:.2}")
    } else if a < 1000.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.0}")
    }
}

/// An integer with thousands separators: 124439808 → "124,439,808".
pub fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A rate with 3 significant-ish digits: "12.3", "1,234".
pub fn rate(v: f64) -> String {
    if v >= 1000.0 {
        thousands(v.round() as u64)
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// Parses a count for `flag` (tokens, steps): a positive number, optionally with a decimal
/// suffix K (10³), M (10⁶), B or G (10⁹), T (10¹²) as training runs are spoken of (`300B`,
/// `15T`, `2.5e9`); errors start with the flag and the text.
pub fn parse_count(flag: &str, text: &str) -> anyhow::Result<f64> {
    let t = text.trim();
    let (num, scale) = match t.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() && t[..i].trim().parse::<f64>().is_ok() => {
            let scale = match c.to_ascii_uppercase() {
                'K' => 1e3,
                'M' => 1e6,
                'B' | 'G' => 1e9,
                'T' => 1e12,
                _ => bail!("{flag} {text}: unknown suffix \"{c}\"; use K, M, B (or G) or T, e.g. 300B or 15T"),
            };
            (&t[..i], scale)
        }
        _ => (t, 1.0),
    };
    match num.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 && (v * scale).is_finite() => Ok(v * scale),
        _ => bail!("{flag} {text}: not a positive count; give a number such as 300B, 15T or 2.5e9"),
    }
}

/// Parses a byte count for `flag` (the grammar of [`size_in_bytes`]): a whole number of bytes
/// from 1 B to 16 EiB, rounded to the byte; errors start with the flag and the text.
pub fn parse_bytes(flag: &str, text: &str) -> anyhow::Result<u64> {
    let hint =
        "use a number with B, KB, MB, GB, TB, KiB, MiB, GiB, TiB (… EiB), e.g. 512MiB or 8GiB";
    let b = match size_in_bytes(text) {
        Ok(b) => {
            if let Some(note) = bare_decimal_note(flag, text, b) {
                eprintln!("{note}");
            }
            b.round()
        }
        Err(SizeError::Negative) => bail!("{flag} {text}: sizes are positive; e.g. 512MiB or 8GiB"),
        Err(SizeError::UnknownUnit(u)) => bail!("{flag} {text}: unknown unit \"{u}\"; {hint}"),
        Err(SizeError::Empty | SizeError::Number(_)) => {
            bail!("{flag} {text}: not a size; {hint}")
        }
    };
    if b < 1.0 || b >= u64::MAX as f64 {
        bail!("{flag} {text}: must be between 1 B and 16 EiB; {hint}");
    }
    Ok(b as u64)
}

/// A size written with a bare `K`, `M`, `G` or `T` (`80G`) is read in powers of 1000, which
/// people often mean as 1024's: the note that says so, with both readings.
fn bare_decimal_note(flag: &str, text: &str, b: f64) -> Option<String> {
    let t = text.trim();
    let last = t.chars().last()?.to_ascii_uppercase();
    if !matches!(last, 'K' | 'M' | 'G' | 'T') {
        return None;
    }
    let number = t[..t.len() - 1].trim_end();
    let before = number.chars().last()?;
    if !before.is_ascii_digit() && before != '.' {
        return None;
    }
    Some(format!(
        "note: {flag} {text} is read as {number}{last}B, powers of 1000 ({} B = {}); write {number}{last}iB for powers of 1024",
        thousands(b.round() as u64),
        fmt_bytes(b),
    ))
}

/// Parses a duration: a number with ms, s, m or h (a bare number is seconds), e.g. 50ms, 90s, 10m,
/// 1.5h.
pub fn parse_duration(flag: &str, text: &str) -> anyhow::Result<Duration> {
    let t = text.trim();
    let hint = "use a number with ms, s, m or h, e.g. 50ms, 90s, 10m, 1h";
    let (num, mult) = match t.chars().last() {
        Some('s') if t.ends_with("ms") => (&t[..t.len() - 2], 0.001),
        Some('s') => (&t[..t.len() - 1], 1.0),
        Some('m') => (&t[..t.len() - 1], 60.0),
        Some('h') => (&t[..t.len() - 1], 3600.0),
        _ => (t, 1.0),
    };
    let v: f64 = num
        .trim()
        .parse()
        .ok()
        .filter(|v: &f64| v.is_finite() && *v > 0.0)
        .with_context(|| format!("{flag} {text}: not a positive duration; {hint}"))?;
    Ok(Duration::from_secs_f64(v * mult))
}

/// `2s`, `10m`, `1h30m`-style short form for messages.
pub fn human_duration(d: Duration) -> String {
    let s = d.as_secs();
    if s > 0 && s % 3600 == 0 {
        format!("{}h", s / 3600)
    } else if s > 0 && s % 60 == 0 {
        format!("{}m", s / 60)
    } else if d.subsec_millis() == 0 {
        format!("{s}s")
    } else {
        format!("{:.1}s", d.as_secs_f64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_are_powers_of_1000_and_1024() {
        assert_eq!(parse_size("500MB").unwrap(), 500e6);
        assert_eq!(parse_size("2GB").unwrap(), 2e9);
        assert_eq!(parse_size("1.5GiB").unwrap(), 1.5 * 1073741824.0);
        assert_eq!(parse_size("1MiB").unwrap(), 1048576.0);
        assert_eq!(parse_size("1 KiB").unwrap(), 1024.0);
        assert_eq!(parse_size("3TB").unwrap(), 3e12);
        assert_eq!(parse_size("1TiB").unwrap(), 1099511627776.0);
        assert_eq!(parse_size("4096").unwrap(), 4096.0);
        assert_eq!(parse_size("4096B").unwrap(), 4096.0);
        assert_eq!(parse_size("1e3KB").unwrap(), 1e6);
        assert_eq!(parse_size("10mb").unwrap(), 10e6);
    }

    #[test]
    fn decimal_units_convert_exactly() {
        // 0.1 * 1e6 in binary floating point is not 100000 in general; the shifted parse is.
        assert_eq!(number_to_bytes("0.1", Unit::MB).unwrap(), 100000.0);
        assert_eq!(number_to_bytes("17.3", Unit::GB).unwrap(), 17300000000.0);
        assert_eq!(number_to_bytes("12,345,678", Unit::B).unwrap(), 12345678.0);
        assert_eq!(number_to_bytes("1,234.5", Unit::KB).unwrap(), 1234500.0);
    }

    #[test]
    fn rejects_nan_inf_overflow_negative_and_junk() {
        for bad in [
            "NaN", "nan", "inf", "-inf", "infinity", "1e400", "-5", "", "abc", "0x10", "1,23",
            "12,3456", "1.2.3", "e5",
        ] {
            assert!(number_to_bytes(bad, Unit::B).is_err(), "{bad} accepted");
        }
        for bad in ["10XB", "MB", "1.5 GiBs", "-1GB", "NaNGB", "infMB"] {
            let e = parse_size(bad).unwrap_err();
            assert!(e.contains(bad), "{e}");
        }
        assert!(parse_size("10XB").unwrap_err().contains("KiB"));
    }

    #[test]
    fn formats_binary_units() {
        assert_eq!(fmt_bytes(512.0), "512 B");
        assert_eq!(fmt_bytes(1536.0), "1.50 KiB");
        assert_eq!(fmt_bytes(17.4 * 1073741824.0), "17.4 GiB");
        assert_eq!(fmt_bytes(-3.0 * 1048576.0), "-3.00 MiB");
        assert_eq!(fmt_bytes(f64::NAN), "unknown");
        assert_eq!(
            fmt_range(17.0 * 1073741824.0, 17.7 * 1073741824.0),
            "17.0–17.7 GiB"
        );
    }

    #[test]
    fn formats() {
        assert_eq!(bytes(512.0), "512 B");
        assert_eq!(bytes(1536.0), "1.5 KiB");
        assert_eq!(bytes(497_759_232.0), "474.7 MiB");
        assert_eq!(bytes(-2.0 * 1024.0 * 1024.0), "-2.0 MiB");
        assert_eq!(bytes(3.0 * (1u64 << 30) as f64), "3.00 GiB");
        assert_eq!(thousands(124_439_808), "124,439,808");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(ms(0.0421), "0.042");
        assert_eq!(ms(41.25), "41.2");
        assert_eq!(rate(1234.4), "1,234");
    }

    #[test]
    fn sizes_above_gib_use_tib_pib_eib() {
        assert_eq!(bytes(1.5 * 1024f64.powi(4)), "1.50 TiB");
        assert_eq!(bytes(14951645184.0 * 1024f64.powi(3)), "13.92 EiB");
        assert_eq!(fmt_bytes(2.0 * 1024f64.powi(5)), "2.00 PiB");
    }

    #[test]
    fn bytes_units() {
        assert_eq!(parse_count("--c", "300B").unwrap(), 3e11);
        assert_eq!(parse_count("--c", "15t").unwrap(), 15e12);
        assert_eq!(parse_count("--c", "2.5e9").unwrap(), 2.5e9);
        assert_eq!(parse_count("--c", "1000").unwrap(), 1000.0);
        let e = parse_count("--c", "lots").unwrap_err().to_string();
        assert!(e.contains("not a positive count"), "{e}");
        let e = parse_count("--c", "5Q").unwrap_err().to_string();
        assert!(e.contains("unknown suffix"), "{e}");
        for bad in ["", "-5", "0", "1X", "T", "nan", "1e999", "lots"] {
            let e = parse_count("--run-tokens", bad).unwrap_err().to_string();
            assert!(e.starts_with("--run-tokens"), "{bad}: {e}");
        }
        assert_eq!(parse_bytes("--m", "512").unwrap(), 512);
        assert_eq!(parse_bytes("--m", "1KB").unwrap(), 1000);
        assert_eq!(parse_bytes("--m", "1KiB").unwrap(), 1024);
        assert_eq!(parse_bytes("--m", "8GiB").unwrap(), 8 << 30);
        assert_eq!(parse_bytes("--m", "2 GB").unwrap(), 2_000_000_000);
        assert_eq!(parse_bytes("--m", "1.5MiB").unwrap(), 1_572_864);
        assert_eq!(parse_bytes("--m", "300mib").unwrap(), 300 << 20);
        let e = parse_bytes("--memory-limit", "8 gigs")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("--memory-limit 8 gigs: unknown unit"), "{e}");
        assert!(parse_bytes("--m", "").is_err());
        assert!(parse_bytes("--m", "0").is_err());
        assert!(parse_bytes("--m", "-1GiB").is_err());
        // Up to the 16 EiB the range message names.
        assert_eq!(parse_bytes("--m", "1EiB").unwrap(), 1 << 60);
        assert_eq!(parse_bytes("--m", "1PiB").unwrap(), 1 << 50);
        assert_eq!(parse_bytes("--m", "2PB").unwrap(), 2_000_000_000_000_000);
        let e = parse_bytes("--m", "16EiB").unwrap_err().to_string();
        assert!(e.contains("between 1 B and 16 EiB"), "{e}");
    }

    #[test]
    fn a_bare_decimal_letter_is_said_in_both_readings() {
        let note = bare_decimal_note("--fits", "80G", 80e9).unwrap();
        assert_eq!(
            note,
            "note: --fits 80G is read as 80GB, powers of 1000 (80,000,000,000 B = 74.5 GiB); write 80GiB for powers of 1024"
        );
        assert!(bare_decimal_note("--fits", "2g", 2e9)
            .unwrap()
            .starts_with("note: --fits 2g is read as 2GB,"));
        for quiet in ["80GiB", "80GB", "512", "1e9"] {
            assert_eq!(bare_decimal_note("--fits", quiet, 1.0), None, "{quiet}");
        }
    }

    #[test]
    fn flags_and_targets_read_one_size_grammar() {
        // What parse_size reads, parse_bytes reads: exponents, thousands separators, single letters.
        for (text, bytes) in [
            ("1e9", 1e9),
            ("12,345", 12345.0),
            ("2g", 2e9),
            ("3 M", 3e6),
            ("1.5GiB", 1.5 * 1073741824.0),
        ] {
            assert_eq!(parse_size(text).unwrap(), bytes, "{text}");
            assert_eq!(parse_bytes("--m", text).unwrap(), bytes as u64, "{text}");
        }
        for bad in ["NaN", "inf", "1e400", "12,3456", "8 gigs", "-2g", ""] {
            assert!(parse_size(bad).is_err(), "{bad}");
            assert!(parse_bytes("--m", bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("--t", "2s").unwrap(), Duration::from_secs(2));
        assert_eq!(
            parse_duration("--t", "10m").unwrap(),
            Duration::from_secs(600)
        );
        assert_eq!(
            parse_duration("--t", "1h").unwrap(),
            Duration::from_secs(3600)
        );
        assert_eq!(
            parse_duration("--t", "90").unwrap(),
            Duration::from_secs(90)
        );
        assert_eq!(
            parse_duration("--t", "0.5s").unwrap(),
            Duration::from_millis(500)
        );
        assert!(parse_duration("--timeout", "soon")
            .unwrap_err()
            .to_string()
            .starts_with("--timeout soon"));
        assert!(parse_duration("--t", "0s").is_err());
        assert_eq!(
            parse_duration("--t", "50ms").unwrap(),
            Duration::from_millis(50)
        );
    }
}
