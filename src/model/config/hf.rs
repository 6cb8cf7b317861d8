//! A Hugging Face config.json (recognised by `model_type`): aliases for each field, the options
//! that would change the parameter structure rejected rather than silently dropped.

use serde_json::Value;

use super::fields::{describe, hf_lookup, Fields};
use super::{default_tie, default_type_vocab, file_stem, ConfigError, Family, ModelConfig};

/// Hugging Face `model_type` values memscope's own engine builds; transformers builds any other
/// (`transformers.rs`, `--engine torch`).
const SUPPORTED_MODEL_TYPES: &str = "gpt2, llama, bert, distilbert";

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
pub(super) const HF_ALIASES: [(&str, &[&str]); 11] = [
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

/// Our field → the HF key its value came from (for error messages).
type UsedKeys = Vec<(&'static str, String)>;

pub(super) fn parse_hf(
    f: &Fields<'_>,
    source: &str,
) -> Result<(ModelConfig, UsedKeys), ConfigError> {
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
        // Built by transformers (`--engine torch`), every field as it reads them.
        other => {
            let cfg = super::transformers::parse(f, source, other)?;
            return Ok((cfg, Vec::new()));
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
    // Llama reads `rope_parameters` / `rope_scaling` (θ may live inside); the others have no RoPE.
    let (rope_theta, rope_scaling) = match family {
        Family::Llama => super::rope::parse_hf(f)?,
        _ => (f64_opt("rope_theta", HF_ROPE_THETA)?, Default::default()),
    };
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
        transformers: None,
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
        rope_scaling,
        tie_embeddings,
        type_vocab_size: type_vocab.unwrap_or(if distil {
            0
        } else {
            default_type_vocab(family)
        }),
    };
    Ok((cfg, used))
}

/// HF options that add or reshape parameters our models do not have, or change the numerics
/// (activation, attention scaling): rejected, not ignored.
pub(super) fn reject_structural_options(f: &Fields<'_>, family: Family) -> Result<(), ConfigError> {
    // (key, the values our forward computes; empty: one of the family's activations).
    let numerics: &[(&str, &[Value])] = match family {
        Family::Gpt2 => &[
            ("activation_function", &[]),
            ("scale_attn_weights", &[Value::Bool(true)]),
            ("scale_attn_by_inverse_layer_idx", &[Value::Bool(false)]),
        ],
        Family::Llama => &[("hidden_act", &[])],
        // distilbert names it `activation`.
        Family::Bert => &[("hidden_act", &[]), ("activation", &[])],
    };
    let activations: &[&str] = match family {
        Family::Gpt2 => &["gelu_new", "gelu_pytorch_tanh"],
        Family::Llama => &["silu", "swish"],
        Family::Bert => &["gelu"],
    };
    for (key, allowed) in numerics {
        let Some(value) = f.get(key).filter(|v| !v.is_null()) else {
            continue;
        };
        let ok = if allowed.is_empty() {
            value.as_str().is_some_and(|s| activations.contains(&s))
        } else {
            allowed.contains(value)
        };
        if !ok {
            let valid = if allowed.is_empty() {
                activations.join(" or ")
            } else {
                allowed
                    .iter()
                    .map(describe)
                    .collect::<Vec<_>>()
                    .join(" or ")
            };
            return Err(ConfigError::Unsupported {
                origin: f.origin.to_string(),
                reason: format!(
                    "field `{key}`: {} is not supported for {family} (memscope computes {valid}); \
                     remove it or set it to {valid}",
                    describe(value)
                ),
            });
        }
    }
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
