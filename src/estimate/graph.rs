//! The vocabulary of the replayed graph: node ids, the ops a node records (elementwise, views,
//! reductions, matmul, memscope's fused kernels, checkpoints), the inputs each op keeps alive
//! (candle 0.11.1's `BackpropOp`), and the phases bytes are charged to.

pub type Id = usize;

/// Elementwise binary ops.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bin {
    Add,
    Sub,
    Mul,
    Div,
}

/// Elementwise unary ops (the ones the models and candle's backward rules use).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Un {
    Exp,
    Log,
    Sqr,
    Sqrt,
    Neg,
    Recip,
    Tanh,
    Gelu,
    GeluErf,
    Erf,
    Silu,
    Powf,
}

/// The op that made a node, as candle records it.
#[derive(Clone, Debug)]
pub enum Op {
    /// Parameter, input or constant: no op.
    Leaf,
    Binary(Bin, Id, Id),
    Unary(Un, Id),
    Affine(Id, f64),
    /// Sum over the given dims, kept as size 1.
    Sum(Id, Vec<usize>),
    Max(Id, Vec<usize>),
    Matmul(Id, Id),
    Broadcast(Id),
    /// Reshape, squeeze and unsqueeze (a copy when the input is not contiguous).
    Reshape(Id),
    Transpose(Id, usize, usize),
    Permute(Id, Vec<usize>),
    Narrow(Id, usize, usize, usize),
    Copy(Id),
    Cat(Vec<Id>, usize),
    /// `arg.index_select(ids, 0)` (embedding lookup).
    IndexSelect(Id, Id),
    /// `arg.gather(ids, dim)`.
    Gather(Id, Id, usize),
    ToDtype(Id),
    /// Ops only backward uses (index_add, scatter_add, comparisons): never differentiated here.
    Other(Vec<Id>),
    /// A fused kernel (a candle CustomOp): holds its inputs; backward makes one fresh gradient
    /// per tracked input. Inputs that are not tracked (saved statistics, ids) get none.
    Fused(Fused, Vec<Id>),
    /// The output of transformer block `.1` run without recording (activation checkpointing):
    /// holds only the block's input; backward recomputes the block.
    Checkpoint(Id, usize),
}

/// Fused kernels the estimate knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fused {
    /// `kernels::gelu`: keeps its input; backward makes one input-sized gradient.
    Gelu,
    /// `kernels::layer_norm` (x, w, b): keeps its inputs; backward makes dx, dw, db.
    LayerNorm,
    /// `kernels::rms_norm` (x, w).
    RmsNorm,
    /// `kernels::swiglu` (gate, up): keeps both; backward makes dgate and dup.
    SwiGlu,
    /// `kernels::rope` (x (B, T, n, D), cos, sin) → (B, n, T, D): keeps its inputs (candle's
    /// custom ops hold their arguments); backward makes one x-sized gradient.
    Rope,
    /// `kernels::cross_entropy` (logits, targets, each row's max + log Σ exp (N) f32) → f32
    /// scalar; backward makes one logits-sized gradient.
    CrossEntropy,
    /// `kernels::linear` (x, W[, b]): keeps its inputs; backward makes dx, dW and db (dW into
    /// the sink when one is open). `out_in`: W is (O, I) (`nn.Linear`), else (I, O) (`Conv1D`);
    /// it decides which product copies W through `kernels::product`'s tile buffer.
    Linear { out_in: bool },
    /// `kernels::embedding` (table, ids): backward scatters into the table's gradient (in the
    /// sink when one is open).
    Embedding,
    /// `kernels::attention` (a packed qkv, or q, k, v; then the lse (B, H, T) f32): saves its
    /// inputs, its output and the lse instead of the (B, H, T, S) probabilities; backward
    /// recomputes the scores block by block and makes one gradient per input.
    Attention { causal: bool },
}

impl Op {
    /// The inputs the op refers to, in the order candle's graph walk visits them.
    pub fn inputs(&self) -> Vec<Id> {
        match self {
            Op::Leaf => vec![],
            Op::Binary(_, a, b) | Op::Matmul(a, b) | Op::IndexSelect(a, b) => vec![*a, *b],
            Op::Gather(a, b, _) => vec![*a, *b],
            Op::Unary(_, a)
            | Op::Affine(a, _)
            | Op::Sum(a, _)
            | Op::Max(a, _)
            | Op::Broadcast(a)
            | Op::Reshape(a)
            | Op::Transpose(a, _, _)
            | Op::Permute(a, _)
            | Op::Narrow(a, _, _, _)
            | Op::Copy(a)
            | Op::ToDtype(a) => vec![*a],
            Op::Cat(v, _) | Op::Other(v) | Op::Fused(_, v) => v.clone(),
            Op::Checkpoint(a, _) => vec![*a],
        }
    }
}

/// What a node's bytes are counted as, mirroring the measured phases.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SimPhase {
    Load,
    Forward,
    Backward,
    Optimizer,
    /// Mixed precision's per-step working copy of the weights (the engine's phase "other").
    Other,
}

pub const N_SIM_PHASES: usize = 5;
