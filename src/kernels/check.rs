//! Test helpers: element-wise closeness and finite-difference gradient checks.

use super::product::{Bf16Product, Strided};
use candle_core::{Device, Result, Tensor, Var};
use half::bf16;

/// Asserts |a − b| ≤ rtol·max(|b|, 0.1·max|b|) element-wise, after widening both to f32: relative
/// to each element, with a floor for elements that are small after cancellation (GELU's
/// gradient near x ≈ −2.5 is the difference of two terms ~7× larger than it).
pub fn close(a: &Tensor, b: &Tensor, rtol: f32) {
    assert_eq!(a.dims(), b.dims());
    let f = |t: &Tensor| -> Vec<f32> {
        t.to_dtype(candle_core::DType::F32)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap()
    };
    let (a, b) = (f(a), f(b));
    let scale = b.iter().fold(0f32, |m, x| m.max(x.abs())).max(1e-30);
    for (i, (x, y)) in a.iter().zip(&b).enumerate() {
        let tol = rtol * y.abs().max(0.1 * scale);
        assert!(
            (x - y).abs() <= tol,
            "element {i}: {x} vs {y} (tolerance {tol})"
        );
    }
}

/// Compares the autograd gradient of Σ f(xs)·r (r fixed random) with central differences,
/// for inputs of the given shapes. f32 throughout, so the step is 1e-2 and the tolerance 2%.
pub fn grad_check(shapes: &[&[usize]], f: impl Fn(&[Tensor]) -> Result<Tensor>) {
    let dev = Device::Cpu;
    let xs: Vec<Var> = shapes
        .iter()
        .map(|&s| Var::from_tensor(&Tensor::randn(0f32, 1.0, s.to_vec(), &dev).unwrap()).unwrap())
        .collect();
    let ts: Vec<Tensor> = xs.iter().map(|v| v.as_tensor().clone()).collect();
    let y = f(&ts).unwrap();
    let r = Tensor::randn(0f32, 1.0, y.shape(), &dev).unwrap();
    let objective = |ts: &[Tensor]| -> f64 {
        let y = f(ts).unwrap();
        (y * &r)
            .unwrap()
            .sum_all()
            .unwrap()
            .to_scalar::<f32>()
            .unwrap() as f64
    };
    let grads = (y * &r).unwrap().sum_all().unwrap().backward().unwrap();
    let h = 1e-2f32;
    for (k, x) in xs.iter().enumerate() {
        let g: Vec<f32> = grads
            .get(x)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap();
        let base: Vec<f32> = x.flatten_all().unwrap().to_vec1().unwrap();
        for i in 0..base.len() {
            let at = |d: f32| {
                let mut v = base.clone();
                v[i] += d;
                let mut inputs: Vec<Tensor> = ts.to_vec();
                inputs[k] = Tensor::from_vec(v, x.shape(), &dev).unwrap();
                objective(&inputs)
            };
            let fd = ((at(h) - at(-h)) / (2.0 * h as f64)) as f32;
            let tol = 2e-2 * fd.abs().max(g[i].abs()).max(0.1);
            assert!(
                (fd - g[i]).abs() <= tol,
                "input {k} element {i}: autograd {} vs finite difference {fd}",
                g[i]
            );
        }
    }
}

