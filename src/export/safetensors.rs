//! Safetensors files (fixtures and tests): the bytes `model::weights` encodes and checks,
//! written atomically.

use std::io;
use std::path::Path;

use crate::model::weights::{safetensors_bytes, WDtype};

/// Writes a valid safetensors file (see `model::weights::safetensors_bytes`); invalid input is an
/// `InvalidInput` error and writes nothing.
pub fn write_safetensors(
    path: &Path,
    tensors: &[(&str, WDtype, &[usize], &[u8])],
) -> io::Result<()> {
    let bytes = safetensors_bytes(path, tensors)?;
    super::write::write_bytes_atomic(path, &bytes).map_err(io::Error::other)
}
