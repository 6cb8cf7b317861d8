//! Scaled dot-product attention, causal or not, as one op per call over all batches and heads.
//!
//! candle's op-by-op version copies Q, K and V into contiguous (B, H, T, D) tensors, keeps the
//! (B, H, T, S) scores and probabilities for backward, and runs a chain of elementwise ops
//! between its two batched matmuls. This reads Q, K and V where they lie (a packed QKV
//! projection or any layout whose head dim is contiguous), writes the output straight into
//! the (B, T, H·D) layout the output projection reads, and keeps only the log-sum-exp of each
//! row, (B, H, T) f32: backward recomputes the probabilities from it, flash-attention style.
//!
//! Each (batch, head) pair is one task; a task walks its queries in blocks of [`BLOCK`] rows,
//! and a causal block only multiplies the keys it can see. The (BLOCK, S) score block is the
//! only scratch, so a tiled variant that also splits S can replace the block loop alone.
//! Grouped-query attention (fewer K/V heads than query heads) reads the shared K/V head in
//! place; backward sums the gradients of the query heads that share it.
//! Shape vocabulary: B batch, T queries, S keys, H query heads, KV key/value heads, D head dim.
//!
//! Over 600 lines because forward and backward are one kernel: they share the private block
//! layout, `Dims` and the storage readers, and the backward recomputes exactly the forward's scores.

use super::elems::{self, fast_exp};
use super::product::{product, Operand};
use super::simd::vector;
use super::widen::narrowed;
use crate::instrument::op_timer::{op_scope, op_scope_in, Pass};
use crate::instrument::scope;
use candle_core::backend::BackendStorage;
use candle_core::{bail, CpuStorage, CustomOp1, CustomOp3, DType, Layout, Result, Shape, Tensor};
use rayon::prelude::*;
use std::borrow::Cow;
use std::sync::Mutex;

/// Query rows per block.
pub const BLOCK: usize = 64;

/// Attention over a packed projection: `qkv` (B, T, 3C) holds Q, K and V side by side, each
/// (H, D) with C = H·D, as GPT-2's `c_attn` produces them → (B, T, C). Differentiable; the
/// gradient is one packed (B, T, 3C) tensor.
pub fn packed(qkv: &Tensor, heads: usize, causal: bool) -> Result<Tensor> {
    let _t = op_scope("attention", Pass::Forward);
    let (_, t, c3) = qkv.dims3()?;
    if t == 0 {
        bail!("attention: no queries (T = 0)")
    }
    if heads == 0 || c3 % (3 * heads) != 0 {
        bail!("attention: the packed projection's width {c3} is not 3 × heads ({heads}) × head dim")
    }
    let op = Packed {
        heads,
        causal,
        lse: Mutex::default(),
        module: scope::current(),
    };
    if dense(qkv) {
        return qkv.apply_op1(op);
    }
    in_f32(qkv, |x| x.apply_op1(op))
}

/// Attention over separate heads: `q` (B, H, T, D), `k` and `v` (B, KV, S, D) with H a
/// multiple of KV, any strides with a contiguous head dim → (B, T, H·D). Causal means query t
/// sees keys up to S − T + t (the queries are the last T positions). Differentiable.
pub fn split(q: &Tensor, k: &Tensor, v: &Tensor, causal: bool) -> Result<Tensor> {
    let _t = op_scope("attention", Pass::Forward);
    let (b, h, t, d) = q.dims4()?;
    let (kb, kv, s, kd) = k.dims4()?;
    if t == 0 {
        bail!("attention: no queries (T = 0)")
    }
    if v.dims() != k.dims() || (kb, kd) != (b, d) || kv == 0 || h % kv != 0 || s < t {
        bail!(
            "attention: q {:?}, k {:?} and v {:?} do not fit (B, H, T, D), (B, KV, S, D) with H a \
             multiple of KV and S ≥ T",
            q.dims(),
            k.dims(),
            v.dims()
        )
    }
    let op = Split {
        causal,
        lse: Mutex::default(),
        module: scope::current(),
    };
    let one_dtype = k.dtype() == q.dtype() && v.dtype() == q.dtype();
    if one_dtype && (q.dtype() == DType::F32 || [q, k, v].iter().all(|x| dense(x))) {
        return q.apply_op3(k, v, op);
    }
    let f = |x: &Tensor| x.to_dtype(DType::F32);
    f(q)?.apply_op3(&f(k)?, &f(v)?, op)?.to_dtype(q.dtype())
}

