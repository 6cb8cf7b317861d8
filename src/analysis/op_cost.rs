//! FLOPs and minimum bytes of every op the engine runs in a step, per (module, op kind, pass),
//! from the shapes alone. The op kinds and module names are the ones the engine's op timer
//! records (`instrument::op_timer`, `instrument::scope`), so the two join one to one.
//!
//! Conventions, stated once:
//! - A matmul (m, k)·(k, n) is 2·m·n·k FLOPs; a linear layer's backward makes dx and dW:
//!   2× its forward (the bias gradient, n·m adds, is not counted).
//! - Attention counts the query–key pairs it computes (causal: pair (t, s) with s ≤ offset + t):
//!   forward QKᵀ and PV, 4·D per pair; backward recomputes the scores and makes dV, dP, dQ,
//!   dK: 10·D per pair. Softmax's exponentials are not counted as FLOPs.
//! - Elementwise ops and norms count a fixed number of FLOPs per element (see each below); they
//!   are small beside the matmuls and exist so intensity is finite.
//! - Minimum bytes: each input read once and each output written once (the tensors the op takes
//!   and returns; the attention kernel's saved log-sum-exp row counts as an output), at the
//!   dtype's size; ids and targets are u32. Caches, re-reads and temporaries are not counted: real
//!   traffic is at least this.

/// The shapes of one model, as plain numbers (no candle, no config types).
#[derive(Clone, Debug, PartialEq)]
pub struct Arch {
    /// LLaMA layout (RMSNorm, separate Q/K/V without bias, RoPE, SwiGLU MLP); else GPT-2's
    /// (LayerNorm, packed QKV with bias, learned positions, GELU MLP).
    pub llama: bool,
    pub n_layers: usize,
    pub d_model: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub d_ff: usize,
    pub vocab: usize,
    /// Bytes per element of the parameters and activations.
    pub elem_bytes: f64,
    /// Every trainable parameter (the optimizer updates each once per step).
    pub params: u64,
}

/// One op's cost in one pass, summed over its calls.
#[derive(Clone, Debug, PartialEq)]
pub struct OpCost {
    pub module: String,
    pub kind: &'static str,
    /// "forward" or "backward".
    pub pass: &'static str,
    pub flops: f64,
    pub bytes: f64,
}

pub const EMBEDDING: &str = "embedding";
pub const HEAD: &str = "lm head + loss";
pub const OUTSIDE: &str = "outside the forward (backward, optimizer)";

fn attention_module(i: usize) -> String {
    format!("layer {i} attention")
}
fn mlp_module(i: usize) -> String {
    format!("layer {i} mlp")
}
fn norms_module(i: usize) -> String {
    format!("layer {i} norms")
}

/// FLOPs of a matmul (m, k)·(k, n).
pub fn matmul_flops(m: f64, n: f64, k: f64) -> f64 {
    2.0 * m * n * k
}

/// A linear layer x (N, I) → (N, O), with or without bias: (forward, backward) as (flops, bytes).
pub fn linear(n: f64, i: f64, o: f64, bias: bool, e: f64) -> [(f64, f64); 2] {
    let b = if bias { o } else { 0.0 };
    let fwd = (matmul_flops(n, o, i), e * (n * i + i * o + b + n * o));
    // Reads x, W, dy; writes dx, dW (and db).
    let bwd = (
        2.0 * matmul_flops(n, o, i),
        e * (2.0 * n * i + 2.0 * i * o + n * o + b),
    );
    [fwd, bwd]
}

/// Query–key pairs per (batch, head) of T queries after `offset` cached keys.
pub fn attention_pairs(t: f64, offset: f64, causal: bool) -> f64 {
    if causal {
        t * offset + t * (t + 1.0) / 2.0
    } else {
        t * (offset + t)
    }
}

/// Attention over B×H heads of dim D, T queries, S = offset + T keys from KV heads.
pub fn attention(a: &Arch, b: f64, t: f64, offset: f64) -> [(f64, f64); 2] {
    let (h, kv) = (a.n_heads as f64, a.n_kv_heads as f64);
    let d = (a.d_model / a.n_heads) as f64;
    let s = offset + t;
    let pairs = b * h * attention_pairs(t, offset, true);
    let (q, kvs, y, lse) = (b * h * t * d, b * kv * s * d, b * t * h * d, b * h * t);
    let fwd = (4.0 * d * pairs, a.elem_bytes * (q + 2.0 * kvs + y + lse));
    // Reads q, k, v, y, dy, lse; writes dq, dk, dv.
    let bwd = (
        10.0 * d * pairs,
        a.elem_bytes * (2.0 * q + 4.0 * kvs + 2.0 * y + lse),
    );
    [fwd, bwd]
}

