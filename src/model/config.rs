//! Model configuration: presets, JSON parsing (memscope's schema and Hugging Face config.json), validation.
//!
//! Two JSON schemas are accepted by [`ModelConfig::from_json_str`]:
//! - memscope's own, recognised by a `family` key. Its keys are exactly the fields of
//!   [`ModelConfig`]; an unknown key is an error (typo protection), so what
//!   `serde_json::to_string(&cfg)` writes reads back unchanged.
//! - a Hugging Face `config.json` (no `family` key), recognised by `model_type`
//!   (`gpt2`, `llama`, `bert`, `distilbert`). Keys we do not need are ignored; the few that would
//!   change the parameter structure (`attention_bias`, `mlp_bias`, `add_cross_attention`, a
//!   `head_dim` other than d_model / n_heads, relative position embeddings) are rejected rather
//!   than silently dropped.
//!
//! Every error names the file and the key, and says what would be valid; nothing here panics on
//! bad input. Validation also proves that the parameter bytes (at 8 bytes per element) fit in a
//! `u64`, so later estimates can start from [`super::cost::param_count`] without overflow checks
//! on the count itself.

use std::fmt;
use std::path::Path;

use serde_json::Value;

use super::cost;

/// Architecture family: decides the parameter structure and the forward pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
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
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
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
    /// Output head shares the token embedding: gpt2 true, llama false by default, bert true
    /// (the MLM decoder is tied to the word embeddings).
    pub tie_embeddings: bool,
    /// BERT token types: 2 for bert, 0 for distilbert and the other families.
    pub type_vocab_size: usize,
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

/// Largest config file we read; real ones are a few KiB.
const MAX_CONFIG_BYTES: u64 = 16 << 20;

/// Bytes per element used by validation's overflow check (the widest dtype we handle, f64).
const WIDEST_DTYPE_BYTES: u64 = 8;

/// Hugging Face `model_type` values we understand.
const SUPPORTED_MODEL_TYPES: &str = "gpt2, llama, bert, distilbert";

/// Keys of memscope's schema, in the order of the struct fields.
const OUR_KEYS: [&str; 13] = [
    "name",
    "family",
    "vocab_size",
    "max_seq_len",
    "n_layers",
    "n_heads",
    "n_kv_heads",
    "d_model",
    "d_ff",
    "norm_eps",
    "rope_theta",
    "tie_embeddings",
    "type_vocab_size",
];

/// Hugging Face key aliases for each of our fields, in order of preference.
const HF_D_MODEL: &[&str] = &["n_embd", "hidden_size", "dim"];
const HF_N_LAYERS: &[&str] = &["n_layer", "num_hidden_layers", "n_layers"];
const HF_N_HEADS: &[&str] = &["n_head", "num_attention_heads", "n_heads"];
const HF_N_KV_HEADS: &[&str] = &["num_key_value_heads"];
const HF_D_FF: &[&str] = &["n_inner", "intermediate_size", "hidden_dim"];
const HF_VOCAB: &[&str] = &["vocab_size"];
const HF_MAX_SEQ: &[&str] = &["n_positions", "n_ctx", "max_position_embeddings"];
const HF_NORM_EPS: &[&str] = &["layer_norm_epsilon", "rms_norm_eps", "layer_norm_eps"];
const HF_ROPE_THETA: &[&str] = &["rope_theta"];
const HF_TIE: &[&str] = &["tie_word_embeddings"];
const HF_TYPE_VOCAB: &[&str] = &["type_vocab_size"];

/// Our field for each Hugging Face alias (for hints when HF keys appear in our schema).
const HF_ALIASES: [(&str, &[&str]); 11] = [
    ("d_model", HF_D_MODEL),
    ("n_layers", HF_N_LAYERS),
    ("n_heads", HF_N_HEADS),
    ("n_kv_heads", HF_N_KV_HEADS),
    ("d_ff", HF_D_FF),
    ("vocab_size", HF_VOCAB),
    ("max_seq_len", HF_MAX_SEQ),
    ("norm_eps", HF_NORM_EPS),
    ("rope_theta", HF_ROPE_THETA),
    ("tie_embeddings", HF_TIE),
    ("type_vocab_size", HF_TYPE_VOCAB),
];

impl ModelConfig {
    /// Width of one attention head, d_model / n_heads (0 when n_heads is 0; `validate` rejects that).
    pub fn head_dim(&self) -> usize {
        self.d_model.checked_div(self.n_heads).unwrap_or(0)
    }

