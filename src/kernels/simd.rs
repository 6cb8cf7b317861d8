//! The elementwise kernels' loops compiled for AVX2 + FMA when the CPU has them, chosen at run
//! time. The crate is built for baseline x86-64 (SSE2, 4 lanes) so that one binary runs on any
//! x86-64 machine; the matmuls (the `gemm` crate) already dispatch at run time, but memscope's
//! own loops (exp, sigmoid, norms, the optimizer) would stay on SSE2. [`vector`] runs a closure
//! inside a function compiled with `avx2,fma`: the closure and everything it inlines (the slice
//! helpers of `elems.rs`, `fast_exp`) are vectorised 8 lanes wide there. Only what is inlined:
//! a closure is its own function, compiled for baseline x86-64, and the compiler left most of
//! them out of line (the AVX2 function was a tail call into SSE2 code), so every caller marks
//! its closure `#[inline(always)]`, as must any helper it calls. The arithmetic is the
//! same (no fused multiply-adds are introduced without `mul_add`, and reductions keep their
//! explicit lane order), so results are bit-identical to the SSE2 path.

use std::sync::OnceLock;

/// Whether this CPU has AVX2 and FMA (checked once).
pub fn has_avx2() -> bool {
    static HAS: OnceLock<bool> = OnceLock::new();
    *HAS.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            std::arch::is_x86_feature_detected!("avx2")
                && std::arch::is_x86_feature_detected!("fma")
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            false
        }
    })
}

/// Runs `f`, compiled for AVX2 + FMA when the CPU has them.
#[inline(always)]
pub fn vector<R>(f: impl FnOnce() -> R) -> R {
    #[cfg(target_arch = "x86_64")]
    if has_avx2() {
        // SAFETY: the CPU has AVX2 and FMA (checked above).
        return unsafe { avx2_fma(f) };
    }
    f()
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn avx2_fma<R>(f: impl FnOnce() -> R) -> R {
    f()
}
