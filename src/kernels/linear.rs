//! Linear layers as one op: y = x·Wᵀ + b (`nn.Linear`, W (out, in)) or y = x·W + b (GPT-2's
//! `Conv1D`, W (in, out)), f32, with the bias written into the output before gemm adds the
//! product onto it.
//!
//! candle's `x.matmul(&w.t())?.broadcast_add(&b)` keeps two (N, out) tensors per layer in a
//! training graph (the add holds the product it was given) and its backward builds the weight
//! gradient as a tracked (in, out) product, transposes it and adds it to zeros: the tracked
//! result holds the product and the zeros until the end of backward, three weight-sized
//! buffers where one is needed (on GPT-2's tied 50257×768 head, 294 MiB of a 2.46 GiB peak).
//! Here forward keeps only the output, and backward makes dx, dW and db, each once, detached,
//! straight from strided views (no transposed copies).
//! Shape vocabulary: N rows, I in features, O out features.

use super::dot_bf16;
use super::elems::{self, rows_per_task};
use super::product::{product, Operand};
use super::sink;
use super::widen::widened;
use super::{panels, strips};
use crate::instrument::op_timer::{op_scope, op_scope_in, Pass};
use crate::instrument::scope;
use candle_core::backend::BackendStorage;
use candle_core::{
    bail, CpuStorage, CustomOp2, CustomOp3, DType, InplaceOp3, Layout, Result, Shape, Tensor,
};
use rayon::prelude::*;

/// `x (…, I) @ w (O, I)ᵀ + b (O)` → (…, O): the `nn.Linear` layout. Differentiable. f32, or
/// bf16 / f16 storage with f32 products (see [`half_forward`]). Leading dims are rows, read in
/// place: a model passes (B, T, C) as it is, since a reshape to (B·T, C) would be a graph node
/// whose backward candle runs as zeros + add on an activation-sized gradient.
pub fn linear(x: &Tensor, w: &Tensor, b: Option<&Tensor>) -> Result<Tensor> {
    apply(x, w, b, Weight::OutIn)
}

/// `x (…, I) @ w (I, O) + b (O)` → (…, O): GPT-2's `Conv1D` layout. Differentiable.
pub fn conv1d(x: &Tensor, w: &Tensor, b: &Tensor) -> Result<Tensor> {
    apply(x, w, Some(b), Weight::InOut)
}

/// How the weight is stored.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Weight {
    /// (O, I), `nn.Linear`.
    OutIn,
    /// (I, O), `Conv1D`.
    InOut,
}

fn apply(x: &Tensor, w: &Tensor, b: Option<&Tensor>, layout: Weight) -> Result<Tensor> {
    let _t = op_scope("linear", Pass::Forward);
    let i = match x.dims() {
        [_, .., i] => *i,
        d => bail!("linear: x must have rows and features (…, I), got {d:?}"),
    };
    let (wi, o) = weight_dims(w.layout(), layout)?;
    if wi != i || b.is_some_and(|b| b.dims() != [o]) {
        bail!(
            "linear: x {:?}, weight {:?} and bias {:?} do not fit (…, I), {} and (O)",
            x.dims(),
            w.dims(),
            b.map(|b| b.dims()),
            if layout == Weight::OutIn {
                "(O, I)"
            } else {
                "(I, O)"
            }
        )
    }
    let dt = x.dtype();
    let float = matches!(dt, DType::F32 | DType::BF16 | DType::F16);
    let same = w.dtype() == dt && b.is_none_or(|b| b.dtype() == dt);
    if !float || !same || !x.device().is_cpu() {
        if w.rank() != 2 {
            bail!(
                "linear: a weight kept in panels (an f32 inference store's) needs an f32 CPU input, got {dt:?}"
            )
        }
        let y = match layout {
            Weight::OutIn => x.broadcast_matmul(&w.t()?)?,
            Weight::InOut => x.broadcast_matmul(w)?,
        }; // (…, O)
        return match b {
            Some(b) => y.broadcast_add(b),
            None => Ok(y),
        };
    }
    match b {
        Some(b) => x.apply_op3(
            w,
            b,
            Linear {
                layout,
                module: scope::current(),
            },
        ),
        None => x.apply_op2(
            w,
            Linear {
                layout,
                module: scope::current(),
            },
        ),
    }
}

