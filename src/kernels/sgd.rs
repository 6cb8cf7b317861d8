//! SGD with momentum applied in place (PyTorch's rule, no dampening): buf ← μ·buf + g,
//! θ ← θ − lr·buf. The momentum buffer is f32, allocated once.

use super::{elems, half_bits};
use candle_core::backend::BackendStorage;
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
        let g = elems::read("sgd gradient", s2, l2)?;
        let Some((a, b)) = l1.contiguous_offsets() else {
            bail!("sgd: the parameter must be contiguous")
        };
        let mut buf = self.buf.borrow_mut();
        if g.len() != b - a || buf.len() != b - a {
            bail!("sgd: parameter, gradient and momentum buffer differ in size");
        }
        let (lr, mu) = (self.lr, self.momentum);
        macro_rules! run {
            ($p:expr, $to:expr, $from:expr) => {
                $p[a..b]
                    .par_chunks_mut(16_384)
                    .zip(g.par_chunks(16_384))
                    .zip(buf.par_chunks_mut(16_384))
                    .for_each(|((p, g), m)| {
                        for i in 0..p.len() {
                            m[i] = mu * m[i] + g[i];
                            p[i] = $from($to(p[i]) - lr * m[i]);
                        }
                    })
            };
        }
        match s1 {
            CpuStorage::F32(p) => run!(p, |x: f32| x, |x: f32| x),
            CpuStorage::BF16(p) => run!(p, half_bits::bf16_to_f32, half_bits::f32_to_bf16),
            CpuStorage::F16(p) => run!(p, |x: half::f16| x.to_f32(), half::f16::from_f32),
            other => bail!("sgd: unsupported parameter dtype {:?}", other.dtype()),
        }
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
