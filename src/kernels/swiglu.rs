//! SwiGLU's gate, forward and backward in one pass each: y = silu(g) · u = g·σ(g)·u (LLaMA's
//! MLP, before the down projection). candle runs `silu` and a `mul` as two tensors and keeps
//! the silu output for backward; this keeps only the two inputs.

use super::elems::{self, fast_exp, rows_per_task};
use super::simd::vector;
use crate::instrument::op_timer::{op_scope, op_scope_in, Pass};
use crate::instrument::scope;
use candle_core::backend::BackendStorage;
use candle_core::{CpuStorage, CustomOp2, Layout, Result, Shape, Tensor};
use rayon::prelude::*;

/// silu(gate) · up, both (…, F) of one shape → (…, F); differentiable in both.
pub fn swiglu(gate: &Tensor, up: &Tensor) -> Result<Tensor> {
    let _t = op_scope("swiglu", Pass::Forward);
    if gate.shape() != up.shape() {
        candle_core::bail!(
            "swiglu: gate {:?} and up {:?} differ in shape",
            gate.dims(),
            up.dims()
        );
    }
    gate.contiguous()?.apply_op2(
        &up.contiguous()?,
        SwiGlu {
            module: scope::current(),
        },
    )
}

#[inline(always)]
fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + fast_exp(-x))
}

struct SwiGlu {
    /// The module its forward ran in (its backward is timed there).
    module: u16,
}

impl CustomOp2 for SwiGlu {
    fn name(&self) -> &'static str {
        "memscope-swiglu"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let g = elems::read("swiglu", s1, l1)?;
        let u = elems::read("swiglu", s2, l2)?;
        let mut y = vec![0f32; g.len()];
        let chunk = rows_per_task(1);
        y.par_chunks_mut(chunk)
            .zip(g.par_chunks(chunk).zip(u.par_chunks(chunk)))
            .for_each(|(y, (g, u))| {
                vector(
                    #[inline(always)]
                    || {
                        for i in 0..y.len() {
                            y[i] = g[i] * sigmoid(g[i]) * u[i];
                        }
                    },
                )
            });
        Ok((elems::write("swiglu", y, s1.dtype())?, l1.shape().clone()))
    }

    fn bwd(
        &self,
        g: &Tensor,
        u: &Tensor,
        _y: &Tensor,
        dy: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>)> {
        let _t = op_scope_in(self.module, "swiglu", Pass::Backward);
        let (dg, du) = grads(g, u, &dy.contiguous()?)?;
        Ok((Some(dg), Some(du)))
    }
}

/// (g, u, dy) → (dg, du) in one pass, one sigmoid per element:
/// dg = dy·u·σ(g)(1 + g(1 − σ(g))), du = dy·silu(g). Both fresh, of g's shape and dtype.
fn grads(g: &Tensor, u: &Tensor, dy: &Tensor) -> Result<(Tensor, Tensor)> {
    let op = "swiglu backward";
    let n = g.elem_count();
    let (mut dg, mut du) = (vec![0f32; n], vec![0f32; n]);
    elems::with_f32(op, g, |g| {
        elems::with_f32(op, u, |u| {
            elems::with_f32(op, dy, |dy| {
                let chunk = rows_per_task(1);
                dg.par_chunks_mut(chunk)
                    .zip(du.par_chunks_mut(chunk))
                    .zip(g.par_chunks(chunk).zip(u.par_chunks(chunk)))
                    .zip(dy.par_chunks(chunk))
                    .for_each(|(((dg, du), (g, u)), dy)| {
                        vector(
                            #[inline(always)]
                            || {
                                for i in 0..dg.len() {
                                    let s = sigmoid(g[i]);
                                    let silu = g[i] * s;
                                    du[i] = dy[i] * silu;
                                    dg[i] = dy[i] * u[i] * (s + silu * (1.0 - s));
                                }
                            },
                        )
                    });
                Ok(())
            })
        })
    })?;
    let tensor = |v: Vec<f32>| Tensor::from_vec(v, g.shape(), g.device())?.to_dtype(g.dtype());
    Ok((tensor(dg)?, tensor(du)?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::check::{against_reference, grad_check};
    use candle_core::Device;

    #[test]
    fn matches_candle_silu_times_up_forward_and_backward() {
        let g = Tensor::randn(0f32, 3.0, (33, 65), &Device::Cpu).unwrap();
        let u = Tensor::randn(0f32, 1.0, (33, 65), &Device::Cpu).unwrap();
        against_reference(
            &[g, u],
            |t| swiglu(&t[0], &t[1]),
            |t| t[0].silu()? * &t[1],
            1e-5,
        );
    }

    #[test]
    fn gradient_matches_finite_differences() {
        grad_check(&[&[4, 5], &[4, 5]], |xs| swiglu(&xs[0], &xs[1]));
    }

    #[test]
    fn mismatched_shapes_are_an_error_naming_both() {
        let g = Tensor::zeros((2, 3), candle_core::DType::F32, &Device::Cpu).unwrap();
        let u = Tensor::zeros((3, 2), candle_core::DType::F32, &Device::Cpu).unwrap();
        let e = swiglu(&g, &u).unwrap_err().to_string();
        assert!(e.contains("[2, 3]") && e.contains("[3, 2]"), "{e}");
    }
}
