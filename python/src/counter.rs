//! The counting malloc: with this library in `LD_PRELOAD` (what `python -m memscope run` sets),
//! every malloc, calloc, realloc, memalign, posix_memalign, aligned_alloc, valloc, pvalloc and
//! free of the process goes through the functions below, which call glibc's own allocator
//! (`__libc_*`) and count the block's usable size (`malloc_usable_size`) in atomics: bytes live,
//! the peak since the last reset, blocks live, allocations made. PyTorch's CPU tensors are
//! `posix_memalign` blocks, so a phase's peak of PyTorch CPU memory is read here exactly (in
//! usable bytes: glibc's size classes round a request up by at most 16 bytes below its mmap
//! threshold, and to the page above it).
//!
//! Nothing here allocates: no Rust heap, no locks, no thread-locals; only relaxed atomics.
//! Loaded without the preload (a plain `import memscope`), Python opens this library with
//! RTLD_LOCAL and glibc's malloc stays the process's: the counters never move and
//! [`active`] says so.

use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering::Relaxed};

extern "C" {
    fn __libc_malloc(size: usize) -> *mut c_void;
    fn __libc_free(p: *mut c_void);
    fn __libc_calloc(n: usize, size: usize) -> *mut c_void;
    fn __libc_realloc(p: *mut c_void, size: usize) -> *mut c_void;
    fn __libc_memalign(align: usize, size: usize) -> *mut c_void;
    fn malloc_usable_size(p: *mut c_void) -> usize;
    fn __errno_location() -> *mut i32;
}

static LIVE: AtomicI64 = AtomicI64::new(0);
static PEAK: AtomicI64 = AtomicI64::new(0);
static BLOCKS: AtomicI64 = AtomicI64::new(0);
static ALLOCS: AtomicU64 = AtomicU64::new(0);
static ALLOC_BYTES: AtomicU64 = AtomicU64::new(0);
static ACTIVE: AtomicBool = AtomicBool::new(false);
/// Bytes live the process may reach (0: no limit): a parallel run's CPU rank held to
/// `--memory-limit`, as a device's memory holds a GPU rank.
static LIMIT: AtomicI64 = AtomicI64::new(0);
/// Allocations the limit refused, and the size the first of them asked for: a C++ library's
/// allocation (gloo's buffers on its own thread) fails as `std::bad_alloc`, not as PyTorch's
/// out-of-memory error, and the rank still ran out of memory.
static REFUSALS: AtomicU64 = AtomicU64::new(0);
static FIRST_REFUSED: AtomicU64 = AtomicU64::new(0);

const ENOMEM: i32 = 12;

/// An allocation of `size` more bytes would pass the limit: it fails as glibc's does when the
/// system has no memory left (null, errno ENOMEM), and PyTorch raises its out-of-memory error.
#[inline(always)]
unsafe fn refused(size: usize) -> bool {
    let limit = LIMIT.load(Relaxed);
    if limit > 0 && LIVE.load(Relaxed).saturating_add(size as i64) > limit {
        *__errno_location() = ENOMEM;
        if REFUSALS.fetch_add(1, Relaxed) == 0 {
            FIRST_REFUSED.store(size as u64, Relaxed);
        }
        return true;
    }
    false
}

const PAGE: usize = 4096;

#[inline(always)]
unsafe fn counted(p: *mut c_void) -> *mut c_void {
    if !p.is_null() {
        let n = malloc_usable_size(p) as i64;
        let now = LIVE.fetch_add(n, Relaxed) + n;
        PEAK.fetch_max(now, Relaxed);
        BLOCKS.fetch_add(1, Relaxed);
        ALLOCS.fetch_add(1, Relaxed);
        ALLOC_BYTES.fetch_add(n as u64, Relaxed);
        if !ACTIVE.load(Relaxed) {
            ACTIVE.store(true, Relaxed);
        }
    }
    p
}

#[inline(always)]
unsafe fn uncount(p: *mut c_void) {
    if !p.is_null() {
        LIVE.fetch_sub(malloc_usable_size(p) as i64, Relaxed);
        BLOCKS.fetch_sub(1, Relaxed);
    }
}

