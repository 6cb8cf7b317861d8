//! Strict, validating reader for safetensors files and sharded Hugging Face checkpoints.
//!
//! The format is parsed here, not with the `safetensors` crate, because that crate keeps the
//! last of duplicate tensor names and accepts several layouts we want to reject. A file is:
//! an 8-byte little-endian `u64` header length `N`, then `N` bytes of UTF-8 JSON (an object:
//! tensor name -> `{"dtype", "shape", "data_offsets"}`, plus an optional `"__metadata__"`
//! object of string -> string), then the data buffer. Offsets are relative to the data buffer.
//!
//! Everything is checked before a single tensor is read: header size and encoding, duplicate
//! names (seen by an order-preserving serde visitor), dtype, shape × dtype size against the
//! byte range, and that the tensors tile the data buffer exactly (no gaps, overlaps, aliases or
//! trailing bytes). Tensor bytes are always copied out, so misaligned data is fine. Every error
//! names the file, the tensor where there is one, and what would be valid.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::fs::File;
use std::io;
use std::path::{Component, Path, PathBuf};

use memmap2::Mmap;
use serde::de::{self, Deserializer as _, IgnoredAny, MapAccess, Visitor};
use serde::Deserialize;
use thiserror::Error;

/// Largest JSON header accepted, in bytes (the limit the reference implementation uses).
pub const MAX_HEADER_LEN: u64 = 100_000_000;
/// Largest `*.index.json` accepted, in bytes.
pub const MAX_INDEX_LEN: u64 = 100_000_000;

const METADATA_KEY: &str = "__metadata__";
const SUPPORTED_DTYPES: &str = "BOOL, U8, I8, I16, U16, I32, U32, I64, U64, F16, BF16, F32, F64";

