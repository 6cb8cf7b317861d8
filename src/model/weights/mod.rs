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
//!
//! `types.rs` holds the errors and tensor types; `header.rs` the order-preserving JSON visitors;
//! `parse.rs` bytes → a validated tensor table; `file.rs` one memory-mapped file; `set.rs` a
//! single file or a sharded index as one table; `write.rs` writing files for tests and fixtures.

mod file;
mod header;
mod parse;
mod set;
mod types;
mod write;

pub use file::SafetensorsFile;
pub use parse::parse_header;
pub use set::{files_of, WeightSet};
pub use types::*;
pub use write::safetensors_bytes;

#[cfg(test)]
mod tests;
