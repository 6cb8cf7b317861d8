//! memscope's own schema (a `family` key): exactly the fields of [`ModelConfig`]; an unknown key
//! is an error with a "did you mean" hint, so what `serde_json::to_string(&cfg)` writes reads back.

use super::fields::Fields;
use super::hf::HF_ALIASES;
use super::{
    default_norm_eps, default_tie, default_type_vocab, file_stem, ConfigError, Family, ModelConfig,
};

/// Keys of memscope's schema, in the order of the struct fields.
const OUR_KEYS: [&str; 14] = [
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
    "rope_scaling",
    "tie_embeddings",
    "type_vocab_size",
];

pub(super) fn parse_ours(f: &Fields<'_>, source: &str) -> Result<ModelConfig, ConfigError> {
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
        transformers: None,
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
        rope_scaling: match f.get("rope_scaling").filter(|v| !v.is_null()) {
            Some(v) => super::rope::parse_object(f, "rope_scaling", v)?.1,
            None => Default::default(),
        },
        tie_embeddings: match f.get("tie_embeddings") {
            Some(v) => f.bool_value("tie_embeddings", v)?,
            None => default_tie(family),
        },
        type_vocab_size: usize_opt("type_vocab_size")?.unwrap_or(default_type_vocab(family)),
    })
}

/// " (did you mean `n_heads`?)" for near-misses and Hugging Face keys, else "".
pub(super) fn unknown_key_hint(key: &str) -> String {
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
        .map(|k| (strsim::levenshtein(key, k), k))
        .filter(|&(d, _)| d <= 2)
        .min()
        .map(|(_, k)| format!(" (did you mean `{k}`?)"))
        .unwrap_or_default()
}
