//! A shape-only replica of candle's tensors, for predicting memory without running the model.
//!
//! Each [`Node`] stands for one candle `Tensor` (an `Arc<Tensor_>`): a shape, a dtype, a storage
//! it shares with its views, and — when candle would record it — the op with the inputs that op
//! keeps alive. Reference counts mirror candle's `Arc`s: a node lives while a handle, a recorded
//! op or a gradient-store entry holds it; a storage lives while a node uses it. Every allocation
//! is charged to the current phase and module, so the simulation yields the same figures the
//! counting allocator measures: what forward retained, what backward's peak holds, and so on.
//!
//! The rules follow candle 0.11.1 (`tensor.rs`, `backprop.rs`): which ops are views, when a
//! reshape copies, that a binary op with a recorded input records itself, that `detach` shares
//! the storage. When the engine changes (fused kernels), this file and `backward.rs` change with
//! it; `tests/estimate.rs` compares the prediction with the measurement.
//!
//! Over 600 lines because the tensor ops below and the allocation bookkeeping above share private
//! state (storages, reference counts, the peak's undo log) that nothing outside may touch; the op
//! vocabulary is in `graph.rs`.

use std::collections::HashMap;

pub use super::graph::{Bin, Fused, Id, Op, SimPhase, Un, N_SIM_PHASES};

#[derive(Clone, Debug)]
pub struct Node {
    pub shape: Vec<usize>,
    /// Bytes per element.
    pub dtype: u64,
    pub op: Op,
    pub storage: usize,
    pub contiguous: bool,
    pub is_var: bool,
    /// candle's `track_op()`: a variable, or an op was recorded.
    pub tracked: bool,
    /// Integer tensors (token ids) are never differentiated.
    pub is_int: bool,
    rc: u32,
}

impl Node {
    pub fn elems(&self) -> u64 {
        self.shape.iter().map(|&d| d as u64).product()
    }
    pub fn rank(&self) -> usize {
        self.shape.len()
    }
}

#[derive(Clone, Debug)]
struct Storage {
    bytes: u64,
    rc: u32,
    phase: SimPhase,
    module: usize,
    kind: &'static str,
}

/// Live bytes at the moment of a peak, by phase of allocation and by module.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PeakSnapshot {
    pub bytes: u64,
    pub by_phase: [u64; N_SIM_PHASES],
    pub by_module: Vec<u64>,
}

/// The simulated heap: nodes, storages and their live bytes.
pub struct Sim {
    pub nodes: Vec<Node>,
    storages: Vec<Storage>,
    pub phase: SimPhase,
    /// Index into `modules` of the module now running (0: outside the forward).
    pub module: usize,
    /// What new allocations are, for the activation table ("qkv", "mlp", …).
    pub kind: &'static str,
    pub modules: Vec<String>,
    module_ids: HashMap<String, usize>,
    pub live: u64,
    live_by_phase: [u64; N_SIM_PHASES],
    live_by_module: Vec<u64>,
    /// Peak since the last [`Sim::reset_peak`], with what was live at that moment. `by_module` is
    /// completed by [`Sim::settle_peak`] (a copy of `live_by_module` at every new peak made the
    /// replay quadratic in depth): today's figures minus the log entries after the peak.
    pub peak: PeakSnapshot,
    peak_stale: bool,
    /// (module, bytes, allocated?) of every allocation and free since the peak window opened.
    module_log: Vec<(usize, u64, bool)>,
    /// `module_log`'s length when the peak was reached.
    peak_log_len: usize,
    /// Matmul FLOPs executed so far, by phase (2·m·k·n per product).
    pub flops: [u64; N_SIM_PHASES],
    /// Set when a tensor's byte size overflowed u64 (the estimate is then refused).
    pub overflow: bool,
    /// candle's no-grad mode: new nodes record nothing (the forward of a checkpointed block).
    pub no_grad: bool,
    /// `--fusion none`: norms, GELU, SwiGLU, RoPE and the loss as candle's op chains
    /// (`model::unfused`), not memscope's kernels.
    pub unfused: bool,
    /// bf16 linear layers run on the CPU's bf16 dot products (`kernels::dot_bf16`): no
    /// widened copies of x and dy, packing buffers instead of f32 tiles.
    pub bf16_dot: bool,
    /// Mixed precision: a linear weight's detached working copy → its f32 master variable,
    /// where the kernels sink its gradient (`kernels::sink::with_masters`).
    pub masters: HashMap<Id, Id>,

