//! How many CPU threads a run uses: the default (every core this process may use) and setting it
//! for rayon and candle's matmuls before any parallel work.

/// The default `--threads`: every core this process may use.
pub fn all_cores() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

/// Sets the CPU thread count for rayon and candle's matmuls. Call before any parallel work.
pub fn set_threads(n: usize) {
    // candle's gemm calls read RAYON_NUM_THREADS each time; rayon's pool reads it once.
    std::env::set_var("RAYON_NUM_THREADS", n.to_string());
    let _ = rayon::ThreadPoolBuilder::new()
        .num_threads(n)
        .build_global();
    crate::kernels::product::allocate_slabs_on_every_thread();
}
