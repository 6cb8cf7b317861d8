//! Rotary position embedding (Hugging Face's rotate-half convention) on a projection's heads in
//! one pass: reads the linear layer's output as (B, T, n, D) in place and writes the rotated
//! heads as (B, n, T, D), the layout attention reads. candle's op-by-op version makes a
//! contiguous copy, two narrows, a neg, a cat, two broadcast products and a sum (five fresh
//! tensors per call, and the graph keeps two of them). Backward applies the inverse rotation to
//! dy and writes dx as (B, T, n, D); the graph keeps only the op's arguments (x, which is the
//! projection's output, and the tables the model holds anyway).
//!
//! y₁ = x₁·cos₁ − x₂·sin₁, y₂ = x₂·cos₂ + x₁·sin₂ (halves of D); so
//! dx₁ = dy₁·cos₁ + dy₂·sin₂, dx₂ = dy₂·cos₂ − dy₁·sin₁.

use super::elems;
use crate::instrument::op_timer::{op_scope, op_scope_in, Pass};
use crate::instrument::scope;
use candle_core::backend::BackendStorage;
use candle_core::{CpuStorage, CustomOp3, Layout, Result, Shape, Tensor};
use rayon::prelude::*;

/// x (B, T, n, D), cos and sin (T, D) → (B, n, T, D) rotated; differentiable in x.
pub fn rope(x: &Tensor, cos: &Tensor, sin: &Tensor) -> Result<Tensor> {
    let _t = op_scope("rope", Pass::Forward);
    let (_, t, _, d) = x.dims4()?;
    if cos.dims() != [t, d] || sin.dims() != [t, d] || d % 2 != 0 {
        candle_core::bail!(
            "rope: x {:?} needs (T, D) = ({t}, {d}) tables with D even, got cos {:?} sin {:?}",
            x.dims(),
            cos.dims(),
            sin.dims()
        );
    }
    x.contiguous()?.apply_op3(
        &cos.contiguous()?,
        &sin.contiguous()?,
        Rope {
            module: scope::current(),
        },
    )
}

struct Rope {
    /// The module its forward ran in (its backward is timed there).
    module: u16,
}

/// Rotates one head row: `out` = rot(`x`) (or its inverse) with the tables' row `c`, `s`.
#[inline]
fn rotate(out: &mut [f32], x: &[f32], c: &[f32], s: &[f32], inverse: bool) {
    let h = x.len() / 2;
    let (o1, o2) = out.split_at_mut(h);
    let (x1, x2) = x.split_at(h);
    let (c1, c2) = c.split_at(h);
    let (s1, s2) = s.split_at(h);
    for i in 0..h {
        if inverse {
            o1[i] = x1[i] * c1[i] + x2[i] * s2[i];
            o2[i] = x2[i] * c2[i] - x1[i] * s1[i];
        } else {
            o1[i] = x1[i] * c1[i] - x2[i] * s1[i];
            o2[i] = x2[i] * c2[i] + x1[i] * s2[i];
        }
    }
}

fn tables<'a>(
    op: &str,
    (s2, l2): (&'a CpuStorage, &Layout),
    (s3, l3): (&'a CpuStorage, &Layout),
) -> Result<(std::borrow::Cow<'a, [f32]>, std::borrow::Cow<'a, [f32]>)> {
    Ok((elems::read(op, s2, l2)?, elems::read(op, s3, l3)?))
}

impl CustomOp3 for Rope {
    fn name(&self) -> &'static str {
        "memscope-rope"
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
        let (b, t, n, d) = l1.shape().dims4()?;
        let x = elems::read("rope", s1, l1)?; // (B, T, n, D)
        let (cos, sin) = tables("rope", (s2, l2), (s3, l3))?; // (T, D)
        let mut y = vec![0f32; x.len()]; // (B, n, T, D)
        y.par_chunks_mut(t * d).enumerate().for_each(|(bh, y)| {
            let (bi, h) = (bh / n, bh % n);
            for ti in 0..t {
                let src = ((bi * t + ti) * n + h) * d;
                let row = ti * d..(ti + 1) * d;
                rotate(
                    &mut y[ti * d..(ti + 1) * d],
                    &x[src..src + d],
                    &cos[row.clone()],
                    &sin[row],
                    false,
                );
            }
        });
        Ok((
            elems::write("rope", y, s1.dtype())?,
            Shape::from((b, n, t, d)),
        ))
    }

    fn bwd(
        &self,
        _x: &Tensor,
        cos: &Tensor,
        sin: &Tensor,
        _y: &Tensor,
        dy: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let _t = op_scope_in(self.module, "rope", Pass::Backward);
        let dx = dy
            .contiguous()?
            .apply_op3_no_bwd(&cos.detach(), &sin.detach(), &RopeGrad)?; // (B, T, n, D)
        Ok((Some(dx), None, None))
    }
}

/// (dy (B, n, T, D), cos, sin) → dx (B, T, n, D): the inverse rotation, transposed back.
struct RopeGrad;