/// Whether `x` is f32, or a view that covers a dense block of its storage (contiguous or
/// transposed). The kernel reads bf16 and f16 operands itself, widening the span their view
/// covers for the call: for such a view that is the tensor's own size, so the graph keeps
/// them in their dtype instead of f32 copies. A view into a larger buffer (a KV cache's
/// prefix) goes through [`in_f32`]'s compact copy instead.
fn dense(x: &Tensor) -> bool {
    x.dtype() == DType::F32 || elems::span(x.layout()).len() == x.elem_count()
}

/// An operand's elements for one call: an f32 storage in place, or the span a bf16 / f16
/// view covers widened; and the offset to subtract from the view's (0 in place).
fn operand<'a>(op: &str, s: &'a CpuStorage, l: &Layout) -> Result<(Cow<'a, [f32]>, usize)> {
    if let CpuStorage::F32(v) = s {
        return Ok((Cow::Borrowed(v.as_slice()), 0));
    }
    let r = elems::span(l);
    Ok((elems::span_f32(op, s, r.clone())?, r.start))
}

/// [`operand`] for a tensor's storage (behind `storage_and_layout`'s guard).
fn operand_of<'a>(
    op: &str,
    s: &'a candle_core::Storage,
    l: &Layout,
) -> Result<(Cow<'a, [f32]>, usize)> {
    match s {
        candle_core::Storage::Cpu(s) => operand(op, s, l),
        _ => bail!("{op}: CPU tensors only (memscope's kernels run on the CPU)"),
    }
}

/// Runs `f` on an f32 copy of a half-precision `x` and casts back.
fn in_f32(x: &Tensor, f: impl FnOnce(&Tensor) -> Result<Tensor>) -> Result<Tensor> {
    match x.dtype() {
        DType::F32 => f(x),
        dt => f(&x.to_dtype(DType::F32)?)?.to_dtype(dt),
    }
}

/// Sizes of one call.
#[derive(Clone, Copy, Debug)]
struct Dims {
    b: usize,
    h: usize,
    kv: usize,
    t: usize,
    s: usize,
    d: usize,
    causal: bool,
}

impl Dims {
    /// Keys row `i` of the queries can see: S − T + i + 1 when causal, all S otherwise.
    fn visible(&self, i: usize) -> usize {
        if self.causal {
            self.s - self.t + i + 1
        } else {
            self.s
        }
    }
    fn scale(&self) -> f32 {
        1.0 / (self.d as f32).sqrt()
    }
}

/// Where one operand's (T or S, D) matrices lie in its buffer: the element offset of batch 0,
/// head 0, row 0, and the strides of batch, head and row (the head dim has stride 1).
#[derive(Clone, Copy, Debug)]
struct View {
    off: usize,
    sb: usize,
    sh: usize,
    st: usize,
}

impl View {
    fn at(&self, b: usize, h: usize) -> usize {
        self.off + b * self.sb + h * self.sh
    }
    /// The view of a 4-d (B, H, T, D) layout.
    fn of4(op: &str, l: &Layout) -> Result<Self> {
        match l.stride() {
            &[sb, sh, st, 1] => Ok(View {
                off: l.start_offset(),
                sb,
                sh,
                st,
            }),
            s => bail!("{op}: the head dim must be contiguous, strides are {s:?}"),
        }
    }
    /// The same view into a buffer that starts `by` elements later (a widened span).
    fn shifted(self, by: usize) -> Self {
        View {
            off: self.off - by,
            ..self
        }
    }
    /// A contiguous (B, T, H, D) buffer of `h` heads: how outputs and packed gradients lie.
    fn rows(off: usize, t: usize, width: usize, d: usize) -> Self {
        View {
            off,
            sb: t * width,
            sh: d,
            st: width,
        }
    }
    /// A contiguous (B, H, T, D) buffer.
    fn heads(h: usize, t: usize, d: usize) -> Self {
        View {
            off: 0,
            sb: h * t * d,
            sh: t * d,
            st: d,
        }
    }
}