    /// Checks sizes, divisibility, finite positive epsilons and that the parameter bytes fit in u64.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.validate_as(&format!("config `{}`", self.name), &|field| {
            field.to_string()
        })
    }

    /// `validate`, with errors starting with `origin` and fields shown as `display(field)`
    /// (the Hugging Face key a value came from, for HF configs).
    fn validate_as(
        &self,
        origin: &str,
        display: &dyn Fn(&str) -> String,
    ) -> Result<(), ConfigError> {
        let invalid = |field: &str, reason: String| ConfigError::Invalid {
            origin: origin.to_string(),
            key: display(field),
            reason,
        };
        let sizes = [
            ("vocab_size", self.vocab_size),
            ("max_seq_len", self.max_seq_len),
            ("n_layers", self.n_layers),
            ("n_heads", self.n_heads),
            ("n_kv_heads", self.n_kv_heads),
            ("d_model", self.d_model),
            ("d_ff", self.d_ff),
        ];
        for (field, value) in sizes {
            if value == 0 {
                return Err(invalid(field, "must be at least 1".into()));
            }
        }
        if !self.d_model.is_multiple_of(self.n_heads) {
            let reason = format!(
                "({}) must be divisible by `{}` ({})",
                self.d_model,
                display("n_heads"),
                self.n_heads
            );
            return Err(invalid("d_model", reason));
        }
        match self.family {
            Family::Llama => {
                if !self.n_heads.is_multiple_of(self.n_kv_heads) {
                    let reason = format!(
                        "({}) must be divisible by `{}` ({}) for grouped-query attention",
                        self.n_heads,
                        display("n_kv_heads"),
                        self.n_kv_heads
                    );
                    return Err(invalid("n_heads", reason));
                }
                if !self.head_dim().is_multiple_of(2) {
                    let reason = format!(
                        "/ `{}` = {} / {} = {} must be even: RoPE rotates pairs of dimensions",
                        display("n_heads"),
                        self.d_model,
                        self.n_heads,
                        self.head_dim()
                    );
                    return Err(invalid("d_model", reason));
                }
            }
            Family::Gpt2 | Family::Bert => {
                if self.n_kv_heads != self.n_heads {
                    let reason = format!(
                        "({}) must equal `{}` ({}) for {}; grouped-query attention is llama only",
                        self.n_kv_heads,
                        display("n_heads"),
                        self.n_heads,
                        self.family
                    );
                    return Err(invalid("n_kv_heads", reason));
                }
            }
        }
        if self.family != Family::Bert && self.type_vocab_size != 0 {
            let reason = format!(
                "({}) must be 0 for {}; token types are bert only",
                self.type_vocab_size, self.family
            );
            return Err(invalid("type_vocab_size", reason));
        }
        for (field, value) in [("norm_eps", self.norm_eps), ("rope_theta", self.rope_theta)] {
            if !(value.is_finite() && value > 0.0) {
                return Err(invalid(
                    field,
                    format!("must be finite and > 0, found {value}"),
                ));
            }
        }
        cost::checked_param_bytes(self, WIDEST_DTYPE_BYTES)
            .map(|_| ())
            .map_err(|e| ConfigError::Overflow {
                origin: origin.to_string(),
                product: e.product,
            })
    }

    /// The preset called `name`, if any (see [`ModelConfig::presets`]).
    pub fn preset(name: &str) -> Option<ModelConfig> {
        Self::presets().into_iter().find(|cfg| cfg.name == name)
    }

    /// Every preset: GPT-2 sizes, the CS336 llama sizes, TinyLlama, BERT, then tiny test models.
    pub fn presets() -> Vec<ModelConfig> {
        vec![
            gpt2("gpt2-small", 12, 12, 768),
            gpt2("gpt2-medium", 24, 16, 1024),
            gpt2("gpt2-large", 36, 20, 1280),
            gpt2("gpt2-xl", 48, 25, 1600),
            cs336("cs336-small", 12, 12, 768),
            cs336("cs336-medium", 24, 16, 1024),
            cs336("cs336-large", 36, 20, 1280),
            cs336("cs336-xl", 48, 25, 1600),
            cs336("cs336-2.7b", 32, 32, 2560),
            ModelConfig {
                name: "tinyllama-1.1b".into(),
                family: Family::Llama,
                vocab_size: 32000,
                max_seq_len: 2048,
                n_layers: 22,
                n_heads: 32,
                n_kv_heads: 4,
                d_model: 2048,
                d_ff: 5632,
                norm_eps: 1e-5,
                rope_theta: 10000.0,
                tie_embeddings: false,
                type_vocab_size: 0,
            },
            bert("bert-base", 12, 2),
            bert("distilbert", 6, 0),
            ModelConfig {
                name: "tiny-gpt2".into(),
                vocab_size: 1000,
                max_seq_len: 256,
                d_ff: 512,
                ..gpt2("", 4, 4, 128)
            },
            ModelConfig {
                name: "tiny-llama".into(),
                vocab_size: 1000,
                max_seq_len: 256,
                n_kv_heads: 2,
                d_ff: 352,
                ..cs336("", 4, 4, 128)
            },
            ModelConfig {
                name: "tiny-bert".into(),
                vocab_size: 1000,
                max_seq_len: 256,
                n_heads: 4,
                n_kv_heads: 4,
                d_model: 128,
                d_ff: 512,
                ..bert("", 4, 2)
            },
        ]
    }

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
            let cfg = parse_ours(&fields, source)?;
            cfg.validate_as(&origin, &|field| field.to_string())?;
            Ok(cfg)
        } else {
            let (cfg, used) = parse_hf(&fields, source)?;
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
        let len = std::fs::metadata(path)
            .map_err(|e| io(e.to_string()))?
            .len();
        if len > MAX_CONFIG_BYTES {
            return Err(io(format!(
                "{len} bytes is too large for a config (limit {MAX_CONFIG_BYTES})"
            )));
        }
        let bytes = std::fs::read(path).map_err(|e| io(e.to_string()))?;
        let text = String::from_utf8(bytes).map_err(|e| {
            io(format!(
                "not UTF-8 (invalid byte at offset {})",
                e.utf8_error().valid_up_to()
            ))
        })?;
        Self::from_json_str(&text, &origin)
    }
}

/// A GPT-2 size: vocab 50257, context 1024, d_ff = 4·d_model, tied head.
fn gpt2(name: &str, n_layers: usize, n_heads: usize, d_model: usize) -> ModelConfig {
    ModelConfig {
        name: name.into(),
        family: Family::Gpt2,
        vocab_size: 50257,
        max_seq_len: 1024,
        n_layers,
        n_heads,
        n_kv_heads: n_heads,
        d_model,
        d_ff: 4 * d_model,
        norm_eps: 1e-5,
        rope_theta: 10000.0,
        tie_embeddings: true,
        type_vocab_size: 0,
    }
}

/// A CS336 assignment size: llama family, vocab 10000, context 1024, d_ff = 4·d_model, untied.
fn cs336(name: &str, n_layers: usize, n_heads: usize, d_model: usize) -> ModelConfig {
    ModelConfig {
        name: name.into(),
        family: Family::Llama,
        vocab_size: 10000,
        max_seq_len: 1024,
        n_layers,
        n_heads,
        n_kv_heads: n_heads,
        d_model,
        d_ff: 4 * d_model,
        norm_eps: 1e-5,
        rope_theta: 10000.0,
        tie_embeddings: false,
        type_vocab_size: 0,
    }
}

/// A BERT-base width (768, 12 heads, vocab 30522, context 512) with `n_layers` layers.
fn bert(name: &str, n_layers: usize, type_vocab_size: usize) -> ModelConfig {
    ModelConfig {
        name: name.into(),
        family: Family::Bert,
        vocab_size: 30522,
        max_seq_len: 512,
        n_layers,
        n_heads: 12,
        n_kv_heads: 12,
        d_model: 768,
        d_ff: 3072,
        norm_eps: 1e-12,
        rope_theta: 10000.0,
        tie_embeddings: true,
        type_vocab_size,
    }
}

/// Per-family defaults for optional keys.
fn default_norm_eps(family: Family) -> f64 {
    match family {
        Family::Gpt2 | Family::Llama => 1e-5,
        Family::Bert => 1e-12,
    }
}

fn default_tie(family: Family) -> bool {
    family != Family::Llama
}

fn default_type_vocab(family: Family) -> usize {
    if family == Family::Bert {
        2
    } else {
        0
    }
}

/// The file stem of `source`, or `fallback` when it has none.
fn file_stem(source: &str, fallback: &str) -> String {
    Path::new(source)
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| fallback.to_string())
}

// ---------------------------------------------------------------------------------------------
// Typed access to the top-level object's fields.

/// The top-level object's entries in file order, with the origin for error messages.
struct Fields<'a> {
    origin: &'a str,
    entries: &'a [(String, Value)],
}

impl<'a> Fields<'a> {
    fn get(&self, key: &str) -> Option<&'a Value> {
        self.entries.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    fn wrong_type(&self, key: &str, expected: &str, value: &Value) -> ConfigError {
        ConfigError::WrongType {
            origin: self.origin.to_string(),
            key: key.to_string(),
            expected: expected.to_string(),
            found: describe(value),
        }
    }

    fn missing(&self, key: &str) -> ConfigError {
        ConfigError::MissingKey {
            origin: self.origin.to_string(),
            key: key.to_string(),
        }
    }

