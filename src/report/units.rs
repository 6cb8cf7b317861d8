//! Human-readable numbers: binary byte units, milliseconds, thousands separators.

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
    } else {
        format!("{sign}{:.2} GiB", a / (K * K * K))
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