/// A raw pointer handed to parallel tasks that write disjoint parts of one buffer.
#[derive(Clone, Copy)]
struct Out(*mut f32);
// SAFETY: the tasks sharing an `Out` write disjoint elements (see `forward` and `backward`).
unsafe impl Send for Out {}
unsafe impl Sync for Out {}

impl Out {
    /// The pointer `n` elements in. A method, so closures capture the whole `Out`.
    fn at(self, n: usize) -> *mut f32 {
        self.0.wrapping_add(n)
    }
}

/// dst (m, n) = beta · lhs (m, k) · rhs (k, n) [+ dst when `acc`]. Strides in elements as
/// (row, column); one thread (the tasks are already parallel).
///
/// # Safety
/// Every pointer must be valid for the strided extent it is given, and `dst` must not alias
/// `lhs`, `rhs` or memory another thread touches.
#[allow(clippy::too_many_arguments)]
unsafe fn mm(
    (m, n, k): (usize, usize, usize),
    dst: *mut f32,
    dst_rs: usize,
    acc: bool,
    lhs: *const f32,
    (lhs_rs, lhs_cs): (usize, usize),
    rhs: *const f32,
    (rhs_rs, rhs_cs): (usize, usize),
    beta: f32,
) {
    let (lhs, rhs) = (
        Operand {
            ptr: lhs,
            rs: lhs_rs,
            cs: lhs_cs,
        },
        Operand {
            ptr: rhs,
            rs: rhs_rs,
            cs: rhs_cs,
        },
    );
    product((m, n, k), dst, dst_rs, acc, lhs, rhs, beta, false)
}

/// One block of scaled scores: p (br, n) = scale · Q[r0..r0+br] · K[..n]ᵀ, row stride `s`.
///
/// # Safety
/// `q` and `k` point at the head's first row; see [`mm`].
#[allow(clippy::too_many_arguments)]
unsafe fn scores(
    p: &mut [f32],
    s: usize,
    q: *const f32,
    qst: usize,
    k: *const f32,
    kst: usize,
    (br, n, d): (usize, usize, usize),
    scale: f32,
) {
    mm(
        (br, n, d),
        p.as_mut_ptr(),
        s,
        false,
        q,
        (qst, 1),
        k,
        (1, kst),
        scale,
    );
}

/// Forward: y and the row log-sum-exps `lse` (B, H, T).
#[allow(clippy::too_many_arguments)]
fn forward(
    dm: Dims,
    (q, qv): (&[f32], View),
    (k, kv): (&[f32], View),
    (v, vv): (&[f32], View),
    (y, yv): (&mut [f32], View),
    lse: &mut [f32],
) {
    let rep = dm.h / dm.kv;
    let out = Out(y.as_mut_ptr());
    lse.par_chunks_mut(dm.t).enumerate().for_each(|(bh, lse)| {
        let (b, h) = (bh / dm.h, bh % dm.h);
        let mut p = vec![0f32; BLOCK.min(dm.t) * dm.s]; // (BLOCK, S)
        let (qh, kh, vh) = (qv.at(b, h), kv.at(b, h / rep), vv.at(b, h / rep));
        for r0 in (0..dm.t).step_by(BLOCK) {
            let br = BLOCK.min(dm.t - r0);
            let n = dm.visible(r0 + br - 1);
            // SAFETY: the layouts come from candle and `packed`/`split` checked the shapes fit
            // together, so every view stays inside its buffer; each task writes only its own
            // head's rows of y.
            unsafe {
                let qp = q.as_ptr().add(qh + r0 * qv.st);
                scores(
                    &mut p,
                    dm.s,
                    qp,
                    qv.st,
                    k.as_ptr().add(kh),
                    kv.st,
                    (br, n, dm.d),
                    dm.scale(),
                );
            }
            vector(
                #[inline(always)]
                || {
                    for i in 0..br {
                        let row = &mut p[i * dm.s..i * dm.s + n];
                        let seen = dm.visible(r0 + i);
                        let max = elems::max(&row[..seen]);
                        row[..seen].iter_mut().for_each(|x| *x = fast_exp(*x - max));
                        row[seen..].fill(0.0);
                        let sum = elems::sum_by(&row[..seen], |x| x);
                        let inv = 1.0 / sum;
                        row[..seen].iter_mut().for_each(|x| *x *= inv);
                        lse[r0 + i] = max + sum.ln();
                    }
                },
            );
            unsafe {
                let dst = out.at(yv.at(b, h) + r0 * yv.st);
                mm(
                    (br, dm.d, n),
                    dst,
                    yv.st,
                    false,
                    p.as_ptr(),
                    (dm.s, 1),
                    v.as_ptr().add(vh),
                    (vv.st, 1),
                    1.0,
                );
            }
        }
    });
}

