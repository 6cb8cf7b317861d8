//! candle 0.11.1's `Tensor::backward`, replayed on the shape-only [`Sim`]: the same node order,
//! the same gradient store (`or_insert` makes zeros, `+=` makes a new tensor), the same
//! per-op rules. What makes candle's backward expensive in memory is kept: a gradient computed
//! from a recorded forward tensor records its own op, so it holds its temporaries until it is
//! consumed; gradients of constant operands (the broadcast mask, a detached max) stay in the
//! store until backward returns.

use super::linear_backward::linear_kernel;
use super::sim::{Bin, Fused, Id, Op, Sim, Un};
use std::collections::HashMap;

/// candle's `GradStore`: node → gradient node (one handle each).
pub type Grads = HashMap<Id, Id>;

/// Nodes that need a gradient, outputs first (candle's `sorted_nodes`).
pub fn sorted_nodes(sim: &Sim, root: Id) -> Vec<Id> {
    fn walk(sim: &Sim, n: Id, out: &mut Vec<Id>, seen: &mut HashMap<Id, bool>) -> bool {
        if let Some(&tg) = seen.get(&n) {
            return tg;
        }
        let node = &sim.nodes[n];
        let mut track = false;
        if node.is_var {
            track = true;
        } else if node.is_int || !node.tracked {
        } else {
            match &node.op {
                Op::Affine(_, m) if *m == 0.0 => {}
                Op::Leaf | Op::Other(_) => {}
                op => {
                    for i in op.inputs() {
                        track |= walk(sim, i, out, seen);
                    }
                }
            }
        }
        seen.insert(n, track);
        if track {
            out.push(n);
        }
        track
    }
    let mut out = Vec::new();
    walk(sim, root, &mut out, &mut HashMap::new());
    out.reverse();
    out
}

/// `*grads.or_insert(arg) += g` (or `-=`): zeros when absent, then a new sum tensor.
fn acc(sim: &mut Sim, grads: &mut Grads, arg: Id, g: Id) {
    let cur = match grads.remove(&arg) {
        Some(c) => c,
        None => sim.zeros_like(arg),
    };
    let gv = if sim.shape(g) != sim.shape(cur) {
        let shape = sim.shape(cur).to_vec();
        sim.broadcast_as(g, &shape)
    } else {
        sim.hold(g)
    };
    let sum = sim.binary(Bin::Add, cur, gv);
    sim.release(gv);
    sim.release(cur);
    grads.insert(arg, sum);
}

/// `grads.or_insert(arg)` ahead of the computation, where candle's rule takes it first.
fn or_insert(sim: &mut Sim, grads: &mut Grads, arg: Id) {
    if !grads.contains_key(&arg) {
        let z = sim.zeros_like(arg);
        grads.insert(arg, z);
    }
}

/// Recomputes transformer block `layer` from its input `x` with recording on (for
/// [`Op::Checkpoint`]); returns the block's output.
pub trait Recompute {
    fn block(&self, sim: &mut Sim, layer: usize, x: Id) -> Id;
}

/// Runs backward from `loss` and returns the gradient store, as candle does.
pub fn backward(sim: &mut Sim, loss: Id, rc: &dyn Recompute) -> Grads {
    let mut grads = Grads::new();
    let ones = sim.zeros_like(loss);
    grads.insert(loss, ones);
    walk_back(sim, loss, &mut grads, rc);
    grads
}

/// `model::segments`' backward: candle's backward from `loss` down to the head's input
/// variable, then one segment at a time, each freed once its gradients are out → the
/// gradients of `vars` only, detached (a parameter used in several segments summed).
/// Takes the handles of `loss` and of every segment.
pub fn segmented_backward(
    sim: &mut Sim,
    loss: Id,
    parts: Vec<(Option<Id>, Id)>,
    head_input: Id,
    vars: &[Id],
    rc: &dyn Recompute,
    earlier: Option<Grads>,
) -> Grads {
    let mut kept = Grads::new();
    let mut order: HashMap<Id, usize> = HashMap::new();
    for (i, &v) in vars.iter().enumerate() {
        order.entry(v).or_insert(i); // a variable listed twice is taken at its first place
    }
    // Earlier micro-batches' gradients seed the sink, as in `model::segments`.
    sim.sink = Some(earlier.unwrap_or_default());
    let mut all = backward(sim, loss, rc);
    sim.release(loss);
    let mut g = take_input(sim, &mut all, head_input);
    keep_params(sim, all, &order, &mut kept);
    for (input, out) in parts.into_iter().rev() {
        let mut sub = Grads::new();
        let injected = g
            .take()
            .expect("every segment above the embedding has an input");
        acc(sim, &mut sub, out, injected); // the inject op's gradient, added to `out`'s
        sim.release(injected);
        walk_back(sim, out, &mut sub, rc);
        sim.release(out);
        if let Some(v) = input {
            g = take_input(sim, &mut sub, v);
        }
        keep_params(sim, sub, &order, &mut kept);
    }
    for (v, g) in sim.sink.take().unwrap_or_default() {
        let g = match kept.remove(&v) {
            Some(prev) => {
                let s = sim.binary(Bin::Add, prev, g);
                release_all(sim, &[prev, g]);
                s
            }
            None => g,
        };
        kept.insert(v, g);
    }
    kept
}

