//! Byte quantities: units, exact parsing of sizes ("1.5GiB", "500 MB", "12,345"), and human formatting.
//!
//! Invariants: decimal units are powers of 1000 (KB, MB, GB, TB), binary units powers of 1024 (KiB, MiB,
//! GiB, TiB). A parsed size is finite and ≥ 0: "NaN", "inf", "1e400" and negative numbers are errors
//! (Rust's `f64::from_str` accepts "NaN" and "inf", so the grammar is checked before parsing).
//! Conversion is exact up to the one rounding of the final `f64`: a decimal unit shifts the decimal
//! exponent of the text before the (correctly rounded) parse, a binary unit multiplies by a power of two.

use serde::Serialize;

/// A unit of memory size.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Unit {
    B,
    KB,
    MB,
    GB,
    TB,
    KiB,
    MiB,
    GiB,
    TiB,
}

/// The spellings accepted for units, for error messages.
pub const UNIT_NAMES: &str = "B, KB, MB, GB, TB, KiB, MiB, GiB, TiB";

impl Unit {
    /// `(decimal exponent, binary exponent)`: the unit is 10^dec × 2^bin bytes.
    fn exponents(self) -> (i32, i32) {
        match self {
            Unit::B => (0, 0),
            Unit::KB => (3, 0),
            Unit::MB => (6, 0),
            Unit::GB => (9, 0),
            Unit::TB => (12, 0),
            Unit::KiB => (0, 10),
            Unit::MiB => (0, 20),
            Unit::GiB => (0, 30),
            Unit::TiB => (0, 40),
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
            Unit::KiB => "KiB",
            Unit::MiB => "MiB",
            Unit::GiB => "GiB",
            Unit::TiB => "TiB",
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
            "kib" => Unit::KiB,
            "mib" => Unit::MiB,
            "gib" => Unit::GiB,
            "tib" => Unit::TiB,
            _ => return None,
        })
    }

    /// Converts `number` (the text of a plain decimal number, already validated by [`check_number`])
    /// in this unit to bytes, with a single rounding.
    fn to_bytes(self, number: &str) -> Result<f64, String> {
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
            format!("{mant}e{}", exp.saturating_add(d as i64))
                .parse()
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
pub fn check_number(s: &str) -> Result<String, String> {
    let t = s.trim();
    let t = t.strip_prefix('+').unwrap_or(t);
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
    Ok(out)
}

/// Converts a number written in `unit` to bytes, exactly (one rounding). Errors on NaN, inf, overflow
/// (e.g. `1e400`) and negative numbers.
pub fn number_to_bytes(number: &str, unit: Unit) -> Result<f64, String> {
    let clean = check_number(number)?;
    unit.to_bytes(&clean)
}

/// Parses a size such as `500MB`, `2GB`, `1.5GiB`, `1 MiB`, `4096` or `4096B` into bytes.
/// A bare number is bytes. Units are case-insensitive.
pub fn parse_size(s: &str) -> Result<f64, String> {
    let t = s.trim();
    let split = t
        .char_indices()
        .find(|&(_, c)| c.is_ascii_alphabetic() && c != 'e' && c != 'E')
        .map(|(i, _)| i)
        .unwrap_or(t.len());
    let (num, unit) = (t[..split].trim(), t[split..].trim());
    let invalid = || {
        format!("invalid size '{s}': expected a number followed by one of {UNIT_NAMES} (e.g. 500MB, 1.5GiB)")
    };
    if num.is_empty() {
        return Err(invalid());
    }
    let unit = if unit.is_empty() {
        Unit::B
    } else {
        Unit::parse(unit).ok_or_else(invalid)?
    };
    number_to_bytes(num, unit).map_err(|e| format!("invalid size '{s}': {e}"))
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
}
