//! The ops the model families are built from, on the shape-only [`Sim`], each as its candle
//! or fused-kernel counterpart allocates: norms, GELU, linear, embedding, the causal mask,
//! softmax, attention (op by op or the fused kernel), the KV-cache append, RoPE, repeat_kv and
//! the loss. Shape vocabulary: B batch, H heads, T query length, S key length, D head dim,
//! N rows, C features, V vocab.

use super::sim::{Bin, Fused, Id, Sim, Un};
use crate::kernels::attention::BLOCK;
use crate::kernels::{dot_bf16, product};

pub fn drop_all(sim: &mut Sim, ts: &[Id]) {
    for &t in ts {
        sim.release(t);
    }
}

/// Runs `f` in f32 when `x` is a half type (`ops::in_f32`).
pub fn in_f32(sim: &mut Sim, x: Id, f: impl FnOnce(&mut Sim, Id) -> Id) -> Id {
    let dt = sim.nodes[x].dtype;
    if dt >= 4 {
        return f(sim, x);
    }
    let x32 = sim.to_dtype(x, 4);
    let y = f(sim, x32);
    let out = sim.to_dtype(y, dt);
    drop_all(sim, &[x32, y]);
    out
}

/// The fused kernels take contiguous inputs (a copy when they are not).
pub fn kernel(sim: &mut Sim, kind: Fused, args: &[Id]) -> Id {
    let shape = sim.shape(args[0]).to_vec();
    kernel_as(sim, kind, args, &shape)
}

/// As [`kernel`], for a kernel whose output has a shape of its own.
pub fn kernel_as(sim: &mut Sim, kind: Fused, args: &[Id], shape: &[usize]) -> Id {
    let cs: Vec<Id> = args.iter().map(|&a| sim.contiguous(a)).collect();
    let out = sim.fused(kind, &cs, cs[0], shape);
    drop_all(sim, &cs);
    out
}

pub fn layer_norm(sim: &mut Sim, x: Id, w: Id, b: Id) -> Id {
    if !sim.unfused {
        return kernel(sim, Fused::LayerNorm, &[x, w, b]);
    }
    // `kernels::unfused::layer_norm`: (x − mean) / sqrt(var + eps), then · w + b.
    let last = sim.shape(x).len() - 1;
    let y = in_f32(sim, x, |sim, x| {
        let mean = sim.mean_keepdim(x, last);
        let xc = sim.broadcast(Bin::Sub, x, mean);
        let sq = sim.unary(Un::Sqr, xc);
        let var = sim.mean_keepdim(sq, last);
        let ve = sim.affine(var, 1.0);
        let sd = sim.unary(Un::Sqrt, ve);
        let out = sim.broadcast(Bin::Div, xc, sd);
        drop_all(sim, &[mean, xc, sq, var, ve, sd]);
        out
    });
    let a = sim.broadcast(Bin::Mul, y, w);
    let out = sim.broadcast(Bin::Add, a, b);
    drop_all(sim, &[y, a]);
    out
}

pub fn rms_norm(sim: &mut Sim, x: Id, w: Id) -> Id {
    if !sim.unfused {
        return kernel(sim, Fused::RmsNorm, &[x, w]);
    }
    // `kernels::unfused::rms_norm`: x / sqrt(mean(x²) + eps), then · w.
    let last = sim.shape(x).len() - 1;
    let y = in_f32(sim, x, |sim, x| {
        let sq = sim.unary(Un::Sqr, x);
        let ms = sim.mean_keepdim(sq, last);
        let me = sim.affine(ms, 1.0);
        let sd = sim.unary(Un::Sqrt, me);
        let out = sim.broadcast(Bin::Div, x, sd);
        drop_all(sim, &[sq, ms, me, sd]);
        out
    });
    let out = sim.broadcast(Bin::Mul, y, w);
    sim.release(y);
    out
}

pub fn gelu(sim: &mut Sim, x: Id) -> Id {
    if sim.unfused {
        return sim.unary(Un::Gelu, x);
    }
    kernel(sim, Fused::Gelu, &[x])
}

/// silu(gate) · up: memscope's kernel, or candle's two ops.
pub fn swiglu(sim: &mut Sim, gate: Id, up: Id) -> Id {
    if !sim.unfused {
        return kernel(sim, Fused::SwiGlu, &[gate, up]);
    }
    let s = sim.unary(Un::Silu, gate);
    let out = sim.binary(Bin::Mul, s, up);
    sim.release(s);
    out
}

