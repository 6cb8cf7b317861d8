//! FLOPs and minimum bytes of one ATen op from the shapes it read and wrote (the torch trace's
//! op signatures), with `op_cost.rs`'s conventions and formulas: a matmul is 2·m·n·k, attention
//! 4·D FLOPs per query–key pair forward and 10·D backward (causal pairs counted as computed),
//! elementwise ops one FLOP per output element, minimum bytes each tensor read once and written
//! once (an in-place op reads and writes its tensors). Views move no bytes. A convolution is
//! 2 FLOPs per output element per weight it multiplies (`C_in/groups × kernel`); its backward
//! the same for each gradient it makes (the input's, the weight's). Pooling reads each input
//! element once. Elementwise, indexing, copying and reducing ops that memscope knows by name
//! ([`MEMORY_BOUND`]) are one FLOP per output element over their bytes; any other op is
//! `uncosted`: its bytes counted, no FLOPs, and named so in every table.

use super::op_cost::{attention_pairs, matmul_flops};
use crate::torch::estimate::TracedOp;

/// What kind of work an op is: the rows of the predicted-time table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    Matmul,
    Attention,
    Convolution,
    Pooling,
    Norm,
    Activation,
    Embedding,
    Loss,
    Optimizer,
    Elementwise,
    /// Views, detaches, metadata: dispatch only, no bytes.
    View,
    /// An op memscope has no formula for: its bytes read and written counted (its time predicted
    /// at memory speed), no FLOPs, and named as uncosted wherever it is shown — never folded
    /// into another kind.
    Uncosted,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Matmul => "matmul",
            Kind::Attention => "attention (SDPA)",
            Kind::Convolution => "convolution",
            Kind::Pooling => "pooling",
            Kind::Norm => "norm",
            Kind::Activation => "activation",
            Kind::Embedding => "embedding",
            Kind::Loss => "loss",
            Kind::Optimizer => "optimizer",
            Kind::Elementwise => "elementwise",
            Kind::View => "views and metadata",
            Kind::Uncosted => "uncosted (no formula)",
        }
    }
}

/// One op call's cost.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Cost {
    pub kind: Kind,
    pub flops: f64,
    pub bytes: f64,
    /// The product's shape (m, k, n) for a matmul (batched: m counts every batch's rows).
    pub mkn: Option<(f64, f64, f64)>,
}

pub fn elem_bytes(dtype: &str) -> f64 {
    match dtype {
        "f64" | "i64" => 8.0,
        "f32" | "i32" => 4.0,
        "bf16" | "f16" => 2.0,
        _ => 1.0,
    }
}

fn numel(shape: &[u64]) -> f64 {
    shape.iter().map(|&d| d as f64).product()
}

fn bytes_of(ts: &[(Vec<u64>, String)]) -> f64 {
    ts.iter().map(|(s, d)| numel(s) * elem_bytes(d)).sum()
}

/// Ops whose work is moving their bytes, by base name (an in-place variant's trailing `_`
/// dropped): ATen's pointwise arithmetic and comparisons, factories and copies, indexing and
/// concatenation, reductions, softmax, dropout.
#[rustfmt::skip] // packed: a list of names, one per line would run to a hundred lines
const MEMORY_BOUND: &[&str] = &[
    "add", "sub", "rsub", "mul", "div", "neg", "pow", "rsqrt", "sqrt", "exp", "exp2", "expm1",
    "log", "log1p", "log2", "cos", "sin", "abs", "sign", "reciprocal", "clamp", "clamp_min",
    "clamp_max", "maximum", "minimum", "where", "gt", "lt", "ge", "le", "eq", "ne", "floor",
    "ceil", "round", "trunc", "floor_divide", "remainder", "fmod", "lerp", "addcmul", "addcdiv",
    "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not", "logical_and", "logical_or",
    "logical_not", "masked_fill", "fill", "zero", "copy", "_to_copy", "clone", "contiguous",
    "tril", "triu", "zeros", "zeros_like", "ones", "ones_like", "full", "full_like", "new_zeros",
    "new_ones", "new_full", "new_empty", "scalar_tensor", "arange", "randint", "randn", "rand",
    "rand_like", "randn_like", "uniform", "normal", "bernoulli", "native_dropout",
    "native_dropout_backward", "cat", "stack", "constant_pad_nd", "slice_backward",
    "select_backward", "index", "index_put", "index_select", "index_add", "gather", "scatter",
    "scatter_add", "masked_select", "masked_scatter", "repeat", "expand_copy", "flip", "roll",
    "sort", "topk", "cumsum", "cumprod", "histc", "bincount", "sum", "mean", "amax", "amin", "max",
    "min", "argmax", "argmin", "var", "std", "var_mean", "prod", "any", "all",
    "linalg_vector_norm", "norm", "_softmax", "_safe_softmax", "_softmax_backward_data", "softmax",
];

