//! LLaMA: RMSNorm, rotary position embeddings, grouped-query attention (n_kv_heads), a SwiGLU MLP
//! (gate, up, down), no biases, untied LM head. Names follow Hugging Face's `LlamaForCausalLM`
//! (`model.layers.{i}.self_attn.q_proj.weight`, PyTorch Linear layout (out, in)).

use crate::instrument::op_timer::timed;
use crate::instrument::scope;
use crate::kernels::embedding::embedding;
use crate::model::config::ModelConfig;
use crate::model::kv_cache::KvCache;
use crate::model::ops::{linear, Ops};
use crate::model::rope::rope_tables;
use crate::model::segments::Cut;
use crate::model::store::{Init::*, ParamSpec, ParamStore};
use crate::model::variant::Variant;
use candle_core::{Result, Tensor};

pub fn param_specs(cfg: &ModelConfig) -> Vec<ParamSpec> {
    let (c, f, v) = (cfg.d_model, cfg.d_ff, cfg.vocab_size);
    let kv = cfg.n_kv_heads * cfg.head_dim();
    let std = 0.02;
    let proj_std = 0.02 / ((2 * cfg.n_layers) as f32).sqrt();
    let mut s = vec![ParamSpec::new(
        "model.embed_tokens.weight",
        &[v, c],
        Normal(std),
    )];
    for i in 0..cfg.n_layers {
        let p = |n: &str| format!("model.layers.{i}.{n}");
        s.extend([
            ParamSpec::new(p("input_layernorm.weight"), &[c], Ones),
            ParamSpec::linear(p("self_attn.q_proj.weight"), &[c, c], Normal(std)),
            ParamSpec::linear(p("self_attn.k_proj.weight"), &[kv, c], Normal(std)),
            ParamSpec::linear(p("self_attn.v_proj.weight"), &[kv, c], Normal(std)),
            ParamSpec::linear(p("self_attn.o_proj.weight"), &[c, c], Normal(proj_std)),
            ParamSpec::new(p("post_attention_layernorm.weight"), &[c], Ones),
            ParamSpec::linear(p("mlp.gate_proj.weight"), &[f, c], Normal(std)),
            ParamSpec::linear(p("mlp.up_proj.weight"), &[f, c], Normal(std)),
            ParamSpec::linear(p("mlp.down_proj.weight"), &[c, f], Normal(proj_std)),
        ]);
    }
    s.push(ParamSpec::new("model.norm.weight", &[c], Ones));
    if !cfg.tie_embeddings {
        s.push(ParamSpec::linear("lm_head.weight", &[v, c], Normal(std)));
    }
    s
}

struct Block {
    attn_norm: Tensor, // (C)
    q: Tensor,         // (C, C)
    k: Tensor,         // (KV*D, C)
    v: Tensor,         // (KV*D, C)
    o: Tensor,         // (C, C)
    mlp_norm: Tensor,  // (C)
    gate: Tensor,      // (F, C)
    up: Tensor,        // (F, C)
    down: Tensor,      // (C, F)
}

impl Block {
    /// The same weights without their variables: a block run on these records no graph.
    fn detached(&self) -> Self {
        Self {
            attn_norm: self.attn_norm.detach(),
            q: self.q.detach(),
            k: self.k.detach(),
            v: self.v.detach(),
            o: self.o.detach(),
            mlp_norm: self.mlp_norm.detach(),
            gate: self.gate.detach(),
            up: self.up.detach(),
            down: self.down.detach(),
        }
    }
}

pub struct Llama {
    cfg: ModelConfig,
    ops: Ops,
    embed: Tensor, // (V, C)
    blocks: Vec<Block>,
    /// `blocks` detached: a checkpointed block's forward (`model::segments`).
    untracked: Vec<Block>,
    norm: Tensor,    // (C)
    lm_head: Tensor, // (V, C)
}