/// Where dQ, dK and dV lie (one buffer when packed), each zeroed and alive for the call.
struct Grads {
    dq: (Out, View),
    dk: (Out, View),
    dv: (Out, View),
}

/// Backward: dQ, dK, dV from the inputs, the output y, its gradient dy and the row lse.
/// dK and dV must start zeroed (they are accumulated over query blocks and shared heads).
#[allow(clippy::too_many_arguments)]
fn backward(
    dm: Dims,
    (q, qv): (&[f32], View),
    (k, kv): (&[f32], View),
    (v, vv): (&[f32], View),
    (y, yv): (&[f32], View),
    (dy, dyv): (&[f32], View),
    lse: &[f32],
    g: &Grads,
) {
    let rep = dm.h / dm.kv;
    let (scale, w) = (dm.scale(), BLOCK.min(dm.t));
    (0..dm.b * dm.kv).into_par_iter().for_each(|bk| {
        let (b, kh) = (bk / dm.kv, bk % dm.kv);
        let mut p = vec![0f32; w * dm.s]; // (BLOCK, S): probabilities
        let mut ds = vec![0f32; w * dm.s]; // (BLOCK, S): dP, then dS
        let (kp, vp) = (k[kv.at(b, kh)..].as_ptr(), v[vv.at(b, kh)..].as_ptr());
        let (dkp, dvp) = (g.dk.0.at(g.dk.1.at(b, kh)), g.dv.0.at(g.dv.1.at(b, kh)));
        for h in kh * rep..(kh + 1) * rep {
            let lse = &lse[(b * dm.h + h) * dm.t..][..dm.t];
            for r0 in (0..dm.t).step_by(BLOCK) {
                let br = BLOCK.min(dm.t - r0);
                let n = dm.visible(r0 + br - 1);
                // SAFETY: as in `forward`; this task alone writes kv head `kh`'s dK and dV and
                // the dQ rows of the query heads that share it.
                unsafe {
                    let qp = q.as_ptr().add(qv.at(b, h) + r0 * qv.st);
                    let dyp = dy.as_ptr().add(dyv.at(b, h) + r0 * dyv.st);
                    scores(&mut p, dm.s, qp, qv.st, kp, kv.st, (br, n, dm.d), scale);
                    vector(
                        #[inline(always)]
                        || {
                            for i in 0..br {
                                let row = &mut p[i * dm.s..i * dm.s + n];
                                let seen = dm.visible(r0 + i);
                                let l = lse[r0 + i];
                                row[..seen].iter_mut().for_each(|x| *x = fast_exp(*x - l));
                                row[seen..].fill(0.0);
                            }
                        },
                    );
                    // dV[..n] += Pᵀ dY
                    mm(
                        (n, dm.d, br),
                        dvp,
                        g.dv.1.st,
                        true,
                        p.as_ptr(),
                        (1, dm.s),
                        dyp,
                        (dyv.st, 1),
                        1.0,
                    );
                    // dP = dY V[..n]ᵀ
                    mm(
                        (br, n, dm.d),
                        ds.as_mut_ptr(),
                        dm.s,
                        false,
                        dyp,
                        (dyv.st, 1),
                        vp,
                        (1, vv.st),
                        1.0,
                    );
                    vector(
                        #[inline(always)]
                        || {
                            for i in 0..br {
                                let yr = &y[yv.at(b, h) + (r0 + i) * yv.st..][..dm.d];
                                let dyr = &dy[dyv.at(b, h) + (r0 + i) * dyv.st..][..dm.d];
                                let di = elems::dot(yr, dyr); // rowsum(dY ∘ Y)
                                let (pr, dr) = (&p[i * dm.s..][..n], &mut ds[i * dm.s..][..n]);
                                dr.iter_mut()
                                    .zip(pr)
                                    .for_each(|(d, &p)| *d = scale * p * (*d - di));
                            }
                        },
                    );
                    // dQ = dS K[..n]; dK[..n] += dSᵀ Q
                    let dqp = g.dq.0.at(g.dq.1.at(b, h) + r0 * g.dq.1.st);
                    mm(
                        (br, dm.d, n),
                        dqp,
                        g.dq.1.st,
                        false,
                        ds.as_ptr(),
                        (dm.s, 1),
                        kp,
                        (kv.st, 1),
                        1.0,
                    );
                    mm(
                        (n, dm.d, br),
                        dkp,
                        g.dk.1.st,
                        true,
                        ds.as_ptr(),
                        (1, dm.s),
                        qp,
                        (qv.st, 1),
                        1.0,
                    );
                }
            }
        }
    });
}