/// Everything that can be wrong with a weights file or a sharded index.
#[derive(Debug, Error)]
pub enum WeightsError {
    // Not named `source`: the reason is part of this message, not a cause printed again after it.
    #[error("{}: cannot read: {error}", path.display())]
    Io { path: PathBuf, error: io::Error },
    #[error(
        "{}: not a safetensors file: it starts with text ({start:?}); a safetensors file starts \
         with an 8-byte little-endian header length followed by a JSON header",
        path.display()
    )]
    NotSafetensors { path: PathBuf, start: String },
    #[error("{}: is not a regular file; pass a `.safetensors` file or a `*.index.json`", path.display())]
    NotAFile { path: PathBuf },
    #[error(
        "{}: header too small: the file is {len} bytes; a safetensors file starts with an 8-byte \
         little-endian header length followed by a JSON header",
        path.display()
    )]
    HeaderTooSmall { path: PathBuf, len: usize },
    #[error(
        "{}: header too large: the length field says {len} bytes; valid is at most {MAX_HEADER_LEN}",
        path.display()
    )]
    HeaderTooLarge { path: PathBuf, len: u64 },
    #[error(
        "{}: invalid header length: the length field says {header_len} bytes but only {available} \
         bytes follow it; valid is a length no larger than the rest of the file",
        path.display()
    )]
    InvalidHeaderLength {
        path: PathBuf,
        header_len: u64,
        available: usize,
    },
    #[error("{}: invalid header: {problem}", path.display())]
    InvalidHeader { path: PathBuf, problem: String },
    #[error(
        "{}: duplicate tensor name {name:?} in the header; each tensor name must appear once",
        path.display()
    )]
    DuplicateTensor { path: PathBuf, name: String },
    #[error("{}: invalid tensor name {name:?}: {problem}", path.display())]
    InvalidName {
        path: PathBuf,
        name: String,
        problem: String,
    },
    #[error("{}: tensor {tensor:?}: unknown dtype {dtype:?}; valid: {SUPPORTED_DTYPES}", path.display())]
    UnknownDtype {
        path: PathBuf,
        tensor: String,
        dtype: String,
    },
    #[error(
        "{}: tensor {tensor:?}: dtype {dtype} is not supported by memscope; supported: {SUPPORTED_DTYPES}",
        path.display()
    )]
    UnsupportedDtype {
        path: PathBuf,
        tensor: String,
        dtype: String,
    },
    #[error(
        "{}: tensor {tensor:?}: shape {shape:?} with dtype {dtype} overflows the addressable size; \
         valid shapes have a byte size that fits in usize",
        path.display()
    )]
    ShapeOverflow {
        path: PathBuf,
        tensor: String,
        dtype: WDtype,
        shape: Vec<u64>,
    },
    #[error(
        "{}: tensor {tensor:?}: shape {shape:?} × {dtype} ({elem} bytes) needs {expected} bytes but \
         data_offsets [{begin}, {end}] cover {actual}",
        path.display(), elem = dtype.size_bytes(), actual = end.saturating_sub(*begin)
    )]
    SizeMismatch {
        path: PathBuf,
        tensor: String,
        dtype: WDtype,
        shape: Vec<usize>,
        expected: usize,
        begin: usize,
        end: usize,
    },
    #[error("{}: tensor {tensor:?}: invalid data_offsets: {problem}", path.display())]
    BadOffsets {
        path: PathBuf,
        tensor: String,
        problem: String,
    },
    #[error(
        "{}: tensors {first:?} [{first_begin}, {first_end}] and {second:?} [{second_begin}, {second_end}] \
         overlap; each byte of the data buffer must belong to exactly one tensor",
        path.display()
    )]
    Overlap {
        path: PathBuf,
        first: String,
        first_begin: usize,
        first_end: usize,
        second: String,
        second_begin: usize,
        second_end: usize,
    },
    #[error(
        "{}: tensors {first:?} and {second:?} share the byte range [{begin}, {end}]; each tensor \
         needs its own bytes",
        path.display()
    )]
    SharedRange {
        path: PathBuf,
        first: String,
        second: String,
        begin: usize,
        end: usize,
    },
    #[error(
        "{}: {gap_len} unused bytes [{gap_begin}, {gap_end}) before tensor {next:?} (after {}); \
         tensors must be packed contiguously from offset 0",
        path.display(), previous.as_deref().map_or("the start of the data buffer".to_string(), |p| format!("tensor {p:?}")),
        gap_len = gap_end.saturating_sub(*gap_begin)
    )]
    Gap {
        path: PathBuf,
        previous: Option<String>,
        next: String,
        gap_begin: usize,
        gap_end: usize,
    },
    #[error(
        "{}: {extra} extra bytes after the last tensor: the data buffer is {data_len} bytes but the \
         tensors end at {tensors_end}; valid is a buffer that ends where the last tensor ends",
        path.display(), extra = data_len.saturating_sub(*tensors_end)
    )]
    TrailingBytes {
        path: PathBuf,
        data_len: usize,
        tensors_end: usize,
    },
    #[error("{}: no tensor named {name:?} ({count} tensors in this file set)", path.display())]
    TensorNotFound {
        path: PathBuf,
        name: String,
        count: usize,
    },
    #[error(
        "tensor of dtype {dtype} cannot be converted to f32; valid dtypes: F16, BF16, F32, F64"
    )]
    NotFloat { dtype: WDtype },
    #[error(
        "raw tensor of dtype {dtype} and shape {shape:?} has {len} bytes; valid is shape product × {} bytes",
        dtype.size_bytes()
    )]
    RawLength {
        dtype: WDtype,
        shape: Vec<usize>,
        len: usize,
    },
    #[error("{}: invalid index: {problem}", path.display())]
    InvalidIndex { path: PathBuf, problem: String },
    #[error(
        "{}: shard {shard:?} for tensor {tensor:?} is unsafe: valid is a relative path inside the \
         index's directory, without `..`, a root or a drive prefix",
        path.display()
    )]
    UnsafeShardPath {
        path: PathBuf,
        shard: String,
        tensor: String,
    },
    #[error(
        "{}: shard {} (named for tensor {tensor:?} and {others} other tensors) does not exist: {error}",
        path.display(), shard.display()
    )]
    ShardMissing {
        path: PathBuf,
        shard: PathBuf,
        tensor: String,
        others: usize,
        error: io::Error,
    },
    #[error(
        "{}: tensor {name:?} is in the headers of two shards, {} and {}; each tensor must be in exactly one shard",
        path.display(), first.display(), second.display()
    )]
    TensorInTwoShards {
        path: PathBuf,
        name: String,
        first: PathBuf,
        second: PathBuf,
    },
    #[error(
        "{}: weight_map puts tensor {name:?} in {}, but that shard's header does not contain it{}",
        path.display(), shard.display(),
        found_in.as_ref().map_or(String::new(), |f| format!(" (it is in {})", f.display()))
    )]
    ShardLacksTensor {
        path: PathBuf,
        name: String,
        shard: PathBuf,
        found_in: Option<PathBuf>,
    },
    #[error(
        "{}: shard {} contains tensor {name:?} that the index's weight_map does not list; valid is \
         a weight_map naming every tensor of every shard",
        path.display(), shard.display()
    )]
    UnlistedTensor {
        path: PathBuf,
        name: String,
        shard: PathBuf,
    },
}

/// Element types of a safetensors tensor that memscope can load.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WDtype {
    Bool,
    U8,
    I8,
    I16,
    U16,
    I32,
    U32,
    I64,
    U64,
    F16,
    BF16,
    F32,
    F64,
}

impl WDtype {
    /// Every supported dtype, in the order of `SUPPORTED_DTYPES`.
    pub const ALL: [WDtype; 13] = [
        WDtype::Bool,
        WDtype::U8,
        WDtype::I8,
        WDtype::I16,
        WDtype::U16,
        WDtype::I32,
        WDtype::U32,
        WDtype::I64,
        WDtype::U64,
        WDtype::F16,
        WDtype::BF16,
        WDtype::F32,
        WDtype::F64,
    ];

    /// Size of one element in bytes.
    pub fn size_bytes(self) -> usize {
        match self {
            WDtype::Bool | WDtype::U8 | WDtype::I8 => 1,
            WDtype::I16 | WDtype::U16 | WDtype::F16 | WDtype::BF16 => 2,
            WDtype::I32 | WDtype::U32 | WDtype::F32 => 4,
            WDtype::I64 | WDtype::U64 | WDtype::F64 => 8,
        }
    }

