//! A Hugging Face config.json whose `model_type` memscope's own engine has no family for
//! (`qwen2`, `mistral`, `gemma2`, `phi3`, `mixtral`, …): kept whole, for the torch engine to build
//! with transformers' own classes, every field read as transformers reads it. What memscope needs
//! to know of the model (its widths, its exact parameter count, which class transformers builds)
//! is what transformers built from it ([`BuiltModel`], `src/torch/describe.rs`), never guessed
//! from key names; until then the sizes read here are only the config's own numbers.

use serde_json::Value;

use super::fields::{hf_lookup, Fields};
use super::{file_stem, ConfigError, Family, ModelConfig};

/// A model transformers builds from its config.json (`--engine torch`).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct TransformersModel {
    /// The config's `model_type`.
    pub model_type: String,
    /// The config.json as given: the torch engine builds the model from it.
    pub config: serde_json::Map<String, Value>,
    /// What transformers built from it; absent until the torch engine has built it once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub built: Option<BuiltModel>,
}

/// What transformers built from a config (on PyTorch's meta device: no memory, no weights).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct BuiltModel {
    /// The class built: the config's `architectures` entry, else the causal (or masked) language
    /// model transformers maps its `model_type` to (`Qwen2ForCausalLM`).
    pub class: String,
    /// What the model predicts from token ids: `causal` (the next token) or `masked`.
    pub objective: Objective,
    /// Exact: every parameter of the built model, a tied one once.
    pub parameters: u64,
    pub n_layers: usize,
    pub d_model: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    /// The MLP's width (one expert's under a mixture of experts).
    pub d_ff: usize,
    pub vocab_size: usize,
    /// The longest sequence its positions cover (`max_position_embeddings`).
    pub max_seq_len: usize,
    /// The output head is the token embedding (the built model's, not the config's word).
    pub tie_embeddings: bool,
    /// A mixture of experts: how many each routed layer has and how many each token goes to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub experts: Option<Experts>,
}

#[derive(
    Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Objective {
    Causal,
    Masked,
}

#[derive(
    Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
pub struct Experts {
    /// Experts in each routed layer (`num_local_experts`, `num_experts`).
    pub per_layer: usize,
    /// Experts each token is sent to (`num_experts_per_tok`).
    pub per_token: usize,
    /// How transformers runs them (`grouped_mm`, its default: one grouped product over every
    /// token's experts).
    pub implementation: String,
}

/// The config.json of a `model_type` memscope's engine does not build, kept for transformers.
/// Refused here: a config that needs the model's own code (`auto_map`: transformers'
/// `trust_remote_code`), which memscope does not run.
pub(super) fn parse(
    f: &Fields<'_>,
    source: &str,
    model_type: &str,
) -> Result<ModelConfig, ConfigError> {
    if f.get("auto_map").is_some() {
        return Err(ConfigError::Unsupported {
            origin: f.origin.to_string(),
            reason: format!(
                "field `auto_map`: model_type `{model_type}` is built by the model's own code \
                 (transformers' trust_remote_code), which memscope does not run; use a config of \
                 an architecture transformers ships"
            ),
        });
    }
    // The config's own numbers, for what is shown before transformers has built the model.
    let size = |aliases: &[&str]| -> Result<usize, ConfigError> {
        match hf_lookup(f, aliases)? {
            Some((key, v)) => f.usize_value(key, v),
            None => Ok(1),
        }
    };
    let d_model = size(&["hidden_size", "n_embd", "d_model", "dim"])?;
    let n_heads = size(&["num_attention_heads", "n_head", "n_heads"])?;
    let name = match f.get("_name_or_path") {
        Some(Value::String(s)) if !s.is_empty() => s.clone(),
        _ => match file_stem(source, model_type) {
            stem if stem == "config" => model_type.to_string(),
            stem => stem,
        },
    };
    let config: serde_json::Map<String, Value> = f.entries.iter().cloned().collect();
    Ok(ModelConfig {
        name,
        family: Family::Llama,
        vocab_size: size(&["vocab_size"])?,
        max_seq_len: size(&["max_position_embeddings", "n_positions", "max_seq_len"])?,
        n_layers: size(&["num_hidden_layers", "n_layer", "n_layers"])?,
        n_heads,
        n_kv_heads: match hf_lookup(f, &["num_key_value_heads"])? {
            Some((key, v)) => f.usize_value(key, v)?,
            None => n_heads,
        },
        d_model,
        d_ff: size(&["intermediate_size", "n_inner", "ffn_dim"])?,
        norm_eps: 1e-6,
        rope_theta: 10000.0,
        rope_scaling: Default::default(),
        tie_embeddings: false,
        type_vocab_size: 0,
        transformers: Some(TransformersModel {
            model_type: model_type.to_string(),
            config,
            built: None,
        }),
    })
}

impl ModelConfig {
    /// The config with what transformers built from it: its widths and exact parameter count;
    /// a masked language model as memscope's encoder family (no generation), the rest as the
    /// decoder family.
    pub fn with_built(&self, b: BuiltModel) -> ModelConfig {
        let mut c = self.clone();
        c.family = match b.objective {
            Objective::Causal => Family::Llama,
            Objective::Masked => Family::Bert,
        };
        c.n_layers = b.n_layers;
        c.d_model = b.d_model;
        c.n_heads = b.n_heads;
        c.n_kv_heads = b.n_kv_heads;
        c.d_ff = b.d_ff;
        c.vocab_size = b.vocab_size;
        c.max_seq_len = b.max_seq_len;
        c.tie_embeddings = b.tie_embeddings;
        if let Some(t) = c.transformers.as_mut() {
            t.built = Some(b);
        }
        c
    }

    /// What transformers built from this config, where it is one transformers builds and has
    /// been built.
    pub fn built(&self) -> Option<&BuiltModel> {
        self.transformers.as_ref().and_then(|t| t.built.as_ref())
    }
}
