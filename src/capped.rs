//! Whole-file reads with a size cap: every file memscope reads whole (a Record, a config, a
//! sweep file, an estimate, a Spec) goes through here. The cap is enforced on the bytes read
//! (`take(cap + 1)`), never on metadata, which says 0 for `/dev/zero`, a FIFO or a `/proc` file.
//! Files read line by line (`analyze`'s logs) stream instead and need no cap.

use std::io::Read;
use std::path::Path;

/// A Record, leak verdict, estimate, roofline, sweep JSONL or HTML report input: a Record with a
/// million samples in each of its phases is about 100 MiB of JSON.
pub const MAX_RESULT_FILE: u64 = 512 << 20;
/// A model config (`--config`), a sweep worker's Spec.
pub const MAX_CONFIG_FILE: u64 = 16 << 20;
/// A text token file (`--data *.txt`): ids as text, parsed into memory.
pub const MAX_TEXT_TOKENS_FILE: u64 = 4 << 30;

/// Why a capped read failed.
#[derive(Debug, thiserror::Error)]
pub enum CappedError {
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// More than `cap` bytes: the read stopped there.
    #[error("more than {} ({cap} bytes), the cap on a {what}; the read stopped there (is it the right file?)", crate::units::fmt_bytes(*cap as f64))]
    TooLarge { cap: u64, what: &'static str },
}

/// Reads at most `cap` bytes from `r`; one byte more is [`CappedError::TooLarge`]. The buffer
/// grows by doubling but never past `cap + 1` bytes.
pub fn read_capped_from(
    r: impl Read,
    cap: u64,
    what: &'static str,
) -> Result<Vec<u8>, CappedError> {
    read_limited(r, cap, what, false)
}

fn read_limited(
    r: impl Read,
    cap: u64,
    what: &'static str,
    text: bool,
) -> Result<Vec<u8>, CappedError> {
    let limit = usize::try_from(cap.saturating_add(1)).unwrap_or(usize::MAX);
    let mut r = r.take(limit as u64);
    let mut bytes: Vec<u8> = Vec::new();
    let mut chunk = vec![0u8; 64 << 10];
    loop {
        let n = match r.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e.into()),
        };
        if text {
            if let Some(i) = chunk[..n].iter().position(|&b| b == 0) {
                return Err(std::io::Error::other(format!(
                    "binary data (a NUL byte at offset {}), not a text file",
                    bytes.len() + i
                ))
                .into());
            }
        }
        if bytes.capacity() - bytes.len() < n {
            let want = (bytes.len() + n).max(bytes.capacity() * 2).min(limit);
            bytes.reserve_exact(want - bytes.len());
        }
        bytes.extend_from_slice(&chunk[..n]);
    }
    if bytes.len() as u64 > cap {
        return Err(CappedError::TooLarge { cap, what });
    }
    Ok(bytes)
}

/// Reads the whole file at `path`, at most `cap` bytes of it (`what` names the kind of file
/// for the error).
pub fn read_capped(path: &Path, cap: u64, what: &'static str) -> Result<Vec<u8>, CappedError> {
    let f = std::fs::File::open(path)?;
    if f.metadata().is_ok_and(|m| m.is_dir()) {
        return Err(std::io::Error::other("is a directory").into());
    }
    read_capped_from(f, cap, what)
}

/// [`read_capped`] as UTF-8 text; a NUL byte (a binary file, `/dev/zero`) stops the read at once.
pub fn read_capped_string(
    path: &Path,
    cap: u64,
    what: &'static str,
) -> Result<String, CappedError> {
    let f = std::fs::File::open(path)?;
    if f.metadata().is_ok_and(|m| m.is_dir()) {
        return Err(std::io::Error::other("is a directory").into());
    }
    let bytes = read_limited(f, cap, what, true)?;
    String::from_utf8(bytes).map_err(|e| {
        std::io::Error::other(format!(
            "not UTF-8 text (invalid byte at offset {})",
            e.utf8_error().valid_up_to()
        ))
        .into()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cap_is_on_bytes_read_not_metadata() {
        let e = read_capped(Path::new("/dev/zero"), 1000, "config").unwrap_err();
        assert!(matches!(e, CappedError::TooLarge { cap: 1000, .. }), "{e}");
        assert!(e.to_string().contains("the cap on a config"), "{e}");
        assert_eq!(
            read_capped_from(&[1u8; 1000][..], 1000, "x").unwrap().len(),
            1000
        );
        let e = read_capped_string(Path::new("/dev/zero"), 1 << 30, "Record").unwrap_err();
        assert!(e.to_string().contains("NUL byte at offset 0"), "{e}");
        let big = vec![b'a'; 200_000];
        assert!(matches!(
            read_capped_from(&big[..], 150_000, "x"),
            Err(CappedError::TooLarge { .. })
        ));
        assert_eq!(read_capped_from(&big[..], 200_000, "x").unwrap(), big);
    }
}