    /// The dtype string used in safetensors headers (`"F32"`, `"BF16"`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            WDtype::Bool => "BOOL",
            WDtype::U8 => "U8",
            WDtype::I8 => "I8",
            WDtype::I16 => "I16",
            WDtype::U16 => "U16",
            WDtype::I32 => "I32",
            WDtype::U32 => "U32",
            WDtype::I64 => "I64",
            WDtype::U64 => "U64",
            WDtype::F16 => "F16",
            WDtype::BF16 => "BF16",
            WDtype::F32 => "F32",
            WDtype::F64 => "F64",
        }
    }

    /// Parses a safetensors dtype string exactly (case-sensitive); `None` if not supported.
    pub fn from_safetensors_str(s: &str) -> Option<WDtype> {
        WDtype::ALL.into_iter().find(|d| d.as_str() == s)
    }
}

impl fmt::Display for WDtype {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Safetensors dtypes that exist in the format but that memscope does not load.
fn is_known_unsupported_dtype(s: &str) -> bool {
    matches!(
        s,
        "F8_E4M3" | "F8_E5M2" | "F8_E8M0" | "F6_E2M3" | "F6_E3M2" | "F4" | "C64"
    )
}

/// One validated header entry. `begin`/`end` are relative to the start of the data buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorInfo {
    pub name: String,
    pub dtype: WDtype,
    pub shape: Vec<usize>,
    pub begin: usize,
    pub end: usize,
}

/// A tensor's bytes (little-endian, copied out of the file) with its dtype and shape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawTensor {
    pub dtype: WDtype,
    pub shape: Vec<usize>,
    pub data: Vec<u8>,
}

impl RawTensor {
    /// Converts F32/F16/BF16/F64 data to `f32` values; other dtypes are an error.
    pub fn to_f32_vec(&self) -> Result<Vec<f32>, WeightsError> {
        self.check_length()?;
        let values = match self.dtype {
            WDtype::F32 => self
                .data
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes(arr(c)))
                .collect(),
            WDtype::F64 => self
                .data
                .chunks_exact(8)
                .map(|c| f64::from_le_bytes(arr(c)) as f32) // rounds to nearest, as a cast
                .collect(),
            WDtype::F16 => self
                .data
                .chunks_exact(2)
                .map(|c| half::f16::from_le_bytes(arr(c)).to_f32())
                .collect(),
            WDtype::BF16 => self
                .data
                .chunks_exact(2)
                .map(|c| half::bf16::from_le_bytes(arr(c)).to_f32())
                .collect(),
            dtype => return Err(WeightsError::NotFloat { dtype }),
        };
        Ok(values)
    }

    /// Checks that `data` holds exactly shape product × element size bytes.
    fn check_length(&self) -> Result<(), WeightsError> {
        let expected = self
            .shape
            .iter()
            .try_fold(self.dtype.size_bytes(), |acc, &d| acc.checked_mul(d));
        if expected == Some(self.data.len()) {
            Ok(())
        } else {
            Err(WeightsError::RawLength {
                dtype: self.dtype,
                shape: self.shape.clone(),
                len: self.data.len(),
            })
        }
    }
}

/// Copies a chunk from `chunks_exact(N)` into an array (the length always matches).
fn arr<const N: usize>(chunk: &[u8]) -> [u8; N] {
    let mut out = [0u8; N];
    out.copy_from_slice(chunk);
    out
}

// ---------------------------------------------------------------------------------------------
// Header JSON: an order-preserving visitor so duplicate names are seen, not silently merged.
// ---------------------------------------------------------------------------------------------

/// A tensor entry exactly as written in the header; validated later.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEntry {
    dtype: String,
    shape: Vec<u64>,
    data_offsets: Vec<u64>,
}

#[derive(Debug)]
enum HeaderEntry {
    Metadata(Vec<(String, String)>),
    Tensor(String, RawEntry),
}

/// Visits the top-level header object, keeping every key in order (duplicates included).
/// `current` records the key whose value is being read, so a value error can name the tensor.
struct HeaderVisitor<'a> {
    current: &'a mut Option<String>,
}

impl<'de> Visitor<'de> for HeaderVisitor<'_> {
    type Value = Vec<HeaderEntry>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(
            "a JSON object mapping tensor names to {\"dtype\", \"shape\", \"data_offsets\"}",
        )
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut entries = Vec::new();
        while let Some(key) = map.next_key::<String>()? {
            *self.current = Some(key.clone());
            if key == METADATA_KEY {
                let pairs: OrderedStrings = map.next_value()?;
                entries.push(HeaderEntry::Metadata(pairs.0));
            } else {
                let entry: RawEntry = map.next_value()?;
                entries.push(HeaderEntry::Tensor(key, entry));
            }
            *self.current = None;
        }
        Ok(entries)
    }
}

/// A JSON object of string -> string, in order, duplicates kept.
struct OrderedStrings(Vec<(String, String)>);

impl<'de> Deserialize<'de> for OrderedStrings {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(OrderedStringsVisitor)
    }
}

struct OrderedStringsVisitor;

impl<'de> Visitor<'de> for OrderedStringsVisitor {
    type Value = OrderedStrings;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object whose values are all strings")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut pairs = Vec::new();
        while let Some((k, v)) = map.next_entry::<String, String>()? {
            pairs.push((k, v));
        }
        Ok(OrderedStrings(pairs))
    }
}

/// First key that occurs twice in `keys`, if any.
fn first_duplicate<'a>(keys: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let mut seen = std::collections::HashSet::new();
    keys.into_iter().find(|k| !seen.insert(*k))
}