/// The three views of a packed (B, T, 3C) layout.
fn packed_views(op: &str, l: &Layout, heads: usize, causal: bool) -> Result<(Dims, [View; 3])> {
    let (b, t, c3) = l.shape().dims3()?;
    let &[sb, st, 1] = l.stride() else {
        bail!(
            "{op}: the packed projection's last dim must be contiguous, strides are {:?}",
            l.stride()
        )
    };
    let (c, d) = (c3 / 3, c3 / 3 / heads);
    let dm = Dims {
        b,
        h: heads,
        kv: heads,
        t,
        s: t,
        d,
        causal,
    };
    let view = |i: usize| View {
        off: l.start_offset() + i * c,
        sb,
        sh: d,
        st,
    };
    Ok((dm, [view(0), view(1), view(2)]))
}

/// The op over a packed projection; keeps the row lse from forward for backward.
struct Packed {
    heads: usize,
    causal: bool,
    lse: Mutex<Vec<f32>>,
    /// The module its forward ran in (its backward is timed there).
    module: u16,
}

impl CustomOp1 for Packed {
    fn name(&self) -> &'static str {
        "memscope-attention-packed"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> Result<(CpuStorage, Shape)> {
        let op = "attention";
        let (x, shift) = operand(op, s, l)?;
        let (dm, [qv, kv, vv]) = packed_views(op, l, self.heads, self.causal)?;
        let [qv, kv, vv] = [qv, kv, vv].map(|v| v.shifted(shift));
        let c = dm.h * dm.d;
        let mut y = vec![0f32; dm.b * dm.t * c]; // (B, T, C)
        let mut lse = vec![0f32; dm.b * dm.h * dm.t]; // (B, H, T)
        let yv = View::rows(0, dm.t, c, dm.d);
        forward(dm, (&x, qv), (&x, kv), (&x, vv), (&mut y, yv), &mut lse);
        drop(x);
        *self.lse.lock().unwrap() = lse;
        Ok((
            elems::write(op, y, s.dtype())?,
            Shape::from((dm.b, dm.t, c)),
        ))
    }

    fn bwd(&self, qkv: &Tensor, y: &Tensor, dy: &Tensor) -> Result<Option<Tensor>> {
        let _t = op_scope_in(self.module, "attention", Pass::Backward);
        let op = "attention backward";
        let dy = dy.contiguous()?;
        let ((xs, xl), (ys, yl), (ds, dl)) = (
            qkv.storage_and_layout(),
            y.storage_and_layout(),
            dy.storage_and_layout(),
        );
        let (dm, views) = packed_views(op, xl, self.heads, self.causal)?;
        let (x, shift) = operand_of(op, &xs, xl)?;
        let [qv, kv, vv] = views.map(|v| v.shifted(shift));
        let c = dm.h * dm.d;
        let mut dx = vec![0f32; dm.b * dm.t * 3 * c]; // (B, T, 3C)
        let out = Out(dx.as_mut_ptr());
        let at = |i| (out, View::rows(i * c, dm.t, 3 * c, dm.d));
        let g = Grads {
            dq: at(0),
            dk: at(1),
            dv: at(2),
        };
        let ((y, ysh), (dy, dsh)) = (operand_of(op, &ys, yl)?, operand_of(op, &ds, dl)?);
        let rows = |l: &Layout, sh: usize| View::rows(l.start_offset() - sh, dm.t, c, dm.d);
        let lse = self.lse.lock().unwrap();
        backward(
            dm,
            (&x, qv),
            (&x, kv),
            (&x, vv),
            (&y, rows(yl, ysh)),
            (&dy, rows(dl, dsh)),
            &lse,
            &g,
        );
        narrowed(dx, (dm.b, dm.t, 3 * c), qkv.dtype(), qkv.device()).map(Some)
    }
}

