//! Model configuration: the [`ModelConfig`] type and its errors. Presets (`presets.rs`), checks
//! (`validate.rs`) and reading JSON (`load.rs`: memscope's schema in `ours.rs`, Hugging Face's in
//! `hf.rs`, diagnostics that point at the field in `json_text.rs`) are the files beside this one.
//!
//! Two JSON schemas are accepted by [`ModelConfig::from_json_str`]:
//! - memscope's own, recognised by a `family` key. Its keys are exactly the fields of
//!   [`ModelConfig`]; an unknown key is an error (typo protection), so what
//!   `serde_json::to_string(&cfg)` writes reads back unchanged.
//! - a Hugging Face `config.json` (no `family` key), recognised by `model_type`
//!   (`gpt2`, `llama`, `bert`, `distilbert`). Keys we do not need are ignored; the few that would
//!   change the parameter structure (`attention_bias`, `mlp_bias`, `add_cross_attention`, a
//!   `head_dim` other than d_model / n_heads, relative position embeddings) are rejected rather
//!   than silently dropped. Any other `model_type` is kept whole for transformers to build
//!   (`transformers.rs`, `--engine torch`).
//!
//! Every error names the file and the key, and says what would be valid; nothing here panics on
//! bad input. Validation also proves that the parameter bytes (at 8 bytes per element) fit in a
//! `u64`, so later estimates can start from [`super::cost::param_count`] without overflow checks
//! on the count itself.

use std::fmt;
use std::path::Path;

pub use rope::RopeScaling;

mod fields;
mod hf;
mod json_text;
mod load;
mod ours;
mod presets;
mod rope;
mod transformers;
mod validate;

pub use transformers::{BuiltModel, Experts, Objective, TransformersModel};

/// Architecture family: decides the parameter structure and the forward pass.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Family {
    Gpt2,
    Llama,
    Bert,
}

impl Family {
    /// Every family, in display order.
    pub const ALL: [Family; 3] = [Family::Gpt2, Family::Llama, Family::Bert];

    /// The lowercase name used in JSON and on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            Family::Gpt2 => "gpt2",
            Family::Llama => "llama",
            Family::Bert => "bert",
        }
    }
}

impl fmt::Display for Family {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Shape and hyper-parameters of a transformer; enough to build it and to count its bytes.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct ModelConfig {
    pub name: String,
    pub family: Family,
    pub vocab_size: usize,
    pub max_seq_len: usize,
    pub n_layers: usize,
    pub n_heads: usize,
    /// Key/value heads (grouped-query attention); equals `n_heads` for gpt2 and bert.
    pub n_kv_heads: usize,
    pub d_model: usize,
    pub d_ff: usize,
    pub norm_eps: f64,
    /// RoPE base, used by llama only (10000.0 by default; kept at the default elsewhere).
    pub rope_theta: f64,
    /// RoPE frequency schedule (llama): `default`, `linear` or `llama3` (`rope_parameters` /
    /// `rope_scaling` in a Hugging Face config).
    #[serde(default, skip_serializing_if = "RopeScaling::is_default")]
    pub rope_scaling: RopeScaling,
    /// Output head shares the token embedding: gpt2 true, llama false by default, bert true
    /// (the MLM decoder is tied to the word embeddings).
    pub tie_embeddings: bool,
    /// BERT token types: 2 for bert, 0 for distilbert and the other families.
    pub type_vocab_size: usize,
    /// A config.json of a `model_type` memscope's engine has no family for, built by Hugging Face
    /// transformers (`--engine torch`); the fields above are then what transformers built.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transformers: Option<TransformersModel>,
}

/// Why a model configuration was rejected. Every message starts with the file (or config name).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ConfigError {
    #[error("{origin}: cannot read config: {reason}")]
    Io { origin: String, reason: String },
    #[error("{origin}: invalid JSON at line {line}, column {column}{}: {reason}", in_field(.key))]
    Syntax {
        origin: String,
        key: Option<String>,
        line: usize,
        column: usize,
        reason: String,
    },
    #[error(
        "{origin}: {}NaN/Infinity is not a number (line {line}, column {column}); JSON has no \
         NaN or Infinity, write a finite number",
        field_prefix(.key)
    )]
    NotANumber {
        origin: String,
        key: Option<String>,
        line: usize,
        column: usize,
    },
    #[error(
        "{origin}: {}nested 128 or more levels deep (line {line}, column {column}); serde_json's \
         recursion limit is 127 levels",
        field_prefix(.key)
    )]
    TooDeep {
        origin: String,
        key: Option<String>,
        line: usize,
        column: usize,
    },
    #[error("{origin}: the top level must be a JSON object, found {found}")]
    NotAnObject { origin: String, found: String },
    #[error("{origin}: field `{key}` appears more than once")]
    DuplicateKey { origin: String, key: String },
    #[error("{origin}: unknown field `{key}`{hint}; valid fields: {valid}")]
    UnknownKey {
        origin: String,
        key: String,
        hint: String,
        valid: String,
    },
    #[error("{origin}: missing required field `{key}`")]
    MissingKey { origin: String, key: String },
    #[error("{origin}: field `{key}`: expected {expected}, found {found}")]
    WrongType {
        origin: String,
        key: String,
        expected: String,
        found: String,
    },
    #[error(
        "{origin}: fields `{key}` ({value}) and `{other_key}` ({other_value}) disagree; keep one"
    )]
    Conflict {
        origin: String,
        key: String,
        value: String,
        other_key: String,
        other_value: String,
    },
    #[error("{origin}: {reason}")]
    Unsupported { origin: String, reason: String },
    #[error("{origin}: `{key}` {reason}")]
    Invalid {
        origin: String,
        key: String,
        reason: String,
    },
    #[error(
        "{origin}: sizes too large: {product} overflows u64 (the parameter bytes, at 8 bytes per \
         parameter, must fit in u64)"
    )]
    Overflow { origin: String, product: String },
    #[error("--model {name}: no such preset; choose one of {choices} (or pass --config FILE)")]
    UnknownPreset { name: String, choices: String },
}

fn in_field(key: &Option<String>) -> String {
    key.as_ref()
        .map(|k| format!(" (in field `{k}`)"))
        .unwrap_or_default()
}

fn field_prefix(key: &Option<String>) -> String {
    key.as_ref()
        .map(|k| format!("field `{k}`: "))
        .unwrap_or_default()
}

impl ModelConfig {
    /// Width of one attention head, d_model / n_heads (0 when n_heads is 0; `validate` rejects that).
    pub fn head_dim(&self) -> usize {
        if let Some(b) = self.built() {
            return b.head_dim;
        }
        self.d_model.checked_div(self.n_heads).unwrap_or(0)
    }
}

/// Per-family defaults for optional keys.
pub(super) fn default_norm_eps(family: Family) -> f64 {
    match family {
        Family::Gpt2 | Family::Llama => 1e-5,
        Family::Bert => 1e-12,
    }
}

pub(super) fn default_tie(family: Family) -> bool {
    family != Family::Llama
}

pub(super) fn default_type_vocab(family: Family) -> usize {
    if family == Family::Bert {
        2
    } else {
        0
    }
}

/// The file stem of `source`, or `fallback` when it has none.
pub(super) fn file_stem(source: &str, fallback: &str) -> String {
    Path::new(source)
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| fallback.to_string())
}

#[cfg(test)]
mod tests;
