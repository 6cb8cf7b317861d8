//! The linear kernel's backward in the estimator: the FLOPs of dx and dW and the scratch
//! `kernels::linear` / `kernels::linear_half` hold while they make them, for f32, bf16 on the
//! dot-product kernel, and bf16 / f16 widened.

use super::sim::{Id, Sim};
use crate::kernels::{dot_bf16, product};

/// `Fused::Linear`'s backward over `inputs` (x, W[, b]) with output gradient `grad`: `sunk` is
/// W when the sink takes its gradient, `master` its f32 master under mixed precision.
pub fn linear_kernel(
    sim: &mut Sim,
    inputs: &[Id],
    grad: Id,
    out_in: bool,
    sunk: Option<Id>,
    master: Option<Id>,
) {
    let (n, i) = sim.rows(inputs[0]);
    let o = sim.rows(grad).1;
    sim.add_matmul_flops(2, n, i, o); // dx = dy·W, dW = dyᵀ·x
    let half = sim.nodes[inputs[1]].dtype;
    if half != 4 {
        // bf16 / f16 (`kernels::linear_half`): db summed, dx made in f32 and narrowed, then dW
        // made in f32 and narrowed (kept in f32 for a mixed-precision master, added in place
        // when the sink already holds it). The largest of those moments, before the outputs
        // exist here.
        let f = |e: usize| e as u64 * 4;
        let db32 = if inputs.len() == 3 { f(o) } else { 0 };
        let (dx32, dw32) = (f(n * i), f(i * o));
        let dx_h = (n * i) as u64 * half;
        let w = inputs[1];
        let dw_h = if master.is_some()
            || sunk.is_some_and(|_| sim.sink.as_ref().is_some_and(|s| s.contains_key(&w)))
        {
            0
        } else {
            (i * o) as u64 * half
        };
        let most = if sim.bf16_dot {
            // On the dot-product kernel: dy, x and W read as they are; each product holds
            // its packing buffers.
            let dw_mnk = if out_in { (o, i, n) } else { (i, o, n) };
            [
                db32 + dx32 + dot_bf16::scratch_bytes((n, i, o)),
                db32 + dx32 + dx_h,
                db32 + dx_h + dw32 + dot_bf16::scratch_bytes(dw_mnk),
                db32 + dx_h + dw32 + dw_h,
            ]
        } else {
            // Widened: dy32 lives until dW is made, x32 beside dW; dx through W's f32 tiles.
            let (dy32, x32) = (f(n * o), f(n * i));
            let tile = product::widening_scratch_bytes((n, i, o));
            [
                dy32 + db32 + dx32 + tile,
                dy32 + db32 + dx32 + dx_h,
                dy32 + db32 + dx_h + x32 + dw32,
                db32 + dx_h + dw32 + dw_h,
            ]
        };
        sim.scratch(most.into_iter().max().unwrap_or(0));
    } else if !out_in {
        // dx = dy · Wᵀ reads the (I, O) weight column-major: the kernel holds dx and
        // the tile it copies W through while the product runs.
        let tile = product::scratch_bytes((n, i, o), 1, o);
        if tile > 0 {
            sim.scratch((n * i * 4) as u64 + tile);
        }
    }
}
