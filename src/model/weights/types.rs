//! What reading weights yields or refuses: [`WeightsError`] (every message names the file, the
//! tensor where there is one, and what would be valid), the dtypes, [`TensorInfo`], [`RawTensor`].

use std::fmt;
use std::io;
use std::path::PathBuf;

use thiserror::Error;

/// Largest JSON header accepted, in bytes (the limit the reference implementation uses).
pub const MAX_HEADER_LEN: u64 = 100_000_000;
/// Largest `*.index.json` accepted, in bytes.
pub const MAX_INDEX_LEN: u64 = 100_000_000;

pub(super) const METADATA_KEY: &str = "__metadata__";
pub(super) const SUPPORTED_DTYPES: &str =
    "BOOL, U8, I8, I16, U16, I32, U32, I64, U64, F16, BF16, F32, F64";

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
pub(super) fn is_known_unsupported_dtype(s: &str) -> bool {
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
        let (size, decode) = self.decoder()?;
        Ok(self.data.chunks_exact(size).map(decode).collect())
    }

    /// As [`Self::to_f32_vec`], the element at row-major index k written at `place(k)`: a
    /// permutation of 0..len, such as a transposition, so the values land in one buffer.
    pub fn to_f32_vec_placed(
        &self,
        place: impl Fn(usize) -> usize,
    ) -> Result<Vec<f32>, WeightsError> {
        let (size, decode) = self.decoder()?;
        let mut out = vec![0f32; self.data.len() / size];
        for (idx, e) in self.data.chunks_exact(size).enumerate() {
            out[place(idx)] = decode(e);
        }
        Ok(out)
    }

    /// Bytes per element and the little-endian decoder to f32 (a cast for F64, rounding to
    /// nearest), after checking the data's length.
    fn decoder(&self) -> Result<(usize, fn(&[u8]) -> f32), WeightsError> {
        self.check_length()?;
        Ok(match self.dtype {
            WDtype::F32 => (4, |c| f32::from_le_bytes(arr(c))),
            WDtype::F64 => (8, |c| f64::from_le_bytes(arr(c)) as f32),
            WDtype::F16 => (2, |c| half::f16::from_le_bytes(arr(c)).to_f32()),
            WDtype::BF16 => (2, |c| half::bf16::from_le_bytes(arr(c)).to_f32()),
            dtype => return Err(WeightsError::NotFloat { dtype }),
        })
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
pub(super) fn arr<const N: usize>(chunk: &[u8]) -> [u8; N] {
    let mut out = [0u8; N];
    out.copy_from_slice(chunk);
    out
}