/// (I, O) of a weight in `layout`: its dims, or those of a panel view ([`panels::view`]).
fn weight_dims(l: &Layout, layout: Weight) -> Result<(usize, usize)> {
    if let Some(s) = panels::recognise(l, layout == Weight::OutIn) {
        return Ok((s.i, s.o));
    }
    let (w0, w1) = l.shape().dims2()?;
    Ok(match layout {
        Weight::OutIn => (w1, w0),
        Weight::InOut => (w0, w1),
    })
}

/// A 2-d operand: its elements, offset and (row, column) strides.
#[derive(Clone, Copy)]
pub(super) struct Mat<'a> {
    v: &'a [f32],
    off: usize,
    rs: usize,
    cs: usize,
}

impl<'a> Mat<'a> {
    fn of(op: &str, v: &'a [f32], l: &Layout) -> Result<Self> {
        match l.stride() {
            &[rs, cs] => Ok(Mat {
                v,
                off: l.start_offset(),
                rs,
                cs,
            }),
            s => bail!("{op}: expects a 2-d operand, strides {s:?}"),
        }
    }
    /// The transposed view.
    fn t(self) -> Self {
        Mat {
            rs: self.cs,
            cs: self.rs,
            ..self
        }
    }
    fn ptr(&self) -> *const f32 {
        self.v[self.off..].as_ptr()
    }
    /// A contiguous row-major (rows, cols) buffer.
    pub(super) fn full(v: &'a [f32], cols: usize) -> Self {
        Mat {
            v,
            off: 0,
            rs: cols,
            cs: 1,
        }
    }
}

/// `l` as an (N, I) layout: a 2-d one as it is (any strides), more dims collapsed into rows,
/// which needs them contiguous.
fn as_rows(l: &Layout) -> Result<Layout> {
    match l.dims() {
        [_, _] => Ok(l.clone()),
        [lead @ .., i] if l.is_contiguous() && !lead.is_empty() => Ok(
            Layout::contiguous_with_offset((lead.iter().product::<usize>(), *i), l.start_offset()),
        ),
        d => bail!(
            "linear: a {}-d input must be contiguous (strides {:?})",
            d.len(),
            l.stride()
        ),
    }
}

/// The output shape of a linear over `x`: x's leading dims, then `o`.
fn out_shape(x: &Layout, o: usize) -> Shape {
    let mut d = x.dims().to_vec();
    if let Some(last) = d.last_mut() {
        *last = o;
    }
    Shape::from(d)
}

/// `t` (…, F) as a detached (N, F) tensor (a view when contiguous), for backward.
fn rows_of(t: &Tensor) -> Result<Tensor> {
    match t.rank() {
        2 => Ok(t.clone()),
        r => t.detach().flatten_to(r - 2),
    }
}

/// dst (m, n) row-major = lhs (m, k) · rhs (k, n) [+ dst when `acc`], split over rayon's
/// threads when gemm finds it worth it (candle's own matmul does the same).
fn mm(m: usize, n: usize, k: usize, dst: &mut [f32], acc: bool, lhs: Mat, rhs: Mat) {
    assert_eq!(dst.len(), m * n);
    // SAFETY: `dst` is m×n and initialised.
    unsafe { mm_to(m, n, k, dst.as_mut_ptr(), acc, lhs, rhs) }
}

/// A fresh (m, n) row-major = lhs (m, k) · rhs (k, n), written by gemm with no zeroing first.
fn mm_new(m: usize, n: usize, k: usize, lhs: Mat, rhs: Mat) -> Vec<f32> {
    // SAFETY: without `acc` the product writes every one of the m×n elements, reading none.
    unsafe { elems::written(m * n, |dst| mm_to(m, n, k, dst, false, lhs, rhs)) }
}

/// [`mm`] into a pointer.
///
/// # Safety
/// `dst` must be valid for m×n writes, and initialised when `acc`.
#[allow(clippy::too_many_arguments)]
unsafe fn mm_to(m: usize, n: usize, k: usize, dst: *mut f32, acc: bool, lhs: Mat, rhs: Mat) {
    let op = |m: Mat| Operand {
        ptr: m.ptr(),
        rs: m.rs,
        cs: m.cs,
    };
    // SAFETY: the caller vouches for `dst`; `Mat::of` took the operands' offsets and strides
    // from layouts candle checked against their storages, and `apply` checked the shapes fit.
    unsafe { product((m, n, k), dst, n, acc, op(lhs), op(rhs), 1.0, true) }
}

