//! LayerNorm over the last dim, forward and backward in one pass each: y = x̂·w + b with
//! x̂ = (x − mean)/√(var + eps). candle's op-by-op version keeps ~6 row-sized and (…, 1)
//! tensors per call for backward and builds more in backward; this keeps only its inputs and
//! recomputes mean and 1/σ per row in backward.

use super::elems::{self, rows_per_task, with_f32};
use super::simd::vector;
use crate::instrument::op_timer::{op_scope, op_scope_in, Pass};
use crate::instrument::scope;
use candle_core::backend::BackendStorage;
use candle_core::{bail, CpuStorage, CustomOp3, Layout, Result, Shape, Tensor};
use rayon::prelude::*;

/// LayerNorm of `x` (…, C) with weight and bias (C) → (…, C); differentiable in all three.
pub fn layer_norm(x: &Tensor, w: &Tensor, b: &Tensor, eps: f64) -> Result<Tensor> {
    let _t = op_scope("layer norm", Pass::Forward);
    let c = x.dim(candle_core::D::Minus1)?;
    if w.dims() != [c] || b.dims() != [c] {
        bail!(
            "layer_norm: weight and bias must be ({c},), got {:?} and {:?}",
            w.dims(),
            b.dims()
        );
    }
    x.contiguous()?.apply_op3(
        &w.contiguous()?,
        &b.contiguous()?,
        LayerNorm {
            eps: eps as f32,
            module: scope::current(),
        },
    )
}

#[derive(Clone, Copy)]
struct LayerNorm {
    eps: f32,
    /// The module its forward ran in (its backward is timed there).
    module: u16,
}

/// Mean and 1/σ of one row.
#[inline(always)]
pub(crate) fn moments(row: &[f32], eps: f32) -> (f32, f32) {
    let n = row.len() as f32;
    let mean = elems::sum_by(row, |x| x) / n;
    let var = elems::sum_by(row, |x| (x - mean) * (x - mean)) / n;
    (mean, 1.0 / (var + eps).sqrt())
}

impl CustomOp3 for LayerNorm {
    fn name(&self) -> &'static str {
        "memscope-layer-norm"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
        s3: &CpuStorage,
        l3: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let x = elems::read("layer_norm input", s1, l1)?;
        let w = elems::read("layer_norm weight", s2, l2)?;
        let b = elems::read("layer_norm bias", s3, l3)?;
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
                            let (mean, rstd) = moments(x, self.eps);
                            for (((y, &x), &w), &b) in
                                y.iter_mut().zip(x).zip(w.iter()).zip(b.iter())
                            {
                                *y = (x - mean) * rstd * w + b;
                            }
                        }
                    },
                )
            });
        Ok((
            elems::write("layer_norm", y, s1.dtype())?,
            l1.shape().clone(),
        ))
    }

    fn bwd(
        &self,
        x: &Tensor,
        w: &Tensor,
        b: &Tensor,
        _y: &Tensor,
        g: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let _t = op_scope_in(self.module, "layer norm", Pass::Backward);
        let g = g.contiguous()?;
        let c = w.elem_count();
        let (dx, dw, db) = with_f32("layer_norm backward", x, |x| {
            with_f32("layer_norm backward", w, |w| {
                with_f32("layer_norm backward", &g, |g| {
                    Ok(backward(x, w, g, c, self.eps))
                })
            })
        })?;
        let dx = Tensor::from_vec(dx, x.shape(), x.device())?.to_dtype(x.dtype())?;
        let dw = Tensor::from_vec(dw, c, w.device())?.to_dtype(w.dtype())?;
        let db = Tensor::from_vec(db, c, b.device())?.to_dtype(b.dtype())?;
        Ok((
            x.track_op().then_some(dx),
            w.track_op().then_some(dw),
            b.track_op().then_some(db),
        ))
    }
}

