//! GPT-2: pre-LayerNorm decoder with learned positions, causal attention, a GELU(tanh) MLP and an
//! LM head tied to the token embedding. Weight names and layouts follow the Hugging Face
//! checkpoint (`h.{i}.attn.c_attn.weight` is a Conv1D: (in, out)).

use crate::instrument::op_timer::timed;
use crate::instrument::scope;
use crate::kernels::embedding::embedding;
use crate::model::config::ModelConfig;
use crate::model::kv_cache::KvCache;
use crate::model::ops::{conv1d, linear, Ops};
use crate::model::segments::Cut;
use crate::model::store::{Init::*, ParamSpec, ParamStore};
use crate::model::variant::Variant;
use candle_core::{Result, Tensor};

pub fn param_specs(cfg: &ModelConfig) -> Vec<ParamSpec> {
    let (c, f, v, t) = (cfg.d_model, cfg.d_ff, cfg.vocab_size, cfg.max_seq_len);
    let std = 0.02;
    // Residual projections scaled by 1/sqrt(2L) (GPT-2 paper, nanoGPT).
    let proj_std = 0.02 / ((2 * cfg.n_layers) as f32).sqrt();
    let mut s = vec![
        ParamSpec::new("wte.weight", &[v, c], Normal(std)),
        ParamSpec::new("wpe.weight", &[t, c], Normal(0.01)),
    ];
    for i in 0..cfg.n_layers {
        let p = |n: &str| format!("h.{i}.{n}");
        s.extend([
            ParamSpec::new(p("ln_1.weight"), &[c], Ones),
            ParamSpec::new(p("ln_1.bias"), &[c], Zeros),
            ParamSpec::conv1d(p("attn.c_attn.weight"), &[c, 3 * c], Normal(std)),
            ParamSpec::new(p("attn.c_attn.bias"), &[3 * c], Zeros),
            ParamSpec::conv1d(p("attn.c_proj.weight"), &[c, c], Normal(proj_std)),
            ParamSpec::new(p("attn.c_proj.bias"), &[c], Zeros),
            ParamSpec::new(p("ln_2.weight"), &[c], Ones),
            ParamSpec::new(p("ln_2.bias"), &[c], Zeros),
            ParamSpec::conv1d(p("mlp.c_fc.weight"), &[c, f], Normal(std)),
            ParamSpec::new(p("mlp.c_fc.bias"), &[f], Zeros),
            ParamSpec::conv1d(p("mlp.c_proj.weight"), &[f, c], Normal(proj_std)),
            ParamSpec::new(p("mlp.c_proj.bias"), &[c], Zeros),
        ]);
    }
    s.push(ParamSpec::new("ln_f.weight", &[c], Ones));
    s.push(ParamSpec::new("ln_f.bias", &[c], Zeros));
    if !cfg.tie_embeddings {
        s.push(ParamSpec::new("lm_head.weight", &[v, c], Normal(std)));
    }
    s
}

struct Norm {
    w: Tensor, // (C)
    b: Tensor, // (C)
}

impl Norm {
    fn detached(&self) -> Self {
        Self {
            w: self.w.detach(),
            b: self.b.detach(),
        }
    }
}

struct Block {
    ln_1: Norm,
    c_attn_w: Tensor, // (C, 3C)
    c_attn_b: Tensor, // (3C)
    c_proj_w: Tensor, // (C, C)
    c_proj_b: Tensor, // (C)
    ln_2: Norm,
    fc_w: Tensor,   // (C, F)
    fc_b: Tensor,   // (F)
    proj_w: Tensor, // (F, C)
    proj_b: Tensor, // (C)
}

impl Block {
    /// The same weights without their variables: a block run on these records no graph.
    fn detached(&self) -> Self {
        Self {
            ln_1: self.ln_1.detached(),
            c_attn_w: self.c_attn_w.detach(),
            c_attn_b: self.c_attn_b.detach(),
            c_proj_w: self.c_proj_w.detach(),
            c_proj_b: self.c_proj_b.detach(),
            ln_2: self.ln_2.detached(),
            fc_w: self.fc_w.detach(),
            fc_b: self.fc_b.detach(),
            proj_w: self.proj_w.detach(),
            proj_b: self.proj_b.detach(),
        }
    }
}

pub struct Gpt2 {
    cfg: ModelConfig,
    ops: Ops,
    /// `blocks` detached: a checkpointed block's forward (`model::segments`).
    untracked: Vec<Block>,
    wte: Tensor, // (V, C)
    wpe: Tensor, // (T_max, C)
    blocks: Vec<Block>,
    ln_f: Norm,
    lm_head: Tensor, // (V, C): the token embedding when tied
}

