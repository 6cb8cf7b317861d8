//! The three model families and the loss, built on the shape-only [`Sim`] op for op as
//! `src/model/{gpt2,llama,bert,ops}.rs` build them on candle — same views, same copies, same
//! order. A change to a model's forward must be mirrored here (`tests/estimate.rs` catches a
//! drift: the prediction stops matching the measurement).
//! Shape vocabulary: B batch, T length, N = B·T, C d_model, H heads, KV kv heads, D head dim,
//! F d_ff, V vocab.

use super::backward::Recompute;
use super::ops::{
    append, attention, attention_kernel, causal_mask, conv1d, drop_all, embedding, gelu, kernel_as,
    layer_norm, linear, naive_attention, rms_norm, rope, swiglu,
};
use super::sim::{Bin, Fused, Id, Sim, Un};
use crate::instrument::scope;
use crate::model::config::{Family, ModelConfig};
use std::collections::{HashMap, HashSet};

/// One parameter as the estimator creates it: name, shape, and whether the engine's store keeps
/// it transposed in memory (`ParamSpec::stored_transposed`).
pub struct ParamSlot {
    pub name: String,
    pub shape: Vec<usize>,
    pub transposed: bool,
}

/// Parameters by checkpoint name, in `param_specs` order.
pub struct Params {
    pub ids: Vec<Id>,
    by_name: HashMap<String, Id>,
}

impl Params {
    /// Creates every parameter (as a `Var` when `trainable`); a weight the engine's store keeps
    /// transposed in memory is a non-contiguous leaf.
    pub fn create(sim: &mut Sim, specs: &[ParamSlot], dtype: u64, trainable: bool) -> Self {
        let mut ids = Vec::with_capacity(specs.len());
        let mut by_name = HashMap::new();
        for p in specs {
            let id = if trainable {
                sim.var(&p.shape, dtype)
            } else {
                sim.leaf(&p.shape, dtype)
            };
            if p.transposed {
                sim.nodes[id].contiguous = false;
            }
            ids.push(id);
            by_name.insert(p.name.clone(), id);
        }
        Self { ids, by_name }
    }

    /// Mixed precision's working copy: every parameter cast to `dtype`, in the engine's order
    /// (by name). As `ParamStore::cast`: a linear weight's cast is detached and its f32 master
    /// recorded in `sim.masters` (the kernel sinks the gradient there); the others are recorded
    /// (backward casts their gradients to the f32 master variables).
    pub fn cast(&self, sim: &mut Sim, dtype: u64, linear: &HashSet<String>) -> Self {
        let mut names: Vec<&String> = self.by_name.keys().collect();
        names.sort();
        let mut map = HashMap::new();
        let mut by_name = HashMap::new();
        for n in names {
            let id = self.by_name[n];
            let c = if linear.contains(n) {
                let d = sim.detach(id);
                let c = sim.to_dtype(d, dtype);
                sim.release(d);
                sim.masters.insert(c, id);
                c
            } else {
                sim.to_dtype(id, dtype)
            };
            map.insert(id, c);
            by_name.insert(n.clone(), c);
        }
        let ids = self.ids.iter().map(|i| map[i]).collect();
        Self { ids, by_name }
    }

    fn get(&self, name: &str) -> Id {
        *self.by_name.get(name).unwrap_or_else(|| {
            panic!("estimate: no parameter {name} (param_specs and the builder disagree)")
        })
    }
}

const GPT2_BLOCK: [&str; 12] = [
    "ln_1.weight",
    "ln_1.bias",
    "attn.c_attn.weight",
    "attn.c_attn.bias",
    "attn.c_proj.weight",
    "attn.c_proj.bias",
    "ln_2.weight",
    "ln_2.bias",
    "mlp.c_fc.weight",
    "mlp.c_fc.bias",
    "mlp.c_proj.weight",
    "mlp.c_proj.bias",
];

