//! Softmax + cross-entropy fused: mean over rows of logsumexp(x) − x[target], forward and
//! backward. Forward keeps nothing beyond its inputs (candle's version keeps the f32 logits,
//! the shifted logits and their exp: three logits-sized buffers) but each row's max + log Σ exp
//! (N f32, dropped with the graph), so that backward makes the gradient (softmax − one-hot)/N
//! in one pass over the logits: exactly one logits-sized buffer, in the logits' dtype.

use super::elems::{self, fast_exp, rows_per_task};
use super::simd::vector;
use crate::instrument::op_timer::{op_scope_in, Pass};
use crate::instrument::scope;
use candle_core::backend::BackendStorage;
use candle_core::{bail, CpuStorage, CustomOp2, DType, Layout, Result, Shape, Tensor};
use rayon::prelude::*;
use std::sync::Mutex;

/// Mean cross-entropy of `logits` (…, V) against `targets` (…) u32 → scalar f32. Any leading
/// dims are rows: a model's (B, T, V) logits go in as they are (a reshape would be a graph
/// node, whose backward candle runs as zeros + add on a logits-sized gradient).
pub fn cross_entropy(logits: &Tensor, targets: &Tensor) -> Result<Tensor> {
    let _t = op_scope_in(scope::HEAD_ID, "cross-entropy", Pass::Forward);
    let lead = match logits.dims() {
        [lead @ .., _] if !lead.is_empty() => lead,
        d => bail!("cross_entropy: logits must be (…, V), got {d:?}"),
    };
    if targets.dims() != lead || targets.dtype() != DType::U32 {
        bail!(
            "cross_entropy: targets must be {lead:?} u32, got {:?} {:?}",
            targets.dims(),
            targets.dtype()
        );
    }
    logits.contiguous()?.apply_op2(
        &targets.contiguous()?,
        CrossEntropy {
            shift: Mutex::new(Vec::new()),
        },
    )
}

struct CrossEntropy {
    /// Each row's max + log Σ exp from forward (N), for backward.
    shift: Mutex<Vec<f32>>,
}

fn targets<'a>(s: &'a CpuStorage, l: &Layout) -> Result<&'a [u32]> {
    match (s, l.contiguous_offsets()) {
        (CpuStorage::U32(t), Some((a, b))) => Ok(&t[a..b]),
        _ => bail!("cross_entropy: targets must be contiguous u32"),
    }
}

/// (rows, V) of logits (…, V).
fn rows(l: &Layout) -> (usize, usize) {
    let v = l.dims().last().copied().unwrap_or(1);
    (l.shape().elem_count() / v.max(1), v)
}

/// max and log Σ exp(x − max) of one row.
#[inline(always)]
fn max_lse(row: &[f32]) -> (f32, f32) {
    let max = elems::max(row);
    let sum = elems::sum_by(row, |x| fast_exp(x - max));
    (max, sum.ln())
}

impl CustomOp2 for CrossEntropy {
    fn name(&self) -> &'static str {
        "memscope-cross-entropy"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let (n, v) = rows(l1);
        let x = elems::read("cross_entropy logits", s1, l1)?;
        let t = targets(s2, l2)?;
        if let Some(&bad) = t.iter().find(|&&t| t as usize >= v) {
            bail!("cross_entropy: target id {bad} is outside the vocabulary (size {v})");
        }
        let shift: Vec<f32> = x
            .par_chunks(v)
            .map(|row| {
                let (max, lse) = vector(
                    #[inline(always)]
                    || max_lse(row),
                );
                lse + max
            })
            .collect();
        let total: f64 = x
            .chunks(v)
            .zip(t)
            .zip(&shift)
            .map(|((row, &t), &s)| (s - row[t as usize]) as f64)
            .sum();
        *self.shift.lock().unwrap_or_else(|e| e.into_inner()) = shift;
        Ok((
            CpuStorage::F32(vec![(total / n as f64) as f32]),
            Shape::from(()),
        ))
    }

    fn bwd(
        &self,
        logits: &Tensor,
        targets: &Tensor,
        _loss: &Tensor,
        g: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>)> {
        let _t = op_scope_in(scope::HEAD_ID, "cross-entropy", Pass::Backward);
        let scale = g.to_dtype(DType::F32)?.to_scalar::<f32>()?;
        let shift = self.shift.lock().unwrap_or_else(|e| e.into_inner());
        let op = CrossEntropyGrad {
            scale,
            shift: &shift,
        };
        Ok((Some(logits.detach().apply_op2_no_bwd(targets, &op)?), None))
    }
}