/// The gradient of a segment's input variable `v`, detached; releases the segment's hold on `v`.
fn take_input(sim: &mut Sim, all: &mut Grads, v: Id) -> Option<Id> {
    let g = all.remove(&v).map(|g| {
        let d = sim.detach(g);
        sim.release(g);
        d
    });
    sim.release(v);
    g
}

/// Moves the parameters' gradients into `kept` (detached, summed with an earlier segment's);
/// drops the rest of the store. Parameters are taken in the order of `vars` (`order` maps a
/// variable to its position there), so the replay is the same whatever the store's size: the
/// cost is the store's, not all parameters' (linear in depth, not quadratic).
fn keep_params(sim: &mut Sim, mut all: Grads, order: &HashMap<Id, usize>, kept: &mut Grads) {
    let mut params: Vec<(usize, Id)> = all
        .keys()
        .filter_map(|id| order.get(id).map(|&i| (i, *id)))
        .collect();
    params.sort_unstable();
    for (_, v) in params {
        let Some(g) = all.remove(&v) else { continue };
        let g = match kept.remove(&v) {
            Some(prev) => {
                let s = sim.binary(Bin::Add, prev, g);
                sim.release(prev);
                sim.release(g);
                s
            }
            None => g,
        };
        let d = sim.detach(g);
        sim.release(g);
        kept.insert(v, d);
    }
    let mut rest: Vec<Id> = all.into_values().collect();
    rest.sort_unstable();
    release_all(sim, &rest);
}

/// Backward over the nodes `root` depends on, with `grads` holding the root's gradient.
fn walk_back(sim: &mut Sim, root: Id, grads: &mut Grads, rc: &dyn Recompute) {
    let order = sorted_nodes(sim, root);
    for node in order {
        sim.module = 0; // as measured: candle's backward runs outside the model's modules
        if sim.nodes[node].is_var {
            continue;
        }
        let Some(g0) = grads.remove(&node) else {
            continue; // candle panics here; a node without a gradient cannot occur in our graphs
        };
        let grad = sim.detach(g0);
        sim.release(g0);
        let op = sim.nodes[node].op.clone();
        match op {
            Op::Checkpoint(x, layer) => checkpoint_rule(sim, grads, x, layer, grad, rc),
            Op::Fused(kind, ref inputs) => fused_rule(sim, grads, kind, inputs, grad),
            _ => rule(sim, grads, node, &op, grad),
        }
        sim.release(grad);
    }
}

/// A checkpointed block: recompute it from its saved input with recording on, run backward
/// through it in its own store, then keep only the input's and the parameters' gradients
/// (detached: the recomputed graph is freed before the next block).
fn checkpoint_rule(
    sim: &mut Sim,
    grads: &mut Grads,
    x: Id,
    layer: usize,
    grad: Id,
    rc: &dyn Recompute,
) {
    let xv = sim.var_view(x);
    let y = rc.block(sim, layer, xv);
    let mut sub = Grads::new();
    let g = sim.hold(grad);
    sub.insert(y, g);
    walk_back(sim, y, &mut sub, rc);
    sim.module = 0;
    let mut moved: Vec<(Id, Id)> = sub.into_iter().collect();
    moved.sort_unstable(); // a deterministic order, like a real store's
    for (k, g) in moved {
        if k == xv {
            acc(sim, grads, x, g);
        } else if sim.nodes[k].is_var {
            let d = sim.detach(g);
            match grads.remove(&k) {
                None => {
                    grads.insert(k, d);
                }
                Some(cur) => {
                    grads.insert(k, cur);
                    acc(sim, grads, k, d);
                    sim.release(d);
                }
            }
        }
        sim.release(g);
    }
    sim.release(y);
    sim.release(xv);
}