/// `x @ wᵀ + b` (nn.Linear layout): `kernels::linear` in f32, candle's ops otherwise.
pub fn linear(sim: &mut Sim, x: Id, w: Id, b: Option<Id>) -> Id {
    if matches!(sim.nodes[x].dtype, 2 | 4) {
        return linear_kernel(sim, x, w, b, true);
    }
    let wt = sim.t(w);
    let y = sim.matmul(x, wt);
    sim.release(wt);
    match b {
        Some(b) => {
            let out = sim.broadcast(Bin::Add, y, b);
            sim.release(y);
            out
        }
        None => y,
    }
}

/// `kernels::embedding` in f32 (table (V, C), ids (N) → (N, C)), candle's `embedding`
/// (index_select) otherwise.
pub fn embedding(sim: &mut Sim, table: Id, ids: Id) -> Id {
    if sim.nodes[table].dtype != 4 {
        return sim.index_select(table, ids);
    }
    let shape = [sim.shape(ids)[0], sim.shape(table)[1]];
    sim.fused(Fused::Embedding, &[table, ids], table, &shape)
}

/// `kernels::linear` over x (N, I) → (N, O), W (O, I) when `out_in`, else (I, O): keeps
/// nothing but its inputs; backward makes dx, dW and db once each.
pub fn linear_kernel(sim: &mut Sim, x: Id, w: Id, b: Option<Id>, out_in: bool) -> Id {
    let (n, i) = sim.rows(x); // x (…, I) read as (N, I)
    let o = sim.shape(w)[if out_in { 0 } else { 1 }];
    let mut out = sim.shape(x).to_vec(); // (…, O)
    *out.last_mut().expect("linear input has dims") = o;
    sim.add_matmul_flops(1, n, i, o);
    let inputs: Vec<Id> = [x, w].into_iter().chain(b).collect();
    if sim.nodes[x].dtype != 4 && sim.bf16_dot {
        // bf16 on the dot-product kernel: the bias widened, y made in f32 from x and W as they
        // are (through the packing buffers), then narrowed.
        let (y32, b32) = ((n * o * 4) as u64, b.map_or(0, |_| o as u64 * 4));
        sim.scratch(b32 + y32 + dot_bf16::scratch_bytes((n, o, i)));
        let y = sim.fused(Fused::Linear { out_in }, &inputs, x, &out);
        sim.scratch(b32 + y32);
        return y;
    }
    if sim.nodes[x].dtype != 4 {
        // bf16 / f16: x and the bias widened, y made in f32 through the weight's f32 tiles,
        // then narrowed (the widened x is freed first).
        let (x32, y32, b32) = (
            (n * i * 4) as u64,
            (n * o * 4) as u64,
            b.map_or(0, |_| o as u64 * 4),
        );
        sim.scratch(b32 + x32 + y32 + product::widening_scratch_bytes((n, o, i)));
        let y = sim.fused(Fused::Linear { out_in }, &inputs, x, &out);
        sim.scratch(b32 + y32);
        return y;
    }
    let y = sim.fused(Fused::Linear { out_in }, &inputs, x, &out);
    // y = x · Wᵀ reads a row-major (O, I) weight column-major: copied tile by tile. An
    // inference store's weight is stored transposed or in panels (non-contiguous) and read in
    // place.
    if out_in && sim.nodes[w].contiguous {
        sim.scratch(product::scratch_bytes((n, o, i), 1, i));
    }
    y
}

/// `x @ w + b` (GPT-2 Conv1D layout).
pub fn conv1d(sim: &mut Sim, x: Id, w: Id, b: Id) -> Id {
    if matches!(sim.nodes[x].dtype, 2 | 4) {
        return linear_kernel(sim, x, w, Some(b), false);
    }
    let y = sim.matmul(x, w);
    let out = sim.broadcast(Bin::Add, y, b);
    sim.release(y);
    out
}

pub fn causal_mask(sim: &mut Sim, t: usize, offset: usize, dtype: u64) -> Id {
    sim.kind = "embeddings";
    let m = sim.leaf(&[t, offset + t], 4); // built in f32
    let out = sim.to_dtype(m, dtype);
    sim.release(m);
    out
}

pub fn softmax_last(sim: &mut Sim, x: Id) -> Id {
    let last = sim.shape(x).len() - 1;
    let mx = sim.max_keepdim(x, last);
    let md = sim.detach(mx);
    let sh = sim.broadcast(Bin::Sub, x, md);
    let e = sim.unary(Un::Exp, sh);
    let s = sim.sum_keepdim(e, &[last]);
    let out = sim.broadcast(Bin::Div, e, s);
    drop_all(sim, &[mx, md, sh, e, s]);
    out
}

