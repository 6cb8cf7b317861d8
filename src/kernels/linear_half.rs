//! The linear kernel's bf16 and f16 paths (`kernels::linear` keeps f32): on the CPU's bf16
//! dot products where it has them (`dot_bf16`, x and dy read as they are), otherwise x and dy
//! widened to f32 once and the weight read through `product_widening`'s f32 tiles. Products
//! are made in f32 and rounded once as they are stored; a weight gradient the sink takes is
//! kept in its master's dtype (f32 under mixed precision).
//! Shape vocabulary: N rows, I in features, O out features.

use super::dot_bf16;
use super::elems::rows_per_task;
use super::half_bits::Widen;
use super::linear::{add_into, column_sums, Linear, Mat, Weight};
use super::product::{product_widening, Strided};
use super::sink;
use super::widen::{cpu, narrowed, row_major, strided, widened, AddWidened};
use candle_core::backend::BackendStorage;
use candle_core::{bail, CpuStorage, DType, Layout, Result, Tensor};
use half::bf16;
use rayon::prelude::*;

/// Column sums of a 2-d bf16 view (N, O), in f32.
fn column_sums_of(v: &[bf16], l: &Layout, (n, o): (usize, usize)) -> Vec<f32> {
    let (off, rs, cs) = (l.start_offset(), l.stride()[0], l.stride()[1]);
    (0..n)
        .into_par_iter()
        .with_min_len(rows_per_task(o))
        .fold(
            || vec![0f32; o],
            |mut s, r| {
                let row = off + r * rs;
                s.iter_mut()
                    .enumerate()
                    .for_each(|(c, s)| *s += v[row + c * cs].to_f32());
                s
            },
        )
        .reduce(|| vec![0f32; o], add_into)
}

impl Linear {
    /// y (N, O) f32 = x (N, I, widened) · W(ᵀ) [+ b] with a bf16 or f16 weight read through
    /// `product_widening`'s f32 tiles: the weight is never widened whole (candle's bf16 matmul
    /// widens both operands' entire storages on every call).
    pub(super) fn half_forward<T: Widen>(
        &self,
        x: Vec<f32>,
        w: &[T],
        wl: &Layout,
        b: Option<&[f32]>,
        (n, i, o): (usize, usize, usize),
    ) -> Result<Vec<f32>> {
        let mut y = vec![0f32; n * o]; // (N, O)
        if let Some(b) = b {
            y.par_chunks_mut(o * rows_per_task(o))
                .for_each(|rows| rows.chunks_mut(o).for_each(|r| r.copy_from_slice(b)));
        }
        let w = strided("linear", w, wl)?;
        let w = if self.layout == Weight::OutIn {
            w.t()
        } else {
            w
        }; // (I, O)
           // SAFETY: x is (N, I) row-major, y (N, O); `strided` checked W's view against its
           // storage and `apply` the shapes.
        unsafe {
            product_widening(
                (n, o, i),
                y.as_mut_ptr(),
                o,
                b.is_some(),
                row_major(&x, i),
                w,
                1.0,
            )
        };
        Ok(y)
    }

    /// y (N, O) f32 = x (N, I) · W(ᵀ) [+ b], x and W bf16 as they are, on the CPU's bf16 dot
    /// products (`dot_bf16`).
    pub(super) fn dot_forward(
        &self,
        (xs, xl): (&CpuStorage, &Layout),
        w: &[bf16],
        wl: &Layout,
        b: Option<&[f32]>,
        (n, i, o): (usize, usize, usize),
    ) -> Result<Vec<f32>> {
        let op = "linear";
        let CpuStorage::BF16(x) = xs else {
            bail!("{op}: x is {:?} and W bf16", xs.dtype())
        };
        let mut y = vec![0f32; n * o]; // (N, O)
        if let Some(b) = b {
            y.par_chunks_mut(o * rows_per_task(o))
                .for_each(|rows| rows.chunks_mut(o).for_each(|r| r.copy_from_slice(b)));
        }
        let (x, w) = (strided(op, x, xl)?, strided(op, w, wl)?);
        // W as (I, O).
        let w = if self.layout == Weight::OutIn {
            w.t()
        } else {
            w
        };
        // SAFETY: `available` was checked by the caller; `strided` checked both views against
        // their storages, `apply` the shapes; y is (N, O).
        unsafe { dot_bf16::product((n, o, i), y.as_mut_ptr(), o, b.is_some(), x, w, 1.0) };
        Ok(y)
    }
}

impl Linear {
    /// [`Linear::backward`] for bf16 / f16: dy and x widened once, dx = dy · W with W read
    /// through f32 tiles, dW = dyᵀ · x or xᵀ · dy in f32, each narrowed to W's dtype as it is
    /// made (dy32, then dx32 → dx, then x32 and dW32 → dW: at most dy32 + dx32 + a tile, or
    /// dy32 + x32 + dW32 + dW, alive at once; `estimate::ops` charges the same).
    pub(super) fn half_backward(
        &self,
        x: &Tensor,
        w: &Tensor,
        dy: &Tensor,
        bias: bool,
    ) -> Result<[Option<Tensor>; 3]> {
        let op = "linear backward";
        let (dt, dev) = (w.dtype(), x.device());
        if dt == DType::BF16 && dot_bf16::available() {
            return self.dot_backward(x, w, dy, bias);
        }
        let (n, i) = x.dims2()?;
        let o = dy.dims2()?.1;
        let dy32 = {
            let (s, l) = dy.storage_and_layout();
            widened(op, cpu(op, &s)?, l)?
        }; // (N, O)
        let db = bias.then(|| column_sums(&dy32, o));
        let mut dx32 = vec![0f32; n * i]; // (N, I) = dy (N, O) · W (O, I)
        {
            let (ws, wl) = w.storage_and_layout();
            match cpu(op, &ws)? {
                CpuStorage::BF16(v) => self.half_dx(v, wl, &dy32, &mut dx32, (n, i, o))?,
                CpuStorage::F16(v) => self.half_dx(v, wl, &dy32, &mut dx32, (n, i, o))?,
                other => bail!("{op}: unsupported dtype {:?}", other.dtype()),
            }
        }
        let dx = narrowed(dx32, (n, i), dt, dev)?;
        let dw32 = {
            let x32 = {
                let (s, l) = x.storage_and_layout();
                widened(op, cpu(op, &s)?, l)?
            }; // (N, I)
            let (xm, g) = (Mat::full(&x32, i), Mat::full(&dy32, o));
            self.weight_grad_new(xm, g, (n, i, o))
        };
        drop(dy32);
        self.half_outputs(w, dx, dw32, db, o)
    }