impl Llama {
    pub fn load(cfg: &ModelConfig, st: &ParamStore, variant: &Variant) -> Result<Self> {
        let blocks = (0..cfg.n_layers)
            .map(|i| {
                let g = |n: &str| st.get(&format!("model.layers.{i}.{n}"));
                Ok(Block {
                    attn_norm: g("input_layernorm.weight")?,
                    q: g("self_attn.q_proj.weight")?,
                    k: g("self_attn.k_proj.weight")?,
                    v: g("self_attn.v_proj.weight")?,
                    o: g("self_attn.o_proj.weight")?,
                    mlp_norm: g("post_attention_layernorm.weight")?,
                    gate: g("mlp.gate_proj.weight")?,
                    up: g("mlp.up_proj.weight")?,
                    down: g("mlp.down_proj.weight")?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let embed = st.get("model.embed_tokens.weight")?;
        let lm_head = if cfg.tie_embeddings {
            embed.clone()
        } else {
            st.get("lm_head.weight")?
        };
        Ok(Self {
            cfg: cfg.clone(),
            ops: Ops::new(variant),
            embed,
            untracked: blocks.iter().map(Block::detached).collect(),
            blocks,
            norm: st.get("model.norm.weight")?,
            lm_head,
        })
    }

    /// ids (B, T) u32 → logits (B, T, V). With a cache, positions continue after the cached ones.
    /// `cut` sees the residual stream after the embedding and runs every block.
    pub fn forward<'m>(
        &'m self,
        ids: &Tensor,
        mut cache: Option<&mut KvCache>,
        cut: Cut<'_, 'm>,
    ) -> Result<Tensor> {
        let (b, t) = ids.dims2()?;
        let c = self.cfg.d_model;
        let offset = cache.as_ref().map_or(0, |k| k.len());
        scope::enter(scope::EMBEDDING_ID);
        let mut x = embedding(&self.embed, &ids.flatten_all()?)?.reshape((b, t, c))?; // (B, T, C)
        let (cos, sin) = rope_tables(&self.cfg, offset, t, x.dtype(), x.device())?; // (T, D)
        let mask = self.ops.causal_mask(t, offset, x.dtype(), x.device())?; // (T, S) naive only
        x = cut.cut(x)?;
        for i in 0..self.blocks.len() {
            x = match cache.as_deref_mut() {
                Some(k) => self.block(i, false, &x, (&cos, &sin), mask.as_ref(), Some((i, k)))?,
                None => {
                    let (cos, sin, mask) = (cos.clone(), sin.clone(), mask.clone());
                    cut.block(
                        &x,
                        Box::new(move |x, track| {
                            self.block(i, track, x, (&cos, &sin), mask.as_ref(), None)
                        }),
                    )?
                }
            };
        }
        if let Some(k) = cache {
            k.advance();
        }
        scope::enter(scope::HEAD_ID);
        let x = self.ops.rms_norm(&x, &self.norm, self.cfg.norm_eps)?; // (B, T, C)
        linear(&x, &self.lm_head, None) // (B, T, V)
    }

    /// Block `i`: x (B, T, C) → (B, T, C), on the variables (`track`) or their detached copies.
    fn block(
        &self,
        i: usize,
        track: bool,
        x: &Tensor,
        rope_cs: (&Tensor, &Tensor),
        mask: Option<&Tensor>,
        cache: Option<(usize, &mut KvCache)>,
    ) -> Result<Tensor> {
        let blk = if track {
            &self.blocks[i]
        } else {
            &self.untracked[i]
        };
        let a = self.attention(i, blk, x, rope_cs, mask, cache)?; // (B, T, C)
        let x = timed("residual add", || x + a)?; // (B, T, C)
        let m = self.mlp(i, blk, &x)?; // (B, T, C)
        timed("residual add", || &x + m) // (B, T, C)
    }

    /// Block `i`'s attention half, norm to output projection → (B, T, C). A function of its
    /// own so that its temporaries are freed before the MLP runs (inference keeps no graph).
    fn attention(
        &self,
        i: usize,
        blk: &Block,
        x: &Tensor,
        (cos, sin): (&Tensor, &Tensor),
        mask: Option<&Tensor>,
        cache: Option<(usize, &mut KvCache)>,
    ) -> Result<Tensor> {
        let (b, t, _) = x.dims3()?;
        let (nh, nkv, hd) = (self.cfg.n_heads, self.cfg.n_kv_heads, self.cfg.head_dim());
        let ops = &self.ops;
        scope::enter(scope::norms_id(i));
        let h = ops.rms_norm(x, &blk.attn_norm, self.cfg.norm_eps)?; // (B, T, C)
        scope::enter(scope::attention_id(i));
        let q = linear(&h, &blk.q, None)?.reshape((b, t, nh, hd))?; // (B, T, H, D)
        let k = linear(&h, &blk.k, None)?.reshape((b, t, nkv, hd))?; // (B, T, KV, D)
        let v = linear(&h, &blk.v, None)?
            .reshape((b, t, nkv, hd))?
            .transpose(1, 2)?; // (B, KV, T, D), a view: the kernel reads it in place
        let q = ops.rope(&q, cos, sin)?; // (B, H, T, D)
        let k = ops.rope(&k, cos, sin)?; // (B, KV, T, D)
        let (k, v) = match cache {
            Some((layer, kv)) => timed("kv cache append", || kv.append(layer, &k, &v))?, // (B, KV, S, D)
            None => (k, v),
        };
        // Query heads share K/V heads inside the kernel: no repeated copies.
        let y = ops.attention_split(&q, &k, &v, true, mask)?; // (B, T, C)
        linear(&y, &blk.o, None) // (B, T, C)
    }

    /// Block `i`'s MLP half, norm to down projection → (B, T, C).
    fn mlp(&self, i: usize, blk: &Block, x: &Tensor) -> Result<Tensor> {
        scope::enter(scope::norms_id(i));
        let h = self.ops.rms_norm(x, &blk.mlp_norm, self.cfg.norm_eps)?; // (B, T, C)
        scope::enter(scope::mlp_id(i));
        let g = linear(&h, &blk.gate, None)?; // (B, T, F)
        let u = linear(&h, &blk.up, None)?; // (B, T, F)
        let gu = self.ops.swiglu(&g, &u)?; // (B, T, F)
        linear(&gu, &blk.down, None) // (B, T, C)
    }
}