// ---------------------------------------------------------------------------------------------
// parse_header: bytes -> validated tensor table.
// ---------------------------------------------------------------------------------------------

/// Validates a whole safetensors file given as bytes; returns its tensors (sorted by offset)
/// and the file offset where the data buffer starts. Pure: no I/O, no panics on any input.
pub fn parse_header(
    file_bytes: &[u8],
    path: &Path,
) -> Result<(Vec<TensorInfo>, usize), WeightsError> {
    let (header, data_start) = split_header(file_bytes, path)?;
    let data_len = file_bytes.len().saturating_sub(data_start); // data_start <= len here
    let text = header_text(header, path)?;
    let entries = parse_header_json(text, path)?;
    let tensors = validate_entries(entries, data_len, path)?;
    check_layout(&tensors, data_len, path)?;
    Ok((tensors, data_start))
}

/// Reads the length prefix; returns the header bytes and the offset of the data buffer.
fn split_header<'a>(bytes: &'a [u8], path: &Path) -> Result<(&'a [u8], usize), WeightsError> {
    let (len_bytes, rest) = match bytes.split_first_chunk::<8>() {
        Some(split) => split,
        None => {
            return Err(WeightsError::HeaderTooSmall {
                path: path.into(),
                len: bytes.len(),
            })
        }
    };
    let header_len = u64::from_le_bytes(*len_bytes);
    let text = |b: &u8| b.is_ascii_graphic() || b.is_ascii_whitespace();
    if header_len > MAX_HEADER_LEN && len_bytes.iter().all(text) {
        return Err(WeightsError::NotSafetensors {
            path: path.into(),
            start: String::from_utf8_lossy(len_bytes).into_owned(),
        });
    }
    if header_len > MAX_HEADER_LEN {
        return Err(WeightsError::HeaderTooLarge {
            path: path.into(),
            len: header_len,
        });
    }
    let invalid = || WeightsError::InvalidHeaderLength {
        path: path.into(),
        header_len,
        available: rest.len(),
    };
    let n = usize::try_from(header_len).map_err(|_| invalid())?;
    let header = rest.get(..n).ok_or_else(invalid)?;
    let data_start = n.checked_add(8).ok_or_else(invalid)?;
    Ok((header, data_start))
}

/// Checks the header's encoding and framing; returns the JSON text without its space padding.
fn header_text<'a>(header: &'a [u8], path: &Path) -> Result<&'a str, WeightsError> {
    let bad = |problem: String| WeightsError::InvalidHeader {
        path: path.into(),
        problem,
    };
    if header.starts_with(&[0xEF, 0xBB, 0xBF]) {
        return Err(bad(
            "it starts with a UTF-8 byte-order mark (EF BB BF); valid headers start \
                        directly with '{'"
                .into(),
        ));
    }
    if let Some(pos) = header.iter().position(|&b| b == 0) {
        return Err(bad(format!(
            "NUL byte at header offset {pos}; pad the header with spaces (0x20), not NUL"
        )));
    }
    let text = std::str::from_utf8(header).map_err(|e| {
        bad(format!(
            "not valid UTF-8 (first bad byte at header offset {}); valid is UTF-8 JSON",
            e.valid_up_to()
        ))
    })?;
    if !text.starts_with('{') {
        return Err(bad(format!(
            "it starts with {:?}; valid headers are a JSON object starting with '{{'",
            text.chars()
                .next()
                .map_or(String::from("nothing (empty header)"), String::from)
        )));
    }
    let trimmed = text.trim_end_matches(' ');
    if !trimmed.ends_with('}') {
        let last = trimmed.chars().last().map_or(String::new(), String::from);
        return Err(bad(format!(
            "it ends with {last:?}; valid headers end with '}}' followed only by space (0x20) padding"
        )));
    }
    Ok(trimmed)
}

/// Parses the header JSON into ordered entries; errors name the tensor being read.
fn parse_header_json(text: &str, path: &Path) -> Result<Vec<HeaderEntry>, WeightsError> {
    let mut current = None;
    let mut de = serde_json::Deserializer::from_str(text);
    let parsed = de
        .deserialize_map(HeaderVisitor {
            current: &mut current,
        })
        .and_then(|entries| de.end().map(|()| entries));
    parsed.map_err(|e| {
        let problem = match &current {
            Some(key) if key == METADATA_KEY => {
                format!("{METADATA_KEY:?} must be an object of string -> string: {e}")
            }
            Some(key) => format!(
                "tensor {key:?}: {e}; valid entries are {{\"dtype\": \"F32\", \"shape\": [..], \
                 \"data_offsets\": [begin, end]}}"
            ),
            None => format!("{e}"),
        };
        WeightsError::InvalidHeader {
            path: path.into(),
            problem,
        }
    })
}

