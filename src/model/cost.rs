//! Exact analytic parameter counts (checked arithmetic); the home of memscope's analytic cost estimates.
//!
//! Every count here is derived from the architecture's tensor shapes, term by term, with the same
//! names the checkpoints use (`c_attn`, `q_proj`, `intermediate.dense`, ...). All arithmetic is
//! checked: a configuration whose count does not fit in a `u64` yields `None` (or an [`Overflow`]
//! naming the product that overflowed), never a wrapped number.
//!
//! Shape vocabulary: C = d_model, F = d_ff, V = vocab_size, T = max_seq_len, L = n_layers,
//! hd = C / n_heads, KV = n_kv_heads * hd.

use std::fmt;

use super::config::{Family, ModelConfig};

/// A product or sum in the parameter count that does not fit in a `u64`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Overflow {
    /// The overflowing expression with its values, e.g. `vocab_size × d_model = 50257 × 2^64-1`.
    pub product: String,
}

impl fmt::Display for Overflow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} overflows u64", self.product)
    }
}

/// Exact number of parameters of `cfg`, or `None` if it does not fit in a `u64`.
pub fn param_count(cfg: &ModelConfig) -> Option<u64> {
    checked_param_count(cfg).ok()
}

/// Bytes taken by the parameters of `cfg` stored as `dtype_bytes`-byte elements, or `None` on overflow.
pub fn param_bytes(cfg: &ModelConfig, dtype_bytes: u64) -> Option<u64> {
    checked_param_bytes(cfg, dtype_bytes).ok()
}

/// As [`param_bytes`], but an overflow names the product that overflowed.
pub fn checked_param_bytes(cfg: &ModelConfig, dtype_bytes: u64) -> Result<u64, Overflow> {
    let n = checked_param_count(cfg)?;
    mul(&[("parameter count", n), ("bytes per element", dtype_bytes)])
}

/// As [`param_count`], but an overflow names the product that overflowed.
///
/// Does not require a validated config: zero heads give head_dim 0 instead of a division panic.
/// A model transformers built: the count it built, exact.
pub fn checked_param_count(cfg: &ModelConfig) -> Result<u64, Overflow> {
    if let Some(b) = cfg.built() {
        return Ok(b.parameters);
    }
    module_params(cfg)?.total(cfg.n_layers as u64)
}

/// Parameters per module of `memscope profile`'s tree: the model's two ends, and one layer's
/// attention, MLP and norms (every layer is the same).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ModuleParams {
    /// Token embeddings, plus GPT-2's and BERT's position (and BERT's token-type and LayerNorm).
    pub embedding: u64,
    /// One layer's attention projections with their biases.
    pub attention: u64,
    /// One layer's MLP.
    pub mlp: u64,
    /// One layer's norms.
    pub norms: u64,
    /// The final norm and the LM head's own weights (none when tied to the token embeddings);
    /// BERT: the masked-LM head.
    pub head: u64,
}

impl ModuleParams {
    /// Every parameter of an `n_layers`-layer model.
    pub fn total(&self, n_layers: u64) -> Result<u64, Overflow> {
        let per_layer = add(
            &[self.attention, self.mlp, self.norms],
            "parameters per layer",
        )?;
        let layers = mul(&[("n_layers", n_layers), ("parameters per layer", per_layer)])?;
        add(&[self.embedding, layers, self.head], "total parameters")
    }
}

/// [`ModuleParams`] of `cfg`; an overflow names the product that overflowed.
pub fn module_params(cfg: &ModelConfig) -> Result<ModuleParams, Overflow> {
    let c = cfg.d_model as u64;
    let f = cfg.d_ff as u64;
    let v = cfg.vocab_size as u64;
    let t = cfg.max_seq_len as u64;
    match cfg.family {
        Family::Gpt2 => gpt2(c, f, v, t, cfg.tie_embeddings),
        Family::Llama => {
            let hd = c.checked_div(cfg.n_heads as u64).unwrap_or(0);
            let kv = mul(&[("n_kv_heads", cfg.n_kv_heads as u64), ("head_dim", hd)])?;
            llama(c, f, v, kv, cfg.tie_embeddings)
        }
        Family::Bert => {
            let type_vocab = cfg.type_vocab_size as u64;
            bert(c, f, v, t, type_vocab, cfg.tie_embeddings)
        }
    }
}