/// A fused kernel's backward (candle's CustomOp rule): every input gradient is computed first,
/// then each is added into the store.
fn fused_rule(sim: &mut Sim, grads: &mut Grads, kind: Fused, inputs: &[Id], grad: Id) {
    // The linear and embedding kernels hand a variable weight's gradient to the sink while one
    // is open (`kernels::sink`): made once, or added in place to what is there.
    let sunk = match kind {
        Fused::Linear { .. } => Some(inputs[1]),
        Fused::Embedding => Some(inputs[0]),
        _ => None,
    }
    .filter(|&w| sim.sink.is_some() && (sim.nodes[w].is_var || sim.masters.contains_key(&w)));
    // The sink keeps a working copy's gradient under its f32 master, made there in f32 (no
    // half copy of it beside the f32 one).
    let master = sunk.and_then(|w| sim.masters.get(&w).copied());
    let sunk_key = master.or(sunk);
    let targets: Vec<Id> = inputs
        .iter()
        .copied()
        .filter(|&i| sim.nodes[i].tracked && !sim.nodes[i].is_int && Some(i) != sunk)
        .collect();
    match kind {
        Fused::Gelu
        | Fused::LayerNorm
        | Fused::RmsNorm
        | Fused::SwiGlu
        | Fused::Rope
        | Fused::CrossEntropy
        | Fused::Embedding => {}
        Fused::Linear { out_in } => linear_kernel(sim, inputs, grad, out_in, sunk, master),
        Fused::Attention { causal } => {
            // The scores are recomputed block by block (no (T, S) buffer beyond a per-thread
            // block): QKᵀ again, then dV, dP, dQ, dK.
            let lse = sim.shape(inputs[inputs.len() - 1]).to_vec(); // (B, H, T)
            let (h, t) = (lse[1], lse[2]);
            let d = sim.shape(grad)[2] / h;
            let s = if inputs.len() == 2 {
                t
            } else {
                sim.shape(inputs[1])[2]
            };
            let cols = super::ops::attention_columns(t, s, causal);
            for _ in 0..5 {
                sim.add_matmul_flops((lse[0] * h) as u64, cols, d, 1);
            }
            // bf16 / f16 read in place: the operands, y and dy widened for the call, and the
            // gradients made in f32 before they are rounded.
            if sim.nodes[inputs[0]].dtype < 4 {
                let qkv: u64 = inputs[..inputs.len() - 1]
                    .iter()
                    .map(|&x| sim.elems(x))
                    .sum();
                sim.scratch((2 * qkv + 2 * sim.elems(grad)) * 4);
            }
        }
    }
    let gs: Vec<Id> = targets.iter().map(|&t| sim.zeros_like(t)).collect();
    if let Some(w) = sunk_key {
        if !sim.sink.as_ref().is_some_and(|s| s.contains_key(&w)) {
            let g = sim.zeros_like(w);
            sim.sink.as_mut().map(|s| s.insert(w, g));
        }
    }
    for (&t, &g) in targets.iter().zip(&gs) {
        acc(sim, grads, t, g);
    }
    release_all(sim, &gs);
}

