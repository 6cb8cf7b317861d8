//! A built model of any family, and the parameters a config implies: what the engine runs.

use super::{bert, gpt2, llama, segments};
use crate::model::config::{Family, ModelConfig};
use crate::model::kv_cache::KvCache;
use crate::model::store::{ParamSpec, ParamStore};
use crate::model::variant::Variant;
use candle_core::{DType, Device, Result, Tensor};

/// A built model of any family.
pub enum Model {
    Gpt2(gpt2::Gpt2),
    Llama(llama::Llama),
    Bert(bert::Bert),
}

/// The parameters a config implies, with checkpoint names and shapes.
pub fn param_specs(cfg: &ModelConfig) -> Vec<ParamSpec> {
    match cfg.family {
        Family::Gpt2 => gpt2::param_specs(cfg),
        Family::Llama => llama::param_specs(cfg),
        Family::Bert => bert::param_specs(cfg),
    }
}

impl Model {
    /// Builds memscope's engine model from a store holding exactly `param_specs(cfg)`.
    pub fn load(cfg: &ModelConfig, store: &ParamStore) -> Result<Self> {
        Self::load_variant(cfg, store, &Variant::default())
    }

    /// [`Model::load`] on the engine path `variant` picks (attention, fusion).
    pub fn load_variant(cfg: &ModelConfig, store: &ParamStore, variant: &Variant) -> Result<Self> {
        let m = match cfg.family {
            Family::Gpt2 => Model::Gpt2(gpt2::Gpt2::load(cfg, store, variant)?),
            Family::Llama => Model::Llama(llama::Llama::load(cfg, store, variant)?),
            Family::Bert => Model::Bert(bert::Bert::load(cfg, store, variant)?),
        };
        let untaken = store.untaken();
        if !untaken.is_empty() {
            candle_core::bail!(
                "internal: parameters created but not used by the model: {untaken:?}"
            );
        }
        Ok(m)
    }

    /// ids (B, T) u32 → logits (B, T, V). `cache` is for decoders only.
    pub fn forward(&self, ids: &Tensor, cache: Option<&mut KvCache>) -> Result<Tensor> {
        self.forward_cut(ids, cache, &mut segments::Uncut)
    }

    /// As [`Model::forward`], passing the residual stream through `cut` after the embedding
    /// and running every block through it (`segments::forward` cuts the autograd graph there,
    /// and checkpoints blocks when asked).
    pub fn forward_cut<'m>(
        &'m self,
        ids: &Tensor,
        cache: Option<&mut KvCache>,
        cut: segments::Cut<'_, 'm>,
    ) -> Result<Tensor> {
        match (self, cache) {
            (Model::Gpt2(m), c) => m.forward(ids, c, cut),
            (Model::Llama(m), c) => m.forward(ids, c, cut),
            (Model::Bert(m), None) => m.forward(ids, cut),
            (Model::Bert(_), Some(_)) => {
                candle_core::bail!("bert is an encoder: it has no KV cache")
            }
        }
    }

    /// An empty KV cache for `batch` sequences of up to `max_len` positions.
    pub fn new_cache(
        cfg: &ModelConfig,
        batch: usize,
        max_len: usize,
        dtype: DType,
    ) -> Result<KvCache> {
        KvCache::new(
            cfg.n_layers,
            batch,
            cfg.n_kv_heads,
            max_len,
            cfg.head_dim(),
            dtype,
            &Device::Cpu,
        )
    }
}
