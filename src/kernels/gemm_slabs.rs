//! gemm keeps one packing buffer per thread ("L2 slab", the size of the L2 cache), allocated
//! the first time that thread packs a product and kept for the thread's life. Which rayon
//! workers reach that point depends on scheduling: a small attention call may run all its
//! tasks on one worker or spread them over every worker, so the heap figures of two identical
//! runs differed by a slab. Packing one product on every thread at start-up makes the count
//! fixed: the calling thread plus every worker, which `estimate::runtime_buffers` predicts.

use gemm::Parallelism;

/// Side of the product that allocates the slab: large enough for gemm's packing path with any
/// SIMD width, small enough to cost nothing (64³ multiply-adds).
const N: usize = 64;

/// Makes the calling thread and every worker of rayon's global pool allocate their slab.
/// Call once, after the pool is built.
pub fn allocate_on_every_thread() {
    rayon::broadcast(|_| pack_one());
    pack_one();
}

fn pack_one() {
    let a = vec![1f32; N * N];
    let mut c = vec![0f32; N * N];
    // SAFETY: three N×N row-major buffers; dst does not alias the operands.
    unsafe {
        gemm::gemm(
            N,
            N,
            N,
            c.as_mut_ptr(),
            1,
            N as isize,
            false,
            a.as_ptr(),
            1,
            N as isize,
            a.as_ptr(),
            1,
            N as isize,
            0.0,
            1.0,
            false,
            false,
            false,
            Parallelism::None,
        )
    }
}