/// GPT-2: learned token and position embeddings, pre-LN blocks with biased linears, final LN.
fn gpt2(c: u64, f: u64, v: u64, t: u64, tied: bool) -> Result<ModuleParams, Overflow> {
    let wte = mul(&[("vocab_size", v), ("d_model", c)])?; // (V, C)
    let wpe = mul(&[("max_seq_len", t), ("d_model", c)])?; // (T, C)
    let ln = mul(&[("2", 2), ("d_model", c)])?; // weight + bias, (C,) each
    let c_attn = add(
        &[
            mul(&[("d_model", c), ("3", 3), ("d_model", c)])?,
            mul(&[("3", 3), ("d_model", c)])?,
        ],
        "c_attn",
    )?; // (C, 3C) + (3C,)
    let attn_proj = add(&[mul(&[("d_model", c), ("d_model", c)])?, c], "attn.c_proj")?; // (C, C) + (C,)
    let c_fc = add(&[mul(&[("d_model", c), ("d_ff", f)])?, f], "mlp.c_fc")?; // (C, F) + (F,)
    let mlp_proj = add(&[mul(&[("d_ff", f), ("d_model", c)])?, c], "mlp.c_proj")?; // (F, C) + (C,)
    let head = if tied { 0 } else { wte }; // lm_head (V, C), shared with wte when tied
    Ok(ModuleParams {
        embedding: add(&[wte, wpe], "embeddings")?,
        attention: add(&[c_attn, attn_proj], "attention")?,
        mlp: add(&[c_fc, mlp_proj], "MLP")?,
        norms: add(&[ln, ln], "norms")?,                // ln_1, ln_2
        head: add(&[ln, head], "final norm and head")?, // ln_f + lm_head
    })
}

/// Llama: token embedding, pre-RMSNorm blocks with bias-free GQA attention and SwiGLU MLP.
fn llama(c: u64, f: u64, v: u64, kv: u64, tied: bool) -> Result<ModuleParams, Overflow> {
    let embed = mul(&[("vocab_size", v), ("d_model", c)])?; // (V, C)
    let norm = c; // RMSNorm weight (C,)
    let q = mul(&[("d_model", c), ("d_model", c)])?; // (C, C)
    let k = mul(&[("d_model", c), ("n_kv_heads × head_dim", kv)])?; // (C, KV)
    let o = q; // (C, C)
    let ffn = mul(&[("d_model", c), ("d_ff", f)])?; // gate, up (C, F); down (F, C)
    let head = if tied { 0 } else { embed }; // lm_head (V, C)
    Ok(ModuleParams {
        embedding: embed,
        attention: add(&[q, k, k, o], "attention")?, // q, k, v, o
        mlp: add(&[ffn, ffn, ffn], "MLP")?,
        norms: add(&[norm, norm], "norms")?, // input and post-attention RMSNorm
        head: add(&[norm, head], "final norm and head")?,
    })
}

/// BERT (and DistilBERT with type_vocab 0): post-LN encoder plus the masked-LM head.
fn bert(
    c: u64,
    f: u64,
    v: u64,
    t: u64,
    type_vocab: u64,
    tied: bool,
) -> Result<ModuleParams, Overflow> {
    let word = mul(&[("vocab_size", v), ("d_model", c)])?; // (V, C)
    let position = mul(&[("max_seq_len", t), ("d_model", c)])?; // (T, C)
    let token_type = mul(&[("type_vocab_size", type_vocab), ("d_model", c)])?; // (type_vocab, C)
    let ln = mul(&[("2", 2), ("d_model", c)])?; // LayerNorm weight + bias
    let dense_cc = add(
        &[mul(&[("d_model", c), ("d_model", c)])?, c],
        "dense (C, C)",
    )?; // (C, C) + (C,)
    let qkvo = mul(&[("4", 4), ("d_model × d_model + d_model", dense_cc)])?; // q, k, v, attention.output
    let intermediate = add(
        &[mul(&[("d_model", c), ("d_ff", f)])?, f],
        "intermediate.dense",
    )?; // (C, F) + (F,)
    let output = add(&[mul(&[("d_ff", f), ("d_model", c)])?, c], "output.dense")?; // (F, C) + (C,)
    let decoder_weight = if tied { 0 } else { word }; // (V, C), tied to word embeddings
    let mlm_head = add(&[dense_cc, ln, v, decoder_weight], "MLM head")?; // transform + LN + decoder bias (V,)
    Ok(ModuleParams {
        embedding: add(&[word, position, token_type, ln], "embeddings")?,
        attention: qkvo,
        mlp: add(&[intermediate, output], "MLP")?,
        norms: add(&[ln, ln], "norms")?,
        head: mlm_head,
    })
}

/// Checked product of named factors; the error names every factor and its value.
fn mul(factors: &[(&str, u64)]) -> Result<u64, Overflow> {
    factors
        .iter()
        .try_fold(1u64, |acc, &(_, x)| acc.checked_mul(x))
        .ok_or_else(|| {
            let names: Vec<&str> = factors.iter().map(|&(name, _)| name).collect();
            let values: Vec<String> = factors.iter().map(|&(_, x)| x.to_string()).collect();
            Overflow {
                product: format!("{} = {}", names.join(" × "), values.join(" × ")),
            }
        })
}

