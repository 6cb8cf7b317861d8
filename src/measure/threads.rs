//! How many CPU threads a run uses: the default (every core this process may use) and setting it
//! for rayon and candle's matmuls before any parallel work.

/// The default `--threads`: every core this process may use.
pub fn all_cores() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

/// Sets the CPU thread count for rayon and candle's matmuls. Call before any parallel work.
///
/// When there are no more threads than CPUs this process may run on, worker i is pinned to the
/// i-th of them. Unpinned, on the 2-core AMD EPYC VMs, Linux left both workers on one CPU for
/// whole runs often enough that a (256, 768, 768) product, a few milliseconds long, ran at one
/// core's rate (≈ 105 GFLOP/s instead of ≈ 205) in 3 of 4 processes that held 2 GiB, and in 1
/// of 4 pinned (`docs/performance.md`).
pub fn set_threads(n: usize) {
    // candle's gemm calls read RAYON_NUM_THREADS each time; rayon's pool reads it once.
    std::env::set_var("RAYON_NUM_THREADS", n.to_string());
    let cpus = allowed_cpus();
    let mut pool = rayon::ThreadPoolBuilder::new().num_threads(n);
    if n <= cpus.len() {
        pool = pool.start_handler(move |i| pin_to(cpus[i]));
    }
    let _ = pool.build_global();
    crate::kernels::product::allocate_slabs_on_every_thread();
}

/// The CPUs this process may run on (its affinity mask: `taskset`, Slurm's binding), in order.
fn allowed_cpus() -> Vec<usize> {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; sched_getaffinity fills it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return Vec::new();
        }
        (0..libc::CPU_SETSIZE as usize)
            .filter(|&c| libc::CPU_ISSET(c, &set))
            .collect()
    }
}

/// Pins the calling thread to `cpu` (best effort: a refusal leaves it where the kernel puts it).
fn pin_to(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t with one CPU set; applies to the calling thread only.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pinned_thread_runs_only_on_its_cpu() {
        let cpus = allowed_cpus();
        assert!(!cpus.is_empty(), "sched_getaffinity gave no CPU");
        let last = *cpus.last().unwrap();
        let (mask, now) = std::thread::spawn(move || {
            pin_to(last);
            // SAFETY: no arguments; returns the CPU the calling thread runs on.
            (allowed_cpus(), unsafe { libc::sched_getcpu() })
        })
        .join()
        .unwrap();
        assert_eq!(mask, vec![last]);
        assert_eq!(now as usize, last);
        assert_eq!(
            allowed_cpus(),
            cpus,
            "the calling thread's mask is untouched"
        );
    }
}
