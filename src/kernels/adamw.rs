//! AdamW applied in place: one pass over each parameter, its gradient and its two moments,
//! with no temporaries (candle-nn's AdamW makes about 14 parameter-sized tensors per
//! parameter). Decoupled weight decay and bias correction as in candle-nn and PyTorch:
//! θ ← θ·(1 − lr·λ) − lr · m̂ / (√v̂ + ε). The moments are f32 whatever the parameter dtype,
//! allocated once, at construction.

use super::elems;
use super::half_bits::{Narrow, Widen};
use super::simd::vector;
use crate::instrument::op_timer::{op_scope_in, Pass};
use crate::instrument::scope;
use candle_core::{backprop::GradStore, bail, CpuStorage, InplaceOp2, Layout, Result, Var};
use candle_nn::ParamsAdamW;
use rayon::prelude::*;
use std::cell::RefCell;

pub struct AdamW {
    vars: Vec<Var>,
    /// First and second moment per parameter, f32.
    moments: Vec<(Vec<f32>, Vec<f32>)>,
    params: ParamsAdamW,
    step: i32,
}

impl AdamW {
    pub fn new(vars: Vec<Var>, params: ParamsAdamW) -> Self {
        let moments = vars
            .iter()
            .map(|v| (vec![0f32; v.elem_count()], vec![0f32; v.elem_count()]))
            .collect();
        Self {
            vars,
            moments,
            params,
            step: 0,
        }
    }

    /// One step over every parameter that has a gradient in `grads`.
    pub fn step(&mut self, grads: &GradStore) -> Result<()> {
        let _t = op_scope_in(scope::OTHER_ID, "adamw", Pass::Forward);
        self.step += 1;
        let p = &self.params;
        let h = Hyper {
            lr: p.lr as f32,
            decay: (1.0 - p.lr * p.weight_decay) as f32,
            beta1: p.beta1 as f32,
            beta2: p.beta2 as f32,
            eps: p.eps as f32,
            correct1: (1.0 / (1.0 - p.beta1.powi(self.step))) as f32,
            correct2: (1.0 / (1.0 - p.beta2.powi(self.step))) as f32,
        };
        for (var, (m, v)) in self.vars.iter().zip(self.moments.iter_mut()) {
            let Some(g) = grads.get(var) else { continue };
            let g = g.contiguous()?;
            let op = Step {
                m: RefCell::new(m),
                v: RefCell::new(v),
                h,
            };
            var.as_tensor().inplace_op2(&g, &op)?;
        }
        Ok(())
    }
}

#[derive(Clone, Copy)]
struct Hyper {
    lr: f32,
    decay: f32,
    beta1: f32,
    beta2: f32,
    eps: f32,
    correct1: f32,
    correct2: f32,
}

impl Hyper {
    /// Updates one element; returns the new parameter value.
    #[inline(always)]
    fn update(&self, theta: f32, g: f32, m: &mut f32, v: &mut f32) -> f32 {
        *m = self.beta1 * *m + (1.0 - self.beta1) * g;
        *v = self.beta2 * *v + (1.0 - self.beta2) * g * g;
        let m_hat = *m * self.correct1;
        let v_hat = *v * self.correct2;
        theta * self.decay - self.lr * m_hat / (v_hat.sqrt() + self.eps)
    }
}

struct Step<'a> {
    m: RefCell<&'a mut Vec<f32>>,
    v: RefCell<&'a mut Vec<f32>>,
    h: Hyper,
}

const CHUNK: usize = 16_384;

impl InplaceOp2 for Step<'_> {
    fn name(&self) -> &'static str {
        "memscope-adamw"
    }

    fn cpu_fwd(
        &self,
        s1: &mut CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<()> {
        let (mut m, mut v) = (self.m.borrow_mut(), self.v.borrow_mut());
        if m.len() != l1.shape().elem_count() {
            bail!("adamw: parameter and moments differ in size");
        }
        let (m, v) = (&mut m[..], &mut v[..]);
        elems::update_in_place("adamw", (s1, l1), (s2, l2), Moments(m, v, self.h))
    }
}

/// One AdamW step over a parameter, its gradient and moments, on every thread, 8 lanes wide.
struct Moments<'a>(&'a mut [f32], &'a mut [f32], Hyper);

impl elems::Update for Moments<'_> {
    fn run<P: Narrow, G: Widen>(&mut self, p: &mut [P], g: &[G]) -> Result<()> {
        let h = self.2;
        p.par_chunks_mut(CHUNK)
            .zip(g.par_chunks(CHUNK))
            .zip(self.0.par_chunks_mut(CHUNK))
            .zip(self.1.par_chunks_mut(CHUNK))
            .for_each(|(((p, g), m), v)| {
                vector(
                    #[inline(always)]
                    || {
                        for i in 0..p.len() {
                            let new = h.update(p[i].widen(), g[i].widen(), &mut m[i], &mut v[i]);
                            p[i] = P::narrow(new);
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
    use candle_nn::Optimizer;

    /// Five steps against candle-nn's AdamW on the same parameters and gradients.
    #[test]
    fn matches_candle_nn_adamw() {
        let dev = Device::Cpu;
        let init = Tensor::randn(0f32, 1.0, (37, 53), &dev).unwrap();
        let (a, b) = (
            Var::from_tensor(&init).unwrap(),
            Var::from_tensor(&init).unwrap(),
        );
        let hp = ParamsAdamW {
            lr: 0.01,
            weight_decay: 0.1,
            ..ParamsAdamW::default()
        };
        let mut ours = AdamW::new(vec![a.clone()], hp.clone());
        let mut theirs = candle_nn::AdamW::new(vec![b.clone()], hp).unwrap();
        for step in 0..5 {
            let g = Tensor::randn(0f32, 1.0 + step as f32, (37, 53), &dev).unwrap();
            let ga = (a.as_tensor() * &g)
                .unwrap()
                .sum_all()
                .unwrap()
                .backward()
                .unwrap();
            let gb = (b.as_tensor() * &g)
                .unwrap()
                .sum_all()
                .unwrap()
                .backward()
                .unwrap();
            ours.step(&ga).unwrap();
            theirs.step(&gb).unwrap();
        }
        super::super::check::close(a.as_tensor(), b.as_tensor(), 1e-5);
    }

    #[test]
    fn bf16_parameters_follow_the_f32_update() {
        let dev = Device::Cpu;
        let init = Tensor::randn(0f32, 1.0, (8, 16), &dev).unwrap();
        let a = Var::from_tensor(&init.to_dtype(candle_core::DType::BF16).unwrap()).unwrap();
        let f = Var::from_tensor(&init).unwrap();
        let g = Tensor::randn(0f32, 1.0, (8, 16), &dev).unwrap();
        let mut oa = AdamW::new(vec![a.clone()], ParamsAdamW::default());
        let mut of = AdamW::new(vec![f.clone()], ParamsAdamW::default());
        let gs = |v: &Var, g: &Tensor| {
            let g = g.to_dtype(v.dtype()).unwrap();
            (v.as_tensor() * g)
                .unwrap()
                .sum_all()
                .unwrap()
                .backward()
                .unwrap()
        };
        oa.step(&gs(&a, &g)).unwrap();
        of.step(&gs(&f, &g)).unwrap();
        let a32 = a.as_tensor().to_dtype(candle_core::DType::F32).unwrap();
        super::super::check::close(&a32, f.as_tensor(), 1e-2);
    }
}
