//! Segmented backward: the training graph is cut at every block boundary, and backward runs
//! one segment at a time from the loss down, dropping each segment's graph — and with it the
//! activations that segment saved — as soon as its gradients are out.
//!
//! candle's `Tensor::backward` walks the whole graph while the loss keeps every saved
//! activation alive until it returns, so activations and all the gradients coexist at the end
//! of backward. Here the peak holds the gradients made so far plus the activations of the
//! segments not yet processed (PyTorch frees saved tensors the same way, node by node).
//!
//! Each cut copies the residual stream (B, T, C) into a fresh `Var`: the next segment's graph
//! starts there, and that variable's gradient is the one injected into the segment below.
//!
//! Activation checkpointing (`--checkpoint`) is the same cut with less kept: a block's forward
//! runs on its detached input with detached weights, so it records no graph and its
//! activations are freed as it goes; only the block's input is kept, and backward runs the
//! block again, recording, just before its segment's backward (PyTorch's
//! `torch.utils.checkpoint`).

use crate::kernels::sink;
use candle_core::backprop::GradStore;
use candle_core::{CpuStorage, CustomOp1, Layout, Result, Shape, Tensor, Var};

/// One transformer block's forward, input (B, T, C) → output (B, T, C). `track`: on the
/// model's variables (recording a graph), or on detached copies of them (recording nothing).
pub type BlockFn<'m> = Box<dyn Fn(&Tensor, bool) -> Result<Tensor> + 'm>;

/// What a model calls on its residual stream: `cut` after the embedding, `block` for every
/// transformer block; each returns the tensor the rest of the model reads.
pub trait Cuts<'m> {
    fn cut(&mut self, x: Tensor) -> Result<Tensor>;
    fn block(&mut self, x: &Tensor, f: BlockFn<'m>) -> Result<Tensor> {
        let y = f(x, true)?;
        self.cut(y)
    }
}

/// No cuts: the forward of inference and of the plain graph.
pub struct Uncut;

impl Cuts<'_> for Uncut {
    fn cut(&mut self, x: Tensor) -> Result<Tensor> {
        Ok(x)
    }
}

pub type Cut<'a, 'm> = &'a mut dyn Cuts<'m>;

/// A piece of the forward graph: the variable it reads (none for the embedding), and the
/// output it produced with its graph, or the block to run again (checkpointed).
enum Part<'m> {
    Graph(Option<Var>, Tensor),
    Recompute(Var, BlockFn<'m>),
}

/// The forward graph in pieces: the embedding (no input variable) and every block, then the
/// head's input variable.
pub struct Segments<'m> {
    parts: Vec<Part<'m>>,
    head_input: Var,
}

struct Recorder<'m> {
    parts: Vec<Part<'m>>,
    input: Option<Var>,
    checkpoint: bool,
}

impl<'m> Cuts<'m> for Recorder<'m> {
    fn cut(&mut self, x: Tensor) -> Result<Tensor> {
        let v = Var::from_tensor(&x.detach())?; // (B, T, C) copy: the next segment's leaf
        let next = v.as_tensor().clone();
        self.parts.push(Part::Graph(self.input.replace(v), x));
        Ok(next)
    }

    fn block(&mut self, x: &Tensor, f: BlockFn<'m>) -> Result<Tensor> {
        let input = match (&self.input, self.checkpoint) {
            (Some(v), true) => v.clone(),
            _ => {
                let y = f(x, true)?;
                return self.cut(y);
            }
        };
        let y = f(&x.detach(), false)?; // (B, T, C), no graph
        let v = Var::from_tensor(&y)?;
        drop(y);
        let next = v.as_tensor().clone();
        self.input = Some(v);
        self.parts.push(Part::Recompute(input, f));
        Ok(next)
    }
}

/// Runs `forward` with a cut at every boundary → (its output, the segments).
pub fn forward<'m>(
    forward: impl FnOnce(Cut<'_, 'm>) -> Result<Tensor>,
) -> Result<(Tensor, Segments<'m>)> {
    forward_with(false, forward)
}

/// [`forward`], with every block checkpointed when `checkpoint` is set.
pub fn forward_with<'m>(
    checkpoint: bool,
    forward: impl FnOnce(Cut<'_, 'm>) -> Result<Tensor>,
) -> Result<(Tensor, Segments<'m>)> {
    let mut rec = Recorder {
        parts: Vec::new(),
        input: None,
        checkpoint,
    };
    let out = forward(&mut rec)?;
    let head_input = rec.input.ok_or_else(|| {
        candle_core::Error::Msg("internal: the model never called its cut".into())
    })?;
    Ok((
        out,
        Segments {
            parts: rec.parts,
            head_input,
        },
    ))
}