const LLAMA_BLOCK: [&str; 9] = [
    "input_layernorm.weight",
    "self_attn.q_proj.weight",
    "self_attn.k_proj.weight",
    "self_attn.v_proj.weight",
    "self_attn.o_proj.weight",
    "post_attention_layernorm.weight",
    "mlp.gate_proj.weight",
    "mlp.up_proj.weight",
    "mlp.down_proj.weight",
];

const BERT_BLOCK: [&str; 16] = [
    "attention.self.query.weight",
    "attention.self.query.bias",
    "attention.self.key.weight",
    "attention.self.key.bias",
    "attention.self.value.weight",
    "attention.self.value.bias",
    "attention.output.dense.weight",
    "attention.output.dense.bias",
    "attention.output.LayerNorm.weight",
    "attention.output.LayerNorm.bias",
    "intermediate.dense.weight",
    "intermediate.dense.bias",
    "output.dense.weight",
    "output.dense.bias",
    "output.LayerNorm.weight",
    "output.LayerNorm.bias",
];

/// A model's tensors, built once, replayed per forward.
pub struct Built<'a> {
    pub cfg: &'a ModelConfig,
    pub dtype: u64,
    /// What-if: every block's forward runs without recording and is recomputed in backward.
    pub checkpoint: bool,
    /// What-if: candle's op-by-op attention, which keeps the (B, H, T, S) scores and
    /// probabilities (memscope's engine runs `kernels::attention`).
    pub naive: bool,
}