/// Checks names, metadata, dtypes, shapes and per-tensor offsets; returns tensors by offset.
fn validate_entries(
    entries: Vec<HeaderEntry>,
    data_len: usize,
    path: &Path,
) -> Result<Vec<TensorInfo>, WeightsError> {
    let mut metadata_seen = false;
    let mut tensors: Vec<TensorInfo> = Vec::with_capacity(entries.len());
    let mut names = std::collections::HashSet::new();
    for entry in entries {
        match entry {
            HeaderEntry::Metadata(pairs) => {
                check_metadata(&pairs, metadata_seen, path)?;
                metadata_seen = true;
            }
            HeaderEntry::Tensor(name, raw) => {
                check_name(&name, path)?;
                if !names.insert(name.clone()) {
                    return Err(WeightsError::DuplicateTensor {
                        path: path.into(),
                        name,
                    });
                }
                tensors.push(validate_tensor(name, raw, data_len, path)?);
            }
        }
    }
    tensors.sort_by(|a, b| (a.begin, a.end, &a.name).cmp(&(b.begin, b.end, &b.name)));
    Ok(tensors)
}

fn check_metadata(
    pairs: &[(String, String)],
    seen_before: bool,
    path: &Path,
) -> Result<(), WeightsError> {
    let bad = |problem: String| WeightsError::InvalidHeader {
        path: path.into(),
        problem,
    };
    if seen_before {
        return Err(bad(format!(
            "{METADATA_KEY:?} appears twice; valid is at most once"
        )));
    }
    if let Some(key) = first_duplicate(pairs.iter().map(|(k, _)| k.as_str())) {
        return Err(bad(format!(
            "{METADATA_KEY:?} has the key {key:?} twice; each key must be unique"
        )));
    }
    Ok(())
}

fn check_name(name: &str, path: &Path) -> Result<(), WeightsError> {
    let problem = if name.is_empty() {
        "the name is empty; valid names are non-empty"
    } else if name.contains('\0') {
        "the name contains a NUL character; valid names have none"
    } else {
        return Ok(());
    };
    Err(WeightsError::InvalidName {
        path: path.into(),
        name: name.into(),
        problem: problem.into(),
    })
}

/// Validates one entry: dtype, offsets within the buffer, and shape × dtype == byte length.
fn validate_tensor(
    name: String,
    raw: RawEntry,
    data_len: usize,
    path: &Path,
) -> Result<TensorInfo, WeightsError> {
    let dtype = parse_dtype(&raw.dtype, &name, path)?;
    let (begin, end) = parse_offsets(&raw.data_offsets, data_len, &name, path)?;
    let overflow = || WeightsError::ShapeOverflow {
        path: path.into(),
        tensor: name.clone(),
        dtype,
        shape: raw.shape.clone(),
    };
    let shape: Vec<usize> = raw
        .shape
        .iter()
        .map(|&d| usize::try_from(d))
        .collect::<Result<_, _>>()
        .map_err(|_| overflow())?;
    let expected = shape
        .iter()
        .try_fold(dtype.size_bytes(), |acc, &d| acc.checked_mul(d))
        .ok_or_else(overflow)?;
    if expected != end.saturating_sub(begin) {
        return Err(WeightsError::SizeMismatch {
            path: path.into(),
            tensor: name,
            dtype,
            shape,
            expected,
            begin,
            end,
        });
    }
    Ok(TensorInfo {
        name,
        dtype,
        shape,
        begin,
        end,
    })
}

fn parse_dtype(s: &str, tensor: &str, path: &Path) -> Result<WDtype, WeightsError> {
    if let Some(dtype) = WDtype::from_safetensors_str(s) {
        return Ok(dtype);
    }
    let (path, tensor, dtype) = (path.into(), tensor.into(), s.into());
    if is_known_unsupported_dtype(s) {
        Err(WeightsError::UnsupportedDtype {
            path,
            tensor,
            dtype,
        })
    } else {
        Err(WeightsError::UnknownDtype {
            path,
            tensor,
            dtype,
        })
    }
}

/// Checks `[begin, end]`: two entries, begin <= end, end within the data buffer.
fn parse_offsets(
    offsets: &[u64],
    data_len: usize,
    tensor: &str,
    path: &Path,
) -> Result<(usize, usize), WeightsError> {
    let bad = |problem: String| WeightsError::BadOffsets {
        path: path.into(),
        tensor: tensor.into(),
        problem,
    };
    let [begin, end] = match offsets {
        [b, e] => [*b, *e],
        _ => {
            return Err(bad(format!(
                "{offsets:?} has {} entries; valid is [begin, end]",
                offsets.len()
            )))
        }
    };
    if begin > end {
        return Err(bad(format!(
            "begin {begin} > end {end}; valid is begin <= end"
        )));
    }
    let beyond = || {
        bad(format!(
            "[{begin}, {end}] reaches beyond the {data_len}-byte data buffer ({} bytes missing); \
             valid offsets are at most {data_len}",
            end.saturating_sub(u64::try_from(data_len).unwrap_or(u64::MAX))
        ))
    };
    let end_usize = usize::try_from(end)
        .ok()
        .filter(|&e| e <= data_len)
        .ok_or_else(beyond)?;
    // begin <= end <= data_len, so this conversion cannot fail.
    let begin_usize = usize::try_from(begin).map_err(|_| beyond())?;
    Ok((begin_usize, end_usize))
}