    /// Train: cut the graph at block boundaries ([`Sim::cut`], `model::segments`).
    pub segmenting: bool,
    /// The segments cut so far: (input variable, output), the embedding's without an input.
    pub segments: Vec<(Option<Id>, Id)>,
    /// The input variable of the segment being built (after the last cut).
    pub segment_input: Option<Id>,
    /// While segmented backward runs: the weights' gradients the linear and embedding kernels
    /// accumulate outside candle's store (`kernels::sink`), by weight.
    pub sink: Option<HashMap<Id, Id>>,
}

impl Default for Sim {
    fn default() -> Self {
        Self::new()
    }
}

impl Sim {
    pub fn new() -> Self {
        let mut s = Self {
            nodes: Vec::new(),
            storages: Vec::new(),
            phase: SimPhase::Load,
            module: 0,
            kind: "other",
            modules: Vec::new(),
            module_ids: HashMap::new(),
            live: 0,
            live_by_phase: [0; N_SIM_PHASES],
            live_by_module: Vec::new(),
            peak: PeakSnapshot::default(),
            peak_stale: false,
            module_log: Vec::new(),
            peak_log_len: 0,
            flops: [0; N_SIM_PHASES],
            overflow: false,
            no_grad: false,
            unfused: false,
            bf16_dot: false,
            masters: HashMap::new(),
            segmenting: false,
            segments: Vec::new(),
            segment_input: None,
            sink: None,
        };
        s.enter(crate::instrument::scope::OUTSIDE);
        s
    }

    /// Makes `name` the module that new allocations are charged to.
    pub fn enter(&mut self, name: &str) {
        let next = self.modules.len();
        let id = *self.module_ids.entry(name.to_string()).or_insert(next);
        if id == next {
            self.modules.push(name.to_string());
            self.live_by_module.push(0);
        }
        self.module = id;
    }

    pub fn reset_peak(&mut self) {
        self.peak = self.snapshot();
        self.peak_stale = false;
        self.module_log.clear();
        self.peak_log_len = 0;
    }

    /// Completes `peak.by_module` with what was live at the peak (see the field's docs).
    pub fn settle_peak(&mut self) {
        if !self.peak_stale {
            return;
        }
        let mut by_module = self.live_by_module.clone();
        for &(m, bytes, allocated) in &self.module_log[self.peak_log_len..] {
            if allocated {
                by_module[m] -= bytes;
            } else {
                by_module[m] += bytes;
            }
        }
        self.peak.by_module = by_module;
        self.peak_stale = false;
    }

    pub fn snapshot(&self) -> PeakSnapshot {
        PeakSnapshot {
            bytes: self.live,
            by_phase: self.live_by_phase,
            by_module: self.live_by_module.clone(),
        }
    }

    pub fn live_of(&self, p: SimPhase) -> u64 {
        self.live_by_phase[p as usize]
    }