    /// [`Linear::half_backward`] on the CPU's bf16 dot products: dx = dy · W and dW = dyᵀ · x
    /// or xᵀ · dy made in f32 from the bf16 tensors as they are (no widened copies), each
    /// narrowed as it is made; db summed from dy (`estimate::backward` charges the same).
    fn dot_backward(
        &self,
        x: &Tensor,
        w: &Tensor,
        dy: &Tensor,
        bias: bool,
    ) -> Result<[Option<Tensor>; 3]> {
        let op = "linear backward";
        let dev = x.device();
        let (n, i) = x.dims2()?;
        let o = dy.dims2()?.1;
        let ((xs, xl), (ws, wl), (gs, gl)) = (
            x.storage_and_layout(),
            w.storage_and_layout(),
            dy.storage_and_layout(),
        );
        let (CpuStorage::BF16(xv), CpuStorage::BF16(wv), CpuStorage::BF16(gv)) =
            (cpu(op, &xs)?, cpu(op, &ws)?, cpu(op, &gs)?)
        else {
            bail!(
                "{op}: x, W and dy must all be bf16 (got {:?}, {:?}, {:?})",
                x.dtype(),
                w.dtype(),
                dy.dtype()
            )
        };
        let (xm, g) = (strided(op, xv, xl)?, strided(op, gv, gl)?); // (N, I), (N, O)
        let w_oi = self.w_oi(strided(op, wv, wl)?);
        let db = bias.then(|| column_sums_of(gv, gl, (n, o)));
        // dx (N, I) = dy (N, O) · W (O, I).
        // SAFETY (both products): `available` was checked by the caller, `strided` checked the
        // views against their storages; dx32 and dw32 have the extents given.
        let mut dx32 = vec![0f32; n * i];
        unsafe { dot_bf16::product((n, i, o), dx32.as_mut_ptr(), i, false, g, w_oi, 1.0) };
        let dx = narrowed(dx32, (n, i), DType::BF16, dev)?;
        let mut dw32 = vec![0f32; i * o];
        match self.layout {
            Weight::OutIn => unsafe {
                dot_bf16::product((o, i, n), dw32.as_mut_ptr(), i, false, g.t(), xm, 1.0)
            }, // (O, I) = dyᵀ · x
            Weight::InOut => unsafe {
                dot_bf16::product((i, o, n), dw32.as_mut_ptr(), o, false, xm.t(), g, 1.0)
            }, // (I, O) = xᵀ · dy
        }
        drop((xs, ws, gs));
        self.half_outputs(w, dx, dw32, db, o)
    }

    /// The half backward's outputs: dx as made, dW (f32) narrowed to W's dtype, or added
    /// into the gradient sink's, db narrowed.
    fn half_outputs(
        &self,
        w: &Tensor,
        dx: Tensor,
        dw32: Vec<f32>,
        db: Option<Vec<f32>>,
        o: usize,
    ) -> Result<[Option<Tensor>; 3]> {
        let (dt, dev) = (w.dtype(), w.device());
        let dw = if sink::takes(w) {
            // Only one of the two closures runs: the first contribution is narrowed as it is
            // (kept in f32 for a mixed-precision master), later ones are added into the sink's
            // gradient.
            let dw32 = std::cell::RefCell::new(Some(dw32));
            let sunk_dt = sink::dtype(w);
            sink::add(
                w,
                || narrowed(dw32.take().unwrap_or_default(), w.dims2()?, sunk_dt, dev),
                |g| g.inplace_op1(&AddWidened(dw32.borrow().as_deref().unwrap_or_default())),
            )?;
            None
        } else {
            Some(narrowed(dw32, w.dims2()?, dt, dev)?)
        };
        Ok([
            Some(dx),
            dw,
            db.map(|db| narrowed(db, (o, 1), dt, dev)?.reshape(o))
                .transpose()?,
        ])
    }

    /// dx (N, I) f32 = dy (N, O) f32 · W (O, I), W a half view read through f32 tiles.
    fn half_dx<T: Widen>(
        &self,
        w: &[T],
        wl: &Layout,
        dy: &[f32],
        dx: &mut [f32],
        (n, i, o): (usize, usize, usize),
    ) -> Result<()> {
        let w_oi = self.w_oi(strided("linear backward", w, wl)?);
        // SAFETY: dy is (N, O) row-major, dx (N, I); `strided` checked W's view.
        unsafe {
            product_widening(
                (n, i, o),
                dx.as_mut_ptr(),
                i,
                false,
                row_major(dy, o),
                w_oi,
                1.0,
            )
        };
        Ok(())
    }

    /// W as (O, I) from its view as stored.
    fn w_oi<T>(&self, w: Strided<T>) -> Strided<T> {
        if self.layout == Weight::OutIn {
            w
        } else {
            w.t()
        }
    }
}