impl Gpt2 {
    pub fn load(cfg: &ModelConfig, st: &ParamStore, variant: &Variant) -> Result<Self> {
        let norm = |p: &str| -> Result<Norm> {
            Ok(Norm {
                w: st.get(&format!("{p}.weight"))?,
                b: st.get(&format!("{p}.bias"))?,
            })
        };
        let blocks = (0..cfg.n_layers)
            .map(|i| {
                let g = |n: &str| st.get(&format!("h.{i}.{n}"));
                Ok(Block {
                    ln_1: norm(&format!("h.{i}.ln_1"))?,
                    c_attn_w: g("attn.c_attn.weight")?,
                    c_attn_b: g("attn.c_attn.bias")?,
                    c_proj_w: g("attn.c_proj.weight")?,
                    c_proj_b: g("attn.c_proj.bias")?,
                    ln_2: norm(&format!("h.{i}.ln_2"))?,
                    fc_w: g("mlp.c_fc.weight")?,
                    fc_b: g("mlp.c_fc.bias")?,
                    proj_w: g("mlp.c_proj.weight")?,
                    proj_b: g("mlp.c_proj.bias")?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let wte = st.get("wte.weight")?;
        let lm_head = if cfg.tie_embeddings {
            wte.clone()
        } else {
            st.get("lm_head.weight")?
        };
        Ok(Self {
            cfg: cfg.clone(),
            ops: Ops::new(variant),
            untracked: blocks.iter().map(Block::detached).collect(),
            wpe: st.get("wpe.weight")?,
            wte,
            blocks,
            ln_f: norm("ln_f")?,
            lm_head,
        })
    }

    /// ids (B, T) u32 → logits (B, T, V). With a cache, positions continue after the cached ones.
    /// `cut` sees the residual stream after the embedding and runs every block, and returns
    /// what the next part of the model reads (see `model::segments`).
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
        let pos = Tensor::arange(offset as u32, (offset + t) as u32, ids.device())?; // (T)
        let tok = embedding(&self.wte, &ids.flatten_all()?)?.reshape((b, t, c))?; // (B, T, C)
        let p = embedding(&self.wpe, &pos)?; // (T, C)
        let x = timed("position add", || tok.broadcast_add(&p))?; // (B, T, C)
        let mask = self.ops.causal_mask(t, offset, x.dtype(), x.device())?; // (T, S) naive only
        let mut x = cut.cut(x)?;
        for i in 0..self.blocks.len() {
            x = match cache.as_deref_mut() {
                Some(k) => self.block(i, false, &x, mask.as_ref(), Some((i, k)))?,
                None => {
                    let mask = mask.clone();
                    cut.block(
                        &x,
                        Box::new(move |x, track| self.block(i, track, x, mask.as_ref(), None)),
                    )?
                }
            };
        }
        scope::enter(scope::HEAD_ID);
        if let Some(k) = cache {
            k.advance();
        }
        let x = self
            .ops
            .layer_norm(&x, &self.ln_f.w, &self.ln_f.b, self.cfg.norm_eps)?; // (B, T, C)
        linear(&x, &self.lm_head, None) // (B, T, V)
    }

    /// Block `i`: x (B, T, C) → (B, T, C), on the variables (`track`) or their detached copies.
    fn block(
        &self,
        i: usize,
        track: bool,
        x: &Tensor,
        mask: Option<&Tensor>,
        cache: Option<(usize, &mut KvCache)>,
    ) -> Result<Tensor> {
        let blk = if track {
            &self.blocks[i]
        } else {
            &self.untracked[i]
        };
        let a = self.attention(i, blk, x, mask, cache)?; // (B, T, C)
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
        mask: Option<&Tensor>,
        cache: Option<(usize, &mut KvCache)>,
    ) -> Result<Tensor> {
        let (b, t, _) = x.dims3()?;
        let (nh, hd) = (self.cfg.n_heads, self.cfg.head_dim());
        let ops = &self.ops;
        scope::enter(scope::norms_id(i));
        let h = ops.layer_norm(x, &blk.ln_1.w, &blk.ln_1.b, self.cfg.norm_eps)?; // (B, T, C)
        scope::enter(scope::attention_id(i));
        let qkv = conv1d(&h, &blk.c_attn_w, &blk.c_attn_b)?; // (B, T, 3C)
        let y = match cache {
            // Training and cache-less forwards read Q, K and V in place in the projection.
            None => ops.attention_packed(&qkv, nh, mask)?, // (B, T, C)
            Some((layer, kv)) => {
                let qkv = qkv.reshape((b, t, 3, nh, hd))?.permute((2, 0, 3, 1, 4))?; // (3, B, H, T, D)
                let (k, v) = timed("kv cache append", || {
                    kv.append(layer, &qkv.get(1)?, &qkv.get(2)?)
                })?; // (B, H, S, D)
                ops.attention_split(&qkv.get(0)?, &k, &v, true, mask)? // (B, T, C)
            }
        };
        conv1d(&y, &blk.c_proj_w, &blk.c_proj_b) // (B, T, C)
    }

    /// Block `i`'s MLP half, norm to output projection → (B, T, C).
    fn mlp(&self, i: usize, blk: &Block, x: &Tensor) -> Result<Tensor> {
        scope::enter(scope::norms_id(i));
        let h = self
            .ops
            .layer_norm(x, &blk.ln_2.w, &blk.ln_2.b, self.cfg.norm_eps)?; // (B, T, C)
        scope::enter(scope::mlp_id(i));
        let g = self.ops.gelu(&conv1d(&h, &blk.fc_w, &blk.fc_b)?)?; // (B, T, F)
        conv1d(&g, &blk.proj_w, &blk.proj_b) // (B, T, C)
    }
}