/// Checks that tensors (sorted by offset) tile `[0, data_len)` exactly.
/// Zero-length tensors occupy no bytes and may sit at any offset on the chain.
fn check_layout(tensors: &[TensorInfo], data_len: usize, path: &Path) -> Result<(), WeightsError> {
    let mut cursor = 0usize;
    let mut prev: Option<&TensorInfo> = None;
    for t in tensors {
        if t.begin > cursor {
            return Err(WeightsError::Gap {
                path: path.into(),
                previous: prev.map(|p| p.name.clone()),
                next: t.name.clone(),
                gap_begin: cursor,
                gap_end: t.begin,
            });
        }
        if t.begin < cursor {
            // Sorted by begin, so the tensor that moved the cursor past t.begin is `prev`.
            return Err(overlap_error(prev.unwrap_or(t), t, path));
        }
        cursor = t.end;
        prev = Some(t);
    }
    if cursor != data_len {
        return Err(WeightsError::TrailingBytes {
            path: path.into(),
            data_len,
            tensors_end: cursor,
        });
    }
    Ok(())
}

fn overlap_error(first: &TensorInfo, second: &TensorInfo, path: &Path) -> WeightsError {
    if first.begin == second.begin && first.end == second.end {
        return WeightsError::SharedRange {
            path: path.into(),
            first: first.name.clone(),
            second: second.name.clone(),
            begin: first.begin,
            end: first.end,
        };
    }
    WeightsError::Overlap {
        path: path.into(),
        first: first.name.clone(),
        first_begin: first.begin,
        first_end: first.end,
        second: second.name.clone(),
        second_begin: second.begin,
        second_end: second.end,
    }
}

// ---------------------------------------------------------------------------------------------
// SafetensorsFile: one validated, memory-mapped file.
// ---------------------------------------------------------------------------------------------

/// One validated, memory-mapped safetensors file.
#[derive(Debug)]
pub struct SafetensorsFile {
    path: PathBuf,
    mmap: Mmap,
    data_start: usize,
    tensors: Vec<TensorInfo>,
    by_name: HashMap<String, usize>,
}

impl SafetensorsFile {
    /// Maps the file and validates its whole header and layout.
    pub fn open(path: &Path) -> Result<Self, WeightsError> {
        let io_err = |error| WeightsError::Io {
            path: path.into(),
            error,
        };
        let file = File::open(path).map_err(io_err)?;
        if !file.metadata().map_err(io_err)?.is_file() {
            return Err(WeightsError::NotAFile { path: path.into() });
        }
        // SAFETY: the map is only read through `&[u8]` and every tensor is copied out. The one
        // hazard is another process truncating or rewriting the file while it is mapped: a
        // truncation turns reads past the new end into SIGBUS. That is acceptable here because
        // weights are read inside a worker process, and the parent classifies such a death as
        // "input changed" (RELIABILITY.md case 12) and the sweep goes on.
        let mmap = unsafe { Mmap::map(&file) }.map_err(io_err)?;
        let (tensors, data_start) = parse_header(&mmap, path)?;
        let by_name = tensors
            .iter()
            .enumerate()
            .map(|(i, t)| (t.name.clone(), i))
            .collect();
        Ok(SafetensorsFile {
            path: path.into(),
            mmap,
            data_start,
            tensors,
            by_name,
        })
    }

    /// The file this was opened from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Every tensor, sorted by data offset.
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }

    /// Copies one tensor's bytes out of the file.
    pub fn read(&self, name: &str) -> Result<RawTensor, WeightsError> {
        let index =
            self.by_name
                .get(name)
                .copied()
                .ok_or_else(|| WeightsError::TensorNotFound {
                    path: self.path.clone(),
                    name: name.into(),
                    count: self.tensors.len(),
                })?;
        self.read_index(index)
    }

    fn read_index(&self, index: usize) -> Result<RawTensor, WeightsError> {
        let missing = |name: &str| WeightsError::TensorNotFound {
            path: self.path.clone(),
            name: name.into(),
            count: self.tensors.len(),
        };
        let info = self
            .tensors
            .get(index)
            .ok_or_else(|| missing("<index out of range>"))?;
        let range = self
            .data_start
            .checked_add(info.begin)
            .zip(self.data_start.checked_add(info.end));
        let bytes = range
            .and_then(|(b, e)| self.mmap.get(b..e))
            .ok_or_else(|| missing(&info.name))?;
        // A copy, never a cast: the bytes may be misaligned for the dtype.
        Ok(RawTensor {
            dtype: info.dtype,
            shape: info.shape.clone(),
            data: bytes.to_vec(),
        })
    }
}

// ---------------------------------------------------------------------------------------------
// WeightSet: a single file or a sharded index, as one name -> tensor table.
// ---------------------------------------------------------------------------------------------

/// Either a single file or a sharded index: name -> tensor.
#[derive(Debug)]
pub struct WeightSet {
    source: PathBuf,
    files: Vec<SafetensorsFile>,
    /// name -> (index into `files`, index into that file's tensors)
    index: BTreeMap<String, (usize, usize)>,
}