/// A fresh (N, O) with the bias `b` (O) in every row.
fn bias_rows(n: usize, b: &[f32]) -> Vec<f32> {
    let o = b.len();
    let mut y = Vec::with_capacity(n * o);
    y.spare_capacity_mut()
        .par_chunks_mut(o * rows_per_task(o))
        .for_each(|rows| {
            for r in rows.chunks_mut(o) {
                r.iter_mut().zip(b).for_each(|(y, &b)| {
                    y.write(b);
                });
            }
        });
    // SAFETY: every row was written with the bias above.
    unsafe { y.set_len(n * o) };
    y
}

/// y (N, O) = x · W [+ b], W a strip buffer's elements, strips `width` wide ([`panels`]).
fn forward_panels(
    x: Mat,
    (w, width): (&[f32], usize),
    b: Option<&[f32]>,
    (n, i, o): (usize, usize, usize),
) -> Vec<f32> {
    assert!(w.len() >= i * o);
    let x = (x.ptr(), x.rs, x.cs);
    // SAFETY: `Mat::of` took x's offset and strides from a layout candle checked, `apply`
    // checked that x is (N, I), and the buffer holds the O·I weights (asserted above); without
    // a bias the product writes every element of y, with one it adds onto the bias rows.
    unsafe {
        match b {
            None => elems::written(n * o, |y| {
                strips::product((n, i, o), width, (y, o), false, x, w.as_ptr())
            }),
            Some(b) => {
                let mut y = bias_rows(n, b);
                strips::product((n, i, o), width, (y.as_mut_ptr(), o), true, x, w.as_ptr());
                y
            }
        }
    }
}

pub(super) struct Linear {
    pub(super) layout: Weight,
    /// The module its forward ran in (its backward is timed there).
    module: u16,
}

pub(super) fn add_into(mut a: Vec<f32>, b: Vec<f32>) -> Vec<f32> {
    a.iter_mut().zip(&b).for_each(|(a, b)| *a += b);
    a
}

/// Σ over rows of `dy` (rows of `o`) → (O).
pub(super) fn column_sums(dy: &[f32], o: usize) -> Vec<f32> {
    dy.par_chunks(o * rows_per_task(o))
        .map(|rows| {
            let mut s = vec![0f32; o];
            for r in rows.chunks(o) {
                s.iter_mut().zip(r).for_each(|(s, &d)| *s += d);
            }
            s
        })
        .reduce(|| vec![0f32; o], add_into)
}

/// In place: dW (the sink's) += the weight gradient of (x, dy).
struct AccWeight<'a> {
    of: &'a Linear,
}

impl InplaceOp3 for AccWeight<'_> {
    fn name(&self) -> &'static str {
        "memscope-linear-acc-weight"
    }

    fn cpu_fwd(
        &self,
        s1: &mut CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
        s3: &CpuStorage,
        l3: &Layout,
    ) -> Result<()> {
        let op = "linear backward";
        let (n, i) = l2.shape().dims2()?;
        let o = l3.shape().dims2()?.1;
        let (x, dy) = (
            Mat::of(op, elems::all_f32(op, s2)?, l2)?,
            Mat::of(op, elems::all_f32(op, s3)?, l3)?,
        );
        let (CpuStorage::F32(dw), Some((a, b))) = (s1, l1.contiguous_offsets()) else {
            bail!("{op}: the gradient must be contiguous f32")
        };
        self.of.weight_grad(&mut dw[a..b], true, x, dy, (n, i, o));
        Ok(())
    }
}

