//! BERT-style encoder: learned positions and token types, post-LayerNorm blocks with
//! bidirectional attention and a GELU MLP, and a masked-LM head whose decoder is tied to the word
//! embedding. Names follow Hugging Face's `BertForMaskedLM`.

use crate::instrument::scope;
use crate::kernels::embedding::embedding;
use crate::model::config::ModelConfig;
use crate::model::ops::{linear, Ops};
use crate::model::store::{Init::*, ParamSpec, ParamStore};
use crate::model::variant::Variant;
use candle_core::{Result, Tensor};

pub fn param_specs(cfg: &ModelConfig) -> Vec<ParamSpec> {
    let (c, f, v, t) = (cfg.d_model, cfg.d_ff, cfg.vocab_size, cfg.max_seq_len);
    let std = 0.02;
    let mut s = vec![
        ParamSpec::new(
            "bert.embeddings.word_embeddings.weight",
            &[v, c],
            Normal(std),
        ),
        ParamSpec::new(
            "bert.embeddings.position_embeddings.weight",
            &[t, c],
            Normal(std),
        ),
    ];
    if cfg.type_vocab_size > 0 {
        s.push(ParamSpec::new(
            "bert.embeddings.token_type_embeddings.weight",
            &[cfg.type_vocab_size, c],
            Normal(std),
        ));
    }
    s.push(ParamSpec::new(
        "bert.embeddings.LayerNorm.weight",
        &[c],
        Ones,
    ));
    s.push(ParamSpec::new(
        "bert.embeddings.LayerNorm.bias",
        &[c],
        Zeros,
    ));
    for i in 0..cfg.n_layers {
        let p = |n: &str| format!("bert.encoder.layer.{i}.{n}");
        s.extend([
            ParamSpec::linear(p("attention.self.query.weight"), &[c, c], Normal(std)),
            ParamSpec::new(p("attention.self.query.bias"), &[c], Zeros),
            ParamSpec::linear(p("attention.self.key.weight"), &[c, c], Normal(std)),
            ParamSpec::new(p("attention.self.key.bias"), &[c], Zeros),
            ParamSpec::linear(p("attention.self.value.weight"), &[c, c], Normal(std)),
            ParamSpec::new(p("attention.self.value.bias"), &[c], Zeros),
            ParamSpec::linear(p("attention.output.dense.weight"), &[c, c], Normal(std)),
            ParamSpec::new(p("attention.output.dense.bias"), &[c], Zeros),
            ParamSpec::new(p("attention.output.LayerNorm.weight"), &[c], Ones),
            ParamSpec::new(p("attention.output.LayerNorm.bias"), &[c], Zeros),
            ParamSpec::linear(p("intermediate.dense.weight"), &[f, c], Normal(std)),
            ParamSpec::new(p("intermediate.dense.bias"), &[f], Zeros),
            ParamSpec::linear(p("output.dense.weight"), &[c, f], Normal(std)),
            ParamSpec::new(p("output.dense.bias"), &[c], Zeros),
            ParamSpec::new(p("output.LayerNorm.weight"), &[c], Ones),
            ParamSpec::new(p("output.LayerNorm.bias"), &[c], Zeros),
        ]);
    }
    s.extend([
        ParamSpec::linear(
            "cls.predictions.transform.dense.weight",
            &[c, c],
            Normal(std),
        ),
        ParamSpec::new("cls.predictions.transform.dense.bias", &[c], Zeros),
        ParamSpec::new("cls.predictions.transform.LayerNorm.weight", &[c], Ones),
        ParamSpec::new("cls.predictions.transform.LayerNorm.bias", &[c], Zeros),
        ParamSpec::new("cls.predictions.bias", &[v], Zeros),
    ]);
    if !cfg.tie_embeddings {
        s.push(ParamSpec::linear(
            "cls.predictions.decoder.weight",
            &[v, c],
            Normal(std),
        ));
    }
    s
}

struct Dense {
    w: Tensor, // (out, in)
    b: Tensor, // (out)
}