/// (logits, targets) → scale · (softmax(logits) − one-hot(targets)) / N, with each row's
/// max + log Σ exp from forward (recomputed when forward's are not there).
struct CrossEntropyGrad<'a> {
    scale: f32,
    shift: &'a [f32],
}

impl CustomOp2 for CrossEntropyGrad<'_> {
    fn name(&self) -> &'static str {
        "memscope-cross-entropy-grad"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let (n, v) = rows(l1);
        let x = elems::read("cross_entropy backward", s1, l1)?;
        let t = targets(s2, l2)?;
        let k = self.scale / n as f32;
        // Every element is written below (no zeroing pass over a logits-sized buffer first).
        let mut d = Vec::<f32>::with_capacity(x.len());
        let rows = rows_per_task(v);
        let saved = (self.shift.len() == n).then_some(self.shift);
        d.spare_capacity_mut()[..x.len()]
            .par_chunks_mut(v * rows)
            .zip(x.par_chunks(v * rows).zip(t.par_chunks(rows)))
            .enumerate()
            .for_each(|(task, (d, (x, t)))| {
                vector(
                    #[inline(always)]
                    || {
                        for (r, ((d, x), &t)) in d.chunks_mut(v).zip(x.chunks(v)).zip(t).enumerate()
                        {
                            let shift = match saved {
                                Some(s) => s[task * rows + r],
                                None => {
                                    let (max, lse) = max_lse(x);
                                    lse + max
                                }
                            };
                            for (d, &x) in d.iter_mut().zip(x) {
                                d.write(k * fast_exp(x - shift));
                            }
                            // SAFETY: the loop above wrote the whole row.
                            unsafe { *d[t as usize].assume_init_mut() -= k };
                        }
                    },
                )
            });
        // SAFETY: the tasks above wrote every row.
        unsafe { d.set_len(x.len()) };
        Ok((
            elems::write("cross_entropy backward", d, s1.dtype())?,
            l1.shape().clone(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::check::{close, grad_check};
    use candle_core::{Device, Var};

    #[test]
    fn matches_the_unfused_loss_and_gradient() {
        let dev = Device::Cpu;
        let x = Var::from_tensor(&Tensor::randn(0f32, 4.0, (37, 101), &dev).unwrap()).unwrap();
        let t = Tensor::from_vec((0..37u32).map(|i| (i * 7) % 101).collect(), 37, &dev).unwrap();
        let ours = cross_entropy(&x, &t).unwrap();
        let theirs = crate::kernels::unfused::cross_entropy(&x, &t).unwrap();
        close(&ours, &theirs, 1e-5);
        let go = ours.backward().unwrap();
        let gt = theirs.backward().unwrap();
        close(go.get(&x).unwrap(), gt.get(&x).unwrap(), 1e-5);
    }

    #[test]
    fn leading_dims_are_rows_with_the_gradient_in_the_logits_shape() {
        let dev = Device::Cpu;
        let x = Var::from_tensor(&Tensor::randn(0f32, 4.0, (3, 5, 11), &dev).unwrap()).unwrap();
        let t = Tensor::from_vec((0..15u32).map(|i| (i * 7) % 11).collect(), (3, 5), &dev).unwrap();
        let ours = cross_entropy(&x, &t).unwrap();
        let flat = (x.reshape((15, 11)).unwrap(), t.flatten_all().unwrap());
        let theirs = crate::kernels::unfused::cross_entropy(&flat.0, &flat.1).unwrap();
        close(&ours, &theirs, 1e-5);
        let (go, gt) = (ours.backward().unwrap(), theirs.backward().unwrap());
        let g = go.get(&x).unwrap();
        assert_eq!(g.dims(), [3, 5, 11]);
        close(g, gt.get(&x).unwrap(), 1e-5);
        let e = cross_entropy(&x, &t.flatten_all().unwrap())
            .unwrap_err()
            .to_string();
        assert!(e.contains("targets must be [3, 5]"), "{e}");
    }

    #[test]
    fn gradient_matches_finite_differences() {
        let t = Tensor::new(&[2u32, 0, 4], &Device::Cpu).unwrap();
        grad_check(&[&[3, 5]], |xs| cross_entropy(&xs[0], &t));
    }

    #[test]
    fn a_target_outside_the_vocabulary_is_an_error_naming_it() {
        let x = Tensor::zeros((2, 4), DType::F32, &Device::Cpu).unwrap();
        let t = Tensor::new(&[1u32, 9], &Device::Cpu).unwrap();
        let e = cross_entropy(&x, &t).unwrap_err().to_string();
        assert!(e.contains("target id 9") && e.contains("size 4"), "{e}");
    }
}
