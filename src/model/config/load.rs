//! Reading a config: [`ModelConfig::from_json_str`] picks memscope's schema (a `family` key) or
//! a Hugging Face config.json, parses, then validates; [`ModelConfig::from_file`] reads the file.

use std::path::Path;

use super::fields::Fields;
use super::hf::parse_hf;
use super::json_text::parse_object;
use super::ours::parse_ours;
use super::{ConfigError, ModelConfig};

/// Largest config file we read; real ones are a few KiB.
const MAX_CONFIG_BYTES: u64 = 16 << 20;

/// A config's `name` as it will be printed: control characters (NUL, newlines, the ESC of a
/// terminal escape sequence) written as escapes (`\u{1b}`), so a file cannot rewrite the
/// terminal or forge report lines; everything else is kept.
fn printable(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

impl ModelConfig {
    /// Parses memscope's schema (has `family`) or a Hugging Face config.json, then validates.
    ///
    /// `source` (normally the file path) starts every error message. The name of the result is
    /// `name` (our schema) or `_name_or_path` (HF) when present; otherwise the file stem of
    /// `source`, or for an HF file called `config.json`, its `model_type`.
    pub fn from_json_str(text: &str, source: &str) -> Result<ModelConfig, ConfigError> {
        let origin = source.to_string();
        let entries = parse_object(text, &origin)?;
        let fields = Fields {
            origin: &origin,
            entries: &entries,
        };
        if fields.get("family").is_some() {
            let mut cfg = parse_ours(&fields, source)?;
            cfg.name = printable(&cfg.name);
            cfg.validate_as(&origin, &|field| field.to_string())?;
            Ok(cfg)
        } else {
            let (mut cfg, used) = parse_hf(&fields, source)?;
            cfg.name = printable(&cfg.name);
            let display = |field: &str| {
                used.iter()
                    .find(|(ours, _)| *ours == field)
                    .map(|(_, hf)| hf.to_string())
                    .unwrap_or_else(|| field.to_string())
            };
            cfg.validate_as(&origin, &display)?;
            Ok(cfg)
        }
    }

    /// Reads and parses a config file (see [`ModelConfig::from_json_str`]).
    pub fn from_file(path: &Path) -> Result<ModelConfig, ConfigError> {
        let origin = path.display().to_string();
        let io = |reason: String| ConfigError::Io {
            origin: origin.clone(),
            reason,
        };
        // Capped on the bytes read: metadata says 0 for /dev/zero or a FIFO.
        let text = crate::capped::read_capped_string(path, MAX_CONFIG_BYTES, "config")
            .map_err(|e| io(e.to_string()))?;
        Self::from_json_str(&text, &origin)
    }
}
