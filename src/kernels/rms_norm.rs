//! RMSNorm over the last dim, forward and backward in one pass each: y = x/√(mean(x²) + eps)·w.
//! Keeps only its inputs; backward recomputes 1/rms per row.

use super::elems::{self, rows_per_task, with_f32};
use super::simd::vector;
use crate::instrument::op_timer::{op_scope, op_scope_in, Pass};
use crate::instrument::scope;
use candle_core::backend::BackendStorage;
use candle_core::{bail, CpuStorage, CustomOp2, Layout, Result, Shape, Tensor};
use rayon::prelude::*;

/// RMSNorm of `x` (…, C) with weight (C) → (…, C); differentiable in both.
pub fn rms_norm(x: &Tensor, w: &Tensor, eps: f64) -> Result<Tensor> {
    let _t = op_scope("rms norm", Pass::Forward);
    let c = x.dim(candle_core::D::Minus1)?;
    if w.dims() != [c] {
        bail!("rms_norm: weight must be ({c},), got {:?}", w.dims());
    }
    x.contiguous()?.apply_op2(
        &w.contiguous()?,
        RmsNorm {
            eps: eps as f32,
            module: scope::current(),
        },
    )
}

#[derive(Clone, Copy)]
struct RmsNorm {
    eps: f32,
    /// The module its forward ran in (its backward is timed there).
    module: u16,
}

#[inline(always)]
fn rstd(row: &[f32], eps: f32) -> f32 {
    let ms = elems::sum_by(row, |x| x * x) / row.len() as f32;
    1.0 / (ms + eps).sqrt()
}

impl CustomOp2 for RmsNorm {
    fn name(&self) -> &'static str {
        "memscope-rms-norm"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let x = elems::read("rms_norm input", s1, l1)?;
        let w = elems::read("rms_norm weight", s2, l2)?;
        let c = w.len();
        let mut y = vec![0f32; x.len()];
        let rows = rows_per_task(c);
        y.par_chunks_mut(c * rows)
            .zip(x.par_chunks(c * rows))
            .for_each(|(y, x)| {
                vector(
                    #[inline(always)]
                    || {
                        for (y, x) in y.chunks_mut(c).zip(x.chunks(c)) {
                            let r = rstd(x, self.eps);
                            for ((y, &x), &w) in y.iter_mut().zip(x).zip(w.iter()) {
                                *y = x * r * w;
                            }
                        }
                    },
                )
            });
        Ok((elems::write("rms_norm", y, s1.dtype())?, l1.shape().clone()))
    }

    fn bwd(
        &self,
        x: &Tensor,
        w: &Tensor,
        _y: &Tensor,
        g: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>)> {
        let _t = op_scope_in(self.module, "rms norm", Pass::Backward);
        let g = g.contiguous()?;
        let c = w.elem_count();
        let eps = self.eps;
        let (dx, dw) = with_f32("rms_norm backward", x, |x| {
            with_f32("rms_norm backward", w, |w| {
                with_f32("rms_norm backward", &g, |g| Ok(backward(x, w, g, c, eps)))
            })
        })?;
        let dx = Tensor::from_vec(dx, x.shape(), x.device())?.to_dtype(x.dtype())?;
        let dw = Tensor::from_vec(dw, c, w.device())?.to_dtype(w.dtype())?;
        Ok((x.track_op().then_some(dx), w.track_op().then_some(dw)))
    }
}

/// dx = r·(w∘g − x̂·mean(w∘g∘x̂)), x̂ = x·r; dw = Σ g∘x̂.
fn backward(x: &[f32], w: &[f32], g: &[f32], c: usize, eps: f32) -> (Vec<f32>, Vec<f32>) {
    let mut dx = vec![0f32; x.len()];
    let rows = rows_per_task(c);
    let partial: Vec<Vec<f32>> = dx
        .par_chunks_mut(c * rows)
        .zip(x.par_chunks(c * rows).zip(g.par_chunks(c * rows)))
        .map(|(dx, (x, g))| {
            let mut dw = vec![0f32; c];
            vector(
                #[inline(always)]
                || {
                    for ((dx, x), g) in dx.chunks_mut(c).zip(x.chunks(c)).zip(g.chunks(c)) {
                        let r = rstd(x, eps);
                        for ((dw, &g), &x) in dw.iter_mut().zip(g).zip(x) {
                            *dw += g * x * r;
                        }
                        let s = r * elems::sum_by3(w, g, x, |w, g, x| w * g * x); // Σ w·g·x̂
                        let m = s / c as f32;
                        for (((dx, &w), &g), &x) in dx.iter_mut().zip(w).zip(g).zip(x) {
                            *dx = r * (w * g - x * r * m);
                        }
                    }
                },
            );
            dw
        })
        .collect();
    let mut dw = vec![0f32; c];
    for p in partial {
        dw.iter_mut().zip(p).for_each(|(a, b)| *a += b);
    }
    (dx, dw)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::check::{against_reference, grad_check};
    use candle_core::Device;

    #[test]
    fn matches_the_unfused_rms_norm_forward_and_backward() {
        let dev = Device::Cpu;
        let x = Tensor::randn(0f32, 2.0, (4, 9, 40), &dev).unwrap();
        let w = Tensor::randn(1f32, 0.5, 40, &dev).unwrap();
        against_reference(
            &[x, w],
            |t| rms_norm(&t[0], &t[1], 1e-5),
            |t| crate::kernels::unfused::rms_norm(&t[0], &t[1], 1e-5),
            1e-5,
        );
    }

    #[test]
    fn gradient_matches_finite_differences() {
        grad_check(&[&[3, 6], &[6]], |xs| rms_norm(&xs[0], &xs[1], 1e-5));
    }
}