fn rule(sim: &mut Sim, grads: &mut Grads, node: Id, op: &Op, grad: Id) {
    match *op {
        Op::Binary(Bin::Add, l, r) | Op::Binary(Bin::Sub, l, r) => {
            acc(sim, grads, l, grad);
            acc(sim, grads, r, grad);
        }
        Op::Binary(Bin::Mul, l, r) => {
            let lg = sim.binary(Bin::Mul, grad, r);
            acc(sim, grads, l, lg);
            let rg = sim.binary(Bin::Mul, grad, l);
            acc(sim, grads, r, rg);
            sim.release(lg);
            sim.release(rg);
        }
        Op::Binary(Bin::Div, l, r) => {
            let lg = sim.binary(Bin::Div, grad, r);
            acc(sim, grads, l, lg);
            let m = sim.binary(Bin::Mul, grad, l);
            let sq = sim.unary(Un::Sqr, r);
            let rg = sim.binary(Bin::Div, m, sq);
            sim.release(m);
            sim.release(sq);
            acc(sim, grads, r, rg);
            sim.release(lg);
            sim.release(rg);
        }
        Op::Matmul(l, r) => {
            let rt = sim.t(r);
            let lg = sim.matmul(grad, rt);
            sim.release(rt);
            acc(sim, grads, l, lg);
            let lt = sim.t(l);
            let rg = sim.matmul(lt, grad);
            sim.release(lt);
            acc(sim, grads, r, rg);
            sim.release(lg);
            sim.release(rg);
        }
        Op::Cat(ref args, dim) => {
            let mut start = 0;
            for &a in args {
                let len = sim.shape(a)[dim];
                let g = sim.narrow(grad, dim, start, len);
                acc(sim, grads, a, g);
                sim.release(g);
                start += len;
            }
        }
        Op::Broadcast(arg) => broadcast_rule(sim, grads, node, arg, grad),
        Op::Sum(arg, _) => {
            let shape = sim.shape(arg).to_vec();
            let g = sim.broadcast_as(grad, &shape);
            acc(sim, grads, arg, g);
            sim.release(g);
        }
        Op::Max(arg, _) => max_rule(sim, grads, node, arg, grad),
        Op::ToDtype(arg) => {
            let dt = sim.nodes[arg].dtype;
            let g = sim.to_dtype(grad, dt);
            acc(sim, grads, arg, g);
            sim.release(g);
        }
        Op::Copy(arg) => acc(sim, grads, arg, grad),
        Op::Affine(arg, mul) => {
            let g = sim.affine(grad, mul);
            acc(sim, grads, arg, g);
            sim.release(g);
        }
        Op::Unary(u, arg) => unary_rule(sim, grads, node, u, arg, grad),
        Op::Narrow(arg, dim, start, len) => narrow_rule(sim, grads, arg, dim, (start, len), grad),
        Op::Reshape(arg) => {
            let shape = sim.shape(arg).to_vec();
            let g = sim.reshape(grad, &shape);
            acc(sim, grads, arg, g);
            sim.release(g);
        }
        Op::Transpose(arg, a, b) => {
            let g = sim.transpose(grad, a, b);
            acc(sim, grads, arg, g);
            sim.release(g);
        }
        Op::Permute(arg, ref dims) => {
            let mut inv = vec![0; dims.len()];
            for (i, &d) in dims.iter().enumerate() {
                inv[d] = i;
            }
            let g = sim.permute(grad, &inv);
            acc(sim, grads, arg, g);
            sim.release(g);
        }
        Op::IndexSelect(arg, ids) | Op::Gather(arg, ids, _) => {
            // index_add / scatter_add into the running sum (zeros when absent).
            let cur = match grads.remove(&arg) {
                Some(c) => c,
                None => sim.zeros_like(arg),
            };
            let sum = sim.other(cur, &[cur, ids, grad]);
            sim.release(cur);
            grads.insert(arg, sum);
        }
        Op::Leaf | Op::Other(_) | Op::Fused(..) | Op::Checkpoint(..) => {}
    }
}

/// Broadcast: the gradient summed over the broadcast dims, the added leading dims squeezed out.
fn broadcast_rule(sim: &mut Sim, grads: &mut Grads, node: Id, arg: Id, grad: Id) {
    let (nd, ad) = (sim.shape(node).to_vec(), sim.shape(arg).to_vec());
    let left = nd.len() - ad.len();
    let mut dims: Vec<usize> = (0..left).collect();
    dims.extend(
        (0..ad.len())
            .filter(|&i| nd[left + i] != ad[i])
            .map(|i| i + left),
    );
    let mut g = sim.sum_keepdim(grad, &dims);
    for _ in 0..left {
        let s = sim.squeeze(g, 0);
        sim.release(g);
        g = s;
    }
    acc(sim, grads, arg, g);
    sim.release(g);
}

/// Max over a dim: the gradient where the input equals the max (a mask, broadcast back).
fn max_rule(sim: &mut Sim, grads: &mut Grads, node: Id, arg: Id, grad: Id) {
    let shape = sim.shape(arg).to_vec();
    let nb = sim.broadcast_as(node, &shape);
    let gb = sim.broadcast_as(grad, &shape);
    let eq = sim.other(nb, &[nb, arg]);
    let g = sim.binary(Bin::Mul, eq, gb);
    for t in [nb, gb, eq] {
        sim.release(t);
    }
    acc(sim, grads, arg, g);
    sim.release(g);
}

/// Narrow: the gradient padded back to the full dim with zeros on either side.
fn narrow_rule(
    sim: &mut Sim,
    grads: &mut Grads,
    arg: Id,
    dim: usize,
    (start, len): (usize, usize),
    grad: Id,
) {
    let full = sim.shape(arg)[dim];
    let mut parts = Vec::new();
    let pad = |sim: &mut Sim, n: usize| {
        let mut shape = sim.shape(arg).to_vec();
        shape[dim] = n;
        let dt = sim.nodes[grad].dtype;
        sim.leaf(&shape, dt)
    };
    if start > 0 {
        parts.push(pad(sim, start));
    }
    parts.push(sim.hold(grad));
    if full - start - len > 0 {
        parts.push(pad(sim, full - start - len));
    }
    let g = if parts.len() == 1 {
        sim.hold(grad)
    } else {
        sim.cat(&parts, dim)
    };
    for p in parts {
        sim.release(p);
    }
    acc(sim, grads, arg, g);
    sim.release(g);
}