/// (Σ w·g, Σ w·g·(x − mean)) over one row, in 16 lanes so the loop vectorizes.
#[inline(always)]
fn wg_sums(w: &[f32], g: &[f32], x: &[f32], mean: f32) -> (f32, f32) {
    const L: usize = 16;
    let (mut a, mut b) = ([0f32; L], [0f32; L]);
    let n = w.len() / L * L;
    let chunks = w[..n]
        .chunks_exact(L)
        .zip(g[..n].chunks_exact(L))
        .zip(x[..n].chunks_exact(L));
    for ((w, g), x) in chunks {
        for j in 0..L {
            let wg = w[j] * g[j];
            a[j] += wg;
            b[j] += wg * (x[j] - mean);
        }
    }
    let (mut s1, mut s2) = (a.iter().sum::<f32>(), b.iter().sum::<f32>());
    for i in n..w.len() {
        let wg = w[i] * g[i];
        s1 += wg;
        s2 += wg * (x[i] - mean);
    }
    (s1, s2)
}

/// dx, dw, db. dx = (1/σ)(w∘g − mean(w∘g) − x̂·mean(w∘g∘x̂)); dw = Σ g∘x̂; db = Σ g, the sums
/// over rows taken per task, then added.
fn backward(x: &[f32], w: &[f32], g: &[f32], c: usize, eps: f32) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let mut dx = vec![0f32; x.len()];
    let rows = rows_per_task(c);
    let partial: Vec<(Vec<f32>, Vec<f32>)> = dx
        .par_chunks_mut(c * rows)
        .zip(x.par_chunks(c * rows).zip(g.par_chunks(c * rows)))
        .map(|(dx, (x, g))| {
            let (mut dw, mut db) = (vec![0f32; c], vec![0f32; c]);
            vector(
                #[inline(always)]
                || {
                    for ((dx, x), g) in dx.chunks_mut(c).zip(x.chunks(c)).zip(g.chunks(c)) {
                        let (mean, rstd) = moments(x, eps);
                        for (((dw, db), &g), &x) in dw.iter_mut().zip(db.iter_mut()).zip(g).zip(x) {
                            let xh = (x - mean) * rstd;
                            *dw += g * xh;
                            *db += g;
                        }
                        let (s1, s2) = wg_sums(w, g, x, mean);
                        let s2 = s2 * rstd; // Σ w·g·x̂
                        let (m1, m2) = (s1 / c as f32, s2 / c as f32);
                        for (((dx, &w), &g), &x) in dx.iter_mut().zip(w).zip(g).zip(x) {
                            let xh = (x - mean) * rstd;
                            *dx = rstd * (w * g - m1 - xh * m2);
                        }
                    }
                },
            );
            (dw, db)
        })
        .collect();
    let (mut dw, mut db) = (vec![0f32; c], vec![0f32; c]);
    for (pw, pb) in partial {
        dw.iter_mut().zip(pw).for_each(|(a, b)| *a += b);
        db.iter_mut().zip(pb).for_each(|(a, b)| *a += b);
    }
    (dx, dw, db)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::check::{against_reference, grad_check};
    use candle_core::Device;

    #[test]
    fn matches_the_unfused_layer_norm_forward_and_backward() {
        let dev = Device::Cpu;
        let x = Tensor::randn(0f32, 2.0, (3, 17, 48), &dev).unwrap();
        let w = Tensor::randn(1f32, 0.5, 48, &dev).unwrap();
        let b = Tensor::randn(0f32, 0.5, 48, &dev).unwrap();
        against_reference(
            &[x, w, b],
            |t| layer_norm(&t[0], &t[1], &t[2], 1e-5),
            |t| crate::kernels::unfused::layer_norm(&t[0], &t[1], &t[2], 1e-5),
            1e-5,
        );
    }

    #[test]
    fn gradient_matches_finite_differences() {
        grad_check(&[&[3, 6], &[6], &[6]], |xs| {
            layer_norm(&xs[0], &xs[1], &xs[2], 1e-5)
        });
    }
}