/// A norm over rows of C: LayerNorm (8 FLOPs per element forward, 14 backward; weight and
/// bias) or RMSNorm (4 and 8; weight only). Forward reads x, w (b), writes y; backward reads
/// x, w, dy and writes dx, dw (db).
pub fn norm(rows: f64, c: f64, layer_norm: bool, e: f64) -> [(f64, f64); 2] {
    let p = if layer_norm { 2.0 } else { 1.0 };
    let (ff, fb) = if layer_norm { (8.0, 14.0) } else { (4.0, 8.0) };
    [
        (ff * rows * c, e * (2.0 * rows * c + p * c)),
        (fb * rows * c, e * (3.0 * rows * c + 2.0 * p * c)),
    ]
}

/// An elementwise op with `inputs` tensors of `n` elements → one output, `f` FLOPs per element.
pub fn elementwise(n: f64, inputs: f64, f: f64, e: f64) -> (f64, f64) {
    (f * n, e * n * (inputs + 1.0))
}

/// Adds `c` (forward, and backward when `bwd`) to the (module, kind) entries, creating them.
fn acc(v: &mut Vec<OpCost>, module: &str, kind: &'static str, c: [(f64, f64); 2], bwd: bool) {
    let passes: &[(&'static str, usize)] = if bwd {
        &[("forward", 0), ("backward", 1)]
    } else {
        &[("forward", 0)]
    };
    for &(pass, p) in passes {
        match v
            .iter_mut()
            .find(|o| o.module == module && o.kind == kind && o.pass == pass)
        {
            Some(o) => {
                o.flops += c[p].0;
                o.bytes += c[p].1;
            }
            None => v.push(OpCost {
                module: module.into(),
                kind,
                pass,
                flops: c[p].0,
                bytes: c[p].1,
            }),
        }
    }
}

/// A forward-only op (its backward runs in candle's autograd, untimed and uncounted).
fn fwd_only(c: (f64, f64)) -> [(f64, f64); 2] {
    [c, (0.0, 0.0)]
}

/// Every op of one forward over B × T tokens after `offset` cached positions (and, with
/// `train`, the loss and every backward), as the engine runs them. `kv_cache`: the forward
/// appends K and V to a cache (generation).
pub fn forward_ops(
    a: &Arch,
    b: usize,
    t: usize,
    offset: usize,
    train: bool,
    kv_cache: bool,
) -> Vec<OpCost> {
    let (bf, tf, of) = (b as f64, t as f64, offset as f64);
    let e = a.elem_bytes;
    let (c, f, v) = (a.d_model as f64, a.d_ff as f64, a.vocab as f64);
    let d = c / a.n_heads as f64;
    let kvd = a.n_kv_heads as f64 * d;
    let r = bf * tf; // rows
    let ln = !a.llama;
    let nk = if a.llama { "rms norm" } else { "layer norm" };
    let mut ops = Vec::new();
    // Embedding: gather rows (reads ids and rows, writes rows); backward scatters them back.
    let gather = |rows: f64| [(0.0, 4.0 * rows + 2.0 * e * rows * c); 2];
    acc(&mut ops, EMBEDDING, "embedding", gather(r), train);
    if !a.llama {
        // Learned positions: a second gather of T rows, then a broadcast add.
        acc(&mut ops, EMBEDDING, "embedding", gather(tf), train);
        let add = elementwise(r * c, 2.0, 1.0, e);
        let add = (add.0, add.1 - e * (r * c - tf * c)); // the position table is (T, C)
        acc(&mut ops, EMBEDDING, "position add", fwd_only(add), train);
    }
    let residual = fwd_only(elementwise(r * c, 2.0, 1.0, e));
    for i in 0..a.n_layers {
        let (att, mlp, nm) = (attention_module(i), mlp_module(i), norms_module(i));
        acc(&mut ops, &nm, nk, norm(r, c, ln, e), train);
        if a.llama {
            let (q, k) = (linear(r, c, c, false, e), linear(r, c, kvd, false, e));
            acc(&mut ops, &att, "linear", q, train);
            acc(&mut ops, &att, "linear", k, train);
            acc(&mut ops, &att, "linear", k, train);
            // RoPE on q and k: x·cos + rotate(x)·sin, 3 FLOPs per element; reads x, cos, sin.
            // Backward (the inverse rotation of dy, the fused kernel's) costs the same.
            let n = r * (c + kvd);
            let rope = (3.0 * n, e * (2.0 * n + 2.0 * 2.0 * tf * d));
            acc(&mut ops, &att, "rope", [rope, rope], train);
        } else {
            acc(
                &mut ops,
                &att,
                "linear",
                linear(r, c, 3.0 * c, true, e),
                train,
            );
        }
        if kv_cache {
            // K and V of T positions read and written into the cache.
            let kv = (0.0, e * 4.0 * bf * tf * kvd);
            acc(&mut ops, &att, "kv cache append", fwd_only(kv), train);
        }
        acc(&mut ops, &att, "attention", attention(a, bf, tf, of), train);
        acc(&mut ops, &att, "linear", linear(r, c, c, ln, e), train);
        acc(&mut ops, &att, "residual add", residual, train);
        acc(&mut ops, &nm, nk, norm(r, c, ln, e), train);
        if a.llama {
            let up = linear(r, c, f, false, e);
            acc(&mut ops, &mlp, "linear", up, train);
            acc(&mut ops, &mlp, "linear", up, train);
            // silu(g)·u: ~6 FLOPs per element; backward reads g, u, dy and writes dg, du.
            let sw = [
                elementwise(r * f, 2.0, 6.0, e),
                (12.0 * r * f, e * 5.0 * r * f),
            ];
            acc(&mut ops, &mlp, "swiglu", sw, train);
            acc(&mut ops, &mlp, "linear", linear(r, f, c, false, e), train);
        } else {
            acc(&mut ops, &mlp, "linear", linear(r, c, f, true, e), train);
            // GELU (tanh): ~10 FLOPs per element forward, 16 backward (reads x, dy; writes dx).
            let g = [
                elementwise(r * f, 1.0, 10.0, e),
                (16.0 * r * f, e * 3.0 * r * f),
            ];
            acc(&mut ops, &mlp, "gelu", g, train);
            acc(&mut ops, &mlp, "linear", linear(r, f, c, true, e), train);
        }
        acc(&mut ops, &mlp, "residual add", residual, train);
    }
    acc(&mut ops, HEAD, nk, norm(r, c, ln, e), train);
    acc(&mut ops, HEAD, "linear", linear(r, c, v, false, e), train);
    if train {
        // Softmax + cross-entropy: ~4 FLOPs per logit each way; forward reads logits and
        // targets, backward reads them and writes the logits' gradient.
        let ce = [
            (4.0 * r * v, e * r * v + 4.0 * r + e),
            (4.0 * r * v, 2.0 * e * r * v + 4.0 * r),
        ];
        acc(&mut ops, HEAD, "cross-entropy", ce, true);
    }
    // Forward-only ops got a zero backward entry: drop those.
    ops.retain(|o| o.pass == "forward" || o.flops > 0.0 || o.bytes > 0.0);
    ops
}

fn cost(module: &str, kind: &'static str, pass: &'static str, c: (f64, f64)) -> OpCost {
    OpCost {
        module: module.into(),
        kind,
        pass,
        flops: c.0,
        bytes: c.1,
    }
}

/// AdamW over every parameter: ~12 FLOPs each; reads p, g, m, v and writes p, m, v.
pub fn optimizer(a: &Arch) -> OpCost {
    let p = a.params as f64;
    cost(
        OUTSIDE,
        "adamw",
        "forward",
        (12.0 * p, 7.0 * a.elem_bytes * p),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_matmul_is_2mnk_and_its_backward_twice_that() {
        assert_eq!(matmul_flops(3.0, 5.0, 4.0), 120.0);
        let [f, b] = linear(3.0, 4.0, 5.0, true, 4.0);
        assert_eq!(f.0, 120.0);
        assert_eq!(b.0, 240.0);
        // Forward reads x (12), W (20), b (5) and writes y (15): 52 elements of 4 bytes.
        assert_eq!(f.1, 4.0 * 52.0);
    }

    #[test]
    fn norm_and_elementwise_bytes_by_hand() {
        // LayerNorm over 2 rows of 4: reads x (8) + w (4) + b (4), writes y (8) = 24 f32.
        let [f, b] = norm(2.0, 4.0, true, 4.0);
        assert_eq!(f.1, 96.0);
        // Backward reads x, dy (16) and w, b (8), writes dx (8): 3·8 + 4·4 = 40 f32.
        assert_eq!(b.1, 160.0);
        // RMSNorm: x (8) + w (4) + y (8) = 20 f32.
        assert_eq!(norm(2.0, 4.0, false, 4.0)[0].1, 80.0);
        // A residual add of 8 elements: two read, one written, one FLOP each.
        assert_eq!(elementwise(8.0, 2.0, 1.0, 4.0), (8.0, 96.0));
    }

    #[test]
    fn attention_counts_causal_pairs() {
        assert_eq!(attention_pairs(4.0, 0.0, true), 10.0);
        assert_eq!(attention_pairs(1.0, 9.0, true), 10.0);
        assert_eq!(attention_pairs(4.0, 0.0, false), 16.0);
        let a = Arch {
            llama: false,
            n_layers: 1,
            d_model: 8,
            n_heads: 2,
            n_kv_heads: 2,
            d_ff: 32,
            vocab: 10,
            elem_bytes: 4.0,
            params: 0,
        };
        // B 1, T 4: 2 heads × 10 pairs × D 4 × 4 FLOPs forward, × 10 backward.
        let [f, b] = attention(&a, 1.0, 4.0, 0.0);
        assert_eq!(f.0, 320.0);
        assert_eq!(b.0, 800.0);
    }
}