    /// A non-negative integer (a JSON integer literal: 768.0 and 768.5 are rejected).
    fn usize_value(&self, key: &str, value: &Value) -> Result<usize, ConfigError> {
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

    fn f64_value(&self, key: &str, value: &Value) -> Result<f64, ConfigError> {
        match value {
            Value::Number(n) => n
                .as_f64()
                .ok_or_else(|| self.wrong_type(key, "a number", value)),
            _ => Err(self.wrong_type(key, "a number", value)),
        }
    }

    fn bool_value(&self, key: &str, value: &Value) -> Result<bool, ConfigError> {
        value
            .as_bool()
            .ok_or_else(|| self.wrong_type(key, "true or false", value))
    }

    fn str_value<'v>(&self, key: &str, value: &'v Value) -> Result<&'v str, ConfigError> {
        value
            .as_str()
            .ok_or_else(|| self.wrong_type(key, "a string", value))
    }
}

/// A short description of a JSON value for "found ..." messages.
fn describe(value: &Value) -> String {
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

// ---------------------------------------------------------------------------------------------
// memscope's schema.

fn parse_ours(f: &Fields<'_>, source: &str) -> Result<ModelConfig, ConfigError> {
    for (key, _) in f.entries {
        if !OUR_KEYS.contains(&key.as_str()) {
            return Err(ConfigError::UnknownKey {
                origin: f.origin.to_string(),
                key: key.clone(),
                hint: unknown_key_hint(key),
                valid: OUR_KEYS.join(", "),
            });
        }
    }
    let usize_opt = |key: &str| f.get(key).map(|v| f.usize_value(key, v)).transpose();
    let usize_req = |key: &str| usize_opt(key)?.ok_or_else(|| f.missing(key));
    let f64_opt = |key: &str| f.get(key).map(|v| f.f64_value(key, v)).transpose();

    let family_value = f.get("family").ok_or_else(|| f.missing("family"))?;
    let family_name = f.str_value("family", family_value)?;
    let family = Family::ALL
        .into_iter()
        .find(|fam| fam.as_str() == family_name)
        .ok_or_else(|| {
            f.wrong_type(
                "family",
                "one of \"gpt2\", \"llama\", \"bert\"",
                family_value,
            )
        })?;
    let name = match f.get("name") {
        Some(v) => f.str_value("name", v)?.to_string(),
        None => file_stem(source, "custom"),
    };
    let n_heads = usize_req("n_heads")?;
    let d_model = usize_req("d_model")?;
    let d_ff = match (usize_opt("d_ff")?, family) {
        (Some(d_ff), _) => d_ff,
        (None, Family::Llama) => return Err(f.missing("d_ff")),
        (None, Family::Gpt2 | Family::Bert) => {
            d_model
                .checked_mul(4)
                .ok_or_else(|| ConfigError::Overflow {
                    origin: f.origin.to_string(),
                    product: format!("d_ff = 4 × d_model = 4 × {d_model}"),
                })?
        }
    };
    Ok(ModelConfig {
        name,
        family,
        vocab_size: usize_req("vocab_size")?,
        max_seq_len: usize_req("max_seq_len")?,
        n_layers: usize_req("n_layers")?,
        n_heads,
        n_kv_heads: usize_opt("n_kv_heads")?.unwrap_or(n_heads),
        d_model,
        d_ff,
        norm_eps: f64_opt("norm_eps")?.unwrap_or(default_norm_eps(family)),
        rope_theta: f64_opt("rope_theta")?.unwrap_or(10000.0),
        tie_embeddings: match f.get("tie_embeddings") {
            Some(v) => f.bool_value("tie_embeddings", v)?,
            None => default_tie(family),
        },
        type_vocab_size: usize_opt("type_vocab_size")?.unwrap_or(default_type_vocab(family)),
    })
}

/// " (did you mean `n_heads`?)" for near-misses and Hugging Face keys, else "".
fn unknown_key_hint(key: &str) -> String {
    if let Some((ours, _)) = HF_ALIASES
        .iter()
        .find(|(_, aliases)| aliases.contains(&key))
    {
        return format!(
            " (`{key}` is a Hugging Face config.json key; a file with a `family` key uses \
             memscope's schema, where it is `{ours}`)"
        );
    }
    OUR_KEYS
        .iter()
        .map(|k| (edit_distance(key, k), k))
        .filter(|&(d, _)| d <= 2)
        .min()
        .map(|(_, k)| format!(" (did you mean `{k}`?)"))
        .unwrap_or_default()
}

/// Levenshtein distance between two short keys.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, &cb) in b.iter().enumerate() {
            cur[j + 1] = (prev[j] + usize::from(ca != cb))
                .min(prev[j + 1] + 1)
                .min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

// ---------------------------------------------------------------------------------------------
// Hugging Face config.json.

/// Our field → the HF key its value came from (for error messages).
type UsedKeys = Vec<(&'static str, String)>;

fn parse_hf(f: &Fields<'_>, source: &str) -> Result<(ModelConfig, UsedKeys), ConfigError> {
    let unsupported = |reason: String| ConfigError::Unsupported {
        origin: f.origin.to_string(),
        reason,
    };
    let model_type = match f.get("model_type") {
        None | Some(Value::Null) => {
            return Err(unsupported(format!(
                "no `family` key (memscope's schema) and no `model_type` key (Hugging Face \
                 config.json); supported model_type values: {SUPPORTED_MODEL_TYPES}"
            )))
        }
        Some(v) => f.str_value("model_type", v)?,
    };
    let (family, distil) = match model_type {
        "gpt2" => (Family::Gpt2, false),
        "llama" => (Family::Llama, false),
        "bert" => (Family::Bert, false),
        "distilbert" => (Family::Bert, true),
        "mistral" => {
            return Err(unsupported(format!(
                "model_type `mistral` is not supported (sliding-window attention); supported \
                 model_type values: {SUPPORTED_MODEL_TYPES}"
            )))
        }
        other => {
            return Err(unsupported(format!(
                "model_type `{other}` is not supported; supported model_type values: \
                 {SUPPORTED_MODEL_TYPES}"
            )))
        }
    };
    reject_structural_options(f, family)?;

    let mut used: UsedKeys = Vec::new();
    let mut usize_opt =
        |field: &'static str, aliases: &[&str]| -> Result<Option<usize>, ConfigError> {
            match hf_lookup(f, aliases)? {
                None => Ok(None),
                Some((key, value)) => {
                    used.push((field, key.to_string()));
                    f.usize_value(key, value).map(Some)
                }
            }
        };
    let required = |value: Option<usize>, aliases: &[&str]| {
        value.ok_or_else(|| f.missing(&aliases.join("` or `")))
    };
    let d_model = required(usize_opt("d_model", HF_D_MODEL)?, HF_D_MODEL)?;
    let n_layers = required(usize_opt("n_layers", HF_N_LAYERS)?, HF_N_LAYERS)?;
    let n_heads = required(usize_opt("n_heads", HF_N_HEADS)?, HF_N_HEADS)?;
    let n_kv_heads = usize_opt("n_kv_heads", HF_N_KV_HEADS)?.unwrap_or(n_heads);
    let vocab_size = required(usize_opt("vocab_size", HF_VOCAB)?, HF_VOCAB)?;
    let max_seq_len = required(usize_opt("max_seq_len", HF_MAX_SEQ)?, HF_MAX_SEQ)?;
    let type_vocab = usize_opt("type_vocab_size", HF_TYPE_VOCAB)?;
    // GPT-2's `n_inner: null` means 4·d_model; so does a missing d_ff for gpt2 and bert.
    let d_ff = match (usize_opt("d_ff", HF_D_FF)?, family) {
        (Some(d_ff), _) => d_ff,
        (None, Family::Llama) => return Err(f.missing("intermediate_size")),
        (None, Family::Gpt2 | Family::Bert) => {
            d_model
                .checked_mul(4)
                .ok_or_else(|| ConfigError::Overflow {
                    origin: f.origin.to_string(),
                    product: format!("d_ff = 4 × d_model = 4 × {d_model}"),
                })?
        }
    };
    let mut f64_opt = |field: &'static str, aliases: &[&str]| -> Result<Option<f64>, ConfigError> {
        match hf_lookup(f, aliases)? {
            None => Ok(None),
            Some((key, value)) => {
                used.push((field, key.to_string()));
                f.f64_value(key, value).map(Some)
            }
        }
    };
    let norm_eps = f64_opt("norm_eps", HF_NORM_EPS)?;
    let rope_theta = f64_opt("rope_theta", HF_ROPE_THETA)?;
    let tie_embeddings = match hf_lookup(f, HF_TIE)? {
        Some((key, value)) => f.bool_value(key, value)?,
        None => default_tie(family),
    };
    if distil && type_vocab.is_some_and(|t| t != 0) {
        return Err(ConfigError::Invalid {
            origin: f.origin.to_string(),
            key: "type_vocab_size".into(),
            reason: "must be 0 for distilbert (it has no token type embeddings)".into(),
        });
    }
    let name = match f.get("_name_or_path") {
        Some(Value::String(s)) if !s.is_empty() => s.clone(),
        _ => match file_stem(source, model_type) {
            stem if stem == "config" => model_type.to_string(),
            stem => stem,
        },
    };
    let cfg = ModelConfig {
        name,
        family,
        vocab_size,
        max_seq_len,
        n_layers,
        n_heads,
        n_kv_heads,
        d_model,
        d_ff,
        norm_eps: norm_eps.unwrap_or(match family {
            Family::Gpt2 => 1e-5,
            Family::Llama => 1e-6, // transformers' LlamaConfig default
            Family::Bert => 1e-12,
        }),
        rope_theta: rope_theta.unwrap_or(10000.0),
        tie_embeddings,
        type_vocab_size: type_vocab.unwrap_or(if distil {
            0
        } else {
            default_type_vocab(family)
        }),
    };
    Ok((cfg, used))
}