/// A model with its parameters, for recomputing a checkpointed block in backward.
pub struct WithParams<'a, 'b>(pub &'a Built<'b>, pub &'a Params);

impl Recompute for WithParams<'_, '_> {
    fn block(&self, sim: &mut Sim, layer: usize, x: Id) -> Id {
        let (m, p) = (self.0, self.1);
        let t = sim.shape(x)[1];
        // The mask and the rotary tables are rebuilt for the recomputation (small).
        let mask = m.mask(sim, t, 0);
        let rope = (m.cfg.family == Family::Llama).then(|| {
            let hd = m.cfg.head_dim();
            (sim.leaf(&[t, hd], m.dtype), sim.leaf(&[t, hd], m.dtype))
        });
        let y = m.block(sim, p, layer, x, mask, rope, None, 0);
        for t in mask
            .into_iter()
            .chain(rope.into_iter().flat_map(|(c, s)| [c, s]))
        {
            sim.release(t);
        }
        y
    }
}

impl Built<'_> {
    /// The additive causal mask (T, S) the naive what-if builds; the kernel needs none.
    fn mask(&self, sim: &mut Sim, t: usize, offset: usize) -> Option<Id> {
        (self.naive && t > 1 && self.cfg.family != Family::Bert)
            .then(|| causal_mask(sim, t, offset, self.dtype))
    }

    /// ids (B, T) → logits (B, T, V). `kv`: per layer (k, v) cache tensors (B, KV, S_max, D) and
    /// the number of positions already cached, for generate.
    pub fn forward(
        &self,
        sim: &mut Sim,
        p: &Params,
        ids: Id,
        kv: Option<(&[(Id, Id)], usize)>,
    ) -> Id {
        match self.cfg.family {
            Family::Gpt2 => self.gpt2(sim, p, ids, kv),
            Family::Llama => self.llama(sim, p, ids, kv),
            Family::Bert => self.bert(sim, p, ids),
        }
    }

    fn gpt2(&self, sim: &mut Sim, p: &Params, ids: Id, kv: Option<(&[(Id, Id)], usize)>) -> Id {
        let cfg = self.cfg;
        let (b, t) = (sim.shape(ids)[0], sim.shape(ids)[1]);
        let c = cfg.d_model;
        let offset = kv.map_or(0, |k| k.1);
        sim.enter(scope::EMBEDDING);
        sim.kind = "embeddings";
        let (wte, wpe) = (p.get("wte.weight"), p.get("wpe.weight"));
        let pos = sim.ints(&[t]); // (T)
        let flat = sim.reshape(ids, &[b * t]);
        let e = embedding(sim, wte, flat); // (N, C)
        let tok = sim.reshape(e, &[b, t, c]); // (B, T, C)
        let pe = embedding(sim, wpe, pos); // (T, C)
        let mut x = sim.broadcast(Bin::Add, tok, pe); // (B, T, C)
        drop_all(sim, &[pos, flat, e, tok, pe]);
        let mask = self.mask(sim, t, offset);
        x = sim.cut(x); // model::segments: the residual stream after the embedding
        for i in 0..cfg.n_layers {
            let cache = kv.map(|k| k.0[i]);
            let y = self.layer(sim, p, i, x, mask, None, cache, offset);
            sim.release(x);
            x = sim.cut(y);
        }
        sim.enter(scope::HEAD);
        sim.kind = "norms";
        let (lw, lb) = (p.get("ln_f.weight"), p.get("ln_f.bias"));
        let lm = if cfg.tie_embeddings {
            wte
        } else {
            p.get("lm_head.weight")
        };
        let h = layer_norm(sim, x, lw, lb); // (B, T, C)
        sim.kind = "logits";
        let out = linear(sim, h, lm, None); // (B, T, V)
        drop_all(sim, &[x, h]);
        if let Some(m) = mask {
            sim.release(m);
        }
        out
    }

    /// Block `i` of the model, checkpointed when asked and recording: under no-grad, with
    /// only the input kept for backward.
    #[allow(clippy::too_many_arguments)]
    fn layer(
        &self,
        sim: &mut Sim,
        p: &Params,
        i: usize,
        x: Id,
        mask: Option<Id>,
        rope: Option<(Id, Id)>,
        cache: Option<(Id, Id)>,
        offset: usize,
    ) -> Id {
        if !(self.checkpoint && sim.nodes[x].tracked) {
            return self.block(sim, p, i, x, mask, rope, cache, offset);
        }
        sim.no_grad = true;
        let y = self.block(sim, p, i, x, mask, rope, cache, offset);
        sim.no_grad = false;
        let out = sim.checkpoint(y, x, i);
        sim.release(y);
        out
    }

    /// Block `i` of the model's family, as `src/model` runs it.
    #[allow(clippy::too_many_arguments)]
    fn block(
        &self,
        sim: &mut Sim,
        p: &Params,
        i: usize,
        x: Id,
        mask: Option<Id>,
        rope: Option<(Id, Id)>,
        cache: Option<(Id, Id)>,
        offset: usize,
    ) -> Id {
        let (names, prefix): (&[&str], String) = match self.cfg.family {
            Family::Gpt2 => (&GPT2_BLOCK, format!("h.{i}.")),
            Family::Llama => (&LLAMA_BLOCK, format!("model.layers.{i}.")),
            Family::Bert => (&BERT_BLOCK, format!("bert.encoder.layer.{i}.")),
        };
        let w: Vec<Id> = names
            .iter()
            .map(|n| p.get(&format!("{prefix}{n}")))
            .collect();
        match self.cfg.family {
            Family::Gpt2 => self.gpt2_block(sim, i, &w, x, mask, cache, offset),
            Family::Llama => {
                let rope = rope.expect("llama blocks get the rotary tables");
                self.llama_block(sim, i, &w, x, rope, mask, (cache, offset))
            }
            Family::Bert => self.bert_layer(sim, i, &w, x),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn gpt2_block(
        &self,
        sim: &mut Sim,
        i: usize,
        w: &[Id],
        x: Id,
        mask: Option<Id>,
        cache: Option<(Id, Id)>,
        offset: usize,
    ) -> Id {
        let cfg = self.cfg;
        let (b, t) = (sim.shape(x)[0], sim.shape(x)[1]);
        let (nh, hd) = (cfg.n_heads, cfg.head_dim());
        sim.enter(&scope::norms(i));
        sim.kind = "norms";
        let ln = layer_norm(sim, x, w[0], w[1]); // (B, T, C)
        sim.enter(&scope::attention(i));
        sim.kind = "attention input (qkv)";
        let qkv = conv1d(sim, ln, w[2], w[3]); // (B, T, 3C)
        let y2 = if cache.is_none() && !self.naive {
            // The kernel reads Q, K and V in place in the packed projection.
            attention_kernel(sim, &[qkv], (b, nh, t, t, hd), true) // (B, T, C)
        } else {
            let r = sim.reshape(qkv, &[b, t, 3, nh, hd]);
            let pm = sim.permute(r, &[2, 0, 3, 1, 4]); // (3, B, H, T, D)
            let parts: Vec<Id> = (0..3).map(|j| sim.get(pm, j)).collect(); // q, k, v views
            let (k, v) = append(sim, cache, parts[1], parts[2], offset); // (B, H, S, D)
            let y2 = attention(sim, self.naive, parts[0], k, v, mask); // (B, T, C)
            drop_all(sim, &[r, pm, k, v]);
            drop_all(sim, &parts);
            y2
        };
        sim.kind = "attention output";
        let pr3 = conv1d(sim, y2, w[4], w[5]); // (B, T, C)
                                               // The engine's attention half returns here: its temporaries are freed.
        drop_all(sim, &[ln, qkv, y2]);
        sim.kind = "residual";
        let x1 = sim.binary(Bin::Add, x, pr3); // (B, T, C)
        sim.release(pr3);
        sim.enter(&scope::norms(i));
        sim.kind = "norms";
        let ln2 = layer_norm(sim, x1, w[6], w[7]); // (B, T, C)
        sim.enter(&scope::mlp(i));
        sim.kind = "mlp";
        let fc = conv1d(sim, ln2, w[8], w[9]); // (B, T, F)
        let g = gelu(sim, fc); // (B, T, F)
        sim.release(fc);
        let pj3 = conv1d(sim, g, w[10], w[11]); // (B, T, C)
        drop_all(sim, &[ln2, g]);
        sim.kind = "residual";
        let out = sim.binary(Bin::Add, x1, pj3); // (B, T, C)
        drop_all(sim, &[x1, pj3]);
        out
    }

    fn llama(&self, sim: &mut Sim, p: &Params, ids: Id, kv: Option<(&[(Id, Id)], usize)>) -> Id {
        let cfg = self.cfg;
        let (b, t) = (sim.shape(ids)[0], sim.shape(ids)[1]);
        let c = cfg.d_model;
        let hd = cfg.head_dim();
        let offset = kv.map_or(0, |k| k.1);
        sim.enter(scope::EMBEDDING);
        sim.kind = "embeddings";
        let embed = p.get("model.embed_tokens.weight");
        let flat = sim.reshape(ids, &[b * t]);
        let e = embedding(sim, embed, flat);
        let mut x = sim.reshape(e, &[b, t, c]); // (B, T, C)
        drop_all(sim, &[flat, e]);
        let cos = sim.leaf(&[t, hd], self.dtype); // (T, D)
        let sin = sim.leaf(&[t, hd], self.dtype);
        let mask = self.mask(sim, t, offset);
        x = sim.cut(x); // model::segments: the residual stream after the embedding
        for i in 0..cfg.n_layers {
            let cache = kv.map(|k| k.0[i]);
            let y = self.layer(sim, p, i, x, mask, Some((cos, sin)), cache, offset);
            sim.release(x);
            x = sim.cut(y);
        }
        sim.enter(scope::HEAD);
        sim.kind = "norms";
        let nw = p.get("model.norm.weight");
        let lm = if cfg.tie_embeddings {
            embed
        } else {
            p.get("lm_head.weight")
        };
        let h = rms_norm(sim, x, nw); // (B, T, C)
        sim.kind = "logits";
        let out = linear(sim, h, lm, None); // (B, T, V)
        drop_all(sim, &[x, h, cos, sin]);
        if let Some(m) = mask {
            sim.release(m);
        }
        out
    }

    #[allow(clippy::too_many_arguments)]
    fn llama_block(
        &self,
        sim: &mut Sim,
        i: usize,
        w: &[Id],
        x: Id,
        (cos, sin): (Id, Id),
        mask: Option<Id>,
        (cache, offset): (Option<(Id, Id)>, usize),
    ) -> Id {
        let cfg = self.cfg;
        let (b, t) = (sim.shape(x)[0], sim.shape(x)[1]);
        let (nh, nkv, hd) = (cfg.n_heads, cfg.n_kv_heads, cfg.head_dim());
        sim.enter(&scope::norms(i));
        sim.kind = "norms";
        let h = rms_norm(sim, x, w[0]); // (B, T, C)
        sim.enter(&scope::attention(i));
        sim.kind = "attention input (qkv)";
        let heads = |sim: &mut Sim, wt: Id, n: usize| {
            let l = linear(sim, h, wt, None);
            let r = sim.reshape(l, &[b, t, n, hd]);
            let tr = sim.transpose(r, 1, 2); // (B, n, T, D)
            drop_all(sim, &[l, r]);
            tr
        };
        // Q and K stay (B, T, n, D) for the fused RoPE kernel (it writes (B, n, T, D)); the
        // op-by-op path rotates a transposed contiguous copy with candle's ops.
        let fused_rope = !sim.unfused;
        let rot = |sim: &mut Sim, wt: Id, n: usize| -> (Id, Id, Id) {
            if fused_rope {
                let l = linear(sim, h, wt, None);
                let r = sim.reshape(l, &[b, t, n, hd]); // (B, T, n, D)
                sim.release(l);
                let y = kernel_as(sim, Fused::Rope, &[r, cos, sin], &[b, n, t, hd]);
                (r, sim.hold(r), y)
            } else {
                let x0 = heads(sim, wt, n);
                let xc = sim.contiguous(x0);
                let y = rope(sim, xc, cos, sin);
                (x0, xc, y)
            }
        };
        let (q0, qc, q) = rot(sim, w[1], nh); // (B, H, T, D)
        let (k0, kc, k) = rot(sim, w[2], nkv); // (B, KV, T, D)
        let v0 = heads(sim, w[3], nkv);
        let (k2, v2) = append(sim, cache, k, v0, offset); // (B, KV, S, D)
        let y2 = attention(sim, self.naive, q, k2, v2, mask); // (B, T, C)
        sim.kind = "attention output";
        let o3 = linear(sim, y2, w[4], None); // (B, T, C)
        sim.kind = "residual";
        // The engine's attention half returns here: its temporaries are freed.
        drop_all(sim, &[h, q0, k0, v0, qc, q, kc, k, k2, v2, y2]);
        let x1 = sim.binary(Bin::Add, x, o3);
        sim.release(o3);
        sim.enter(&scope::norms(i));
        sim.kind = "norms";
        let h2 = rms_norm(sim, x1, w[5]); // (B, T, C)
        sim.enter(&scope::mlp(i));
        sim.kind = "mlp";
        let gl = linear(sim, h2, w[6], None); // (B, T, F)
        let u = linear(sim, h2, w[7], None); // (B, T, F)
        let gu = swiglu(sim, gl, u); // (B, T, F)
        let d3 = linear(sim, gu, w[8], None); // (B, T, C)
        drop_all(sim, &[h2, gl, u, gu]);
        sim.kind = "residual";
        let out = sim.binary(Bin::Add, x1, d3);
        drop_all(sim, &[x1, d3]);
        out
    }

    fn bert(&self, sim: &mut Sim, p: &Params, ids: Id) -> Id {
        let cfg = self.cfg;
        let (b, t) = (sim.shape(ids)[0], sim.shape(ids)[1]);
        let c = cfg.d_model;
        sim.enter(scope::EMBEDDING);
        sim.kind = "embeddings";
        // param_specs order: word, position, token type (when present), embedding LayerNorm.
        let e = |n: &str| p.get(&format!("bert.embeddings.{n}"));
        let word = e("word_embeddings.weight");
        let posw = e("position_embeddings.weight");
        let tt = (cfg.type_vocab_size > 0).then(|| e("token_type_embeddings.weight"));
        let (ew, eb) = (e("LayerNorm.weight"), e("LayerNorm.bias"));
        let pos = sim.ints(&[t]);
        let flat = sim.reshape(ids, &[b * t]);
        let e = embedding(sim, word, flat);
        let x0 = sim.reshape(e, &[b, t, c]);
        let pe = embedding(sim, posw, pos);
        let mut x = sim.broadcast(Bin::Add, x0, pe);
        drop_all(sim, &[pos, flat, e, x0, pe]);
        if let Some(tt) = tt {
            let t0 = sim.get(tt, 0); // (C)
            let y = sim.broadcast(Bin::Add, x, t0);
            drop_all(sim, &[t0, x]);
            x = y;
        }
        let mut x = {
            let y = layer_norm(sim, x, ew, eb);
            sim.release(x);
            y
        };
        x = sim.cut(x); // model::segments: the hidden states after the embeddings
        for i in 0..cfg.n_layers {
            let y = self.layer(sim, p, i, x, None, None, None, 0);
            sim.release(x);
            x = sim.cut(y);
        }
        sim.enter(scope::HEAD);
        sim.kind = "logits";
        let c_ = |n: &str| p.get(&format!("cls.predictions.{n}"));
        let (dw, db) = (c_("transform.dense.weight"), c_("transform.dense.bias"));
        let (nw, nb) = (
            c_("transform.LayerNorm.weight"),
            c_("transform.LayerNorm.bias"),
        );
        let dec = if cfg.tie_embeddings {
            word
        } else {
            c_("decoder.weight")
        };
        let dec_b = c_("bias");
        let d = linear(sim, x, dw, Some(db)); // (B, T, C)
        let g = sim.unary(Un::GeluErf, d);
        let n = layer_norm(sim, g, nw, nb);
        let out = linear(sim, n, dec, Some(dec_b)); // (B, T, V)
        drop_all(sim, &[x, d, g, n]);
        out
    }

    fn bert_layer(&self, sim: &mut Sim, i: usize, w: &[Id], x: Id) -> Id {
        let cfg = self.cfg;
        let (b, t) = (sim.shape(x)[0], sim.shape(x)[1]);
        let (nh, hd) = (cfg.n_heads, cfg.head_dim());
        sim.enter(&scope::attention(i));
        sim.kind = "attention input (qkv)";
        let heads = |sim: &mut Sim, wi: usize| {
            let l = linear(sim, x, w[wi], Some(w[wi + 1])); // (B, T, C)
            let r = sim.reshape(l, &[b, t, nh, hd]);
            let tr = sim.transpose(r, 1, 2); // (B, H, T, D), a view
            drop_all(sim, &[l, r]);
            tr
        };
        let q = heads(sim, 0);
        let k = heads(sim, 2);
        let v = heads(sim, 4);
        let y2 = if self.naive {
            naive_attention(sim, q, k, v, None)
        } else {
            attention_kernel(sim, &[q, k, v], (b, nh, t, t, hd), false)
        };
        sim.kind = "attention output";
        let o3 = linear(sim, y2, w[6], Some(w[7])); // (B, T, C)
        drop_all(sim, &[q, k, v, y2]); // the engine's attention half returns here
        sim.kind = "residual";
        let s = sim.binary(Bin::Add, x, o3);
        sim.release(o3);
        sim.enter(&scope::norms(i));
        sim.kind = "norms";
        let x1 = layer_norm(sim, s, w[8], w[9]);
        sim.release(s);
        sim.enter(&scope::mlp(i));
        sim.kind = "mlp";
        let it = linear(sim, x1, w[10], Some(w[11])); // (B, T, F)
        let g = sim.unary(Un::GeluErf, it);
        sim.release(it);
        let o3 = linear(sim, g, w[12], Some(w[13])); // (B, T, C)
        sim.release(g);
        sim.kind = "residual";
        let s2 = sim.binary(Bin::Add, x1, o3);
        sim.release(o3);
        sim.enter(&scope::norms(i));
        sim.kind = "norms";
        let y = layer_norm(sim, s2, w[14], w[15]);
        drop_all(sim, &[x1, s2]);
        y
    }
}