impl Linear {
    /// Forward on f32, bf16 or f16 storages (all the same dtype: `apply` checked).
    fn forward_any(
        &self,
        (xs, xl): (&CpuStorage, &Layout),
        (ws, wl): (&CpuStorage, &Layout),
        bias: Option<(&CpuStorage, &Layout)>,
        (n, i, o): (usize, usize, usize),
    ) -> Result<CpuStorage> {
        let op = "linear";
        let b = match bias {
            Some((bs, bl)) => Some(elems::read(op, bs, bl)?),
            None => None,
        };
        let b = b.as_deref();
        let held = panels::recognise(wl, self.layout == Weight::OutIn);
        if let (CpuStorage::F32(w), Some(s)) = (ws, held) {
            let x = Mat::of(op, elems::all_f32(op, xs)?, xl)?;
            let w = (&w[wl.start_offset()..], s.width);
            return Ok(CpuStorage::F32(forward_panels(x, w, b, (n, i, o))));
        }
        Ok(match ws {
            CpuStorage::F32(w) => CpuStorage::F32(self.forward(
                Mat::of(op, elems::all_f32(op, xs)?, xl)?,
                Mat::of(op, w, wl)?,
                b,
                (n, i, o),
            )),
            CpuStorage::BF16(w) if dot_bf16::available() => {
                let y = self.dot_forward((xs, xl), w, wl, b, (n, i, o))?;
                elems::write(op, y, DType::BF16)?
            }
            CpuStorage::BF16(w) => {
                let y = self.half_forward(widened(op, xs, xl)?, w, wl, b, (n, i, o))?;
                elems::write(op, y, DType::BF16)?
            }
            CpuStorage::F16(w) => {
                let y = self.half_forward(widened(op, xs, xl)?, w, wl, b, (n, i, o))?;
                elems::write(op, y, DType::F16)?
            }
            other => bail!("{op}: unsupported dtype {:?}", other.dtype()),
        })
    }

    /// y (N, O) = x · W(ᵀ) [+ b].
    fn forward(
        &self,
        x: Mat,
        w: Mat,
        b: Option<&[f32]>,
        (n, i, o): (usize, usize, usize),
    ) -> Vec<f32> {
        let w = if self.layout == Weight::OutIn {
            w.t()
        } else {
            w
        }; // (I, O)
        let Some(b) = b else {
            return mm_new(n, o, i, x, w); // (N, O)
        };
        let mut y = bias_rows(n, b); // (N, O), then + x · W
        mm(n, o, i, &mut y, true, x, w);
        y
    }

    /// A fresh dW (W's layout) = dyᵀ · x or xᵀ · dy.
    pub(super) fn weight_grad_new(
        &self,
        x: Mat,
        dy: Mat,
        (n, i, o): (usize, usize, usize),
    ) -> Vec<f32> {
        match self.layout {
            Weight::OutIn => mm_new(o, i, n, dy.t(), x), // (O, I) = dyᵀ · x
            Weight::InOut => mm_new(i, o, n, x.t(), dy), // (I, O) = xᵀ · dy
        }
    }

    /// dW (W's layout) = dyᵀ · x or xᵀ · dy, written into `dw`, or added to it when `acc`.
    pub(super) fn weight_grad(
        &self,
        dw: &mut [f32],
        acc: bool,
        x: Mat,
        dy: Mat,
        (n, i, o): (usize, usize, usize),
    ) {
        match self.layout {
            Weight::OutIn => mm(o, i, n, dw, acc, dy.t(), x), // (O, I) = dyᵀ · x
            Weight::InOut => mm(i, o, n, dw, acc, x.t(), dy), // (I, O) = xᵀ · dy
        }
    }

    /// (dx (N, I), dW in W's layout, db (O)) from x, W and dy (N, O), all detached. With a
    /// gradient sink open and W a variable, dW goes to the sink instead (`kernels::sink`).
    fn backward(
        &self,
        x: &Tensor,
        w: &Tensor,
        dy: &Tensor,
        bias: bool,
    ) -> Result<[Option<Tensor>; 3]> {
        let op = "linear backward";
        if w.rank() != 2 {
            bail!("{op}: the weight is kept in panels, which only inference stores do (no gradients there)")
        }
        if w.dtype() != DType::F32 {
            return self.half_backward(x, w, dy, bias);
        }
        let dy = dy.contiguous()?;
        let (n, i) = x.dims2()?;
        let o = dy.dims2()?.1;
        let dev = x.device();
        let (dx, db) = {
            let ((ws, wl), (gs, gl)) = (w.storage_and_layout(), dy.storage_and_layout());
            let (wm, g) = (
                Mat::of(op, elems::all_f32_of(op, &ws)?, wl)?,
                Mat::of(op, elems::all_f32_of(op, &gs)?, gl)?,
            );
            let w_oi = if self.layout == Weight::OutIn {
                wm
            } else {
                wm.t()
            }; // (O, I)
            let dx = mm_new(n, i, o, g, w_oi); // (N, I) = dy (N, O) · W (O, I)
            let db = bias.then(|| column_sums(&g.v[g.off..g.off + n * o], o));
            (dx, db)
        };
        let fresh = || -> Result<Tensor> {
            let ((xs, xl), (gs, gl)) = (x.storage_and_layout(), dy.storage_and_layout());
            let (xm, g) = (
                Mat::of(op, elems::all_f32_of(op, &xs)?, xl)?,
                Mat::of(op, elems::all_f32_of(op, &gs)?, gl)?,
            );
            Tensor::from_vec(self.weight_grad_new(xm, g, (n, i, o)), w.shape(), dev)
        };
        let dw = if sink::takes(w) {
            let acc = AccWeight { of: self };
            sink::add(w, fresh, |g| g.inplace_op3(x, &dy, &acc))?;
            None
        } else {
            Some(fresh()?)
        };
        Ok([
            Some(Tensor::from_vec(dx, (n, i), dev)?),
            dw,
            db.map(|db| Tensor::from_vec(db, o, dev)).transpose()?,
        ])
    }
}

