//! SGD with momentum applied in place (PyTorch's rule, no dampening): buf ← μ·buf + g,
//! θ ← θ − lr·buf. The momentum buffer is f32, allocated once.

use super::elems;
use super::half_bits::{Narrow, Widen};
use super::simd::vector;
use candle_core::{backprop::GradStore, bail, CpuStorage, InplaceOp2, Layout, Result, Var};
use rayon::prelude::*;
use std::cell::RefCell;

pub struct Sgd {
    vars: Vec<Var>,
    buffers: Vec<Vec<f32>>,
    lr: f32,
    momentum: f32,
}

impl Sgd {
    pub fn new(vars: Vec<Var>, lr: f64, momentum: f64) -> Self {
        let buffers = vars.iter().map(|v| vec![0f32; v.elem_count()]).collect();
        Self {
            vars,
            buffers,
            lr: lr as f32,
            momentum: momentum as f32,
        }
    }

    pub fn step(&mut self, grads: &GradStore) -> Result<()> {
        for (var, buf) in self.vars.iter().zip(self.buffers.iter_mut()) {
            let Some(g) = grads.get(var) else { continue };
            let g = g.contiguous()?;
            let op = Step {
                buf: RefCell::new(buf),
                lr: self.lr,
                momentum: self.momentum,
            };
            var.as_tensor().inplace_op2(&g, &op)?;
        }
        Ok(())
    }
}

struct Step<'a> {
    buf: RefCell<&'a mut Vec<f32>>,
    lr: f32,
    momentum: f32,
}

impl InplaceOp2 for Step<'_> {
    fn name(&self) -> &'static str {
        "memscope-sgd"
    }

    fn cpu_fwd(
        &self,
        s1: &mut CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<()> {
        let mut buf = self.buf.borrow_mut();
        if buf.len() != l1.shape().elem_count() {
            bail!("sgd: parameter and momentum buffer differ in size");
        }
        let f = Momentum(&mut buf[..], self.lr, self.momentum);
        elems::update_in_place("sgd", (s1, l1), (s2, l2), f)
    }
}

/// One SGD-with-momentum step over a parameter, its gradient and momentum buffer, on every
/// thread, 8 lanes wide.
struct Momentum<'a>(&'a mut [f32], f32, f32);

impl elems::Update for Momentum<'_> {
    fn run<P: Narrow, G: Widen>(&mut self, p: &mut [P], g: &[G]) -> Result<()> {
        let (lr, mu) = (self.1, self.2);
        p.par_chunks_mut(16_384)
            .zip(g.par_chunks(16_384))
            .zip(self.0.par_chunks_mut(16_384))
            .for_each(|((p, g), m)| {
                vector(
                    #[inline(always)]
                    || {
                        for i in 0..p.len() {
                            m[i] = mu * m[i] + g[i].widen();
                            p[i] = P::narrow(p[i].widen() - lr * m[i]);
                        }
                    },
                )
            });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, Tensor};

    /// Three steps against the rule written with candle ops.
    #[test]
    fn matches_the_momentum_rule_in_candle_ops() {
        let dev = Device::Cpu;
        let init = Tensor::randn(0f32, 1.0, (19, 7), &dev).unwrap();
        let p = Var::from_tensor(&init).unwrap();
        let mut opt = Sgd::new(vec![p.clone()], 0.1, 0.9);
        let (mut theta, mut buf) = (init.clone(), init.zeros_like().unwrap());
        for _ in 0..3 {
            let g = Tensor::randn(0f32, 1.0, (19, 7), &dev).unwrap();
            let gs = (p.as_tensor() * &g)
                .unwrap()
                .sum_all()
                .unwrap()
                .backward()
                .unwrap();
            opt.step(&gs).unwrap();
            buf = ((buf * 0.9).unwrap() + &g).unwrap();
            theta = (theta - (&buf * 0.1).unwrap()).unwrap();
        }
        super::super::check::close(p.as_tensor(), &theta, 1e-5);
    }
}
