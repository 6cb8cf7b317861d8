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
/// core's rate (≈ 105 GFLOP/s instead of ≈ 205) in 3 of 4 processes that held 2 GiB, and in 0
/// of 4 pinned (a later batch: 4 of 12 pinned; `docs/performance.md`).
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

/// Sets the threads for a run of `spec`: [`set_threads`], and how candle runs its own
/// elementwise ops. candle 0.11 runs them on a "barrier pool" of threads − 1 workers that spin
/// 25,000 `pause`s after every op before parking; on 2 cores that spinning worker competes with
/// rayon's workers on the kernel that follows (a `perf` profile of cs336-small train put 6.7% of
/// all samples in that spin, tiny GPT-2 8k 8.3%). When memscope's kernels do the heavy work,
/// candle's remaining ops (gradient accumulation adds, casts, the residual adds) run on the
/// calling thread instead (`CANDLE_NUM_THREADS=1`): cs336-small train 2×128 step 1359–1424 →
/// 1304–1331 ms, tiny GPT-2 8k 8×128 276–279 → 252–265 ms, interleaved. f32 only: the
/// op-by-op path (`--fusion none`) is built from candle's ops and ran 9–13% slower without the
/// pool, and bf16 training (candle's casts) 12–16% slower. A `CANDLE_NUM_THREADS` set by the
/// user wins.
///
/// Where the pool stays, its workers park after [`POOL_SPINS`] spins instead of 25,000: their
/// spinning after each of candle's ops took a core from the kernels that followed (AMD EPYC
/// Zen 5, 2 cores, gpt2-small train 2×128 everything in bf16, interleaved: step 594–612 → 550–562
/// ms; cs336-small 666 → 605 ms; `--fusion none` f32 1382 → 1374 ms). A
/// `CANDLE_BARRIER_POOL_SPIN_LIMIT` set by the user wins.
pub fn set_run_threads(spec: &crate::spec::Spec) {
    if let crate::spec::EngineRef::Torch(_) = spec.engine() {
        return; // the Python package sets PyTorch's threads; nothing of candle runs
    }
    let user = std::env::var_os("CANDLE_NUM_THREADS").is_some();
    let f32 = spec.dtype == crate::spec::Dtype::F32;
    match candle_threads(spec.variant.fusion, f32, user) {
        Some(n) => std::env::set_var("CANDLE_NUM_THREADS", n),
        None if std::env::var_os("CANDLE_BARRIER_POOL_SPIN_LIMIT").is_none() => {
            std::env::set_var("CANDLE_BARRIER_POOL_SPIN_LIMIT", POOL_SPINS.to_string())
        }
        None => {}
    }
    set_threads(spec.threads);
}

/// Spins of candle's pool workers before they park, where memscope leaves the pool on.
pub const POOL_SPINS: u32 = 2000;

/// The `CANDLE_NUM_THREADS` a run sets (None: leave candle's default or the user's value).
fn candle_threads(
    fusion: crate::model::variant::Fusion,
    f32: bool,
    user_set: bool,
) -> Option<&'static str> {
    (fusion == crate::model::variant::Fusion::Full && f32 && !user_set).then_some("1")
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
    fn candle_ops_run_on_the_calling_thread_only_beside_memscopes_kernels() {
        use crate::model::variant::Fusion;
        assert_eq!(candle_threads(Fusion::Full, true, false), Some("1"));
        let keep =
            |f, f32, user, why: &str| assert_eq!(candle_threads(f, f32, user), None, "{why}");
        keep(Fusion::None, true, false, "op-by-op keeps candle's pool");
        keep(Fusion::Full, false, false, "half types keep candle's pool");
        keep(Fusion::Full, true, true, "the user's value wins");
    }

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