impl WeightSet {
    /// Opens `*.index.json` as a sharded checkpoint, anything else as one safetensors file.
    pub fn open(path: &Path) -> Result<Self, WeightsError> {
        let is_index = path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.ends_with(".index.json"));
        if is_index {
            open_sharded(path)
        } else {
            let file = SafetensorsFile::open(path)?;
            let index = file
                .tensors()
                .iter()
                .enumerate()
                .map(|(i, t)| (t.name.clone(), (0, i)))
                .collect();
            Ok(WeightSet {
                source: path.into(),
                files: vec![file],
                index,
            })
        }
    }

    /// The path this set was opened from (the file or the index).
    pub fn source(&self) -> &Path {
        &self.source
    }

    /// Every tensor name, sorted.
    pub fn names(&self) -> Vec<String> {
        self.index.keys().cloned().collect()
    }

    /// Header information of one tensor.
    pub fn info(&self, name: &str) -> Option<&TensorInfo> {
        let &(f, t) = self.index.get(name)?;
        self.files.get(f)?.tensors().get(t)
    }

    /// Copies one tensor's bytes out of its file.
    pub fn read(&self, name: &str) -> Result<RawTensor, WeightsError> {
        let found = self
            .index
            .get(name)
            .and_then(|&(f, t)| Some((self.files.get(f)?, t)));
        match found {
            Some((file, t)) => file.read_index(t),
            None => Err(WeightsError::TensorNotFound {
                path: self.source.clone(),
                name: name.into(),
                count: self.index.len(),
            }),
        }
    }
}

/// The parts of a Hugging Face `*.index.json` we use, with order and duplicates preserved.
struct IndexJson {
    weight_map: Vec<(String, String)>,
}

struct IndexVisitor;

impl<'de> Visitor<'de> for IndexVisitor {
    type Value = IndexJson;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object {\"metadata\": {..}, \"weight_map\": {tensor name: shard file}}")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut weight_map: Option<Vec<(String, String)>> = None;
        let mut metadata_seen = false;
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "weight_map" if weight_map.is_none() => {
                    weight_map = Some(map.next_value::<OrderedStrings>()?.0);
                }
                "metadata" if !metadata_seen => {
                    map.next_value::<IgnoredAny>()?;
                    metadata_seen = true;
                }
                "weight_map" | "metadata" => {
                    return Err(de::Error::custom(format_args!("key {key:?} appears twice")));
                }
                other => {
                    return Err(de::Error::custom(format_args!(
                        "unknown key {other:?}; valid keys are \"metadata\" and \"weight_map\""
                    )));
                }
            }
        }
        let weight_map = weight_map.ok_or_else(|| de::Error::missing_field("weight_map"))?;
        Ok(IndexJson { weight_map })
    }
}

/// Reads and parses an index file (size-capped, strict UTF-8 JSON).
fn read_index_json(path: &Path) -> Result<IndexJson, WeightsError> {
    let io_err = |error| WeightsError::Io {
        path: path.into(),
        error,
    };
    let bad = |problem: String| WeightsError::InvalidIndex {
        path: path.into(),
        problem,
    };
    let len = std::fs::metadata(path).map_err(io_err)?.len();
    if len > MAX_INDEX_LEN {
        return Err(bad(format!(
            "the file is {len} bytes; valid is at most {MAX_INDEX_LEN}"
        )));
    }
    let bytes = std::fs::read(path).map_err(io_err)?;
    let text = std::str::from_utf8(&bytes).map_err(|e| {
        bad(format!(
            "not valid UTF-8 (first bad byte at offset {}); valid is UTF-8 JSON",
            e.valid_up_to()
        ))
    })?;
    let mut de = serde_json::Deserializer::from_str(text);
    let parsed = de
        .deserialize_map(IndexVisitor)
        .and_then(|ix| de.end().map(|()| ix));
    parsed.map_err(|e| bad(e.to_string()))
}

/// Turns a weight_map shard entry into a safe relative path (no `..`, root or prefix).
fn safe_shard_path(index_path: &Path, tensor: &str, shard: &str) -> Result<PathBuf, WeightsError> {
    let unsafe_path = || WeightsError::UnsafeShardPath {
        path: index_path.into(),
        shard: shard.into(),
        tensor: tensor.into(),
    };
    if shard.contains('\0') {
        return Err(unsafe_path());
    }
    let mut out = PathBuf::new();
    for component in Path::new(shard).components() {
        match component {
            Component::Normal(part) => out.push(part),
            Component::CurDir => {}
            Component::ParentDir | Component::RootDir | Component::Prefix(_) => {
                return Err(unsafe_path())
            }
        }
    }
    if out.as_os_str().is_empty() {
        return Err(unsafe_path());
    }
    Ok(out)
}

/// Opens every shard of an index and checks the index against the shards' headers.
fn open_sharded(index_path: &Path) -> Result<WeightSet, WeightsError> {
    let bad = |problem: String| WeightsError::InvalidIndex {
        path: index_path.into(),
        problem,
    };
    let index_json = read_index_json(index_path)?;
    let weight_map = index_json.weight_map;
    if weight_map.is_empty() {
        return Err(bad(
            "weight_map is empty; valid is one entry per tensor".into()
        ));
    }
    if let Some(name) = first_duplicate(weight_map.iter().map(|(k, _)| k.as_str())) {
        return Err(bad(format!(
            "weight_map lists tensor {name:?} twice; each tensor must appear once"
        )));
    }
    // Shard (relative path) -> tensors the index puts there; BTreeMap for a stable order.
    let mut by_shard: BTreeMap<PathBuf, Vec<&str>> = BTreeMap::new();
    let mut expected: HashMap<&str, PathBuf> = HashMap::with_capacity(weight_map.len());
    for (name, shard) in &weight_map {
        check_name(name, index_path)?;
        let rel = safe_shard_path(index_path, name, shard)?;
        by_shard.entry(rel.clone()).or_default().push(name);
        expected.insert(name, rel);
    }
    let dir = index_path.parent().unwrap_or(Path::new(""));
    let mut files = Vec::with_capacity(by_shard.len());
    let mut rel_paths = Vec::with_capacity(by_shard.len());
    for (rel, names) in &by_shard {
        files.push(open_shard(index_path, &dir.join(rel), names)?);
        rel_paths.push(rel.clone());
    }
    let index = index_tensors(index_path, &files)?;
    cross_check(index_path, &files, &rel_paths, &index, &expected)?;
    Ok(WeightSet {
        source: index_path.into(),
        files,
        index,
    })
}