#[no_mangle]
pub unsafe extern "C" fn malloc(size: usize) -> *mut c_void {
    if refused(size) {
        return std::ptr::null_mut();
    }
    counted(__libc_malloc(size))
}

#[no_mangle]
pub unsafe extern "C" fn free(p: *mut c_void) {
    uncount(p);
    __libc_free(p)
}

#[no_mangle]
pub unsafe extern "C" fn calloc(n: usize, size: usize) -> *mut c_void {
    if refused(n.saturating_mul(size)) {
        return std::ptr::null_mut();
    }
    counted(__libc_calloc(n, size))
}

#[no_mangle]
pub unsafe extern "C" fn realloc(p: *mut c_void, size: usize) -> *mut c_void {
    if p.is_null() {
        return malloc(size);
    }
    if size == 0 {
        free(p);
        return std::ptr::null_mut();
    }
    let old = malloc_usable_size(p) as i64;
    if size as i64 > old && refused(size - old as usize) {
        return std::ptr::null_mut(); // the old block stays as it was
    }
    let q = __libc_realloc(p, size);
    if !q.is_null() {
        // The old block is gone (moved or resized in place): swap its bytes for the new ones.
        let n = malloc_usable_size(q) as i64;
        let now = LIVE.fetch_add(n - old, Relaxed) + (n - old);
        PEAK.fetch_max(now, Relaxed);
        ALLOCS.fetch_add(1, Relaxed);
        ALLOC_BYTES.fetch_add(n as u64, Relaxed);
    }
    q
}

#[no_mangle]
pub unsafe extern "C" fn memalign(align: usize, size: usize) -> *mut c_void {
    if refused(size) {
        return std::ptr::null_mut();
    }
    counted(__libc_memalign(align, size))
}

#[no_mangle]
pub unsafe extern "C" fn aligned_alloc(align: usize, size: usize) -> *mut c_void {
    if refused(size) {
        return std::ptr::null_mut();
    }
    counted(__libc_memalign(align, size))
}

#[no_mangle]
pub unsafe extern "C" fn posix_memalign(out: *mut *mut c_void, align: usize, size: usize) -> i32 {
    if !align.is_power_of_two() || align % std::mem::size_of::<*mut c_void>() != 0 {
        return 22; // EINVAL
    }
    if refused(size) {
        return ENOMEM;
    }
    let p = counted(__libc_memalign(align, size));
    if p.is_null() {
        return 12; // ENOMEM
    }
    *out = p;
    0
}

#[no_mangle]
pub unsafe extern "C" fn valloc(size: usize) -> *mut c_void {
    if refused(size) {
        return std::ptr::null_mut();
    }
    counted(__libc_memalign(PAGE, size))
}

#[no_mangle]
pub unsafe extern "C" fn pvalloc(size: usize) -> *mut c_void {
    if refused(size) {
        return std::ptr::null_mut();
    }
    counted(__libc_memalign(PAGE, size.div_ceil(PAGE).max(1) * PAGE))
}

/// True once a malloc went through these functions: the library was preloaded.
pub fn active() -> bool {
    ACTIVE.load(Relaxed)
}

/// (bytes live, peak since the last reset, blocks live, allocations made, bytes allocated).
pub fn read() -> (i64, i64, i64, u64, u64) {
    (
        LIVE.load(Relaxed),
        PEAK.load(Relaxed),
        BLOCKS.load(Relaxed),
        ALLOCS.load(Relaxed),
        ALLOC_BYTES.load(Relaxed),
    )
}

/// (allocations the limit refused, bytes the first of them asked for).
pub fn refusals() -> (u64, u64) {
    (REFUSALS.load(Relaxed), FIRST_REFUSED.load(Relaxed))
}

/// Holds the bytes live to `bytes` from now on (0: no limit); an allocation past it fails.
pub fn set_limit(bytes: i64) {
    LIMIT.store(bytes.max(0), Relaxed);
}

/// Starts a new peak window at the bytes live now; returns them.
pub fn reset_peak() -> i64 {
    let now = LIVE.load(Relaxed);
    PEAK.store(now, Relaxed);
    // An allocation racing the store may have raised LIVE above it: take it in.
    PEAK.fetch_max(LIVE.load(Relaxed), Relaxed);
    now
}