struct Norm {
    w: Tensor, // (C)
    b: Tensor, // (C)
}

impl Dense {
    fn detached(&self) -> Self {
        Self {
            w: self.w.detach(),
            b: self.b.detach(),
        }
    }
}

impl Norm {
    fn detached(&self) -> Self {
        Self {
            w: self.w.detach(),
            b: self.b.detach(),
        }
    }
}

struct Layer {
    q: Dense,
    k: Dense,
    v: Dense,
    attn_out: Dense,
    attn_norm: Norm,
    inter: Dense,
    out: Dense,
    out_norm: Norm,
}

impl Layer {
    /// The same weights without their variables: a layer run on these records no graph.
    fn detached(&self) -> Self {
        Self {
            q: self.q.detached(),
            k: self.k.detached(),
            v: self.v.detached(),
            attn_out: self.attn_out.detached(),
            attn_norm: self.attn_norm.detached(),
            inter: self.inter.detached(),
            out: self.out.detached(),
            out_norm: self.out_norm.detached(),
        }
    }
}

pub struct Bert {
    cfg: ModelConfig,
    ops: Ops,
    /// `layers` detached: a checkpointed layer's forward (`model::segments`).
    untracked: Vec<Layer>,
    word: Tensor,               // (V, C)
    pos: Tensor,                // (T_max, C)
    token_type: Option<Tensor>, // (types, C)
    emb_norm: Norm,
    layers: Vec<Layer>,
    head_dense: Dense,
    head_norm: Norm,
    decoder: Tensor,      // (V, C): the word embedding when tied
    decoder_bias: Tensor, // (V)
}