/// Elementwise unary rules, with the temporaries candle's formulas create.
fn unary_rule(sim: &mut Sim, grads: &mut Grads, node: Id, u: Un, arg: Id, grad: Id) {
    // Intermediates are released where Rust drops them (statement temporaries at the end of the
    // statement, named ones at the end of the rule); a recorded result still holds them (a recorded result still holds them).
    if !matches!(u, Un::Sqr | Un::Sqrt) {
        or_insert(sim, grads, arg);
    }
    let g = match u {
        Un::Exp => sim.binary(Bin::Mul, grad, node),
        Un::Log => sim.binary(Bin::Div, grad, arg),
        Un::Neg => sim.hold(grad),
        Un::Sqr => {
            let m = sim.binary(Bin::Mul, arg, grad);
            let g = sim.affine(m, 2.0);
            sim.release(m);
            g
        }
        Un::Sqrt => {
            let d = sim.binary(Bin::Div, grad, node);
            let g = sim.affine(d, 0.5);
            sim.release(d);
            g
        }
        Un::Recip => {
            let sq = sim.unary(Un::Sqr, arg);
            let g = sim.binary(Bin::Div, grad, sq);
            sim.release(sq);
            g
        }
        Un::Tanh => {
            let sq = sim.unary(Un::Sqr, node);
            let md = sim.affine(sq, 1.0);
            sim.release(sq);
            let g = sim.binary(Bin::Mul, grad, md);
            sim.release(md);
            g
        }
        Un::Gelu => {
            let cube = sim.unary(Un::Powf, arg);
            let a1 = sim.affine(cube, 0.0356774);
            let a2 = sim.affine(arg, 0.797885);
            let s1 = sim.binary(Bin::Add, a1, a2);
            let tanh = sim.unary(Un::Tanh, s1);
            release_all(sim, &[a1, a2, s1]);
            let h = sim.affine(tanh, 0.5);
            let c2 = sim.affine(cube, 0.0535161);
            let a3 = sim.affine(arg, 0.398942);
            let s2 = sim.binary(Bin::Add, c2, a3);
            let tp = sim.unary(Un::Powf, tanh);
            let om = sim.affine(tp, -1.0);
            let p = sim.binary(Bin::Mul, s2, om);
            let s3 = sim.binary(Bin::Add, h, p);
            let gg = sim.affine(s3, 1.0);
            release_all(sim, &[h, c2, a3, s2, tp, om, p, s3, cube, tanh]);
            let g = sim.binary(Bin::Mul, grad, gg);
            sim.release(gg);
            g
        }
        Un::GeluErf => {
            let sq = sim.unary(Un::Sqr, arg);
            let ng = sim.unary(Un::Neg, sq);
            let nhs = sim.affine(ng, 0.5);
            release_all(sim, &[sq, ng]);
            let ex = sim.unary(Un::Exp, nhs);
            let a = sim.affine(ex, 0.398942);
            let sea = sim.binary(Bin::Mul, a, arg);
            release_all(sim, &[ex, a]);
            let ass = sim.affine(arg, 0.7071);
            let erf = sim.unary(Un::Erf, ass);
            let ess = sim.affine(erf, 0.5);
            release_all(sim, &[erf]);
            let h = sim.affine(sea, 1.0);
            let geg = sim.binary(Bin::Add, h, ess);
            release_all(sim, &[h, nhs, sea, ass, ess]);
            let g = sim.binary(Bin::Mul, grad, geg);
            sim.release(geg);
            g
        }
        Un::Silu => {
            let ng = sim.unary(Un::Neg, arg);
            let ex = sim.unary(Un::Exp, ng);
            let p1 = sim.affine(ex, 1.0);
            let sig = sim.unary(Un::Recip, p1);
            release_all(sim, &[ng, ex, p1]);
            let om = sim.affine(node, -1.0);
            let p = sim.binary(Bin::Mul, sig, om);
            let sg = sim.binary(Bin::Add, p, node);
            release_all(sim, &[om, p, sig]);
            let g = sim.binary(Bin::Mul, grad, sg);
            sim.release(sg);
            g
        }
        Un::Erf | Un::Powf => return, // only inside backward formulas: never differentiated
    };
    acc(sim, grads, arg, g);
    sim.release(g);
}

fn release_all(sim: &mut Sim, ts: &[Id]) {
    for &t in ts {
        sim.release(t);
    }
}