impl CustomOp2 for Linear {
    fn name(&self) -> &'static str {
        "memscope-linear"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let x = as_rows(l1)?;
        let (n, i) = x.shape().dims2()?;
        let o = weight_dims(l2, self.layout)?.1;
        let y = self.forward_any((s1, &x), (s2, l2), None, (n, i, o))?;
        Ok((y, out_shape(l1, o)))
    }

    fn bwd(
        &self,
        x: &Tensor,
        w: &Tensor,
        _y: &Tensor,
        dy: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>)> {
        let _t = op_scope_in(self.module, "linear", Pass::Backward);
        let [dx, dw, _] = self.backward(&rows_of(x)?, w, &rows_of(dy)?, false)?;
        Ok((dx.map(|dx| dx.reshape(x.shape())).transpose()?, dw))
    }
}

impl CustomOp3 for Linear {
    fn name(&self) -> &'static str {
        "memscope-linear-bias"
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
        let x = as_rows(l1)?;
        let (n, i) = x.shape().dims2()?;
        let o = l3.shape().dims1()?;
        let y = self.forward_any((s1, &x), (s2, l2), Some((s3, l3)), (n, i, o))?;
        Ok((y, out_shape(l1, o)))
    }

    fn bwd(
        &self,
        x: &Tensor,
        w: &Tensor,
        _b: &Tensor,
        _y: &Tensor,
        dy: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let _t = op_scope_in(self.module, "linear", Pass::Backward);
        let [dx, dw, db] = self.backward(&rows_of(x)?, w, &rows_of(dy)?, true)?;
        Ok((dx.map(|dx| dx.reshape(x.shape())).transpose()?, dw, db))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::check::{against_reference, grad_check};
    use candle_core::Device;

    fn randn(s: &[usize]) -> Tensor {
        Tensor::randn(0f32, 1.0, s.to_vec(), &Device::Cpu).unwrap()
    }

    /// x (N, I) and x (…, I): leading dims are rows, read in place.
    #[test]
    fn matches_candle_matmul_plus_bias_in_both_weight_layouts() {
        for shape in [&[37, 19][..], &[3, 7, 19]] {
            let (x, b) = (randn(shape), randn(&[23]));
            against_reference(
                &[x.clone(), randn(&[23, 19]), b.clone()],
                |t| linear(&t[0], &t[1], Some(&t[2])),
                |t| t[0].broadcast_matmul(&t[1].t()?)?.broadcast_add(&t[2]),
                1e-5,
            );
            against_reference(
                &[x.clone(), randn(&[23, 19])],
                |t| linear(&t[0], &t[1], None),
                |t| t[0].broadcast_matmul(&t[1].t()?),
                1e-5,
            );
            against_reference(
                &[x, randn(&[19, 23]), b],
                |t| conv1d(&t[0], &t[1], &t[2]),
                |t| t[0].broadcast_matmul(&t[1])?.broadcast_add(&t[2]),
                1e-5,
            );
        }
    }

    /// x · W through a strip view `lin` ((O, I)) and `conv` ((I, O)) against the plain product.
    fn products_match(w_io: &Tensor, w_oi: &Tensor, lin: &Tensor, conv: &Tensor) {
        let o = w_io.dim(1).unwrap();
        for shape in [&[100, 19][..], &[2, 5, 19], &[1, 19]] {
            let (x, b) = (randn(shape), randn(&[o]));
            let close = |got: Tensor, want: Tensor| {
                let d = (got - want).unwrap().abs().unwrap().max_all().unwrap();
                assert!(d.to_scalar::<f32>().unwrap() < 1e-4, "{shape:?}");
            };
            let plain = x.broadcast_matmul(w_io).unwrap();
            close(linear(&x, lin, None).unwrap(), plain.clone());
            close(
                linear(&x, lin, Some(&b)).unwrap(),
                linear(&x, w_oi, Some(&b)).unwrap(),
            );
            close(
                conv1d(&x, conv, &b).unwrap(),
                plain.broadcast_add(&b).unwrap(),
            );
        }
    }

    /// On any machine (the store picks the width gemm's kernel reads, the product runs at
    /// either): 100 rows are two full 48-row calls and a partial one; 128 out features are
    /// two strips 64 wide or eight 16 wide.
    #[test]
    fn a_weight_in_panels_gives_the_product_of_the_weight_it_holds() {
        let (i, o) = (19, 128);
        let w_io = randn(&[i, o]);
        let w_oi = w_io.t().unwrap();
        let values = w_io.flatten_all().unwrap().to_vec1().unwrap();
        let buffers = strips::WIDTHS.map(|w| panels::panelled(&values, i, o, w));
        for buffer in &buffers {
            let (lin, conv) = (
                panels::view(buffer.clone(), true).unwrap(),
                panels::view(buffer.clone(), false).unwrap(),
            );
            products_match(&w_io, &w_oi, &lin, &conv);
        }
        let lin = panels::view(buffers[1].clone(), true).unwrap();
        let x = candle_core::Var::from_tensor(&randn(&[3, 19])).unwrap();
        let y = linear(x.as_tensor(), &lin, None)
            .unwrap()
            .sum_all()
            .unwrap();
        let e = y.backward().unwrap_err().to_string();
        assert!(e.contains("kept in panels"), "{e}");
        let x16 = randn(&[3, 19]).to_dtype(DType::BF16).unwrap();
        let e = linear(&x16, &lin, None).unwrap_err().to_string();
        assert!(e.contains("panels") && e.contains("BF16"), "{e}");
    }

    #[test]
    fn a_strided_input_of_more_than_two_dims_is_refused_naming_its_strides() {
        let x = randn(&[7, 3, 19]).transpose(0, 1).unwrap(); // (3, 7, 19), not contiguous
        let e = linear(&x, &randn(&[23, 19]), None).unwrap_err().to_string();
        assert!(e.contains("3-d input must be contiguous"), "{e}");
    }

    #[test]
    fn a_transposed_input_is_read_in_place() {
        let x = randn(&[19, 37]);
        against_reference(
            &[x, randn(&[23, 19])],
            |t| linear(&t[0].t()?, &t[1], None),
            |t| t[0].t()?.matmul(&t[1].t()?),
            1e-5,
        );
    }

    #[test]
    fn gradients_match_finite_differences() {
        grad_check(&[&[3, 4], &[5, 4], &[5]], |t| {
            linear(&t[0], &t[1], Some(&t[2]))
        });
        grad_check(&[&[3, 4], &[4, 5], &[5]], |t| conv1d(&t[0], &t[1], &t[2]));
    }

    #[test]
    fn with_a_sink_open_the_weight_gradient_goes_there_and_adds_in_place() {
        use candle_core::Var;
        let x = randn(&[6, 4]);
        let w = Var::from_tensor(&randn(&[4, 3])).unwrap();
        let loss = || conv1d(&x, &w, &randn(&[3])).unwrap().sum_all().unwrap();
        let alone = loss().backward().unwrap();
        let alone: Vec<Vec<f32>> = alone.get(w.as_tensor()).unwrap().to_vec2().unwrap();
        let (store, sunk) = sink::collect(Default::default(), || {
            loss().backward()?;
            loss().backward()
        })
        .unwrap();
        assert!(
            store.get(w.as_tensor()).is_none(),
            "candle's store gets none"
        );
        let twice: Vec<Vec<f32>> = sunk[&w.as_tensor().id()].to_vec2().unwrap();
        for (a, b) in alone.iter().flatten().zip(twice.iter().flatten()) {
            assert!((2.0 * a - b).abs() <= 1e-5 * b.abs().max(1.0), "{a} vs {b}");
        }
    }

    /// The largest |a − b| over the largest |b|.
    fn rel_err(a: &Tensor, b: &Tensor) -> f32 {
        let a: Vec<f32> = a
            .flatten_all()
            .unwrap()
            .to_dtype(DType::F32)
            .unwrap()
            .to_vec1()
            .unwrap();
        let b: Vec<f32> = b
            .flatten_all()
            .unwrap()
            .to_dtype(DType::F32)
            .unwrap()
            .to_vec1()
            .unwrap();
        let scale = b.iter().fold(0f32, |m, x| m.max(x.abs())).max(1e-30);
        a.iter()
            .zip(&b)
            .fold(0f32, |m, (a, b)| m.max((a - b).abs()))
            / scale
    }

    #[test]
    fn bf16_and_f16_match_f32_within_their_rounding_in_both_layouts() {
        use candle_core::Var;
        // I = 600 > one 512-row tile; 130 rows; the f32 reference gets the same rounded inputs.
        for (dt, tol) in [(DType::BF16, 2e-2), (DType::F16, 4e-3)] {
            for layout in [Weight::OutIn, Weight::InOut] {
                let w_shape: &[usize] = if layout == Weight::OutIn {
                    &[90, 600]
                } else {
                    &[600, 90]
                };
                let x = randn(&[130, 600]).to_dtype(dt).unwrap();
                let w = randn(w_shape)
                    .affine(0.05, 0.0)
                    .unwrap()
                    .to_dtype(dt)
                    .unwrap();
                let b = randn(&[90]).to_dtype(dt).unwrap();
                let r = randn(&[130, 90]);
                let run = |d: DType| {
                    let vs: Vec<Var> = [&x, &w, &b]
                        .iter()
                        .map(|t| Var::from_tensor(&t.to_dtype(d).unwrap()).unwrap())
                        .collect();
                    let y = apply(&vs[0], &vs[1], Some(&vs[2]), layout).unwrap();
                    assert_eq!(y.dtype(), d);
                    let loss = (y.to_dtype(DType::F32).unwrap() * &r)
                        .unwrap()
                        .sum_all()
                        .unwrap();
                    let g = loss.backward().unwrap();
                    let grads: Vec<Tensor> = vs.iter().map(|v| g.get(v).unwrap().clone()).collect();
                    (y, grads)
                };
                let (yh, gh) = run(dt);
                let (yf, gf) = run(DType::F32);
                let what = format!("{dt:?} {layout:?}");
                assert!(rel_err(&yh, &yf) <= tol, "{what} y: {}", rel_err(&yh, &yf));
                for (k, (a, b)) in ["dx", "dW", "db"].iter().zip(gh.iter().zip(&gf)) {
                    assert_eq!(a.dtype(), dt, "{what} {k}");
                    assert!(rel_err(a, b) <= tol, "{what} {k}: {}", rel_err(a, b));
                }
            }
        }
    }

    #[test]
    fn a_bf16_weight_gradient_sunk_twice_is_added_in_place() {
        use candle_core::Var;
        let x = randn(&[6, 4]).to_dtype(DType::BF16).unwrap();
        let w = Var::from_tensor(&randn(&[3, 4]).to_dtype(DType::BF16).unwrap()).unwrap();
        let loss = || {
            linear(&x, &w, None)
                .unwrap()
                .to_dtype(DType::F32)
                .unwrap()
                .sum_all()
                .unwrap()
        };
        let alone = loss().backward().unwrap();
        let alone = alone
            .get(w.as_tensor())
            .unwrap()
            .to_dtype(DType::F32)
            .unwrap();
        let (_, sunk) = sink::collect(Default::default(), || {
            loss().backward()?;
            loss().backward()
        })
        .unwrap();
        let twice = &sunk[&w.as_tensor().id()];
        assert_eq!(twice.dtype(), DType::BF16);
        let want = (alone * 2.0).unwrap();
        assert!(rel_err(twice, &want) <= 1e-2, "{}", rel_err(twice, &want));
    }

    #[test]
    fn shapes_that_do_not_fit_are_errors_naming_them() {
        let e = linear(&randn(&[4, 3]), &randn(&[2, 5]), None)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("[4, 3]") && e.contains("[2, 5]") && e.contains("(O, I)"),
            "{e}"
        );
        let e = conv1d(&randn(&[4, 3]), &randn(&[3, 2]), &randn(&[3]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("Some([3])"), "{e}");
    }
}