    /// Live bytes allocated in `phase`, by (module, kind), in first-allocation order.
    pub fn live_by_module_kind(&self, phase: SimPhase) -> Vec<(String, &'static str, u64)> {
        let mut out: Vec<(String, &'static str, u64)> = Vec::new();
        let mut index: HashMap<(usize, &'static str), usize> = HashMap::new();
        for s in self
            .storages
            .iter()
            .filter(|s| s.rc > 0 && s.phase == phase)
        {
            let i = *index.entry((s.module, s.kind)).or_insert_with(|| {
                out.push((self.modules[s.module].clone(), s.kind, 0));
                out.len() - 1
            });
            out[i].2 += s.bytes;
        }
        out
    }

    pub fn shape(&self, t: Id) -> &[usize] {
        &self.nodes[t].shape
    }

    /// A (…, F) tensor as (rows, F): its leading dims multiplied out, then its last.
    pub fn rows(&self, t: Id) -> (usize, usize) {
        let s = self.shape(t);
        let f = s.last().copied().unwrap_or(1);
        (s[..s.len().saturating_sub(1)].iter().product(), f)
    }

    pub fn elems(&self, t: Id) -> u64 {
        self.nodes[t].elems()
    }

    fn new_storage(&mut self, bytes: u64) -> usize {
        self.storages.push(Storage {
            bytes,
            rc: 0,
            phase: self.phase,
            module: self.module,
            kind: self.kind,
        });
        // Live bytes beyond 2^63 (no machine's address space holds them): the estimate is
        // refused (tensors that each fit can still add up past it); the sums wrap meanwhile,
        // consistently with the frees.
        if self
            .live
            .checked_add(bytes)
            .is_none_or(|l| l > i64::MAX as u64)
        {
            self.overflow = true;
        }
        self.live = self.live.wrapping_add(bytes);
        let ph = &mut self.live_by_phase[self.phase as usize];
        *ph = ph.wrapping_add(bytes);
        let m = &mut self.live_by_module[self.module];
        *m = m.wrapping_add(bytes);
        self.module_log.push((self.module, bytes, true));
        if self.live > self.peak.bytes {
            self.peak.bytes = self.live;
            self.peak.by_phase = self.live_by_phase;
            self.peak_log_len = self.module_log.len();
            self.peak_stale = true;
        }
        self.storages.len() - 1
    }

    /// Creates a node with one handle. `storage`: `None` allocates a fresh contiguous storage.
    fn push(&mut self, shape: Vec<usize>, dtype: u64, op: Op, storage: Option<usize>) -> Id {
        let inputs = op.inputs();
        let tracked = !self.no_grad && inputs.iter().any(|&i| self.nodes[i].tracked);
        let is_int = inputs.first().is_some_and(|&i| self.nodes[i].is_int)
            && !matches!(op, Op::IndexSelect(..) | Op::Gather(..));
        self.push_node(shape, dtype, op, storage, tracked, false, is_int)
    }

    #[allow(clippy::too_many_arguments)]
    fn push_node(
        &mut self,
        shape: Vec<usize>,
        dtype: u64,
        op: Op,
        storage: Option<usize>,
        tracked: bool,
        is_var: bool,
        is_int: bool,
    ) -> Id {
        let (storage, contiguous) = match storage {
            Some(s) => (s, false),
            None => {
                let elems = shape.iter().try_fold(1u64, |a, &d| a.checked_mul(d as u64));
                let bytes = elems.and_then(|e| e.checked_mul(dtype));
                if bytes.is_none() {
                    self.overflow = true;
                }
                (self.new_storage(bytes.unwrap_or(u64::MAX / 4)), true)
            }
        };
        self.storages[storage].rc += 1;
        // A recorded op keeps its inputs alive (candle's BackpropOp holds Tensor clones). An
        // unrecorded op is kept only to know the inputs (for last-use lifetimes); it holds nothing.
        if tracked {
            for i in op.inputs() {
                self.nodes[i].rc += 1;
            }
        }
        self.nodes.push(Node {
            shape,
            dtype,
            op,
            storage,
            contiguous,
            is_var,
            tracked: tracked || is_var,
            is_int,
            rc: 1,
        });
        self.nodes.len() - 1
    }

    /// A view of `of` with a new shape (shares the storage).
    fn view(&mut self, of: Id, shape: Vec<usize>, op: Op, contiguous: bool) -> Id {
        let (dtype, storage) = (self.nodes[of].dtype, self.nodes[of].storage);
        let id = self.push(shape, dtype, op, Some(storage));
        self.nodes[id].contiguous = contiguous;
        id
    }

    /// Adds a handle to `t` (a clone of the tensor).
    pub fn hold(&mut self, t: Id) -> Id {
        self.nodes[t].rc += 1;
        t
    }

    /// Drops one handle to `t`; frees what nothing else holds.
    pub fn release(&mut self, t: Id) {
        let mut stack = vec![t];
        while let Some(t) = stack.pop() {
            let n = &mut self.nodes[t];
            assert!(n.rc > 0, "estimate: node {t} released twice");
            n.rc -= 1;
            if n.rc > 0 {
                continue;
            }
            let s = n.storage;
            if n.tracked && !n.is_var {
                stack.extend(n.op.inputs());
            }
            self.unshare(s);
        }
    }

    /// Drops one reference to storage `s`; frees it when none is left.
    fn unshare(&mut self, s: usize) {
        let st = &mut self.storages[s];
        st.rc -= 1;
        if st.rc == 0 {
            let (bytes, phase, module) = (st.bytes, st.phase, st.module);
            self.module_log.push((module, bytes, false));
            self.live = self.live.wrapping_sub(bytes);
            let ph = &mut self.live_by_phase[phase as usize];
            *ph = ph.wrapping_sub(bytes);
            let m = &mut self.live_by_module[module];
            *m = m.wrapping_sub(bytes);
        }
    }

    /// A buffer a kernel allocates and frees within one call (`kernels::product`'s tile):
    /// counts toward the peak, holds nothing after.
    pub fn scratch(&mut self, bytes: u64) {
        if bytes > 0 {
            let s = self.new_storage(bytes);
            self.storages[s].rc = 1;
            self.unshare(s);
        }
    }

    /// f32, or a view that covers its whole storage (contiguous or permuted): what the
    /// attention kernel reads in its own dtype (`kernels::attention`'s `dense`).
    pub fn dense(&self, t: Id) -> bool {
        let n = &self.nodes[t];
        n.dtype >= 4 || self.storages[n.storage].bytes == n.elems() * n.dtype
    }

    pub fn is_alive(&self, t: Id) -> bool {
        self.nodes[t].rc > 0
    }

    // ---- leaves --------------------------------------------------------------------------

    /// A trainable parameter (candle `Var`).
    pub fn var(&mut self, shape: &[usize], dtype: u64) -> Id {
        self.push_node(shape.to_vec(), dtype, Op::Leaf, None, true, true, false)
    }

    /// A tensor with no op: a detached parameter, an input, a constant.
    pub fn leaf(&mut self, shape: &[usize], dtype: u64) -> Id {
        self.push_node(shape.to_vec(), dtype, Op::Leaf, None, false, false, false)
    }

    /// Token ids and other integer tensors.
    pub fn ints(&mut self, shape: &[usize]) -> Id {
        self.push_node(shape.to_vec(), 4, Op::Leaf, None, false, false, true)
    }

    pub fn zeros_like(&mut self, t: Id) -> Id {
        let (shape, dtype) = (self.nodes[t].shape.clone(), self.nodes[t].dtype);
        self.leaf(&shape, dtype)
    }

    /// `detach()`: shares the storage, records nothing.
    pub fn detach(&mut self, t: Id) -> Id {
        let n = &self.nodes[t];
        if !n.tracked {
            return self.hold(t);
        }
        let (shape, dtype, storage, contiguous) =
            (n.shape.clone(), n.dtype, n.storage, n.contiguous);
        let id = self.push_node(shape, dtype, Op::Leaf, Some(storage), false, false, false);
        self.nodes[id].contiguous = contiguous;
        id
    }

    // ---- views ---------------------------------------------------------------------------

    pub fn reshape(&mut self, t: Id, shape: &[usize]) -> Id {
        if self.nodes[t].contiguous {
            self.view(t, shape.to_vec(), Op::Reshape(t), true)
        } else {
            let dtype = self.nodes[t].dtype;
            self.push(shape.to_vec(), dtype, Op::Reshape(t), None)
        }
    }

    pub fn transpose(&mut self, t: Id, a: usize, b: usize) -> Id {
        let mut shape = self.nodes[t].shape.clone();
        if a == b {
            return self.hold(t);
        }
        shape.swap(a, b);
        self.view(t, shape, Op::Transpose(t, a, b), false)
    }

    /// Transpose of the last two dims.
    pub fn t(&mut self, t: Id) -> Id {
        let r = self.nodes[t].rank();
        self.transpose(t, r - 2, r - 1)
    }

    pub fn permute(&mut self, t: Id, dims: &[usize]) -> Id {
        let shape = dims.iter().map(|&d| self.nodes[t].shape[d]).collect();
        self.view(t, shape, Op::Permute(t, dims.to_vec()), false)
    }

    pub fn narrow(&mut self, t: Id, dim: usize, start: usize, len: usize) -> Id {
        let mut shape = self.nodes[t].shape.clone();
        if start == 0 && len == shape[dim] {
            return self.hold(t);
        }
        shape[dim] = len;
        // Narrowing the outermost non-unit dim of a contiguous tensor stays contiguous.
        let contiguous =
            self.nodes[t].contiguous && self.nodes[t].shape[..dim].iter().all(|&d| d == 1);
        self.view(t, shape, Op::Narrow(t, dim, start, len), contiguous)
    }

    pub fn broadcast_as(&mut self, t: Id, shape: &[usize]) -> Id {
        self.view(t, shape.to_vec(), Op::Broadcast(t), false)
    }

    pub fn unsqueeze(&mut self, t: Id, dim: usize) -> Id {
        let mut shape = self.nodes[t].shape.clone();
        shape.insert(dim, 1);
        let c = self.nodes[t].contiguous;
        self.view(t, shape, Op::Reshape(t), c)
    }

    pub fn squeeze(&mut self, t: Id, dim: usize) -> Id {
        let mut shape = self.nodes[t].shape.clone();
        if shape[dim] != 1 {
            return self.hold(t);
        }
        shape.remove(dim);
        let c = self.nodes[t].contiguous;
        self.view(t, shape, Op::Reshape(t), c)
    }

    /// `t.get(i)`: narrow on dim 0, then a reshape (which copies a non-contiguous input).
    pub fn get(&mut self, t: Id, i: usize) -> Id {
        let n = self.narrow(t, 0, i, 1);
        let shape = self.nodes[n].shape[1..].to_vec();
        let r = self.reshape(n, &shape);
        self.release(n);
        r
    }

    pub fn contiguous(&mut self, t: Id) -> Id {
        if self.nodes[t].contiguous {
            return self.hold(t);
        }
        let (shape, dtype) = (self.nodes[t].shape.clone(), self.nodes[t].dtype);
        self.push(shape, dtype, Op::Copy(t), None)
    }

    // ---- compute -------------------------------------------------------------------------

    fn fresh(&mut self, like: Id, shape: Vec<usize>, op: Op) -> Id {
        let dtype = self.nodes[like].dtype;
        self.push(shape, dtype, op, None)
    }

    pub fn binary(&mut self, op: Bin, a: Id, b: Id) -> Id {
        let shape = self.nodes[a].shape.clone();
        self.fresh(a, shape, Op::Binary(op, a, b))
    }

    /// `broadcast_add` and friends: broadcast views where the shapes differ, then the op.
    pub fn broadcast(&mut self, op: Bin, a: Id, b: Id) -> Id {
        let sa = self.nodes[a].shape.clone();
        let sb = self.nodes[b].shape.clone();
        let rank = sa.len().max(sb.len());
        let pad = |s: &[usize]| -> Vec<usize> {
            let mut v = vec![1; rank - s.len()];
            v.extend_from_slice(s);
            v
        };
        let (pa, pb) = (pad(&sa), pad(&sb));
        let shape: Vec<usize> = pa.iter().zip(&pb).map(|(x, y)| *x.max(y)).collect();
        let va = if sa != shape {
            self.broadcast_as(a, &shape)
        } else {
            self.hold(a)
        };
        let vb = if sb != shape {
            self.broadcast_as(b, &shape)
        } else {
            self.hold(b)
        };
        let out = self.binary(op, va, vb);
        self.release(va);
        self.release(vb);
        out
    }

    pub fn unary(&mut self, op: Un, a: Id) -> Id {
        let shape = self.nodes[a].shape.clone();
        self.fresh(a, shape, Op::Unary(op, a))
    }

    /// `a * mul + add` (also `a * scalar`, `a + scalar`, `scalar - a`).
    pub fn affine(&mut self, a: Id, mul: f64) -> Id {
        let shape = self.nodes[a].shape.clone();
        self.fresh(a, shape, Op::Affine(a, mul))
    }

    pub fn sum_keepdim(&mut self, a: Id, dims: &[usize]) -> Id {
        let mut shape = self.nodes[a].shape.clone();
        for &d in dims {
            shape[d] = 1;
        }
        self.fresh(a, shape, Op::Sum(a, dims.to_vec()))
    }

    pub fn max_keepdim(&mut self, a: Id, dim: usize) -> Id {
        let mut shape = self.nodes[a].shape.clone();
        shape[dim] = 1;
        self.fresh(a, shape, Op::Max(a, vec![dim]))
    }

    /// candle's `mean_keepdim`: a sum, then an affine by 1/n.
    pub fn mean_keepdim(&mut self, a: Id, dim: usize) -> Id {
        let s = self.sum_keepdim(a, &[dim]);
        let m = self.affine(s, 1.0);
        self.release(s);
        m
    }

    /// candle's `mean_all`: a sum over every dim (then squeezed), then an affine.
    pub fn mean_all(&mut self, a: Id) -> Id {
        let dims: Vec<usize> = (0..self.nodes[a].rank()).collect();
        let s = self.sum_keepdim(a, &dims);
        let mut sq = s;
        for _ in 0..dims.len() {
            let next = self.squeeze(sq, 0);
            self.release(sq);
            sq = next;
        }
        let m = self.affine(sq, 1.0);
        self.release(sq);
        m
    }

    /// Batched matmul: (…, m, k) @ (…, k, n) → (…, m, n). Counts 2·m·k·n FLOPs per batch entry.
    pub fn matmul(&mut self, a: Id, b: Id) -> Id {
        let sa = self.nodes[a].shape.clone();
        let sb = self.nodes[b].shape.clone();
        let (m, k) = (sa[sa.len() - 2], sa[sa.len() - 1]);
        let n = sb[sb.len() - 1];
        let mut shape = sa[..sa.len() - 2].to_vec();
        let batch: u64 = shape.iter().map(|&d| d as u64).product();
        self.add_matmul_flops(batch, m, k, n);
        shape.extend([m, n]);
        self.fresh(a, shape, Op::Matmul(a, b))
    }

    /// Counts `batch` products of (m, k) @ (k, n) in the current phase.
    pub fn add_matmul_flops(&mut self, batch: u64, m: usize, k: usize, n: usize) {
        let f = 2u64
            .saturating_mul(batch)
            .saturating_mul(m as u64)
            .saturating_mul(k as u64)
            .saturating_mul(n as u64);
        self.flops[self.phase as usize] = self.flops[self.phase as usize].saturating_add(f);
    }

    /// A fused kernel's output: a fresh `shape` tensor of `like`'s dtype holding `inputs`.
    pub fn fused(&mut self, kind: Fused, inputs: &[Id], like: Id, shape: &[usize]) -> Id {
        self.fresh(like, shape.to_vec(), Op::Fused(kind, inputs.to_vec()))
    }

    /// A fused kernel's output of its own dtype (`dtype` bytes per element).
    pub fn fused_as(&mut self, kind: Fused, inputs: &[Id], shape: &[usize], dtype: u64) -> Id {
        self.push(
            shape.to_vec(),
            dtype,
            Op::Fused(kind, inputs.to_vec()),
            None,
        )
    }

    /// Wraps the output `y` of block `layer`, run under [`Sim::no_grad`], as a node that holds
    /// only the block's input `x` (shares `y`'s storage).
    pub fn checkpoint(&mut self, y: Id, x: Id, layer: usize) -> Id {
        let (shape, dtype, storage) = (
            self.nodes[y].shape.clone(),
            self.nodes[y].dtype,
            self.nodes[y].storage,
        );
        let id = self.push(shape, dtype, Op::Checkpoint(x, layer), Some(storage));
        self.nodes[id].contiguous = self.nodes[y].contiguous;
        id
    }

    /// `model::segments`' cut: when segmenting a recorded stream, `x` ends the current segment
    /// (kept in [`Sim::segments`]) and a fresh variable copy of it starts the next; otherwise
    /// `x` itself. Takes `x`'s handle, returns one.
    pub fn cut(&mut self, x: Id) -> Id {
        if !self.segmenting || !self.nodes[x].tracked {
            return x;
        }
        let (shape, dtype) = (self.nodes[x].shape.clone(), self.nodes[x].dtype);
        let v = self.var(&shape, dtype); // (B, T, C) copy
        if matches!(self.nodes[x].op, Op::Checkpoint(..)) {
            // A checkpointed block's output is dropped once copied: the segment keeps only
            // the block's input, and backward runs the block again.
            let old = self.nodes[x].storage;
            let empty = self.new_storage(0);
            self.storages[empty].rc += 1;
            self.nodes[x].storage = empty;
            self.unshare(old);
        }
        let held = self.hold(v);
        let input = self.segment_input.replace(held);
        self.segments.push((input, x));
        v
    }

    /// A `Var` sharing `t`'s storage: the input of a recomputed block, whose gradient backward
    /// collects like a parameter's.
    pub fn var_view(&mut self, t: Id) -> Id {
        let (shape, dtype, storage) = (
            self.nodes[t].shape.clone(),
            self.nodes[t].dtype,
            self.nodes[t].storage,
        );
        let id = self.push_node(shape, dtype, Op::Leaf, Some(storage), true, true, false);
        self.nodes[id].contiguous = self.nodes[t].contiguous;
        id
    }

    pub fn cat(&mut self, args: &[Id], dim: usize) -> Id {
        let mut shape = self.nodes[args[0]].shape.clone();
        shape[dim] = args.iter().map(|&a| self.nodes[a].shape[dim]).sum();
        self.fresh(args[0], shape, Op::Cat(args.to_vec(), dim))
    }

    /// Embedding lookup: table (V, C), ids (N) → (N, C).
    pub fn index_select(&mut self, table: Id, ids: Id) -> Id {
        let shape = vec![self.nodes[ids].elems() as usize, self.nodes[table].shape[1]];
        self.fresh(table, shape, Op::IndexSelect(table, ids))
    }

    /// `a.gather(ids, dim)` with ids of the output's shape.
    pub fn gather(&mut self, a: Id, ids: Id, dim: usize) -> Id {
        let shape = self.nodes[ids].shape.clone();
        self.fresh(a, shape, Op::Gather(a, ids, dim))
    }

    pub fn to_dtype(&mut self, a: Id, dtype: u64) -> Id {
        if self.nodes[a].dtype == dtype {
            return self.hold(a);
        }
        let shape = self.nodes[a].shape.clone();
        self.push(shape, dtype, Op::ToDtype(a), None)
    }

    /// A fresh tensor shaped like `like` from an op backward uses only (index_add, scatter_add,
    /// eq): recorded when an input is, never differentiated.
    pub fn other(&mut self, like: Id, inputs: &[Id]) -> Id {
        let shape = self.nodes[like].shape.clone();
        self.fresh(like, shape, Op::Other(inputs.to_vec()))
    }
}