impl Segments<'_> {
    /// Backward from `loss` (a scalar computed from the forward's output), segment by segment →
    /// the gradients of `vars` only, detached, added to `acc` (earlier micro-batches'
    /// gradients) when given.
    pub fn backward(self, loss: Tensor, vars: &[Var], acc: Option<GradStore>) -> Result<GradStore> {
        // The linear and embedding kernels put their weights' gradients in the sink, added in
        // place across segments and micro-batches (`kernels::sink`); the rest comes through
        // candle's stores and is added here.
        let mut seed = std::collections::HashMap::new();
        if let Some(mut acc) = acc {
            for v in vars {
                if let Some(g) = acc.remove(v.as_tensor()) {
                    seed.insert(v.as_tensor().id(), g);
                }
            }
        }
        let (mut kept, mut sunk) = sink::collect(seed, || self.backward_segments(loss, vars))?;
        for v in vars {
            let Some(g) = sunk.remove(&v.as_tensor().id()) else {
                continue;
            };
            let g = match kept.remove(v.as_tensor()) {
                Some(prev) => (prev + g)?.detach(),
                None => g,
            };
            kept.insert(v.as_tensor(), g);
        }
        Ok(kept)
    }

    fn backward_segments(self, loss: Tensor, vars: &[Var]) -> Result<GradStore> {
        let Segments { parts, head_input } = self;
        let mut kept = GradStore::default();
        let mut all = loss.backward()?;
        drop(loss); // frees the head's graph: logits and the loss's buffers
        let mut g = Some(take(&mut all, head_input.as_tensor())?); // (B, T, C)
        keep_params(all, vars, &mut kept)?;
        for part in parts.into_iter().rev() {
            let (input, out) = match part {
                Part::Graph(input, out) => (input, out),
                Part::Recompute(input, f) => {
                    let out = f(input.as_tensor(), true)?; // (B, T, C), recording
                    (Some(input), out)
                }
            };
            let g_out = g
                .take()
                .expect("every segment above the embedding has an input");
            let root = out.apply_op1(Inject(g_out))?; // scalar; backward hands the gradient to `out`
            let mut all = root.backward()?;
            drop((root, out)); // frees this segment's graph and the activations it saved
            if let Some(v) = &input {
                g = Some(take(&mut all, v.as_tensor())?);
            }
            keep_params(all, vars, &mut kept)?;
        }
        Ok(kept)
    }
}

/// The gradient of a segment's input variable, detached.
fn take(all: &mut GradStore, v: &Tensor) -> Result<Tensor> {
    all.remove(v)
        .map(|g| g.detach())
        .ok_or_else(|| candle_core::Error::Msg("internal: a segment input got no gradient".into()))
}

/// Moves the parameters' gradients from one segment's store into `kept` (adding where a
/// parameter is used by several segments: a tied embedding). Everything else is dropped:
/// candle leaves gradients of constants (the mask, a detached max) in the store. Detached,
/// because a gradient records the op that made it (`hᵀ @ grad` holds `h`), which would keep
/// the activations alive through the optimizer step (36 MiB on tiny-gpt2).
fn keep_params(mut all: GradStore, vars: &[Var], kept: &mut GradStore) -> Result<()> {
    for v in vars {
        let Some(g) = all.remove(v.as_tensor()) else {
            continue;
        };
        let g = match kept.remove(v.as_tensor()) {
            Some(prev) => (prev + g)?,
            None => g,
        };
        kept.insert(v.as_tensor(), g.detach());
    }
    Ok(())
}

/// Injects a known gradient: forward returns a scalar zero, backward hands `.0` to the input.
struct Inject(Tensor);

impl CustomOp1 for Inject {
    fn name(&self) -> &'static str {
        "inject-grad"
    }

    fn cpu_fwd(&self, _s: &CpuStorage, _l: &Layout) -> Result<(CpuStorage, Shape)> {
        Ok((CpuStorage::F32(vec![0.0]), Shape::from(())))
    }

    fn bwd(&self, _arg: &Tensor, _res: &Tensor, _grad_res: &Tensor) -> Result<Option<Tensor>> {
        Ok(Some(self.0.clone()))
    }
}
