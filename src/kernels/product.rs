//! How the kernels call gemm: row-major f32 products over strided operands, and gemm's
//! per-thread packing buffers.
//!
//! gemm keeps one packing buffer per thread ("L2 slab", the size of the L2 cache), allocated
//! the first time that thread packs a product and kept for the thread's life. Which rayon
//! workers reach that point depends on scheduling: a small attention call may run all its
//! tasks on one worker or spread them over every worker, so the heap figures of two identical
//! runs differed by a slab. [`allocate_slabs_on_every_thread`] packs one product on every
//! thread at start-up, so the count is fixed: the calling thread plus every worker, which
//! `estimate::runtime_buffers` predicts.

use gemm::Parallelism;

/// A row-major operand: pointer to its (0, 0) element and its (row, column) strides.
#[derive(Clone, Copy)]
pub struct Operand {
    pub ptr: *const f32,
    pub rs: usize,
    pub cs: usize,
}

impl Operand {
    /// The transposed view.
    pub fn t(self) -> Self {
        Operand {
            rs: self.cs,
            cs: self.rs,
            ..self
        }
    }
}

/// dst (m, n) with row stride `dst_rs` = beta · lhs (m, k) · rhs (k, n), plus dst when `acc`.
/// `parallel`: let gemm split the product over rayon's threads when it finds it worth it
/// (candle's own matmul does the same); otherwise it runs on the calling thread.
///
/// # Safety
/// Every operand must be valid for the strided (m, k), (k, n) and (m, n) extents it is given,
/// and `dst` must not alias the operands or memory another thread touches meanwhile.
#[allow(clippy::too_many_arguments)]
pub unsafe fn product(
    (m, n, k): (usize, usize, usize),
    dst: *mut f32,
    dst_rs: usize,
    acc: bool,
    lhs: Operand,
    rhs: Operand,
    beta: f32,
    parallel: bool,
) {
    let threads = rayon::current_num_threads();
    let par = if parallel && threads > 1 {
        Parallelism::Rayon(threads)
    } else {
        Parallelism::None
    };
    gemm::gemm(
        m,
        n,
        k,
        dst,
        1,
        dst_rs as isize,
        acc,
        lhs.ptr,
        lhs.cs as isize,
        lhs.rs as isize,
        rhs.ptr,
        rhs.cs as isize,
        rhs.rs as isize,
        1.0,
        beta,
        false,
        false,
        false,
        par,
    )
}

/// Side of the product that allocates a slab: large enough for gemm's packing path with any
/// SIMD width, small enough to cost nothing (64³ multiply-adds).
const SLAB_N: usize = 64;

/// Makes the calling thread and every worker of rayon's global pool allocate their slab.
/// Call once, after the pool is built.
pub fn allocate_slabs_on_every_thread() {
    rayon::broadcast(|_| pack_one());
    pack_one();
}

fn pack_one() {
    let a = vec![1f32; SLAB_N * SLAB_N];
    let mut c = vec![0f32; SLAB_N * SLAB_N];
    let op = Operand {
        ptr: a.as_ptr(),
        rs: SLAB_N,
        cs: 1,
    };
    // SAFETY: three N×N row-major buffers; dst does not alias the operands.
    unsafe {
        product(
            (SLAB_N, SLAB_N, SLAB_N),
            c.as_mut_ptr(),
            SLAB_N,
            false,
            op,
            op,
            1.0,
            false,
        )
    }
}