/// The first present, non-null alias; an error if two aliases are present with different values.
fn hf_lookup<'v>(
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

/// HF options that add or reshape parameters our models do not have: rejected, not ignored.
fn reject_structural_options(f: &Fields<'_>, family: Family) -> Result<(), ConfigError> {
    let flags: &[&str] = match family {
        Family::Gpt2 => &["add_cross_attention"],
        Family::Llama => &["attention_bias", "mlp_bias"],
        Family::Bert => &["add_cross_attention", "is_decoder"],
    };
    for &key in flags {
        if let Some(value) = f.get(key) {
            if value.as_bool() == Some(true) {
                return Err(ConfigError::Unsupported {
                    origin: f.origin.to_string(),
                    reason: format!(
                        "field `{key}`: true is not supported for {family}; remove it or set it \
                         to false"
                    ),
                });
            }
        }
    }
    if family == Family::Bert {
        if let Some(value) = f.get("position_embedding_type") {
            if !(value.is_null() || value.as_str() == Some("absolute")) {
                return Err(ConfigError::Unsupported {
                    origin: f.origin.to_string(),
                    reason: format!(
                        "field `position_embedding_type`: {} is not supported; only \"absolute\"",
                        describe(value)
                    ),
                });
            }
        }
    }
    if family == Family::Llama {
        if let Some(value) = f.get("head_dim").filter(|v| !v.is_null()) {
            let head_dim = f.usize_value("head_dim", value)?;
            let d_model = hf_lookup(f, HF_D_MODEL)?.and_then(|(_, v)| v.as_u64());
            let n_heads = hf_lookup(f, HF_N_HEADS)?.and_then(|(_, v)| v.as_u64());
            if let (Some(d_model), Some(n_heads)) = (d_model, n_heads.filter(|&n| n > 0)) {
                // A non-divisible d_model is reported by validation instead.
                if d_model % n_heads == 0 && d_model / n_heads != head_dim as u64 {
                    return Err(ConfigError::Unsupported {
                        origin: f.origin.to_string(),
                        reason: format!(
                            "field `head_dim` ({head_dim}) differs from hidden_size / \
                             num_attention_heads ({d_model} / {n_heads}); decoupled head_dim is not supported"
                        ),
                    });
                }
            }
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// JSON text → top-level entries, with diagnostics that point at the field.

/// The top-level object as ordered entries, keeping duplicates so that we can reject them.
struct Entries(Vec<(String, Value)>);

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

fn parse_object(text: &str, origin: &str) -> Result<Vec<(String, Value)>, ConfigError> {
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
fn json_error(text: &str, origin: &str, err: &serde_json::Error) -> ConfigError {
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
fn byte_offset(text: &str, line: usize, column: usize) -> usize {
    let line_start = text
        .match_indices('\n')
        .nth(line.saturating_sub(2))
        .map_or(0, |(i, _)| i + 1);
    let start = if line <= 1 { 0 } else { line_start };
    (start + column.saturating_sub(1)).min(text.len())
}

/// Start of a `NaN`, `Infinity` or signed variant that serde_json stopped at, if any.
fn non_finite_token_at(text: &str, offset: usize) -> Option<usize> {
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
enum PathSeg {
    Key(String),
    Index(usize),
}

/// `rope_scaling.factor`, `layers[3]` ... (at most 8 segments shown).
fn format_path(path: &[PathSeg]) -> String {
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
fn json_path_at(text: &str, offset: usize) -> Vec<PathSeg> {
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

#[cfg(test)]
mod tests {
    use super::*;

    const SRC: &str = "models/my.json";

    fn parse(text: &str) -> Result<ModelConfig, ConfigError> {
        ModelConfig::from_json_str(text, SRC)
    }

    fn err(text: &str) -> String {
        let e = parse(text).expect_err("expected an error");
        let msg = e.to_string();
        assert!(msg.starts_with(SRC), "error does not name the file: {msg}");
        msg
    }

    /// A valid llama config in our schema with `patch` merged over it.
    fn ours_with(patch: &str) -> String {
        let mut base: serde_json::Map<String, Value> = serde_json::from_str(
            r#"{"family": "llama", "vocab_size": 1000, "max_seq_len": 256, "n_layers": 4,
                "n_heads": 4, "n_kv_heads": 2, "d_model": 128, "d_ff": 352}"#,
        )
        .unwrap();
        let patch: serde_json::Map<String, Value> = serde_json::from_str(patch).unwrap();
        base.extend(patch);
        Value::Object(base).to_string()
    }

    // --- presets -------------------------------------------------------------------------

    #[test]
    fn presets_are_listed_in_order_and_found_by_name() {
        let names: Vec<String> = ModelConfig::presets().into_iter().map(|c| c.name).collect();
        assert_eq!(
            names,
            [
                "gpt2-small",
                "gpt2-medium",
                "gpt2-large",
                "gpt2-xl",
                "cs336-small",
                "cs336-medium",
                "cs336-large",
                "cs336-xl",
                "cs336-2.7b",
                "tinyllama-1.1b",
                "bert-base",
                "distilbert",
                "tiny-gpt2",
                "tiny-llama",
                "tiny-bert"
            ]
        );
        assert_eq!(ModelConfig::preset("tiny-llama").unwrap().n_kv_heads, 2);
        assert!(ModelConfig::preset("gpt3").is_none());
    }

    #[test]
    fn every_preset_validates() {
        for cfg in ModelConfig::presets() {
            cfg.validate()
                .unwrap_or_else(|e| panic!("{}: {e}", cfg.name));
        }
    }

    #[test]
    fn tiny_presets_are_tiny() {
        for name in ["tiny-gpt2", "tiny-llama", "tiny-bert"] {
            let cfg = ModelConfig::preset(name).unwrap();
            assert!(cost::param_count(&cfg).unwrap() < 2_000_000, "{name}");
        }
    }

    #[test]
    fn preset_shapes() {
        let t = ModelConfig::preset("tinyllama-1.1b").unwrap();
        assert_eq!(
            (t.n_heads, t.n_kv_heads, t.head_dim(), t.d_ff),
            (32, 4, 64, 5632)
        );
        let b = ModelConfig::preset("bert-base").unwrap();
        assert_eq!(
            (b.type_vocab_size, b.norm_eps, b.tie_embeddings),
            (2, 1e-12, true)
        );
        let d = ModelConfig::preset("distilbert").unwrap();
        assert_eq!((d.n_layers, d.type_vocab_size), (6, 0));
        let g = ModelConfig::preset("gpt2-xl").unwrap();
        assert_eq!(
            (g.n_heads, g.d_model, g.d_ff, g.head_dim()),
            (25, 1600, 6400, 64)
        );
        let c = ModelConfig::preset("cs336-2.7b").unwrap();
        assert_eq!(
            (c.family, c.tie_embeddings, c.d_ff, c.vocab_size),
            (Family::Llama, false, 10240, 10000)
        );
        assert_eq!(Family::Gpt2.to_string(), "gpt2");
        assert_eq!(Family::Llama.to_string(), "llama");
        assert_eq!(Family::Bert.to_string(), "bert");
    }

    // --- our schema ----------------------------------------------------------------------

    #[test]
    fn our_schema_round_trips_every_preset() {
        for cfg in ModelConfig::presets() {
            let text = serde_json::to_string_pretty(&cfg).unwrap();
            assert_eq!(parse(&text).unwrap(), cfg, "{text}");
        }
    }

    #[test]
    fn our_schema_defaults() {
        let cfg = parse(
            r#"{"family": "gpt2", "vocab_size": 1000, "max_seq_len": 256, "n_layers": 4,
                "n_heads": 4, "d_model": 128}"#,
        )
        .unwrap();
        assert_eq!(
            cfg,
            ModelConfig {
                name: "my".into(),
                ..ModelConfig::preset("tiny-gpt2").unwrap()
            }
        );

        let cfg = parse(
            r#"{"name": "b", "family": "bert", "vocab_size": 1000, "max_seq_len": 256,
                "n_layers": 4, "n_heads": 4, "d_model": 128}"#,
        )
        .unwrap();
        assert_eq!(
            cfg,
            ModelConfig {
                name: "b".into(),
                ..ModelConfig::preset("tiny-bert").unwrap()
            }
        );

        let cfg = parse(&ours_with("{}")).unwrap();
        assert_eq!(
            cfg,
            ModelConfig {
                name: "my".into(),
                ..ModelConfig::preset("tiny-llama").unwrap()
            }
        );
    }

    #[test]
    fn unknown_key_is_named_with_valid_keys_and_a_hint() {
        let msg = err(&ours_with(r#"{"n_haeds": 4}"#));
        assert!(msg.contains("unknown field `n_haeds`"), "{msg}");
        assert!(msg.contains("did you mean `n_heads`?"), "{msg}");
        let msg = err(&ours_with(r#"{"dmodel": 4}"#));
        assert!(
            msg.contains("unknown field `dmodel` (did you mean `d_model`?)"),
            "{msg}"
        );
        let msg = err(&ours_with(r#"{"n_head": 4}"#));
        assert!(msg.contains("it is `n_heads`"), "{msg}");
        assert!(
            msg.contains("valid fields: name, family, vocab_size"),
            "{msg}"
        );
        let msg = err(&ours_with(r#"{"hidden_size": 128}"#));
        assert!(
            msg.contains("`hidden_size` is a Hugging Face config.json key"),
            "{msg}"
        );
        assert!(msg.contains("it is `d_model`"), "{msg}");
    }

    #[test]
    fn llama_requires_d_ff() {
        let text = r#"{"family": "llama", "vocab_size": 10, "max_seq_len": 8, "n_layers": 1,
                       "n_heads": 1, "d_model": 8}"#;
        assert!(err(text).contains("missing required field `d_ff`"));
    }

    #[test]
    fn missing_key_is_named() {
        let text =
            r#"{"family": "gpt2", "vocab_size": 10, "n_layers": 1, "n_heads": 1, "d_model": 8}"#;
        let msg = err(text);
        assert!(
            msg.contains("missing required field `max_seq_len`"),
            "{msg}"
        );
    }

    #[test]
    fn unknown_family_lists_the_valid_ones() {
        let msg = err(&ours_with(r#"{"family": "gpt3"}"#));
        assert!(msg.contains("field `family`"), "{msg}");
        assert!(msg.contains(r#"one of "gpt2", "llama", "bert""#), "{msg}");
    }

    #[test]
    fn duplicate_key_is_rejected() {
        let text = r#"{"family": "gpt2", "vocab_size": 10, "max_seq_len": 8, "n_layers": 1,
                       "n_heads": 1, "d_model": 8, "n_heads": 0}"#;
        assert!(err(text).contains("field `n_heads` appears more than once"));
    }

    // --- type errors ---------------------------------------------------------------------

    #[test]
    fn wrong_types_name_the_key() {
        let cases = [
            (
                r#"{"d_model": 768.5}"#,
                "field `d_model`: expected a non-negative integer, found 768.5",
            ),
            (
                r#"{"d_model": 128.0}"#,
                "field `d_model`: expected a non-negative integer that fits in u64",
            ),
            (
                r#"{"n_layers": -4}"#,
                "field `n_layers`: expected a non-negative integer, found -4",
            ),
            (
                r#"{"vocab_size": "1000"}"#,
                "field `vocab_size`: expected a non-negative integer, found string \"1000\"",
            ),
            (
                r#"{"n_heads": null}"#,
                "field `n_heads`: expected a non-negative integer, found null",
            ),
            (
                r#"{"n_layers": 1e30}"#,
                "field `n_layers`: expected a non-negative integer that fits in u64",
            ),
            (
                r#"{"vocab_size": 18446744073709551616}"#,
                "field `vocab_size`",
            ),
            (
                r#"{"norm_eps": "1e-5"}"#,
                "field `norm_eps`: expected a number",
            ),
            (
                r#"{"tie_embeddings": 1}"#,
                "field `tie_embeddings`: expected true or false, found 1",
            ),
            (r#"{"name": 7}"#, "field `name`: expected a string, found 7"),
            (r#"{"family": 2}"#, "field `family`: expected a string"),
        ];
        for (patch, expected) in cases {
            let msg = err(&ours_with(patch));
            assert!(msg.contains(expected), "{patch}: {msg}");
        }
    }

    // --- JSON syntax ---------------------------------------------------------------------

    #[test]
    fn invalid_json_reports_line_and_column() {
        let msg = err("{\n  \"family\": \"gpt2\",\n  \"n_layers\": 4,,\n}");
        assert!(
            msg.contains("invalid JSON at line 3, column 17: key must be a string"),
            "{msg}"
        );
        assert!(err("").contains("invalid JSON at line 1"));
        assert!(err("{} x").contains("trailing characters"));
    }

    #[test]
    fn top_level_must_be_an_object() {
        assert!(err("[1, 2]").contains("the top level must be a JSON object, found sequence"));
        assert!(err("12").contains("the top level must be a JSON object"));
    }

    #[test]
    fn nan_and_infinity_name_the_key() {
        for token in ["NaN", "Infinity", "-Infinity", "+Infinity", "-NaN"] {
            let text = format!(
                "{{\n  \"family\": \"gpt2\",\n  \"norm_eps\": {token},\n  \"d_model\": 8\n}}"
            );
            let msg = err(&text);
            assert!(
                msg.contains("field `norm_eps`: NaN/Infinity is not a number (line 3"),
                "{token}: {msg}"
            );
        }
        // In a Hugging Face file, nested, before any other check.
        let msg = err(
            r#"{"model_type": "llama", "rope_scaling": {"type": "linear", "factor": Infinity}}"#,
        );
        assert!(
            msg.contains("field `rope_scaling.factor`: NaN/Infinity"),
            "{msg}"
        );
        let msg = err(r#"{"model_type": "gpt2", "x": [1, 2, NaN]}"#);
        assert!(msg.contains("field `x[2]`: NaN/Infinity"), "{msg}");
        let msg = err(r#"{"a\"b": NaN}"#);
        assert!(msg.contains(r#"field `a"b`"#), "{msg}");
        // A key or string that merely contains the word is not confused with a value.
        let msg = err(r#"{"NaN": 1,, "x": 2}"#);
        assert!(msg.contains("invalid JSON"), "{msg}");
    }

    #[test]
    fn nesting_deeper_than_serde_json_allows_is_an_error() {
        let deep = format!(
            "{{\"family\": \"gpt2\", \"junk\": {}1{}}}",
            "[".repeat(200),
            "]".repeat(200)
        );
        let msg = err(&deep);
        assert!(
            msg.contains("field `junk`: nested 128 or more levels deep"),
            "{msg}"
        );
        assert!(msg.contains("recursion limit"), "{msg}");
        // 127 levels parse (and then fail on the unknown key, not on depth).
        let ok_depth = format!(
            "{{\"family\": \"gpt2\", \"junk\": {}1{}}}",
            "[".repeat(126),
            "]".repeat(126)
        );
        assert!(err(&ok_depth).contains("unknown field `junk`"));
        // Deep objects, too.
        let deep = format!(
            "{{\"model_type\": \"bert\", \"a\": {}{}}}",
            "{\"b\": ".repeat(300),
            "}".repeat(300)
        );
        assert!(err(&deep).contains("field `a`: nested 128 or more levels deep"));
    }

    // --- validation ----------------------------------------------------------------------

    #[test]
    fn zero_sizes_name_the_key() {
        for key in [
            "vocab_size",
            "max_seq_len",
            "n_layers",
            "n_heads",
            "n_kv_heads",
            "d_model",
            "d_ff",
        ] {
            let msg = err(&ours_with(&format!("{{\"{key}\": 0}}")));
            assert!(
                msg.contains(&format!("`{key}` must be at least 1")),
                "{msg}"
            );
        }
    }

    #[test]
    fn divisibility_errors_name_the_keys() {
        let msg = err(&ours_with(r#"{"d_model": 130}"#));
        assert!(
            msg.contains("`d_model` (130) must be divisible by `n_heads` (4)"),
            "{msg}"
        );
        let msg = err(&ours_with(r#"{"n_kv_heads": 3}"#));
        assert!(
            msg.contains("`n_heads` (4) must be divisible by `n_kv_heads` (3)"),
            "{msg}"
        );
        let msg = err(&ours_with(r#"{"n_kv_heads": 8}"#));
        assert!(
            msg.contains("`n_heads` (4) must be divisible by `n_kv_heads` (8)"),
            "{msg}"
        );
        let msg = err(&ours_with(r#"{"d_model": 12}"#));
        assert!(
            msg.contains("`d_model` / `n_heads` = 12 / 4 = 3 must be even"),
            "{msg}"
        );
    }

    #[test]
    fn family_specific_fields_are_checked() {
        let gpt2 = r#"{"family": "gpt2", "vocab_size": 10, "max_seq_len": 8, "n_layers": 1,
                       "n_heads": 2, "d_model": 8, "n_kv_heads": 1}"#;
        assert!(err(gpt2).contains("`n_kv_heads` (1) must equal `n_heads` (2) for gpt2"));
        let msg = err(&ours_with(r#"{"type_vocab_size": 2}"#));
        assert!(
            msg.contains("`type_vocab_size` (2) must be 0 for llama"),
            "{msg}"
        );
    }

    #[test]
    fn eps_and_theta_must_be_finite_and_positive() {
        for (key, value) in [
            ("norm_eps", "0"),
            ("norm_eps", "-1e-5"),
            ("rope_theta", "0.0"),
            ("rope_theta", "-10000"),
        ] {
            let msg = err(&ours_with(&format!("{{\"{key}\": {value}}}")));
            assert!(
                msg.contains(&format!("`{key}` must be finite and > 0")),
                "{msg}"
            );
        }
        // 1e400 parses as infinity in serde_json; it must not slip through.
        let msg = err(&ours_with("{}").replacen('{', r#"{"rope_theta": 1e400,"#, 1));
        assert!(
            msg.contains("(in field `rope_theta`): number out of range"),
            "{msg}"
        );
        let mut cfg = ModelConfig::preset("tiny-llama").unwrap();
        cfg.norm_eps = f64::NAN;
        let msg = cfg.validate().unwrap_err().to_string();
        assert!(
            msg.contains("config `tiny-llama`: `norm_eps` must be finite and > 0, found NaN"),
            "{msg}"
        );
    }

    #[test]
    fn overflowing_sizes_name_the_product() {
        let huge = u64::MAX / 2;
        let msg = err(&ours_with(&format!(r#"{{"vocab_size": {huge}}}"#)));
        assert!(msg.contains("overflow"), "{msg}");
        assert!(msg.contains("vocab_size × d_model"), "{msg}");
        // Fits in u64 as a count but not at 8 bytes per parameter.
        let v = u64::MAX / 8 / 128;
        let msg = err(&ours_with(&format!(r#"{{"vocab_size": {v}}}"#)));
        assert!(msg.contains("parameter count × bytes per element"), "{msg}");
        // d_ff default 4 × d_model overflow in our schema.
        let text = format!(
            r#"{{"family": "gpt2", "vocab_size": 10, "max_seq_len": 8, "n_layers": 1, "n_heads": 1, "d_model": {}}}"#,
            u64::MAX / 2
        );
        assert!(err(&text).contains("d_ff = 4 × d_model"));
        // validate() on a struct built in code.
        let cfg = ModelConfig {
            n_layers: usize::MAX,
            ..ModelConfig::preset("tiny-bert").unwrap()
        };
        let msg = cfg.validate().unwrap_err().to_string();
        assert!(msg.contains("n_layers × parameters per layer"), "{msg}");
    }

    // --- Hugging Face config.json --------------------------------------------------------

    const HF_GPT2_MEDIUM: &str = r#"{
      "activation_function": "gelu_new",
      "architectures": ["GPT2LMHeadModel"],
      "attn_pdrop": 0.1,
      "bos_token_id": 50256,
      "embd_pdrop": 0.1,
      "eos_token_id": 50256,
      "initializer_range": 0.02,
      "layer_norm_epsilon": 1e-05,
      "model_type": "gpt2",
      "n_ctx": 1024,
      "n_embd": 1024,
      "n_head": 16,
      "n_inner": null,
      "n_layer": 24,
      "n_positions": 1024,
      "n_special": 0,
      "predict_special_tokens": true,
      "reorder_and_upcast_attn": false,
      "resid_pdrop": 0.1,
      "scale_attn_by_inverse_layer_idx": false,
      "scale_attn_weights": true,
      "summary_activation": null,
      "summary_first_dropout": 0.1,
      "summary_proj_to_labels": true,
      "summary_type": "cls_index",
      "summary_use_proj": true,
      "task_specific_params": {"text-generation": {"do_sample": true, "max_length": 50}},
      "use_cache": true,
      "vocab_size": 50257
    }"#;

    /// TinyLlama/TinyLlama-1.1B-Chat-v1.0 config.json, verbatim field set.
    const HF_TINYLLAMA: &str = r#"{
      "architectures": ["LlamaForCausalLM"],
      "attention_bias": false,
      "bos_token_id": 1,
      "eos_token_id": 2,
      "hidden_act": "silu",
      "hidden_size": 2048,
      "initializer_range": 0.02,
      "intermediate_size": 5632,
      "max_position_embeddings": 2048,
      "model_type": "llama",
      "num_attention_heads": 32,
      "num_hidden_layers": 22,
      "num_key_value_heads": 4,
      "pretraining_tp": 1,
      "rms_norm_eps": 1e-05,
      "rope_scaling": null,
      "rope_theta": 10000.0,
      "tie_word_embeddings": false,
      "torch_dtype": "bfloat16",
      "transformers_version": "4.35.0",
      "use_cache": true,
      "vocab_size": 32000
    }"#;

    const HF_BERT: &str = r#"{
      "architectures": ["BertForMaskedLM"],
      "attention_probs_dropout_prob": 0.1,
      "gradient_checkpointing": false,
      "hidden_act": "gelu",
      "hidden_dropout_prob": 0.1,
      "hidden_size": 768,
      "initializer_range": 0.02,
      "intermediate_size": 3072,
      "layer_norm_eps": 1e-12,
      "max_position_embeddings": 512,
      "model_type": "bert",
      "num_attention_heads": 12,
      "num_hidden_layers": 12,
      "pad_token_id": 0,
      "position_embedding_type": "absolute",
      "transformers_version": "4.6.0.dev0",
      "type_vocab_size": 2,
      "use_cache": true,
      "vocab_size": 30522
    }"#;

    const HF_DISTILBERT: &str = r#"{
      "activation": "gelu",
      "architectures": ["DistilBertForMaskedLM"],
      "attention_dropout": 0.1,
      "dim": 768,
      "dropout": 0.1,
      "hidden_dim": 3072,
      "initializer_range": 0.02,
      "max_position_embeddings": 512,
      "model_type": "distilbert",
      "n_heads": 12,
      "n_layers": 6,
      "pad_token_id": 0,
      "qa_dropout": 0.1,
      "seq_classif_dropout": 0.2,
      "sinusoidal_pos_embds": false,
      "tie_weights_": true,
      "transformers_version": "4.10.0.dev0",
      "vocab_size": 30522
    }"#;

    fn hf(text: &str) -> ModelConfig {
        ModelConfig::from_json_str(text, "hub/snapshots/abc/config.json").unwrap()
    }

    #[test]
    fn hf_gpt2_with_null_n_inner() {
        let want = ModelConfig {
            name: "gpt2".into(),
            ..ModelConfig::preset("gpt2-medium").unwrap()
        };
        assert_eq!(hf(HF_GPT2_MEDIUM), want);
        assert_eq!(cost::param_count(&want), Some(354_823_168));
    }

    #[test]
    fn hf_tinyllama() {
        let want = ModelConfig {
            name: "llama".into(),
            ..ModelConfig::preset("tinyllama-1.1b").unwrap()
        };
        assert_eq!(hf(HF_TINYLLAMA), want);
        let named = HF_TINYLLAMA.replacen(
            '{',
            r#"{"_name_or_path": "TinyLlama/TinyLlama-1.1B-Chat-v1.0","#,
            1,
        );
        assert_eq!(hf(&named).name, "TinyLlama/TinyLlama-1.1B-Chat-v1.0");
        // A file named after the model keeps its stem.
        let cfg = ModelConfig::from_json_str(HF_TINYLLAMA, "tinyllama.json").unwrap();
        assert_eq!(cfg.name, "tinyllama");
    }

    #[test]
    fn hf_bert_and_distilbert() {
        let want = ModelConfig {
            name: "bert".into(),
            ..ModelConfig::preset("bert-base").unwrap()
        };
        assert_eq!(hf(HF_BERT), want);
        assert_eq!(
            hf(HF_DISTILBERT),
            ModelConfig::preset("distilbert").unwrap()
        );
    }

    #[test]
    fn hf_defaults() {
        // No tie_word_embeddings: llama untied, gpt2 tied; no num_key_value_heads: MHA; llama eps 1e-6.
        let text = r#"{"model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
                       "max_position_embeddings": 32, "num_attention_heads": 4,
                       "num_hidden_layers": 2, "vocab_size": 100}"#;
        let cfg = hf(text);
        assert_eq!(
            (
                cfg.tie_embeddings,
                cfg.n_kv_heads,
                cfg.norm_eps,
                cfg.rope_theta
            ),
            (false, 4, 1e-6, 10000.0)
        );
        let text = r#"{"model_type": "gpt2", "n_embd": 64, "n_positions": 32, "n_head": 4,
                       "n_layer": 2, "vocab_size": 100}"#;
        let cfg = hf(text);
        assert_eq!(
            (cfg.tie_embeddings, cfg.d_ff, cfg.type_vocab_size),
            (true, 256, 0)
        );
    }

    #[test]
    fn hf_errors_name_the_hf_key() {
        let msg =
            err(&HF_TINYLLAMA.replace("\"num_key_value_heads\": 4", "\"num_key_value_heads\": 5"));
        assert!(
            msg.contains(
                "`num_attention_heads` (32) must be divisible by `num_key_value_heads` (5)"
            ),
            "{msg}"
        );
        let msg =
            err(&HF_TINYLLAMA.replace("\"num_attention_heads\": 32", "\"num_attention_heads\": 0"));
        assert!(
            msg.contains("`num_attention_heads` must be at least 1"),
            "{msg}"
        );
        let msg = err(&HF_BERT.replace("\"hidden_size\": 768", "\"hidden_size\": 770"));
        assert!(
            msg.contains("`hidden_size` (770) must be divisible by `num_attention_heads` (12)"),
            "{msg}"
        );
        let msg = err(&HF_GPT2_MEDIUM.replace("\"n_layer\": 24", "\"n_layer\": 24.5"));
        assert!(
            msg.contains("field `n_layer`: expected a non-negative integer, found 24.5"),
            "{msg}"
        );
        let msg = err(&HF_BERT.replace("\"layer_norm_eps\": 1e-12", "\"layer_norm_eps\": 0"));
        assert!(
            msg.contains("`layer_norm_eps` must be finite and > 0"),
            "{msg}"
        );
        let msg = err(&HF_TINYLLAMA.replace("\"rms_norm_eps\": 1e-05", "\"rms_norm_eps\": NaN"));
        assert!(
            msg.contains("field `rms_norm_eps`: NaN/Infinity is not a number"),
            "{msg}"
        );
        let msg =
            err(&HF_TINYLLAMA.replace("\"vocab_size\": 32000", "\"vocab_size\": 1099511627776000"));
        assert!(msg.contains("overflow"), "{msg}");
        let msg = err(&HF_BERT.replace("\"num_hidden_layers\": 12,", ""));
        assert!(
            msg.contains("missing required field `n_layer` or `num_hidden_layers` or `n_layers`"),
            "{msg}"
        );
        let msg = err(&HF_TINYLLAMA.replace("\"intermediate_size\": 5632,", ""));
        assert!(
            msg.contains("missing required field `intermediate_size`"),
            "{msg}"
        );
    }

    #[test]
    fn hf_model_type_must_be_supported() {
        let msg = err(r#"{"hidden_size": 8}"#);
        assert!(
            msg.contains("no `model_type` key") && msg.contains("gpt2, llama, bert, distilbert"),
            "{msg}"
        );
        let msg = err(&HF_TINYLLAMA.replace("\"llama\"", "\"mistral\""));
        assert!(
            msg.contains("`mistral` is not supported (sliding-window attention)"),
            "{msg}"
        );
        let msg = err(&HF_TINYLLAMA.replace("\"llama\"", "\"t5\""));
        assert!(
            msg.contains("model_type `t5` is not supported; supported model_type values: gpt2"),
            "{msg}"
        );
        let msg = err(r#"{"model_type": 3}"#);
        assert!(
            msg.contains("field `model_type`: expected a string"),
            "{msg}"
        );
    }

    #[test]
    fn hf_structural_options_are_rejected_not_ignored() {
        let msg =
            err(&HF_TINYLLAMA.replace("\"attention_bias\": false", "\"attention_bias\": true"));
        assert!(
            msg.contains("field `attention_bias`: true is not supported for llama"),
            "{msg}"
        );
        let msg = err(&HF_TINYLLAMA.replacen('{', r#"{"head_dim": 128,"#, 1));
        assert!(msg.contains("field `head_dim` (128) differs"), "{msg}");
        assert_eq!(
            hf(&HF_TINYLLAMA.replacen('{', r#"{"head_dim": 64,"#, 1)).head_dim(),
            64
        );
        let msg = err(&HF_BERT.replace("\"absolute\"", "\"relative_key\""));
        assert!(msg.contains("field `position_embedding_type`"), "{msg}");
    }

    #[test]
    fn hf_conflicting_aliases_are_rejected() {
        let msg = err(&HF_GPT2_MEDIUM.replace("\"n_ctx\": 1024", "\"n_ctx\": 2048"));
        assert!(
            msg.contains("fields `n_positions` (1024) and `n_ctx` (2048) disagree"),
            "{msg}"
        );
    }

    // --- files ---------------------------------------------------------------------------

    #[test]
    fn from_file_reads_and_names_the_path() {
        let dir = std::env::temp_dir().join(format!("memscope-config-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let good = dir.join("config.json");
        std::fs::write(&good, HF_DISTILBERT).unwrap();
        assert_eq!(
            ModelConfig::from_file(&good).unwrap(),
            ModelConfig::preset("distilbert").unwrap()
        );

        let bad = dir.join("bad.json");
        std::fs::write(&bad, b"{\"family\": \"gpt2\xff\"}").unwrap();
        let msg = ModelConfig::from_file(&bad).unwrap_err().to_string();
        assert!(
            msg.starts_with(&bad.display().to_string()) && msg.contains("not UTF-8"),
            "{msg}"
        );

        let missing = dir.join("missing.json");
        let msg = ModelConfig::from_file(&missing).unwrap_err().to_string();
        assert!(
            msg.starts_with(&missing.display().to_string()) && msg.contains("cannot read"),
            "{msg}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn edit_distance_basics() {
        assert_eq!(edit_distance("n_head", "n_heads"), 1);
        assert_eq!(edit_distance("dmodel", "d_model"), 1);
        assert_eq!(edit_distance("", "abc"), 3);
    }
}