/// q (B, H, T, D), k and v (B, KV, S, D), any layout → (N, C): memscope's kernel, or the
/// naive what-if (contiguous copies, K/V heads repeated, scores and probabilities kept).
pub fn attention(sim: &mut Sim, naive: bool, q: Id, k: Id, v: Id, mask: Option<Id>) -> Id {
    let (b, h, t, d) = (
        sim.shape(q)[0],
        sim.shape(q)[1],
        sim.shape(q)[2],
        sim.shape(q)[3],
    );
    let s = sim.shape(k)[2];
    if !naive {
        return attention_kernel(sim, &[q, k, v], (b, h, t, s, d), true); // (B, T, C)
    }
    let rep = h / sim.shape(k)[1];
    let cs: Vec<Id> = [q, k, v].iter().map(|&x| sim.contiguous(x)).collect();
    let kr = repeat_kv(sim, cs[1], rep); // (B, H, S, D)
    let vr = repeat_kv(sim, cs[2], rep);
    let y = naive_attention(sim, cs[0], kr, vr, mask);
    drop_all(sim, &[kr, vr]);
    drop_all(sim, &cs);
    y
}

/// candle's op-by-op attention (`kernels::unfused::attention`) then the (N, C) layout:
/// q (B, H, T, D), k and v (B, H, S, D) contiguous.
pub fn naive_attention(sim: &mut Sim, q: Id, k: Id, v: Id, mask: Option<Id>) -> Id {
    let before = sim.kind;
    let (b, h, t, d) = (
        sim.shape(q)[0],
        sim.shape(q)[1],
        sim.shape(q)[2],
        sim.shape(q)[3],
    );
    sim.kind = "scores + probabilities";
    let kt = sim.t(k);
    let s0 = sim.matmul(q, kt); // (B, H, T, S)
    let s1 = sim.affine(s0, 1.0);
    drop_all(sim, &[kt, s0]);
    let s2 = match mask {
        Some(m) => {
            let s = sim.broadcast(Bin::Add, s1, m);
            sim.release(s1);
            s
        }
        None => s1,
    };
    let probs = in_f32(sim, s2, softmax_last);
    sim.kind = "attention output";
    let y = sim.matmul(probs, v); // (B, H, T, D)
    let yt = sim.transpose(y, 1, 2);
    let y2 = sim.reshape(yt, &[b, t, h * d]); // (B, T, C), a copy
    drop_all(sim, &[s2, probs, y, yt]);
    sim.kind = before;
    y2
}

/// `kernels::attention` over `inputs` (a packed (B, T, 3C) projection, or q, k, v) of
/// `(B, H, T, S, D)` → (B, T, H·D), run in f32 for half types. It keeps its inputs and the row
/// log-sum-exp (B, H, T) f32; the mask is applied inside. Its per-thread (64, S) score blocks
/// are not counted (under 1 MiB per thread up to S = 2048).
pub fn attention_kernel(
    sim: &mut Sim,
    inputs: &[Id],
    (b, h, t, s, d): (usize, usize, usize, usize, usize),
    causal: bool,
) -> Id {
    let before = sim.kind;
    let dt = sim.nodes[inputs[0]].dtype;
    // bf16 / f16 views that cover their storage are read in their dtype, widened for the call
    // (with the f32 output they are the kernel's scratch); others get f32 copies the graph keeps.
    let in_place = dt >= 4 || inputs.iter().all(|&x| sim.dense(x));
    let mut xs: Vec<Id> = inputs
        .iter()
        .map(|&x| {
            if in_place {
                sim.hold(x)
            } else {
                sim.to_dtype(x, 4)
            }
        })
        .collect();
    if dt < 4 && in_place {
        let widened: u64 = inputs.iter().map(|&x| sim.elems(x) * 4).sum();
        sim.scratch(widened + (b * t * h * d) as u64 * 4);
    }
    sim.kind = "scores + probabilities";
    let lse = sim.leaf(&[b, h, t], 4);
    xs.push(lse);
    sim.kind = "attention output";
    let cols = attention_columns(t, s, causal);
    for _ in 0..2 {
        sim.add_matmul_flops((b * h) as u64, cols, d, 1); // QKᵀ, then PV
    }
    let y = sim.fused(Fused::Attention { causal }, &xs, xs[0], &[b, t, h * d]);
    drop_all(sim, &xs);
    let out = if dt >= 4 || in_place {
        y
    } else {
        let o = sim.to_dtype(y, dt);
        sim.release(y);
        o
    };
    sim.kind = before;
    out
}

