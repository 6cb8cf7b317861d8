//! Token files for `--data`: a flat `.bin` of little-endian u16 (nanoGPT / CS336) or u32
//! (`--data-dtype u32`), a `.npy` of integer ids (`<u2 <u4 <i4 <i8 <u8`, header parsed here), or
//! a `.txt` of whitespace-separated ids. Binary files are memory-mapped; text is parsed once.
//!
//! Batches: batch `k` of a run has `B` rows; row `r` is the window of `seq + 1` consecutive tokens
//! starting at offset `splitmix64(seed, k·B + r) mod (N − seq)` (N tokens in the file), inputs
//! `window[..seq]`, targets `window[1..]`. splitmix64 is used (not the `rand` crate) so the Python
//! checks in `scripts/` reproduce the same windows in a few lines (docs/data.md).

use crate::spec::{BinDtype, DataSpec};
use memmap2::Mmap;
use std::fs::File;
use std::path::Path;

/// Every way a token file can be refused. Each message names the file and the flag.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum TokenError {
    #[error("--data {path}: cannot read: {reason}")]
    Io { path: String, reason: String },
    #[error("--data {path}: unknown extension {ext:?}; use .bin (little-endian u16, or u32 with --data-dtype u32), .npy (integer ids) or .txt (whitespace-separated ids)")]
    Extension { path: String, ext: String },
    #[error("--data-dtype applies to .bin files only; {path} is a {kind} file whose ids carry their own type: remove --data-dtype")]
    DtypeNotBin { path: String, kind: &'static str },
    #[error("--data {path}: the file is empty (0 tokens); it needs at least --seq + 1 = {window} tokens")]
    Empty { path: String, window: usize },
    #[error("--data {path}: {bytes} bytes is not a whole number of {dtype} tokens ({size} bytes each); a truncated file, or the wrong --data-dtype")]
    OddBytes {
        path: String,
        bytes: u64,
        dtype: &'static str,
        size: u64,
    },
    #[error("--data {path}: not a valid .npy file: {reason}")]
    Npy { path: String, reason: String },
    #[error("--data {path}: .npy dtype {descr:?} is not an integer id type; supported: <u2, <u4, <i4, <i8, <u8 (convert with `arr.astype(np.uint16)`)")]
    NpyDtype { path: String, descr: String },
    #[error("--data {path}: line {line}: {word:?} is not a token id (a non-negative integer)")]
    Text {
        path: String,
        line: usize,
        word: String,
    },
    #[error("--data {path}: {tokens} tokens is shorter than one window of --seq + 1 = {window} tokens; use a longer file or a smaller --seq")]
    TooShort {
        path: String,
        tokens: u64,
        window: usize,
    },
    #[error("--data {path}: token id {id} at position {position} is outside the model's vocabulary of {vocab} ids (vocab_size); the file was tokenised for another model, or use --config with a larger vocab_size")]
    OutOfVocab {
        path: String,
        id: i128,
        position: u64,
        vocab: usize,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Elem {
    U16,
    U32,
    I32,
    I64,
    U64,
}

impl Elem {
    fn size(self) -> usize {
        match self {
            Elem::U16 => 2,
            Elem::U32 | Elem::I32 => 4,
            Elem::I64 | Elem::U64 => 8,
        }
    }
    fn name(self) -> &'static str {
        match self {
            Elem::U16 => "u16",
            Elem::U32 => "u32",
            Elem::I32 => "i32",
            Elem::I64 => "i64",
            Elem::U64 => "u64",
        }
    }
}

enum Store {
    /// A mapped binary file; tokens start at byte `start`.
    Mapped {
        map: Mmap,
        start: usize,
        elem: Elem,
    },
    Owned(Vec<u64>),
}

/// An opened token file: N ids, read by position.
pub struct Tokens {
    path: String,
    store: Store,
    len: u64,
    /// "u16", "u32", … (the file's element type; text: "text").
    pub dtype: String,
}

impl Tokens {
    pub fn open(spec: &DataSpec) -> Result<Tokens, TokenError> {
        let path = spec.path.display().to_string();
        let ext = spec
            .path
            .extension()
            .map(|e| e.to_string_lossy().to_lowercase())
            .unwrap_or_default();
        let io = |e: std::io::Error| TokenError::Io {
            path: path.clone(),
            reason: e.to_string(),
        };
        let not_bin = |kind| TokenError::DtypeNotBin {
            path: path.clone(),
            kind,
        };
        match ext.as_str() {
            "bin" => {
                let elem = match spec.bin_dtype.unwrap_or(BinDtype::U16) {
                    BinDtype::U16 => Elem::U16,
                    BinDtype::U32 => Elem::U32,
                };
                let map = map_file(&spec.path).map_err(io)?;
                mapped(path.clone(), map, 0, elem)
            }
            "npy" => {
                if spec.bin_dtype.is_some() {
                    return Err(not_bin(".npy"));
                }
                let map = map_file(&spec.path).map_err(io)?;
                let (start, elem) = npy_header(&map).map_err(|e| match e {
                    NpyErr::Bad(reason) => TokenError::Npy {
                        path: path.clone(),
                        reason,
                    },
                    NpyErr::Dtype(descr) => TokenError::NpyDtype {
                        path: path.clone(),
                        descr,
                    },
                })?;
                mapped(path.clone(), map, start, elem)
            }
            "txt" => {
                if spec.bin_dtype.is_some() {
                    return Err(not_bin("text"));
                }
                let text = std::fs::read(&spec.path).map_err(io)?;
                let ids = parse_text(&text).map_err(|(line, word)| TokenError::Text {
                    path: path.clone(),
                    line,
                    word,
                })?;
                let len = ids.len() as u64;
                Ok(Tokens {
                    path,
                    store: Store::Owned(ids),
                    len,
                    dtype: "text".into(),
                })
            }
            _ => Err(TokenError::Extension { path, ext }),
        }
    }

    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Token `i` (i < len) as a signed value wide enough for every element type.
    fn get(&self, i: u64) -> i128 {
        match &self.store {
            Store::Owned(v) => v[i as usize] as i128,
            Store::Mapped { map, start, elem } => {
                let at = start + i as usize * elem.size();
                let b = &map[at..at + elem.size()];
                match elem {
                    Elem::U16 => u16::from_le_bytes([b[0], b[1]]) as i128,
                    Elem::U32 => u32::from_le_bytes(b.try_into().unwrap()) as i128,
                    Elem::I32 => i32::from_le_bytes(b.try_into().unwrap()) as i128,
                    Elem::I64 => i64::from_le_bytes(b.try_into().unwrap()) as i128,
                    Elem::U64 => u64::from_le_bytes(b.try_into().unwrap()) as i128,
                }
            }
        }
    }

    /// Refuses a file that cannot give one window of `seq + 1` tokens.
    pub fn check_window(&self, seq: usize) -> Result<(), TokenError> {
        let window = seq + 1;
        if self.len == 0 {
            return Err(TokenError::Empty {
                path: self.path.clone(),
                window,
            });
        }
        if self.len < window as u64 {
            return Err(TokenError::TooShort {
                path: self.path.clone(),
                tokens: self.len,
                window,
            });
        }
        Ok(())
    }

    /// Batch `k`: `batch` windows of `seq + 1` ids (row-major, `batch × (seq + 1)`), each id
    /// checked against `vocab`.
    pub fn batch(
        &self,
        k: u64,
        batch: usize,
        seq: usize,
        seed: u64,
        vocab: usize,
    ) -> Result<Vec<u32>, TokenError> {
        self.check_window(seq)?;
        let window = seq as u64 + 1;
        let starts = self.len - window + 1;
        let mut out = Vec::with_capacity(batch * (seq + 1));
        for r in 0..batch as u64 {
            let start = splitmix64(seed, k * batch as u64 + r) % starts;
            for pos in start..start + window {
                let id = self.get(pos);
                if id < 0 || id >= vocab as i128 {
                    return Err(TokenError::OutOfVocab {
                        path: self.path.clone(),
                        id,
                        position: pos,
                        vocab,
                    });
                }
                out.push(id as u32);
            }
        }
        Ok(out)
    }
}

/// The `j`-th output of the splitmix64 generator seeded with `seed` (Steele et al. 2014):
/// state = seed + (j+1)·0x9E3779B97F4A7C15, then the finaliser.
pub fn splitmix64(seed: u64, j: u64) -> u64 {
    let mut z = seed.wrapping_add(j.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn map_file(path: &Path) -> std::io::Result<Mmap> {
    let file = File::open(path)?;
    if file.metadata()?.len() == 0 {
        // mmap of an empty file fails on Linux; an empty map says "0 tokens".
        return memmap2::MmapOptions::new().len(0).map_anon().map(|m| {
            m.make_read_only()
                .expect("an anonymous map can be made read-only")
        });
    }
    // SAFETY: the file is opened read-only; a file truncated while mapped raises SIGBUS, which
    // a sweep classifies as "input changed" (as for weights).
    unsafe { Mmap::map(&file) }
}

fn mapped(path: String, map: Mmap, start: usize, elem: Elem) -> Result<Tokens, TokenError> {
    let bytes = (map.len() - start) as u64;
    let size = elem.size() as u64;
    if bytes % size != 0 {
        return Err(TokenError::OddBytes {
            path,
            bytes,
            dtype: elem.name(),
            size,
        });
    }
    Ok(Tokens {
        path,
        len: bytes / size,
        dtype: elem.name().into(),
        store: Store::Mapped { map, start, elem },
    })
}

enum NpyErr {
    Bad(String),
    Dtype(String),
}

/// Parses a .npy header (format 1.0, 2.0, 3.0) → (byte offset of the data, element type).
/// Only C-order (or 1-D) arrays of little-endian integers are accepted; the data must be
/// exactly the shape's product of elements.
fn npy_header(b: &[u8]) -> Result<(usize, Elem), NpyErr> {
    let bad = |s: &str| NpyErr::Bad(s.to_string());
    if b.len() < 10 || &b[..6] != b"\x93NUMPY" {
        return Err(bad("missing the \\x93NUMPY magic"));
    }
    let (hlen, hstart) = match b[6] {
        1 => (u16::from_le_bytes([b[8], b[9]]) as usize, 10usize),
        2 | 3 if b.len() >= 12 => (u32::from_le_bytes([b[8], b[9], b[10], b[11]]) as usize, 12),
        v => return Err(NpyErr::Bad(format!("format version {v} is not 1, 2 or 3"))),
    };
    let end = hstart
        .checked_add(hlen)
        .filter(|&e| e <= b.len())
        .ok_or_else(|| bad("header length runs past the end of the file"))?;
    let header = std::str::from_utf8(&b[hstart..end]).map_err(|_| bad("header is not text"))?;
    let value_of = |key: &str| -> Option<&str> {
        let at = header.find(&format!("'{key}'"))? + key.len() + 2;
        let rest = header[at..].trim_start().strip_prefix(':')?.trim_start();
        Some(rest)
    };
    let descr = value_of("descr")
        .and_then(|r| r.strip_prefix('\''))
        .and_then(|r| r.split('\'').next())
        .ok_or_else(|| bad("no 'descr' in the header"))?;
    let elem = match descr {
        "<u2" => Elem::U16,
        "<u4" => Elem::U32,
        "<i4" => Elem::I32,
        "<i8" => Elem::I64,
        "<u8" => Elem::U64,
        other => return Err(NpyErr::Dtype(other.to_string())),
    };
    let fortran =
        value_of("fortran_order").ok_or_else(|| bad("no 'fortran_order' in the header"))?;
    let shape_text = value_of("shape")
        .and_then(|r| r.strip_prefix('('))
        .and_then(|r| r.split(')').next())
        .ok_or_else(|| bad("no 'shape' in the header"))?;
    let mut count: u64 = 1;
    let mut dims = 0;
    for d in shape_text
        .split(',')
        .map(str::trim)
        .filter(|d| !d.is_empty())
    {
        let d: u64 = d
            .parse()
            .map_err(|_| NpyErr::Bad(format!("shape entry {d:?} is not an integer")))?;
        count = count
            .checked_mul(d)
            .ok_or_else(|| bad("shape overflows u64"))?;
        dims += 1;
    }
    if fortran.starts_with("True") && dims > 1 {
        return Err(bad(
            "fortran_order arrays are not supported; save with np.ascontiguousarray",
        ));
    }
    let data = (b.len() - end) as u64;
    if count.checked_mul(elem.size() as u64) != Some(data) {
        return Err(NpyErr::Bad(format!(
            "shape ({shape_text}) of {descr} needs {count} × {} bytes but {data} bytes follow the header",
            elem.size()
        )));
    }
    Ok((end, elem))
}

/// Whitespace-separated non-negative integers → ids, or (line, word) of the first bad word.
fn parse_text(text: &[u8]) -> Result<Vec<u64>, (usize, String)> {
    let text = String::from_utf8_lossy(text);
    let mut ids = Vec::new();
    for (n, line) in text.lines().enumerate() {
        for w in line.split_whitespace() {
            ids.push(w.parse::<u64>().map_err(|_| (n + 1, w.to_string()))?);
        }
    }
    Ok(ids)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(name: &str, bytes: &[u8]) -> (tempfile::TempDir, DataSpec) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(name);
        std::fs::write(&path, bytes).unwrap();
        (
            dir,
            DataSpec {
                path,
                bin_dtype: None,
            },
        )
    }

    fn npy(descr: &str, shape: &str, data: &[u8]) -> Vec<u8> {
        let mut h = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
        while (10 + h.len() + 1) % 64 != 0 {
            h.push(' ');
        }
        h.push('\n');
        let mut b = b"\x93NUMPY\x01\x00".to_vec();
        b.extend((h.len() as u16).to_le_bytes());
        b.extend(h.as_bytes());
        b.extend(data);
        b
    }

    #[test]
    fn splitmix64_matches_the_reference_sequence() {
        // Reference values of splitmix64 seeded with 0 (Vigna's splitmix64.c, first outputs).
        assert_eq!(splitmix64(0, 0), 0xE220_A839_7B1D_CDAF);
        assert_eq!(splitmix64(0, 1), 0x6E78_9E6A_A1B9_65F4);
    }

    #[test]
    fn bin_u16_windows_are_consecutive_ids() {
        let ids: Vec<u8> = (0u16..100).flat_map(|i| i.to_le_bytes()).collect();
        let (_d, spec) = write("t.bin", &ids);
        let t = Tokens::open(&spec).unwrap();
        assert_eq!((t.len(), t.dtype.as_str()), (100, "u16"));
        let b = t.batch(3, 2, 7, 42, 1000).unwrap();
        assert_eq!(b.len(), 16);
        for row in b.chunks(8) {
            assert!(row.windows(2).all(|w| w[1] == w[0] + 1), "{row:?}");
            let start = row[0] as u64;
            assert!(start + 8 <= 100);
        }
        let k = 3 * 2;
        assert_eq!(b[0] as u64, splitmix64(42, k) % 93);
        assert_eq!(b[8] as u64, splitmix64(42, k + 1) % 93);
    }

    #[test]
    fn npy_i8_and_text_read_the_same_ids() {
        let vals: Vec<i64> = vec![5, 1, 4, 1, 5, 9, 2, 6];
        let data: Vec<u8> = vals.iter().flat_map(|v| v.to_le_bytes()).collect();
        let (_d, spec) = write("t.npy", &npy("<i8", "(8,)", &data));
        let t = Tokens::open(&spec).unwrap();
        let (_d2, spec2) = write("t.txt", b"5 1 4\n1 5\t9 2 6\n");
        let u = Tokens::open(&spec2).unwrap();
        assert_eq!((t.len(), u.len()), (8, 8));
        assert_eq!(
            t.batch(0, 3, 4, 7, 10).unwrap(),
            u.batch(0, 3, 4, 7, 10).unwrap()
        );
    }

    #[test]
    fn out_of_vocab_names_id_position_and_vocab() {
        let (_d, spec) = write("t.txt", b"1 2 3 70000 4");
        let t = Tokens::open(&spec).unwrap();
        match t.batch(0, 1, 4, 0, 50257) {
            Err(TokenError::OutOfVocab {
                id,
                position,
                vocab,
                ..
            }) => assert_eq!((id, position, vocab), (70000, 3, 50257)),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn npy_float_and_bad_shapes_are_refused() {
        let (_d, spec) = write("f.npy", &npy("<f4", "(2,)", &[0; 8]));
        assert!(
            matches!(Tokens::open(&spec), Err(TokenError::NpyDtype { descr, .. }) if descr == "<f4")
        );
        let (_d, spec) = write("s.npy", &npy("<u2", "(3,)", &[0; 4]));
        assert!(matches!(Tokens::open(&spec), Err(TokenError::Npy { .. })));
        let (_d, spec) = write("m.npy", b"NUMPY garbage");
        assert!(matches!(Tokens::open(&spec), Err(TokenError::Npy { .. })));
    }
}