/// Norms by a part of their name (`native_layer_norm_backward`, `_fused_rms_norm`).
const NORMS: &[&str] = &[
    "layer_norm",
    "rms_norm",
    "batch_norm",
    "group_norm",
    "instance_norm",
];

/// Activations by the start of their name (`gelu_backward`; ReLU's backward is `threshold_…`).
const ACTIVATIONS: &[&str] = &[
    "gelu",
    "tanh",
    "silu",
    "relu",
    "sigmoid",
    "softplus",
    "erf",
    "threshold",
];

const VIEWS: &[&str] = &[
    "view",
    "_unsafe_view",
    "t",
    "transpose",
    "permute",
    "detach",
    "alias",
    "slice",
    "select",
    "split",
    "split_with_sizes",
    "unsqueeze",
    "squeeze",
    "expand",
    "as_strided",
    "lift_fresh",
    "unbind",
    "chunk",
    "narrow",
    "_reshape_alias",
    "diagonal",
    "unfold",
    "empty",
    "empty_like",
    "empty_strided",
];

/// A mixture of experts' products (transformers' grouped_mm experts, `_grouped_mm(a, b, offs)`):
/// each row of the tokens × top-k rows meets one expert's matrix, whichever the router chose, so
/// the work does not depend on the routing. (S, K)(E, K, N) → (S, N) and its 3-D × 3-D and 3-D ×
/// 2-D forms: 2 FLOPs per output element per contracted element; the weight gradient
/// (K, S)(S, N) → (E, K, N): each of S's columns goes to one expert.
fn grouped_product(a: &[u64], b: &[u64], out: &[u64], io: f64) -> Cost {
    let last = |s: &[u64]| s.last().copied().unwrap_or(0) as f64;
    // As one product's (rows, contracted, columns), for the rate products of its shape reach.
    let mkn = match (a.len(), b.len()) {
        (2, 2) => (a.first().copied().unwrap_or(0) as f64, last(a), last(b)),
        _ => {
            let n = last(out);
            let rows = if n > 0.0 { numel(out) / n } else { 0.0 };
            (rows, last(a), n)
        }
    };
    Cost {
        kind: Kind::Matmul,
        flops: matmul_flops(mkn.0, mkn.2, mkn.1),
        bytes: io,
        mkn: Some(mkn),
    }
}