impl Bert {
    pub fn load(cfg: &ModelConfig, st: &ParamStore, variant: &Variant) -> Result<Self> {
        let dense = |p: &str| -> Result<Dense> {
            Ok(Dense {
                w: st.get(&format!("{p}.weight"))?,
                b: st.get(&format!("{p}.bias"))?,
            })
        };
        let norm = |p: &str| -> Result<Norm> {
            Ok(Norm {
                w: st.get(&format!("{p}.weight"))?,
                b: st.get(&format!("{p}.bias"))?,
            })
        };
        let layers = (0..cfg.n_layers)
            .map(|i| {
                let p = |n: &str| format!("bert.encoder.layer.{i}.{n}");
                Ok(Layer {
                    q: dense(&p("attention.self.query"))?,
                    k: dense(&p("attention.self.key"))?,
                    v: dense(&p("attention.self.value"))?,
                    attn_out: dense(&p("attention.output.dense"))?,
                    attn_norm: norm(&p("attention.output.LayerNorm"))?,
                    inter: dense(&p("intermediate.dense"))?,
                    out: dense(&p("output.dense"))?,
                    out_norm: norm(&p("output.LayerNorm"))?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let word = st.get("bert.embeddings.word_embeddings.weight")?;
        let token_type = if cfg.type_vocab_size > 0 {
            Some(st.get("bert.embeddings.token_type_embeddings.weight")?)
        } else {
            None
        };
        let decoder = if cfg.tie_embeddings {
            word.clone()
        } else {
            st.get("cls.predictions.decoder.weight")?
        };
        Ok(Self {
            cfg: cfg.clone(),
            ops: Ops::new(variant),
            untracked: layers.iter().map(Layer::detached).collect(),
            pos: st.get("bert.embeddings.position_embeddings.weight")?,
            word,
            token_type,
            emb_norm: norm("bert.embeddings.LayerNorm")?,
            layers,
            head_dense: dense("cls.predictions.transform.dense")?,
            head_norm: norm("cls.predictions.transform.LayerNorm")?,
            decoder,
            decoder_bias: st.get("cls.predictions.bias")?,
        })
    }

    /// ids (B, T) u32, every token of type 0 → masked-LM logits (B, T, V). `cut` sees the
    /// hidden states after the embeddings and after every layer.
    pub fn forward<'m>(
        &'m self,
        ids: &Tensor,
        cut: crate::model::segments::Cut<'_, 'm>,
    ) -> Result<Tensor> {
        let (b, t) = ids.dims2()?;
        let (c, eps) = (self.cfg.d_model, self.cfg.norm_eps);
        crate::instrument::scope::enter(crate::instrument::scope::EMBEDDING_ID);
        let pos = Tensor::arange(0u32, t as u32, ids.device())?; // (T)
        let mut x = embedding(&self.word, &ids.flatten_all()?)?.reshape((b, t, c))?; // (B, T, C)
        x = x.broadcast_add(&embedding(&self.pos, &pos)?)?; // (B, T, C)
        if let Some(tt) = &self.token_type {
            x = x.broadcast_add(&tt.get(0)?)?; // (B, T, C)
        }
        let ops = &self.ops;
        let mut x = cut.cut(ops.layer_norm(&x, &self.emb_norm.w, &self.emb_norm.b, eps)?)?; // (B, T, C)
        for i in 0..self.layers.len() {
            x = cut.block(&x, Box::new(move |x, track| self.layer(i, track, x)))?;
        }
        crate::instrument::scope::enter(crate::instrument::scope::HEAD_ID);
        let h = linear(&x, &self.head_dense.w, Some(&self.head_dense.b))?.gelu_erf()?; // (B, T, C)
        let h = ops.layer_norm(&h, &self.head_norm.w, &self.head_norm.b, eps)?; // (B, T, C)
        linear(&h, &self.decoder, Some(&self.decoder_bias)) // (B, T, V)
    }

    /// Layer `i`: x (B, T, C) → (B, T, C), on the variables (`track`) or their detached copies.
    fn layer(&self, i: usize, track: bool, x: &Tensor) -> Result<Tensor> {
        let l = if track {
            &self.layers[i]
        } else {
            &self.untracked[i]
        };
        let (eps, ops) = (self.cfg.norm_eps, &self.ops);
        let s = (x + self.attention(i, l, x)?)?; // (B, T, C)
        scope::enter(scope::norms_id(i));
        let x = ops.layer_norm(&s, &l.attn_norm.w, &l.attn_norm.b, eps)?; // (B, T, C)
        drop(s);
        let s = (&x + self.mlp(i, l, &x)?)?; // (B, T, C)
        scope::enter(scope::norms_id(i));
        ops.layer_norm(&s, &l.out_norm.w, &l.out_norm.b, eps) // (B, T, C)
    }

    /// Layer `i`'s self-attention to its output projection → (B, T, C). A function of its own
    /// so that its temporaries are freed before the MLP runs (inference keeps no graph).
    fn attention(&self, i: usize, l: &Layer, x: &Tensor) -> Result<Tensor> {
        scope::enter(scope::attention_id(i));
        let (b, t, _) = x.dims3()?;
        let (nh, hd) = (self.cfg.n_heads, self.cfg.head_dim());
        let heads = |d: &Dense| -> Result<Tensor> {
            linear(x, &d.w, Some(&d.b))?
                .reshape((b, t, nh, hd))?
                .transpose(1, 2) // (B, H, T, D), a view: the kernel reads it in place
        };
        let (q, k, v) = (heads(&l.q)?, heads(&l.k)?, heads(&l.v)?);
        let y = self.ops.attention_split(&q, &k, &v, false, None)?; // (B, T, C)
        linear(&y, &l.attn_out.w, Some(&l.attn_out.b)) // (B, T, C)
    }

    /// Layer `i`'s feed-forward → (B, T, C).
    fn mlp(&self, i: usize, l: &Layer, x: &Tensor) -> Result<Tensor> {
        scope::enter(scope::mlp_id(i));
        let h = linear(x, &l.inter.w, Some(&l.inter.b))?.gelu_erf()?; // (B, T, F)
        linear(&h, &l.out.w, Some(&l.out.b)) // (B, T, C)
    }
}
