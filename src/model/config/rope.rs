//! RoPE scaling: which rotary frequency schedule a llama config asks for. Transformers 5 writes
//! `rope_parameters: {rope_theta, rope_type, factor, …}`; older configs write `rope_theta` and
//! `rope_scaling: {type | rope_type, factor, …}`. memscope implements `default`, `linear` and
//! `llama3` (in `model/rope.rs`) and refuses any other type by name, so a checkpoint never runs
//! silently with the wrong positions. Memscope's own schema uses the same object as `rope_scaling`.

use serde_json::Value;

use super::fields::{describe, Fields};
use super::ConfigError;

/// The inverse-frequency schedule of the rotary embedding (Hugging Face's `rope_type`).
#[derive(
    Debug, Clone, PartialEq, Default, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
#[serde(tag = "rope_type", rename_all = "lowercase")]
pub enum RopeScaling {
    /// inv_freq_i = θ^(−2i/D).
    #[default]
    Default,
    /// Position interpolation: inv_freq / factor.
    Linear { factor: f64 },
    /// Llama 3.1: low frequencies (wavelength > original_max / low_freq_factor) divided by
    /// `factor`, high ones (wavelength < original_max / high_freq_factor) kept, a smooth blend
    /// between.
    Llama3 {
        factor: f64,
        low_freq_factor: f64,
        high_freq_factor: f64,
        original_max_position_embeddings: usize,
    },
}

impl RopeScaling {
    pub fn is_default(&self) -> bool {
        *self == RopeScaling::Default
    }
}

const SUPPORTED: &str = "default, linear, llama3";

/// Keys a rope object may hold; any other key could change the numerics and is refused.
const KNOWN: [&str; 8] = [
    "rope_theta",
    "rope_type",
    "type",
    "factor",
    "low_freq_factor",
    "high_freq_factor",
    "original_max_position_embeddings",
    "partial_rotary_factor",
];

/// A Hugging Face llama config's rope fields → (θ if given, scaling). `rope_parameters` wins over
/// the older `rope_scaling`; a top-level `rope_theta` that disagrees with
/// `rope_parameters.rope_theta` is an error.
pub(super) fn parse_hf(f: &Fields<'_>) -> Result<(Option<f64>, RopeScaling), ConfigError> {
    let top_theta = match f.get("rope_theta").filter(|v| !v.is_null()) {
        Some(v) => Some(f.f64_value("rope_theta", v)?),
        None => None,
    };
    let (key, value) = match (
        f.get("rope_parameters").filter(|v| !v.is_null()),
        f.get("rope_scaling").filter(|v| !v.is_null()),
    ) {
        (Some(p), Some(s)) => {
            // Both spellings (transformers 5 and 4): they must say the same, or the file is
            // ambiguous; one is never dropped silently.
            let (tp, sp) = parse_object(f, "rope_parameters", p)?;
            let (ts, ss) = parse_object(f, "rope_scaling", s)?;
            if sp != ss || (tp.is_some() && ts.is_some() && tp != ts) {
                return Err(ConfigError::Conflict {
                    origin: f.origin.to_string(),
                    key: "rope_scaling".into(),
                    value: s.to_string(),
                    other_key: "rope_parameters".into(),
                    other_value: p.to_string(),
                });
            }
            ("rope_parameters", p)
        }
        (Some(v), _) => ("rope_parameters", v),
        (None, Some(v)) => ("rope_scaling", v),
        (None, None) => return Ok((top_theta, RopeScaling::Default)),
    };
    let (theta, scaling) = parse_object(f, key, value)?;
    match (top_theta, theta) {
        (Some(a), Some(b)) if a != b => Err(ConfigError::Conflict {
            origin: f.origin.to_string(),
            key: "rope_theta".into(),
            value: a.to_string(),
            other_key: format!("{key}.rope_theta"),
            other_value: b.to_string(),
        }),
        (a, b) => Ok((b.or(a), scaling)),
    }
}

/// One rope object (`key` names it in errors) → (its `rope_theta` if any, the scaling).
pub(super) fn parse_object(
    f: &Fields<'_>,
    key: &str,
    value: &Value,
) -> Result<(Option<f64>, RopeScaling), ConfigError> {
    let Value::Object(map) = value else {
        return Err(f.wrong_type(key, "an object such as {\"rope_type\": \"default\"}", value));
    };
    let origin = f.origin.to_string();
    let unsupported = |reason: String| ConfigError::Unsupported {
        origin: origin.clone(),
        reason,
    };
    if let Some(k) = map.keys().find(|k| !KNOWN.contains(&k.as_str())) {
        return Err(unsupported(format!(
            "field `{key}.{k}` is not supported (it may change the rotary embedding); known keys: {}",
            KNOWN.join(", ")
        )));
    }
    let num = |k: &str| -> Result<Option<f64>, ConfigError> {
        match map.get(k).filter(|v| !v.is_null()) {
            None => Ok(None),
            Some(v) => match v.as_f64() {
                Some(x) if x.is_finite() && x > 0.0 => Ok(Some(x)),
                _ => Err(ConfigError::Invalid {
                    origin: origin.clone(),
                    key: format!("{key}.{k}"),
                    reason: format!("must be a finite positive number, found {}", describe(v)),
                }),
            },
        }
    };
    let need = |k: &str| -> Result<f64, ConfigError> {
        num(k)?.ok_or_else(|| f.missing(&format!("{key}.{k}")))
    };
    if let Some(p) = num("partial_rotary_factor")? {
        if p != 1.0 {
            return Err(unsupported(format!(
                "field `{key}.partial_rotary_factor` ({p}) is not supported; only 1 (every \
                 dimension rotated)"
            )));
        }
    }
    let type_key = if map.contains_key("rope_type") {
        "rope_type"
    } else {
        "type"
    };
    let rope_type = match map.get(type_key).filter(|v| !v.is_null()) {
        None => "default",
        Some(v) => v
            .as_str()
            .ok_or_else(|| f.wrong_type(&format!("{key}.{type_key}"), "a string", v))?,
    };
    let scaling = match rope_type {
        "default" => RopeScaling::Default,
        "linear" => RopeScaling::Linear {
            factor: need("factor")?,
        },
        "llama3" => {
            let low = need("low_freq_factor")?;
            let high = need("high_freq_factor")?;
            if high <= low {
                return Err(ConfigError::Invalid {
                    origin,
                    key: format!("{key}.high_freq_factor"),
                    reason: format!("({high}) must be larger than low_freq_factor ({low})"),
                });
            }
            let orig = need("original_max_position_embeddings")?;
            if orig.fract() != 0.0 {
                return Err(f.wrong_type(
                    &format!("{key}.original_max_position_embeddings"),
                    "a positive integer",
                    &map["original_max_position_embeddings"],
                ));
            }
            RopeScaling::Llama3 {
                factor: need("factor")?,
                low_freq_factor: low,
                high_freq_factor: high,
                original_max_position_embeddings: orig as usize,
            }
        }
        other => {
            return Err(unsupported(format!(
                "field `{key}.{type_key}`: {other:?} is not supported; supported rope types: \
                 {SUPPORTED} (remove the field for plain RoPE only if the checkpoint was trained \
                 with it)"
            )))
        }
    };
    Ok((num("rope_theta")?, scaling))
}