/// The op over separate Q, K and V; keeps the row lse from forward for backward.
struct Split {
    causal: bool,
    lse: Mutex<Vec<f32>>,
    /// The module its forward ran in (its backward is timed there).
    module: u16,
}

fn split_dims(lq: &Layout, lk: &Layout, causal: bool) -> Result<Dims> {
    let (b, h, t, d) = lq.shape().dims4()?;
    let (_, kv, s, _) = lk.shape().dims4()?;
    Ok(Dims {
        b,
        h,
        kv,
        t,
        s,
        d,
        causal,
    })
}

impl CustomOp3 for Split {
    fn name(&self) -> &'static str {
        "memscope-attention"
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
        let op = "attention";
        let dm = split_dims(l1, l2, self.causal)?;
        let c = dm.h * dm.d;
        let mut y = vec![0f32; dm.b * dm.t * c]; // (B, T, H·D)
        let mut lse = vec![0f32; dm.b * dm.h * dm.t]; // (B, H, T)
        {
            let arg = |s, l| -> Result<(Cow<[f32]>, View)> {
                let (v, shift) = operand(op, s, l)?;
                Ok((v, View::of4(op, l)?.shifted(shift)))
            };
            let ((q, qv), (k, kv), (v, vv)) = (arg(s1, l1)?, arg(s2, l2)?, arg(s3, l3)?);
            let yv = View::rows(0, dm.t, c, dm.d);
            forward(dm, (&q, qv), (&k, kv), (&v, vv), (&mut y, yv), &mut lse);
        }
        *self.lse.lock().unwrap() = lse;
        Ok((
            elems::write(op, y, s1.dtype())?,
            Shape::from((dm.b, dm.t, c)),
        ))
    }

    fn bwd(
        &self,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        y: &Tensor,
        dy: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let _t = op_scope_in(self.module, "attention", Pass::Backward);
        let op = "attention backward";
        let dy = dy.contiguous()?;
        let dm = split_dims(q.layout(), k.layout(), self.causal)?;
        let c = dm.h * dm.d;
        let mut dq = vec![0f32; dm.b * dm.h * dm.t * dm.d]; // (B, H, T, D)
        let mut dk = vec![0f32; dm.b * dm.kv * dm.s * dm.d]; // (B, KV, S, D)
        let mut dv = vec![0f32; dk.len()]; // (B, KV, S, D)
        let g = Grads {
            dq: (Out(dq.as_mut_ptr()), View::heads(dm.h, dm.t, dm.d)),
            dk: (Out(dk.as_mut_ptr()), View::heads(dm.kv, dm.s, dm.d)),
            dv: (Out(dv.as_mut_ptr()), View::heads(dm.kv, dm.s, dm.d)),
        };
        {
            let ((qs, ql), (ks, kl), (vs, vl)) = (
                q.storage_and_layout(),
                k.storage_and_layout(),
                v.storage_and_layout(),
            );
            let ((ys, yl), (ds, dl)) = (y.storage_and_layout(), dy.storage_and_layout());
            let arg = |s, l| -> Result<(Cow<[f32]>, View)> {
                let (v, shift) = operand_of(op, s, l)?;
                Ok((v, View::of4(op, l)?.shifted(shift)))
            };
            let rows = |s, l: &Layout| -> Result<(Cow<[f32]>, View)> {
                let (v, shift) = operand_of(op, s, l)?;
                Ok((v, View::rows(l.start_offset() - shift, dm.t, c, dm.d)))
            };
            let ((q, qv), (k, kv), (v, vv)) = (arg(&qs, ql)?, arg(&ks, kl)?, arg(&vs, vl)?);
            let ((y, yv), (dy, dv)) = (rows(&ys, yl)?, rows(&ds, dl)?);
            let lse = self.lse.lock().unwrap();
            backward(
                dm,
                (&q, qv),
                (&k, kv),
                (&v, vv),
                (&y, yv),
                (&dy, dv),
                &lse,
                &g,
            );
        }
        let (dev, dt) = (q.device(), q.dtype());
        Ok((
            Some(narrowed(dq, q.shape(), dt, dev)?),
            Some(narrowed(dk, k.shape(), dt, dev)?),
            Some(narrowed(dv, v.shape(), dt, dev)?),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::check::{against_reference, grad_check};
    use crate::kernels::unfused::{attention, causal_mask};
    use candle_core::Device;

    /// candle's op-by-op attention: q (B, H, T, D), k and v (B, KV, S, D) → (B, T, H·D).
    fn reference(q: &Tensor, k: &Tensor, v: &Tensor, causal: bool) -> Result<Tensor> {
        let (b, h, t, d) = q.dims4()?;
        let (_, kv, s, _) = k.dims4()?;
        let rep = |x: &Tensor| {
            x.unsqueeze(2)?
                .broadcast_as((b, kv, h / kv, s, d))?
                .reshape((b, h, s, d)) // (B, H, S, D)
        };
        let mask = causal
            .then(|| causal_mask(t, s - t, q.dtype(), q.device()))
            .transpose()?; // (T, S)
        let y = attention(q, &rep(k)?, &rep(v)?, mask.as_ref())?; // (B, H, T, D)
        y.transpose(1, 2)?.reshape((b, t, h * d))
    }

    /// The packed layout's q, k and v: (B, T, 3C) → three (B, H, T, D) views.
    fn unpack(qkv: &Tensor, h: usize) -> Result<Vec<Tensor>> {
        let (b, t, c3) = qkv.dims3()?;
        let x = qkv
            .reshape((b, t, 3, h, c3 / 3 / h))?
            .permute((2, 0, 3, 1, 4))?;
        (0..3).map(|i| x.get(i)).collect()
    }

    fn randn(s: &[usize]) -> Tensor {
        Tensor::randn(0f32, 1.0, s.to_vec(), &Device::Cpu).unwrap()
    }

    #[test]
    fn packed_matches_candle_over_several_query_blocks() {
        // T = 150: two full blocks of 64 and a partial one.
        for causal in [true, false] {
            against_reference(
                &[randn(&[2, 150, 3 * 3 * 8])],
                |x| packed(&x[0], 3, causal),
                |x| {
                    let p = unpack(&x[0], 3)?;
                    reference(&p[0], &p[1], &p[2], causal)
                },
                1e-5,
            );
        }
    }

    #[test]
    fn split_matches_candle_with_shared_kv_heads_a_prefix_and_strided_inputs() {
        // 4 query heads over 2 K/V heads, 70 queries after 5 earlier keys; v is a transposed
        // (B, S, KV, D) view, not contiguous.
        let (q, k, v) = (
            randn(&[2, 4, 70, 8]),
            randn(&[2, 2, 75, 8]),
            randn(&[2, 75, 2, 8]),
        );
        for causal in [true, false] {
            against_reference(
                &[q.clone(), k.clone(), v.clone()],
                |x| split(&x[0], &x[1], &x[2].transpose(1, 2)?, causal),
                |x| reference(&x[0], &x[1], &x[2].transpose(1, 2)?, causal),
                1e-5,
            );
        }
    }

    #[test]
    fn gradients_match_finite_differences() {
        grad_check(&[&[1, 5, 3 * 2 * 2]], |x| packed(&x[0], 2, true));
        grad_check(&[&[1, 2, 3, 2], &[1, 1, 4, 2], &[1, 1, 4, 2]], |x| {
            split(&x[0], &x[1], &x[2], true)
        });
    }

    #[test]
    fn half_precision_runs_in_f32_and_returns_its_dtype() {
        let x = randn(&[1, 9, 3 * 2 * 4]).to_dtype(DType::BF16).unwrap();
        let ours = packed(&x, 2, true).unwrap();
        assert_eq!(ours.dtype(), DType::BF16);
        // The same bf16 inputs in f32: only the output's rounding to bf16 differs (2⁻⁹).
        let f32s = packed(&x.to_dtype(DType::F32).unwrap(), 2, true).unwrap();
        crate::kernels::check::close(&ours.to_dtype(DType::F32).unwrap(), &f32s, 1e-2);
    }

    #[test]
    fn bf16_operands_are_read_in_place_and_match_f32_forward_and_backward() {
        // Dense views (contiguous q, a transposed k, the packed projection) are read in bf16
        // by the kernel; a view into a larger buffer (a KV cache's prefix: v) goes through an
        // f32 copy. Either way: the f32 kernel on the same inputs, within bf16's rounding of
        // outputs and gradients. Inputs and loss weights are fixed multiples of 1/32 (exact in
        // bf16), so the check is the same on every run.
        use candle_core::Var;
        let exact = |s: &[usize], seed: usize| {
            let n: usize = s.iter().product();
            let v: Vec<f32> = (0..n)
                .map(|i| (((i * 37 + seed) % 61) as f32 - 30.0) / 32.0)
                .collect();
            Tensor::from_vec(v, s.to_vec(), &Device::Cpu).unwrap()
        };
        let (q, kt, vbig) = (
            exact(&[2, 4, 6, 8], 1),
            exact(&[2, 6, 2, 8], 2),
            exact(&[2, 2, 10, 8], 3),
        );
        let packed_in = exact(&[2, 6, 3 * 2 * 8], 4);
        let run = |dt: DType| {
            let vars: Vec<Var> = [&q, &kt, &vbig, &packed_in]
                .iter()
                .map(|t| Var::from_tensor(&t.to_dtype(dt).unwrap()).unwrap())
                .collect();
            let k = vars[1].as_tensor().transpose(1, 2).unwrap(); // (B, KV, S, D), a view
            let v = vars[2].as_tensor().narrow(2, 0, 6).unwrap(); // prefix of a larger buffer
            let y1 = split(vars[0].as_tensor(), &k, &v, true).unwrap();
            let y2 = packed(vars[3].as_tensor(), 2, true).unwrap();
            let y3 = split(vars[0].as_tensor(), &k, &k, false).unwrap(); // all dense
            assert_eq!((y1.dtype(), y2.dtype(), y3.dtype()), (dt, dt, dt));
            // Σ y·w: every run differentiates the same dy = w.
            let wsum = |y: &Tensor, seed| {
                let w = exact(y.dims(), seed).to_dtype(dt).unwrap();
                (y * w).unwrap().sum_all().unwrap()
            };
            let loss = ((wsum(&y1, 5) + wsum(&y2, 6)).unwrap() + wsum(&y3, 7)).unwrap();
            let g = loss.backward().unwrap();
            let mut out = vec![y1, y2, y3];
            for v in &vars {
                let gv = g.get(v.as_tensor()).unwrap();
                assert_eq!(gv.dtype(), dt);
                out.push(gv.clone());
            }
            out.into_iter()
                .map(|t| t.to_dtype(DType::F32).unwrap())
                .collect::<Vec<_>>()
        };
        for (a, b) in run(DType::F32).iter().zip(run(DType::BF16)) {
            crate::kernels::check::close(&b, a, 3e-2);
        }
    }

    #[test]
    fn shapes_that_do_not_fit_are_errors_naming_them() {
        let e = packed(&randn(&[1, 4, 10]), 3, true)
            .unwrap_err()
            .to_string();
        assert!(e.contains("10") && e.contains("heads (3)"), "{e}");
        let e = split(
            &randn(&[1, 3, 4, 2]),
            &randn(&[1, 2, 4, 2]),
            &randn(&[1, 2, 4, 2]),
            true,
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("[1, 3, 4, 2]") && e.contains("multiple of KV"),
            "{e}"
        );
        let e = packed(&randn(&[1, 0, 6]), 1, true).unwrap_err().to_string();
        assert!(e.contains("T = 0"), "{e}");
    }
}