impl CustomOp3 for RopeGrad {
    fn name(&self) -> &'static str {
        "memscope-rope-grad"
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
        let op = "rope backward";
        let (b, n, t, d) = l1.shape().dims4()?;
        let dy = elems::read(op, s1, l1)?; // (B, n, T, D)
        let (cos, sin) = tables(op, (s2, l2), (s3, l3))?; // (T, D)
        let mut dx = vec![0f32; dy.len()]; // (B, T, n, D)
        dx.par_chunks_mut(n * d).enumerate().for_each(|(bt, dx)| {
            let (bi, ti) = (bt / t, bt % t);
            let row = ti * d..(ti + 1) * d;
            for h in 0..n {
                let src = ((bi * n + h) * t + ti) * d;
                rotate(
                    &mut dx[h * d..(h + 1) * d],
                    &dy[src..src + d],
                    &cos[row.clone()],
                    &sin[row.clone()],
                    true,
                );
            }
        });
        Ok((elems::write(op, dx, s1.dtype())?, Shape::from((b, t, n, d))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::check::{against_reference, grad_check};
    use candle_core::{Device, D};

    /// candle's op-by-op RoPE on (B, n, T, D), as the model ran it before this kernel.
    fn reference(x: &Tensor, cos: &Tensor, sin: &Tensor) -> Result<Tensor> {
        let x = x.transpose(1, 2)?.contiguous()?; // (B, n, T, D)
        let half = x.dim(D::Minus1)? / 2;
        let x1 = x.narrow(D::Minus1, 0, half)?;
        let x2 = x.narrow(D::Minus1, half, half)?;
        let rotated = Tensor::cat(&[&x2.neg()?, &x1], D::Minus1)?;
        x.broadcast_mul(cos)? + rotated.broadcast_mul(sin)?
    }

    fn inputs(b: usize, t: usize, n: usize, d: usize) -> [Tensor; 3] {
        let dev = &Device::Cpu;
        [
            Tensor::randn(0f32, 1.0, (b, t, n, d), dev).unwrap(),
            Tensor::randn(0f32, 1.0, (t, d), dev).unwrap(),
            Tensor::randn(0f32, 1.0, (t, d), dev).unwrap(),
        ]
    }

    #[test]
    fn matches_candle_ops_forward_and_backward() {
        // The tables are constants (no gradient), as in the model.
        against_reference(
            &inputs(2, 7, 3, 8),
            |a| rope(&a[0], &a[1].detach(), &a[2].detach()),
            |a| reference(&a[0], &a[1].detach(), &a[2].detach()),
            1e-5,
        );
    }

    #[test]
    fn gradient_matches_finite_differences() {
        let [_, c, s] = inputs(1, 3, 1, 4);
        grad_check(&[&[2, 3, 2, 4]], |xs| rope(&xs[0], &c, &s));
    }

    #[test]
    fn bf16_matches_f32_within_its_rounding_forward_and_backward() {
        // bf16 is rotated in f32 and rounded once: on the same bf16-exact inputs and dy, the
        // f32 kernel's y and dx rounded once (2⁻⁹ relative), forward and backward.
        use candle_core::{DType, Var};
        let half = |t: &Tensor| t.to_dtype(DType::BF16).unwrap();
        let [x, c, s] = inputs(2, 5, 3, 8).map(|t| half(&t).to_dtype(DType::F32).unwrap());
        let run = |dt: DType| {
            let v = Var::from_tensor(&x.to_dtype(dt).unwrap()).unwrap();
            let (c, s) = (c.to_dtype(dt).unwrap(), s.to_dtype(dt).unwrap());
            let y = rope(v.as_tensor(), &c, &s).unwrap();
            assert_eq!(y.dtype(), dt);
            // dy = w, in eighths: exact in bf16, so both runs differentiate the same dy.
            let w: Vec<f32> = (0..y.elem_count())
                .map(|k| ((k * 7 % 17) as f32 - 8.0) / 8.0)
                .collect();
            let w = Tensor::from_vec(w, y.dims(), &Device::Cpu)
                .unwrap()
                .to_dtype(dt)
                .unwrap();
            let g = (y.clone() * w)
                .unwrap()
                .sum_all()
                .unwrap()
                .backward()
                .unwrap();
            let dx = g.get(v.as_tensor()).unwrap().to_dtype(DType::F32).unwrap();
            (y.to_dtype(DType::F32).unwrap(), dx)
        };
        let ((y32, dx32), (y16, dx16)) = (run(DType::F32), run(DType::BF16));
        crate::kernels::check::close(&y16, &y32, 1e-2);
        crate::kernels::check::close(&dx16, &dx32, 1e-2);
    }

    #[test]
    fn wrong_tables_are_an_error_naming_the_shapes() {
        let [x, c, _] = inputs(1, 4, 2, 8);
        let e = rope(&x, &c, &c.narrow(0, 0, 3).unwrap())
            .unwrap_err()
            .to_string();
        assert!(e.contains("[1, 4, 2, 8]") && e.contains("[3, 8]"), "{e}");
    }
}
