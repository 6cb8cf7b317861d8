//! JSON text → the top-level object's entries (duplicates kept, so they can be rejected), with
//! serde_json's errors turned into messages that name the field at the error position.

use std::fmt;

use serde_json::Value;

use super::ConfigError;

/// The top-level object as ordered entries, keeping duplicates so that we can reject them.
pub(super) struct Entries(Vec<(String, Value)>);

impl<'de> serde::Deserialize<'de> for Entries {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = Entries;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Entries, A::Error> {
                let mut entries = Vec::new();
                while let Some(entry) = map.next_entry::<String, Value>()? {
                    entries.push(entry);
                }
                Ok(Entries(entries))
            }
        }
        deserializer.deserialize_map(Visitor)
    }
}

pub(super) fn parse_object(text: &str, origin: &str) -> Result<Vec<(String, Value)>, ConfigError> {
    let entries = match serde_json::from_str::<Entries>(text) {
        Ok(Entries(entries)) => entries,
        Err(err) => return Err(json_error(text, origin, &err)),
    };
    for (i, (key, _)) in entries.iter().enumerate() {
        if entries[..i].iter().any(|(k, _)| k == key) {
            return Err(ConfigError::DuplicateKey {
                origin: origin.to_string(),
                key: key.clone(),
            });
        }
    }
    Ok(entries)
}

/// Turns a serde_json error into a ConfigError naming the field at the error position.
pub(super) fn json_error(text: &str, origin: &str, err: &serde_json::Error) -> ConfigError {
    let origin = origin.to_string();
    let (line, column) = (err.line(), err.column());
    let offset = byte_offset(text, line, column);
    let message = err.to_string();
    let reason = message
        .rsplit_once(" at line ")
        .map_or(message.as_str(), |(reason, _)| reason)
        .to_string();
    if err.classify() == serde_json::error::Category::Data {
        let found = reason
            .strip_prefix("invalid type: ")
            .and_then(|r| r.split(',').next())
            .unwrap_or(&reason)
            .to_string();
        return ConfigError::NotAnObject { origin, found };
    }
    if reason == "recursion limit exceeded" {
        let key = json_path_at(text, offset)
            .into_iter()
            .find_map(|seg| match seg {
                PathSeg::Key(k) => Some(k),
                PathSeg::Index(_) => None,
            });
        return ConfigError::TooDeep {
            origin,
            key,
            line,
            column,
        };
    }
    if let Some(start) = non_finite_token_at(text, offset) {
        let path = json_path_at(text, start);
        let key = (!path.is_empty()).then(|| format_path(&path));
        return ConfigError::NotANumber {
            origin,
            key,
            line,
            column,
        };
    }
    let path = json_path_at(text, offset);
    let key = (!path.is_empty()).then(|| format_path(&path));
    ConfigError::Syntax {
        origin,
        key,
        line,
        column,
        reason,
    }
}

/// Byte offset of serde_json's (1-based line, column) position; column counts bytes.
pub(super) fn byte_offset(text: &str, line: usize, column: usize) -> usize {
    let line_start = text
        .match_indices('\n')
        .nth(line.saturating_sub(2))
        .map_or(0, |(i, _)| i + 1);
    let start = if line <= 1 { 0 } else { line_start };
    (start + column.saturating_sub(1)).min(text.len())
}

/// Start of a `NaN`, `Infinity` or signed variant that serde_json stopped at, if any.
pub(super) fn non_finite_token_at(text: &str, offset: usize) -> Option<usize> {
    let bytes = text.as_bytes();
    (offset.saturating_sub(2)..=offset.saturating_add(1).min(bytes.len())).find_map(|p| {
        let rest = &bytes[p..];
        if rest.starts_with(b"NaN") || rest.starts_with(b"Infinity") {
            let signed = p > 0 && matches!(bytes[p - 1], b'-' | b'+');
            Some(if signed { p - 1 } else { p })
        } else {
            None
        }
    })
}

#[derive(Debug, Clone, PartialEq)]
pub(super) enum PathSeg {
    Key(String),
    Index(usize),
}

/// `rope_scaling.factor`, `layers[3]` ... (at most 8 segments shown).
pub(super) fn format_path(path: &[PathSeg]) -> String {
    let mut out = String::new();
    for seg in path.iter().take(8) {
        match seg {
            PathSeg::Key(k) if out.is_empty() => out.push_str(k),
            PathSeg::Key(k) => {
                out.push('.');
                out.push_str(k);
            }
            PathSeg::Index(i) => out.push_str(&format!("[{i}]")),
        }
    }
    if path.len() > 8 {
        out.push('…');
    }
    out
}

/// The key/index path of the value being parsed at byte `offset`.
///
/// serde_json has accepted everything before `offset`, so a light scan of strings and
/// brackets is enough: it never needs to handle malformed input before the offset.
pub(super) fn json_path_at(text: &str, offset: usize) -> Vec<PathSeg> {
    enum Frame {
        Object {
            key: Option<String>,
            expect_key: bool,
        },
        Array {
            index: usize,
        },
    }
    let bytes = text.as_bytes();
    let mut stack: Vec<Frame> = Vec::new();
    let mut i = 0;
    while i < offset.min(bytes.len()) {
        match bytes[i] {
            b'"' => {
                let mut j = i + 1;
                while j < bytes.len() && bytes[j] != b'"' {
                    j += if bytes[j] == b'\\' { 2 } else { 1 };
                }
                let end = j.min(bytes.len());
                if let Some(Frame::Object {
                    key,
                    expect_key: expect_key @ true,
                }) = stack.last_mut()
                {
                    let raw = &text[i..(end + 1).min(text.len())];
                    let decoded = serde_json::from_str::<String>(raw)
                        .unwrap_or_else(|_| text[i + 1..end].to_string());
                    *key = Some(decoded);
                    *expect_key = false;
                }
                i = end + 1;
                continue;
            }
            b'{' => stack.push(Frame::Object {
                key: None,
                expect_key: true,
            }),
            b'[' => stack.push(Frame::Array { index: 0 }),
            b'}' | b']' => {
                stack.pop();
            }
            b',' => match stack.last_mut() {
                Some(Frame::Object { key, expect_key }) => {
                    *key = None;
                    *expect_key = true;
                }
                Some(Frame::Array { index }) => *index += 1,
                None => {}
            },
            _ => {}
        }
        i += 1;
    }
    stack
        .into_iter()
        .filter_map(|frame| match frame {
            Frame::Object { key, .. } => key.map(PathSeg::Key),
            Frame::Array { index } => Some(PathSeg::Index(index)),
        })
        .collect()
}
