//! The built-in presets: GPT-2 sizes, the CS336 llama sizes, TinyLlama, BERT, tiny test models.

use super::{ConfigError, Family, ModelConfig};

impl ModelConfig {
    /// The preset called `name`, if any (see [`ModelConfig::presets`]).
    pub fn preset(name: &str) -> Option<ModelConfig> {
        Self::presets().into_iter().find(|cfg| cfg.name == name)
    }

    /// `--model NAME` / `--config FILE` as every command resolves them (the binary's and the
    /// Python package's): the file when one is given, else the preset, validated.
    pub fn resolve(
        model: &str,
        config: Option<&std::path::Path>,
    ) -> Result<ModelConfig, ConfigError> {
        if let Some(path) = config {
            return ModelConfig::from_file(path);
        }
        Self::preset(model).ok_or_else(|| ConfigError::UnknownPreset {
            name: model.to_string(),
            choices: Self::presets()
                .into_iter()
                .map(|c| c.name)
                .collect::<Vec<_>>()
                .join(", "),
        })
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
                transformers: None,
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
                rope_scaling: Default::default(),
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
}

/// A GPT-2 size: vocab 50257, context 1024, d_ff = 4·d_model, tied head.
fn gpt2(name: &str, n_layers: usize, n_heads: usize, d_model: usize) -> ModelConfig {
    ModelConfig {
        transformers: None,
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
        rope_scaling: Default::default(),
        tie_embeddings: true,
        type_vocab_size: 0,
    }
}

/// A CS336 assignment size: llama family, vocab 10000, context 1024, d_ff = 4·d_model, untied.
fn cs336(name: &str, n_layers: usize, n_heads: usize, d_model: usize) -> ModelConfig {
    ModelConfig {
        transformers: None,
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
        rope_scaling: Default::default(),
        tie_embeddings: false,
        type_vocab_size: 0,
    }
}

/// A BERT-base width (768, 12 heads, vocab 30522, context 512) with `n_layers` layers.
fn bert(name: &str, n_layers: usize, type_vocab_size: usize) -> ModelConfig {
    ModelConfig {
        transformers: None,
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
        rope_scaling: Default::default(),
        tie_embeddings: true,
        type_vocab_size,
    }
}