/// Σ over the kernel's query blocks of rows × keys multiplied: T·S without a mask; with the
/// causal mask, each block of [`BLOCK`] rows stops at the last key its last row sees.
pub fn attention_columns(t: usize, s: usize, causal: bool) -> usize {
    (0..t)
        .step_by(BLOCK)
        .map(|r0| {
            let br = BLOCK.min(t - r0);
            br * if causal { s - t + r0 + br } else { s }
        })
        .sum()
}

/// The KV cache's `append`: copies k and v into the cache (through a contiguous copy when
/// they are views) and returns views of the filled prefix.
pub fn append(sim: &mut Sim, cache: Option<(Id, Id)>, k: Id, v: Id, offset: usize) -> (Id, Id) {
    match cache {
        None => (sim.hold(k), sim.hold(v)),
        Some((ck, cv)) => {
            let s = offset + sim.shape(k)[2];
            let filled = |sim: &mut Sim, c: Id, new: Id| {
                let staged = sim.contiguous(new);
                sim.release(staged);
                // The cache holds S_max positions; the prefix in use is offset + T of them.
                sim.narrow(c, 2, 0, s)
            };
            (filled(sim, ck, k), filled(sim, cv, v))
        }
    }
}

/// x·cos + rotate_half(x)·sin.
pub fn rope(sim: &mut Sim, x: Id, cos: Id, sin: Id) -> Id {
    let last = sim.shape(x).len() - 1;
    let half = sim.shape(x)[last] / 2;
    let x1 = sim.narrow(x, last, 0, half);
    let x2 = sim.narrow(x, last, half, half);
    let n2 = sim.unary(Un::Neg, x2);
    let rot = sim.cat(&[n2, x1], last);
    let a = sim.broadcast(Bin::Mul, x, cos);
    let b = sim.broadcast(Bin::Mul, rot, sin);
    let out = sim.binary(Bin::Add, a, b);
    drop_all(sim, &[x1, x2, n2, rot, a, b]);
    out
}

pub fn repeat_kv(sim: &mut Sim, x: Id, rep: usize) -> Id {
    if rep == 1 {
        return sim.hold(x);
    }
    let s = sim.shape(x).to_vec();
    let u = sim.unsqueeze(x, 2);
    let bc = sim.broadcast_as(u, &[s[0], s[1], rep, s[2], s[3]]);
    let out = sim.reshape(bc, &[s[0], s[1] * rep, s[2], s[3]]);
    drop_all(sim, &[u, bc]);
    out
}

/// `kernels::cross_entropy`: logits (N, V), targets (N) → f32 scalar.
pub fn cross_entropy(sim: &mut Sim, logits: Id, targets: Id) -> Id {
    sim.kind = "loss";
    if sim.unfused {
        return cross_entropy_unfused(sim, logits, targets);
    }
    let l = sim.contiguous(logits);
    // Each row's max + log Σ exp (N f32), kept by the op for backward.
    let shift = sim.leaf(&[sim.rows(l).0], 4);
    let loss = sim.fused_as(Fused::CrossEntropy, &[l, targets, shift], &[], 4);
    sim.release(shift);
    sim.release(l);
    loss
}

/// `kernels::unfused::cross_entropy`: logits (…, V) flattened to (N, V), targets to (N), → f32
/// scalar, op by op.
fn cross_entropy_unfused(sim: &mut Sim, logits: Id, targets: Id) -> Id {
    let (n, v) = sim.rows(logits);
    let (logits, targets) = (sim.reshape(logits, &[n, v]), sim.reshape(targets, &[n]));
    let l = sim.to_dtype(logits, 4); // (N, V)
    let mx = sim.max_keepdim(l, 1);
    let md = sim.detach(mx);
    let sh = sim.broadcast(Bin::Sub, l, md);
    let e = sim.unary(Un::Exp, sh);
    let s = sim.sum_keepdim(e, &[1]);
    let lse = sim.unary(Un::Log, s); // (N, 1)
    let tu = sim.unsqueeze(targets, 1);
    let picked = sim.gather(sh, tu, 1); // (N, 1)
    let d = sim.binary(Bin::Sub, lse, picked);
    let out = sim.mean_all(d);
    drop_all(
        sim,
        &[logits, targets, l, mx, md, sh, e, s, lse, tu, picked, d],
    );
    out
}