/// Checked sum of the parts of `what`.
fn add(parts: &[u64], what: &str) -> Result<u64, Overflow> {
    parts
        .iter()
        .try_fold(0u64, |acc, &x| acc.checked_add(x))
        .ok_or_else(|| Overflow {
            product: format!("the sum of the {what}"),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn count(name: &str) -> u64 {
        let cfg = ModelConfig::preset(name).unwrap_or_else(|| panic!("no preset {name}"));
        param_count(&cfg).unwrap()
    }

    #[test]
    fn gpt2_preset_counts_match_hugging_face() {
        assert_eq!(count("gpt2-small"), 124_439_808);
        assert_eq!(count("gpt2-medium"), 354_823_168);
        assert_eq!(count("gpt2-large"), 774_030_080);
        assert_eq!(count("gpt2-xl"), 1_557_611_200);
    }

    #[test]
    fn cs336_preset_counts() {
        assert_eq!(count("cs336-small"), 128_625_408);
        assert_eq!(count("cs336-medium"), 423_183_360);
        assert_eq!(count("cs336-large"), 969_411_840);
        // xl: 2·V·C = 2·10000·1600 = 32,000,000; per layer 2C + 4C² + 3CF = 3,200 + 10,240,000
        // + 30,720,000 = 40,963,200; × 48 = 1,966,233,600; + final norm 1,600 → 1,998,235,200.
        assert_eq!(count("cs336-xl"), 1_998_235_200);
        // 2.7b: 2·10000·2560 = 51,200,000; per layer 5,120 + 26,214,400 + 78,643,200 = 104,862,720;
        // × 32 = 3,355,607,040; + 2,560 → 3,406,809,600.
        assert_eq!(count("cs336-2.7b"), 3_406_809_600);
    }

    #[test]
    fn tinyllama_count_matches_hugging_face() {
        assert_eq!(count("tinyllama-1.1b"), 1_100_048_384);
    }

    #[test]
    fn bert_counts_match_hugging_face_masked_lm() {
        // BertForMaskedLM (bert-base-uncased) as reported by transformers: 109,514,298.
        // embeddings 23,440,896 + 393,216 + 1,536 + 1,536 = 23,837,184; layers 12 × 7,087,872
        // = 85,054,464; MLM head 590,592 + 1,536 + 30,522 = 622,650.
        assert_eq!(count("bert-base"), 109_514_298);
        // DistilBertForMaskedLM: 66,985,530 = 23,835,648 + 6 × 7,087,872 + 622,650.
        assert_eq!(count("distilbert"), 66_985_530);
    }

    #[test]
    fn tiny_preset_counts() {
        // tiny-gpt2: wte 128,000 + wpe 32,768 + 4 × 198,272 + ln_f 256 = 954,112.
        // per layer: 256 + (49,152 + 384) + (16,384 + 128) + 256 + (65,536 + 512) + (65,536 + 128).
        assert_eq!(count("tiny-gpt2"), 954_112);
        // tiny-llama: hd 32, KV 64; per layer 128 + 16,384 + 8,192 + 8,192 + 16,384 + 128
        // + 3 × 45,056 = 184,576; × 4 = 738,304; + embed 128,000 + norm 128 + head 128,000 = 994,432.
        assert_eq!(count("tiny-llama"), 994_432);
        // tiny-bert: embeddings 128,000 + 32,768 + 256 + 256 = 161,280; per layer 4 × 16,512
        // + 256 + 66,048 + 65,664 + 256 = 198,272; × 4 = 793,088; MLM head 16,512 + 256 + 1,000
        // = 17,768 → 972,136.
        assert_eq!(count("tiny-bert"), 972_136);
    }

    #[test]
    fn untying_adds_the_head() {
        for name in ["tiny-gpt2", "tiny-llama", "tiny-bert"] {
            let mut cfg = ModelConfig::preset(name).unwrap();
            let before = param_count(&cfg).unwrap();
            cfg.tie_embeddings = !cfg.tie_embeddings;
            let after = param_count(&cfg).unwrap();
            let head = (cfg.vocab_size * cfg.d_model) as u64;
            assert_eq!(before.abs_diff(after), head, "{name}");
        }
    }

    #[test]
    fn param_bytes_scales_and_overflows() {
        let cfg = ModelConfig::preset("gpt2-small").unwrap();
        assert_eq!(param_bytes(&cfg, 4), Some(4 * 124_439_808));
        assert_eq!(param_bytes(&cfg, 2), Some(2 * 124_439_808));
        assert_eq!(param_bytes(&cfg, u64::MAX), None);
        let err = checked_param_bytes(&cfg, u64::MAX).unwrap_err();
        assert!(
            err.product
                .starts_with("parameter count × bytes per element"),
            "{err}"
        );
    }

    #[test]
    fn overflow_names_the_product() {
        let mut cfg = ModelConfig::preset("tiny-llama").unwrap();
        cfg.vocab_size = usize::MAX;
        assert_eq!(param_count(&cfg), None);
        let err = checked_param_count(&cfg).unwrap_err();
        assert!(err.product.starts_with("vocab_size × d_model = "), "{err}");
        assert!(err.to_string().ends_with("overflows u64"), "{err}");

        let mut cfg = ModelConfig::preset("tiny-gpt2").unwrap();
        cfg.n_layers = usize::MAX;
        let err = checked_param_count(&cfg).unwrap_err();
        assert!(
            err.product.starts_with("n_layers × parameters per layer"),
            "{err}"
        );
    }

    #[test]
    fn zero_heads_do_not_panic() {
        let mut cfg = ModelConfig::preset("tiny-llama").unwrap();
        cfg.n_heads = 0;
        assert!(param_count(&cfg).is_some());
    }
}