/// The cost of one call of `op`.
pub fn cost(op: &TracedOp) -> Cost {
    let name = op.op.trim_start_matches("aten.");
    let base = name.split('.').next().unwrap_or(name);
    let (ins, outs) = (&op.inputs, &op.outputs);
    let io = bytes_of(ins) + bytes_of(outs);
    let out_elems: f64 = outs.iter().map(|(s, _)| numel(s)).sum();
    let plain = |kind, flops_per_elem: f64| Cost {
        kind,
        flops: flops_per_elem * out_elems,
        bytes: io,
        mkn: None,
    };
    let dims = |i: usize| ins.get(i).map(|(s, _)| s.clone()).unwrap_or_default();
    match base {
        b if VIEWS.contains(&b) => Cost {
            kind: Kind::View,
            flops: 0.0,
            bytes: 0.0,
            mkn: None,
        },
        "mm" | "addmm" | "bmm" | "baddbmm" => {
            // mm (m,k)(k,n); addmm (bias, (m,k), (k,n)); bmm (b,m,k)(b,k,n).
            let (a, b) = if base.starts_with("add") || base == "baddbmm" {
                (dims(1), dims(2))
            } else {
                (dims(0), dims(1))
            };
            let batch: f64 = a.iter().rev().skip(2).map(|&d| d as f64).product();
            let (m, k) = match a.as_slice() {
                [.., m, k] => (*m as f64, *k as f64),
                _ => (0.0, 0.0),
            };
            let n = b.last().copied().unwrap_or(0) as f64;
            Cost {
                kind: Kind::Matmul,
                flops: batch * matmul_flops(m, n, k),
                bytes: io,
                mkn: Some((batch * m, k, n)),
            }
        }
        "_grouped_mm" => {
            let out = outs.first().map(|(s, _)| s.as_slice()).unwrap_or(&[]);
            grouped_product(&dims(0), &dims(1), out, io)
        }
        b if b.starts_with("_scaled_dot_product") || b.starts_with("_flash_attention") => {
            // q (B, H, T, D), k (B, Hk, S, D); causal as its first bool argument.
            let (q, k) = (dims(0), dims(1));
            let (bh, t, d) = match q.as_slice() {
                [bb, h, t, d] => (*bb as f64 * *h as f64, *t as f64, *d as f64),
                _ => (0.0, 0.0, 0.0),
            };
            let s = k.get(2).copied().unwrap_or(0) as f64;
            let causal = op.flags.first().copied().unwrap_or(false);
            let pairs = bh * attention_pairs(t, (s - t).max(0.0), causal);
            let per_pair = if b.ends_with("_backward") { 10.0 } else { 4.0 };
            Cost {
                kind: Kind::Attention,
                flops: per_pair * d * pairs,
                bytes: io,
                mkn: None,
            }
        }
        b if b.contains("convolution")
            || [
                "conv",
                "_conv_depthwise",
                "_slow_conv",
                "slow_conv",
                "thnn_conv",
            ]
            .iter()
            .any(|p| b.starts_with(p)) =>
        {
            // `convolution` says transposed as its bool argument; `conv_transpose2d` by name.
            let transposed = op.flags.first().copied().unwrap_or(false) || b.contains("transpose");
            conv(b, ins, outs, transposed, io)
        }
        b if b.contains("pool") => Cost {
            // Each input element read once into a comparison or a sum.
            kind: Kind::Pooling,
            flops: ins.iter().map(|(s, _)| numel(s)).fold(0.0, f64::max),
            bytes: io,
            mkn: None,
        },
        b if NORMS.iter().any(|n| b.contains(n)) => plain(Kind::Norm, 8.0),
        b if ACTIVATIONS.iter().any(|a| b.starts_with(a)) => plain(Kind::Activation, 8.0),
        "embedding" => Cost {
            // A gather: the ids read, the rows it picks read once and written once (not the
            // whole table).
            kind: Kind::Embedding,
            flops: 0.0,
            bytes: bytes_of(ins.get(1..).unwrap_or(&[])) + 2.0 * bytes_of(outs),
            mkn: None,
        },
        b if b.starts_with("embedding") || b.contains("embedding_bag") => {
            plain(Kind::Embedding, 1.0)
        }
        b if b.contains("log_softmax")
            || b.starts_with("nll_loss")
            || b.contains("cross_entropy") =>
        {
            plain(Kind::Loss, 4.0)
        }
        b if b.starts_with("_fused_adam") => Cost {
            // In place over four equal lists (parameters, gradients, both moments): each read,
            // all but the gradients written: 7 of the 8 list-bytes a read-and-write would be.
            kind: Kind::Optimizer,
            flops: 16.0 * ins.iter().map(|(s, _)| numel(s)).sum::<f64>() / 4.0,
            bytes: 1.75 * bytes_of(ins),
            mkn: None,
        },
        b if b.starts_with("_foreach") => Cost {
            kind: Kind::Optimizer,
            flops: ins.iter().map(|(s, _)| numel(s)).sum::<f64>(),
            bytes: 2.0 * bytes_of(ins),
            mkn: None,
        },
        b if b.ends_with('_') && MEMORY_BOUND.contains(&b.trim_end_matches('_')) => Cost {
            // In place: read and write their tensors.
            kind: Kind::Elementwise,
            flops: numel(&dims(0)),
            bytes: 2.0 * bytes_of(ins),
            mkn: None,
        },
        b if MEMORY_BOUND.contains(&b) => plain(Kind::Elementwise, 1.0),
        _ => Cost {
            kind: Kind::Uncosted,
            flops: 0.0,
            bytes: io,
            mkn: None,
        },
    }
}

/// A convolution's cost: forward `(input, weight, bias?)` → output; backward `(grad_output,
/// input, weight)` → the gradients asked for, each told by its shape (the input's, the
/// weight's). The weight is `(C_out, C_in/groups, k…)` (transposed: `(C_in, C_out/groups,
/// k…)`), so each output element of a forward takes `numel(weight) / weight[0]` products
/// (transposed: each input element).
fn conv(
    base: &str,
    ins: &[(Vec<u64>, String)],
    outs: &[(Vec<u64>, String)],
    transposed: bool,
    io: f64,
) -> Cost {
    let shape = |i: usize| ins.get(i).map(|(s, _)| s.as_slice()).unwrap_or(&[]);
    let per = |w: &[u64]| match w.first() {
        Some(&c) if c > 0 => numel(w) / c as f64,
        _ => 0.0,
    };
    let flops = if base.ends_with("_backward") {
        let (grad_out, input, weight) = (shape(0), shape(1), shape(2));
        // Each gradient made costs what the forward did.
        let made = outs
            .iter()
            .filter(|(s, _)| s.as_slice() == input || s.as_slice() == weight)
            .count() as f64;
        let elems = if transposed {
            numel(input)
        } else {
            numel(grad_out)
        };
        2.0 * elems * per(weight) * made
    } else {
        let (input, weight) = (shape(0), shape(1));
        let elems = if transposed {
            numel(input)
        } else {
            outs.first().map_or(0.0, |(s, _)| numel(s))
        };
        2.0 * elems * per(weight)
    };
    Cost {
        kind: Kind::Convolution,
        flops,
        bytes: io,
        mkn: None,
    }
}

