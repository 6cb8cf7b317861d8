//! GELU, tanh approximation (GPT-2's), forward and backward in one pass each:
//! y = ½x(1 + tanh(u)), u = √(2/π)(x + 0.044715x³). candle's `gelu` calls a scalar tanhf per
//! element and its backward builds a chain of ~14 elementwise tensors; this keeps only the
//! input for backward and makes one gradient tensor.

use super::elems::{self, fast_exp, rows_per_task};
use super::simd::vector;
use crate::instrument::op_timer::{op_scope, op_scope_in, Pass};
use crate::instrument::scope;
use candle_core::backend::BackendStorage;
use candle_core::{CpuStorage, CustomOp1, Layout, Result, Shape, Tensor};
use rayon::prelude::*;

const K: f32 = 0.797_884_6; // √(2/π)
const A: f32 = 0.044_715;

/// GELU (tanh) of `x`, any shape; differentiable.
pub fn gelu(x: &Tensor) -> Result<Tensor> {
    let _t = op_scope("gelu", Pass::Forward);
    x.contiguous()?.apply_op1(Gelu {
        module: scope::current(),
    })
}

struct Gelu {
    /// The module its forward ran in (the backward is timed there).
    module: u16,
}

/// `f` on every element, on the AVX2 path (pass an `#[inline(always)]` closure: see `simd`).
fn map(op: &str, s: &CpuStorage, l: &Layout, f: impl Fn(f32) -> f32 + Sync) -> Result<CpuStorage> {
    let x = elems::read(op, s, l)?;
    let mut y = vec![0f32; x.len()];
    let chunk = rows_per_task(1);
    y.par_chunks_mut(chunk)
        .zip(x.par_chunks(chunk))
        .for_each(|(y, x)| {
            vector(
                #[inline(always)]
                || y.iter_mut().zip(x).for_each(|(y, &x)| *y = f(x)),
            )
        });
    elems::write(op, y, s.dtype())
}

impl CustomOp1 for Gelu {
    fn name(&self) -> &'static str {
        "memscope-gelu"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> Result<(CpuStorage, Shape)> {
        // ½(1 + tanh(u)) = σ(2u): no cancellation for large negative x.
        let out = map(
            "gelu",
            s,
            l,
            #[inline(always)]
            |x| x / (1.0 + fast_exp(-2.0 * K * (x + A * x * x * x))),
        )?;
        Ok((out, l.shape().clone()))
    }

    fn bwd(&self, x: &Tensor, _y: &Tensor, g: &Tensor) -> Result<Option<Tensor>> {
        let _t = op_scope_in(self.module, "gelu", Pass::Backward);
        let g = g.contiguous()?;
        Ok(Some(x.detach().apply_op2_no_bwd(&g, &GeluGrad)?))
    }
}

/// (x, dy) → dy · gelu'(x).
struct GeluGrad;

impl candle_core::CustomOp2 for GeluGrad {
    fn name(&self) -> &'static str {
        "memscope-gelu-grad"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let x = elems::read("gelu backward", s1, l1)?;
        let g = elems::read("gelu backward", s2, l2)?;
        let mut dx = vec![0f32; x.len()];
        let chunk = rows_per_task(1);
        dx.par_chunks_mut(chunk)
            .zip(x.par_chunks(chunk).zip(g.par_chunks(chunk)))
            .for_each(|(d, (x, g))| {
                vector(
                    #[inline(always)]
                    || {
                        for i in 0..d.len() {
                            let x = x[i];
                            // s = σ(2u); d/dx x·s = s + x·2s(1 − s)·u'.
                            let s = 1.0 / (1.0 + fast_exp(-2.0 * K * (x + A * x * x * x)));
                            let du = K * (1.0 + 3.0 * A * x * x);
                            d[i] = g[i] * (s + 2.0 * x * s * (1.0 - s) * du);
                        }
                    },
                )
            });
        Ok((
            elems::write("gelu backward", dx, s1.dtype())?,
            l1.shape().clone(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::check::{against_reference, grad_check};
    use candle_core::Device;

    #[test]
    fn matches_candle_gelu_forward_and_backward() {
        let x = Tensor::randn(0f32, 3.0, (33, 65), &Device::Cpu).unwrap();
        against_reference(&[x], |t| gelu(&t[0]), |t| t[0].gelu(), 1e-5);
    }

    #[test]
    fn gradient_matches_finite_differences() {
        grad_check(&[&[4, 5]], |xs| gelu(&xs[0]));
    }
}