/// Runs `ours` on f32 copies of `inputs` and `reference` (the unfused candle ops) on f64
/// copies, and checks the outputs and the gradients of Σ y·r (r fixed random) agree within
/// `rtol`: the f64 reference is exact to well below the f32 rounding being checked.
pub fn against_reference(
    inputs: &[Tensor],
    ours: impl Fn(&[Tensor]) -> Result<Tensor>,
    reference: impl Fn(&[Tensor]) -> Result<Tensor>,
    rtol: f32,
) {
    let vars = |dt| -> Vec<Var> {
        inputs
            .iter()
            .map(|t| Var::from_tensor(&t.to_dtype(dt).unwrap()).unwrap())
            .collect()
    };
    let (a, b) = (vars(candle_core::DType::F32), vars(candle_core::DType::F64));
    let ta: Vec<Tensor> = a.iter().map(|v| v.as_tensor().clone()).collect();
    let tb: Vec<Tensor> = b.iter().map(|v| v.as_tensor().clone()).collect();
    let (ya, yb) = (ours(&ta).unwrap(), reference(&tb).unwrap());
    close(&ya, &yb, rtol);
    let r = Tensor::randn(0f32, 1.0, ya.shape(), &Device::Cpu).unwrap();
    let r64 = r.to_dtype(candle_core::DType::F64).unwrap();
    let ga = (ya * &r).unwrap().sum_all().unwrap().backward().unwrap();
    let gb = (yb * &r64).unwrap().sum_all().unwrap().backward().unwrap();
    for (i, (va, vb)) in a.iter().zip(&b).enumerate() {
        match (ga.get(va), gb.get(vb)) {
            (Some(x), Some(y)) => close(x, y, rtol),
            (x, y) => assert_eq!(x.is_some(), y.is_some(), "input {i}: gradient presence"),
        }
    }
}

/// Asserts that the bf16 product `run` (`what` names it) equals the exact sum of products in
/// every operand layout (row- and column-major on each side) at (m, n, k), accumulated into a
/// destination with a wider row stride and scaled, and that without `acc` it overwrites.
pub fn bf16_product(run: Bf16Product, what: &str, (m, n, k): (usize, usize, usize)) {
    let values = |len: usize, seed: usize| -> Vec<bf16> {
        (0..len)
            .map(|i| bf16::from_f32((((i * 7 + seed) % 23) as f32 - 11.0) / 8.0))
            .collect()
    };
    // (r, c) row-major or column-major over `v`.
    let view = |v: &[bf16], (r, c): (usize, usize), column_major: bool| {
        let (rs, cs) = if column_major { (1, r) } else { (c, 1) };
        Strided {
            ptr: v.as_ptr(),
            rs,
            cs,
        }
    };
    let at = |v: &[bf16], s: Strided<bf16>, r: usize, c: usize| -> f64 {
        let off = (s.ptr as usize - v.as_ptr() as usize) / 2;
        v[off + r * s.rs + c * s.cs].to_f64()
    };
    for (lhs_cm, rhs_cm) in [(false, false), (false, true), (true, false), (true, true)] {
        let (a, b) = (values(m * k, 1), values(k * n, 5));
        let (l, r) = (view(&a, (m, k), lhs_cm), view(&b, (k, n), rhs_cm));
        let mut dst = vec![0.5f32; m * (n + 3)]; // row stride n + 3
                                                 // SAFETY: the views cover their buffers; dst has m rows of n + 3.
        unsafe { run((m, n, k), dst.as_mut_ptr(), n + 3, true, l, r, 2.0) };
        for i in 0..m {
            for j in 0..n + 3 {
                let want = if j < n {
                    0.5 + 2.0
                        * (0..k)
                            .map(|d| at(&a, l, i, d) * at(&b, r, d, j))
                            .sum::<f64>()
                } else {
                    0.5
                };
                let got = dst[i * (n + 3) + j] as f64;
                // Exact products of bf16 values, summed in f32.
                assert!(
                    (got - want).abs() <= 1e-5 * k as f64,
                    "{what}: layout {lhs_cm}/{rhs_cm} ({i}, {j}): {got} vs {want}"
                );
            }
        }
    }
    // Without acc the destination is overwritten.
    let (a, b) = (values(3 * 5, 2), values(5 * 2, 3));
    let mut dst = vec![f32::NAN; 6];
    let (l, r) = (view(&a, (3, 5), false), view(&b, (5, 2), false));
    // SAFETY: as above.
    unsafe { run((3, 2, 5), dst.as_mut_ptr(), 2, false, l, r, 1.0) };
    assert!(dst.iter().all(|v| v.is_finite()), "{what}: {dst:?}");
}
