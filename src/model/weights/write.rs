//! Safetensors bytes for tests and fixtures (`export::write_safetensors` writes them to a file).

use std::io;
use std::path::Path;

use super::parse::parse_header;
use super::types::*;

/// A valid safetensors file's bytes: tensors packed contiguously in the given order, header
/// space-padded so the data buffer starts at a multiple of 8. The result is checked with
/// `parse_header` (`path` names the file in its errors); a tensor whose byte length does not
/// match its shape, a duplicate or an invalid name gives an `InvalidInput` error.
pub fn safetensors_bytes(
    path: &Path,
    tensors: &[(&str, WDtype, &[usize], &[u8])],
) -> io::Result<Vec<u8>> {
    let bytes = encode_safetensors(tensors)?;
    parse_header(&bytes, path)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?;
    Ok(bytes)
}

/// Serializes tensors into safetensors bytes (header + packed data), without validation.
pub(super) fn encode_safetensors(
    tensors: &[(&str, WDtype, &[usize], &[u8])],
) -> io::Result<Vec<u8>> {
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
