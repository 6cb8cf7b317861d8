//! `parse_header`: the file's bytes → a validated tensor table, checked before any tensor is read.

use std::path::Path;

use serde::de::Deserializer as _;

use super::header::*;
use super::types::*;

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
pub(super) fn split_header<'a>(
    bytes: &'a [u8],
    path: &Path,
) -> Result<(&'a [u8], usize), WeightsError> {
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
pub(super) fn header_text<'a>(header: &'a [u8], path: &Path) -> Result<&'a str, WeightsError> {
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
pub(super) fn parse_header_json(text: &str, path: &Path) -> Result<Vec<HeaderEntry>, WeightsError> {
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
pub(super) fn validate_entries(
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

pub(super) fn check_metadata(
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

pub(super) fn check_name(name: &str, path: &Path) -> Result<(), WeightsError> {
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
pub(super) fn validate_tensor(
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

pub(super) fn parse_dtype(s: &str, tensor: &str, path: &Path) -> Result<WDtype, WeightsError> {
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
pub(super) fn parse_offsets(
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
pub(super) fn check_layout(
    tensors: &[TensorInfo],
    data_len: usize,
    path: &Path,
) -> Result<(), WeightsError> {
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

pub(super) fn overlap_error(first: &TensorInfo, second: &TensorInfo, path: &Path) -> WeightsError {
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