/// FLOPs of one step's products (matmuls, grouped ones included, and attention), from its
/// traced ops: what a Record's `compute.matmul_flops_per_step` counts.
pub fn product_flops(ops: &[TracedOp]) -> u64 {
    ops.iter()
        .map(|op| (cost(op), op.calls))
        .filter(|(c, _)| matches!(c.kind, Kind::Matmul | Kind::Attention))
        .map(|(c, calls)| c.flops * calls)
        .sum::<f64>()
        .round() as u64
}

/// FLOPs of one step by phase (and `total`), from its traced ops.
pub fn flops_by_phase(ops: &[TracedOp]) -> std::collections::BTreeMap<String, u64> {
    let mut m = std::collections::BTreeMap::new();
    for op in ops {
        let f = cost(op).flops * op.calls;
        *m.entry(op.phase.clone()).or_insert(0.0) += f;
        *m.entry("total".to_string()).or_insert(0.0) += f;
    }
    m.into_iter().map(|(k, v)| (k, v.round() as u64)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(name: &str, ins: &[&[u64]], outs: &[&[u64]], flags: &[bool]) -> TracedOp {
        let t = |v: &[&[u64]]| v.iter().map(|s| (s.to_vec(), "f32".to_string())).collect();
        TracedOp {
            phase: "forward".into(),
            op: name.into(),
            inputs: t(ins),
            outputs: t(outs),
            flags: flags.to_vec(),
            calls: 1.0,
        }
    }

    #[test]
    fn an_experts_grouped_product_costs_its_rows_whatever_the_routing() {
        // 12 token-expert rows (tokens × top-k) of width 16 through 4 experts' 16 × 8 matrices.
        let f = cost(&op(
            "aten._grouped_mm.default",
            &[&[12, 16], &[4, 16, 8], &[4]],
            &[&[12, 8]],
            &[],
        ));
        assert_eq!((f.kind, f.flops), (Kind::Matmul, 2.0 * 12.0 * 16.0 * 8.0));
        // Timed as one product of its rows, at the rate products of that shape reach.
        assert_eq!(f.mkn, Some((12.0, 16.0, 8.0)));
        // The weights' gradient: (16, 12)ᵀ rows against the output gradient (12, 8).
        let w = cost(&op(
            "aten._grouped_mm.default",
            &[&[16, 12], &[12, 8], &[4]],
            &[&[4, 16, 8]],
            &[],
        ));
        assert_eq!(w.flops, 2.0 * 16.0 * 12.0 * 8.0);
    }

    #[test]
    fn products_attention_and_views() {
        let c = cost(&op(
            "aten.addmm.default",
            &[&[8], &[4, 16], &[16, 8]],
            &[&[4, 8]],
            &[],
        ));
        assert_eq!((c.kind, c.flops), (Kind::Matmul, 2.0 * 4.0 * 16.0 * 8.0));
        assert_eq!(c.mkn, Some((4.0, 16.0, 8.0)));
        let b = cost(&op(
            "aten.bmm.default",
            &[&[3, 4, 16], &[3, 16, 8]],
            &[&[3, 4, 8]],
            &[],
        ));
        assert_eq!(b.flops, 3.0 * 2.0 * 4.0 * 16.0 * 8.0);
        // Causal attention over 2 heads of 4 queries (10 pairs each), D = 8.
        let q: &[u64] = &[1, 2, 4, 8];
        let a = cost(&op(
            "aten._scaled_dot_product_flash_attention_for_cpu.default",
            &[q, q, q],
            &[q, &[1, 2, 4]],
            &[true],
        ));
        assert_eq!((a.kind, a.flops), (Kind::Attention, 4.0 * 8.0 * 2.0 * 10.0));
        let v = cost(&op("aten.transpose.int", &[&[4, 8]], &[&[8, 4]], &[]));
        assert_eq!((v.kind, v.bytes), (Kind::View, 0.0));
        // A gather of 6 rows of 8 from a table of 100: ids, then the rows read and written.
        let mut g = op(
            "aten.embedding.default",
            &[&[100, 8], &[6]],
            &[&[6, 8]],
            &[],
        );
        g.inputs[1].1 = "i64".into();
        assert_eq!(cost(&g).bytes, 6.0 * 8.0 + 2.0 * 6.0 * 8.0 * 4.0);
        let e = cost(&op("aten.add.Tensor", &[&[4, 8], &[4, 8]], &[&[4, 8]], &[]));
        assert_eq!(
            (e.kind, e.flops, e.bytes),
            (Kind::Elementwise, 32.0, 3.0 * 32.0 * 4.0)
        );
    }

    #[test]
    fn an_op_without_a_formula_is_uncosted_by_name_with_its_bytes() {
        // An FFT: no formula here, so no FLOPs and never "elementwise"; its bytes still count.
        let f = cost(&op(
            "aten._fft_r2c.default",
            &[&[4, 256]],
            &[&[4, 129, 2]],
            &[],
        ));
        assert_eq!(f.kind, Kind::Uncosted);
        assert_eq!(f.kind.name(), "uncosted (no formula)");
        assert_eq!(
            (f.flops, f.bytes),
            (0.0, (4.0 * 256.0 + 4.0 * 129.0 * 2.0) * 4.0)
        );
        // Known memory-bound ops, in place or not, stay elementwise; ReLU's backward is an
        // activation's.
        for name in [
            "aten.add_.Tensor",
            "aten.cat.default",
            "aten.sum.dim_IntList",
        ] {
            assert_eq!(
                cost(&op(name, &[&[8]], &[&[8]], &[])).kind,
                Kind::Elementwise,
                "{name}"
            );
        }
        let relu_back = cost(&op(
            "aten.threshold_backward.default",
            &[&[8], &[8]],
            &[&[8]],
            &[],
        ));
        assert_eq!(relu_back.kind, Kind::Activation);
    }

    #[test]
    fn convolutions_count_their_products_and_pooling_its_reads() {
        // conv2 of a small CNN: 32 → 64 channels, 3×3, over 8 images of 26×26 → 24×24:
        // 2 · (8·64·24·24) · (32·9) ≈ 0.17 GFLOP, not one FLOP an output element.
        let c = cost(&op(
            "aten.convolution.default",
            &[&[8, 32, 26, 26], &[64, 32, 3, 3], &[64]],
            &[&[8, 64, 24, 24]],
            &[false],
        ));
        let fwd = 2.0 * (8.0 * 64.0 * 24.0 * 24.0) * (32.0 * 9.0);
        assert_eq!((c.kind, c.flops), (Kind::Convolution, fwd));
        // Its backward making both gradients: twice the forward; the first layer's (no input
        // gradient asked for): once.
        let both = cost(&op(
            "aten.convolution_backward.default",
            &[&[8, 64, 24, 24], &[8, 32, 26, 26], &[64, 32, 3, 3]],
            &[&[8, 32, 26, 26], &[64, 32, 3, 3], &[64]],
            &[false],
        ));
        assert_eq!(both.flops, 2.0 * fwd);
        let weight_only = cost(&op(
            "aten.convolution_backward.default",
            &[&[8, 64, 24, 24], &[8, 32, 26, 26], &[64, 32, 3, 3]],
            &[&[64, 32, 3, 3], &[64]],
            &[false],
        ));
        assert_eq!(weight_only.flops, fwd);
        // Depthwise (groups = channels): one input channel a filter.
        let dw = cost(&op(
            "aten.convolution.default",
            &[&[1, 16, 10, 10], &[16, 1, 3, 3]],
            &[&[1, 16, 8, 8]],
            &[false],
        ));
        assert_eq!(dw.flops, 2.0 * (16.0 * 64.0) * 9.0);
        let p = cost(&op(
            "aten.max_pool2d_with_indices.default",
            &[&[8, 64, 24, 24]],
            &[&[8, 64, 12, 12], &[8, 64, 12, 12]],
            &[],
        ));
        assert_eq!((p.kind, p.flops), (Kind::Pooling, 8.0 * 64.0 * 24.0 * 24.0));
        let g = cost(&op(
            "aten.native_group_norm.default",
            &[&[2, 8, 4]],
            &[&[2, 8, 4]],
            &[],
        ));
        assert_eq!(g.kind, Kind::Norm);
    }
}
