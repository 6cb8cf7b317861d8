//! Typed access to the top-level object's fields, with errors that name the key and what was found.

use serde_json::Value;

use super::ConfigError;

/// The top-level object's entries in file order, with the origin for error messages.
pub(super) struct Fields<'a> {
    pub(super) origin: &'a str,
    pub(super) entries: &'a [(String, Value)],
}

impl<'a> Fields<'a> {
    pub(super) fn get(&self, key: &str) -> Option<&'a Value> {
        self.entries.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    pub(super) fn wrong_type(&self, key: &str, expected: &str, value: &Value) -> ConfigError {
        ConfigError::WrongType {
            origin: self.origin.to_string(),
            key: key.to_string(),
            expected: expected.to_string(),
            found: describe(value),
        }
    }

    pub(super) fn missing(&self, key: &str) -> ConfigError {
        ConfigError::MissingKey {
            origin: self.origin.to_string(),
            key: key.to_string(),
        }
    }

    /// A non-negative integer (a JSON integer literal: 768.0 and 768.5 are rejected).
    pub(super) fn usize_value(&self, key: &str, value: &Value) -> Result<usize, ConfigError> {
        let expected = "a non-negative integer";
        match value {
            Value::Number(n) => match n.as_u64() {
                Some(u) => usize::try_from(u)
                    .map_err(|_| self.wrong_type(key, "an integer that fits in usize", value)),
                None if n.is_i64() => Err(self.wrong_type(key, expected, value)),
                None if n.as_f64().is_some_and(|x| x.fract() == 0.0 && x >= 0.0) => Err(self
                    .wrong_type(
                        key,
                        "a non-negative integer that fits in u64 (written without `.` or exponent)",
                        value,
                    )),
                None => Err(self.wrong_type(key, expected, value)),
            },
            _ => Err(self.wrong_type(key, expected, value)),
        }
    }

    pub(super) fn f64_value(&self, key: &str, value: &Value) -> Result<f64, ConfigError> {
        match value {
            Value::Number(n) => n
                .as_f64()
                .ok_or_else(|| self.wrong_type(key, "a number", value)),
            _ => Err(self.wrong_type(key, "a number", value)),
        }
    }

    pub(super) fn bool_value(&self, key: &str, value: &Value) -> Result<bool, ConfigError> {
        value
            .as_bool()
            .ok_or_else(|| self.wrong_type(key, "true or false", value))
    }

    pub(super) fn str_value<'v>(
        &self,
        key: &str,
        value: &'v Value,
    ) -> Result<&'v str, ConfigError> {
        value
            .as_str()
            .ok_or_else(|| self.wrong_type(key, "a string", value))
    }
}

/// A short description of a JSON value for "found ..." messages.
pub(super) fn describe(value: &Value) -> String {
    match value {
        Value::Null => "null".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) if s.chars().count() > 40 => {
            format!("string \"{}…\"", s.chars().take(40).collect::<String>())
        }
        Value::String(s) => format!("string {s:?}"),
        Value::Array(_) => "an array".into(),
        Value::Object(_) => "an object".into(),
    }
}

/// The first present, non-null alias; an error if two aliases are present with different values.
pub(super) fn hf_lookup<'v>(
    f: &Fields<'v>,
    aliases: &[&'v str],
) -> Result<Option<(&'v str, &'v Value)>, ConfigError> {
    let mut found: Option<(&str, &Value)> = None;
    for &key in aliases {
        let Some(value) = f.get(key).filter(|v| !v.is_null()) else {
            continue;
        };
        match found {
            None => found = Some((key, value)),
            Some((first_key, first_value)) if first_value != value => {
                return Err(ConfigError::Conflict {
                    origin: f.origin.to_string(),
                    key: first_key.to_string(),
                    value: describe(first_value),
                    other_key: key.to_string(),
                    other_value: describe(value),
                })
            }
            Some(_) => {}
        }
    }
    Ok(found)
}