fn open_shard(
    index_path: &Path,
    shard: &Path,
    names: &[&str],
) -> Result<SafetensorsFile, WeightsError> {
    match SafetensorsFile::open(shard) {
        Err(WeightsError::Io { error, .. }) if error.kind() == io::ErrorKind::NotFound => {
            Err(WeightsError::ShardMissing {
                path: index_path.into(),
                shard: shard.into(),
                tensor: names.first().map_or(String::new(), |n| n.to_string()),
                others: names.len().saturating_sub(1),
                error,
            })
        }
        other => other,
    }
}

/// name -> (file, tensor) over all shards; a name in two shards' headers is an error.
fn index_tensors(
    index_path: &Path,
    files: &[SafetensorsFile],
) -> Result<BTreeMap<String, (usize, usize)>, WeightsError> {
    let mut index: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    for (fi, file) in files.iter().enumerate() {
        for (ti, t) in file.tensors().iter().enumerate() {
            if let Some((prev, _)) = index.insert(t.name.clone(), (fi, ti)) {
                let first = files
                    .get(prev)
                    .map_or_else(PathBuf::new, |f| f.path().into());
                return Err(WeightsError::TensorInTwoShards {
                    path: index_path.into(),
                    name: t.name.clone(),
                    first,
                    second: file.path().into(),
                });
            }
        }
    }
    Ok(index)
}

/// The weight_map and the shard headers must describe exactly the same name -> shard mapping.
fn cross_check(
    index_path: &Path,
    files: &[SafetensorsFile],
    rel_paths: &[PathBuf],
    index: &BTreeMap<String, (usize, usize)>,
    expected: &HashMap<&str, PathBuf>,
) -> Result<(), WeightsError> {
    let file_path = |fi: usize| files.get(fi).map_or_else(PathBuf::new, |f| f.path().into());
    for (&name, rel) in expected {
        let found = index.get(name).map(|&(fi, _)| fi);
        if found.and_then(|fi| rel_paths.get(fi)) != Some(rel) {
            let shard = rel_paths
                .iter()
                .position(|r| r == rel)
                .map_or_else(|| rel.clone(), file_path);
            return Err(WeightsError::ShardLacksTensor {
                path: index_path.into(),
                name: name.into(),
                shard,
                found_in: found.map(file_path),
            });
        }
    }
    for (name, &(fi, _)) in index {
        if !expected.contains_key(name.as_str()) {
            return Err(WeightsError::UnlistedTensor {
                path: index_path.into(),
                name: name.clone(),
                shard: file_path(fi),
            });
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Writing (for tests and fixtures).
// ---------------------------------------------------------------------------------------------

/// Writes a valid safetensors file: tensors packed contiguously in the given order, header
/// space-padded so the data buffer starts at a multiple of 8. The result is checked with
/// `parse_header`; a tensor whose byte length does not match its shape, a duplicate or an
/// invalid name gives an `InvalidInput` error and writes nothing.
pub fn write_safetensors(
    path: &Path,
    tensors: &[(&str, WDtype, &[usize], &[u8])],
) -> io::Result<()> {
    let bytes = encode_safetensors(tensors)?;
    parse_header(&bytes, path)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?;
    std::fs::write(path, bytes)
}

/// Serializes tensors into safetensors bytes (header + packed data), without validation.
fn encode_safetensors(tensors: &[(&str, WDtype, &[usize], &[u8])]) -> io::Result<Vec<u8>> {
    let mut header = String::from("{");
    let mut offset = 0usize;
    for (i, (name, dtype, shape, data)) in tensors.iter().enumerate() {
        let end = offset.checked_add(data.len()).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                "total data size overflows usize",
            )
        })?;
        let name_json = serde_json::to_string(name).map_err(io::Error::other)?;
        if i > 0 {
            header.push(',');
        }
        header.push_str(&format!(
            "{name_json}:{{\"dtype\":\"{dtype}\",\"shape\":{shape:?},\"data_offsets\":[{offset},{end}]}}"
        ));
        offset = end;
    }
    header.push('}');
    while header.len() % 8 != 0 {
        header.push(' ');
    }
    let mut out = Vec::with_capacity(header.len().saturating_add(offset).saturating_add(8));
    let header_len = u64::try_from(header.len()).map_err(io::Error::other)?;
    out.extend_from_slice(&header_len.to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    for (_, _, _, data) in tensors {
        out.extend_from_slice(data);
    }
    Ok(out)
}

#[cfg(test)]
#[path = "weights_tests.rs"]
mod tests;
