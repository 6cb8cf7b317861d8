//! Header JSON: an order-preserving visitor so duplicate names are seen, not silently merged.

use std::fmt;

use serde::de::{self, MapAccess, Visitor};
use serde::Deserialize;

use super::types::METADATA_KEY;

/// A tensor entry exactly as written in the header; validated later.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawEntry {
    pub(super) dtype: String,
    pub(super) shape: Vec<u64>,
    pub(super) data_offsets: Vec<u64>,
}

#[derive(Debug)]
pub(super) enum HeaderEntry {
    Metadata(Vec<(String, String)>),
    Tensor(String, RawEntry),
}

/// Visits the top-level header object, keeping every key in order (duplicates included).
/// `current` records the key whose value is being read, so a value error can name the tensor.
pub(super) struct HeaderVisitor<'a> {
    pub(super) current: &'a mut Option<String>,
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
pub(super) struct OrderedStrings(pub(super) Vec<(String, String)>);

impl<'de> Deserialize<'de> for OrderedStrings {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(OrderedStringsVisitor)
    }
}

pub(super) struct OrderedStringsVisitor;

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
pub(super) fn first_duplicate<'a>(keys: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let mut seen = std::collections::HashSet::new();
    keys.into_iter().find(|k| !seen.insert(*k))
}
