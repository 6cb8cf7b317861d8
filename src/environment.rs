//! The machine and build a run happened on, recorded in every Record.

use crate::record::Environment;

pub fn capture(threads: usize) -> Environment {
    Environment {
        cpu_model: cpu_model().unwrap_or_else(|| "unknown".into()),
        isa: isa(),
        cores: std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1),
        threads,
        os: os().unwrap_or_else(|| std::env::consts::OS.to_string()),
        memscope_version: env!("CARGO_PKG_VERSION").to_string(),
        git_commit: option_env!("MEMSCOPE_GIT_COMMIT")
            .unwrap_or("unknown")
            .to_string(),
        candle_version: option_env!("MEMSCOPE_CANDLE_VERSION")
            .unwrap_or("unknown")
            .to_string(),
        allocator: match std::env::var("MIMALLOC_PURGE_DELAY") {
            Ok(d) => format!("mimalloc (counted; MIMALLOC_PURGE_DELAY={d} from the environment)"),
            Err(_) => "mimalloc (counted; freed memory kept, not returned to the OS)".to_string(),
        },
    }
}

/// The widest vector instructions this CPU offers memscope's kernels: `avx512 + avx512_bf16`,
/// `avx512`, `avx2`, `sse2` on x86-64 (gemm and `kernels::simd` choose theirs at run time), the
/// architecture's name elsewhere. Figures from an AVX2-only and an AVX-512 machine differ.
pub fn isa() -> String {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::is_x86_feature_detected as has;
        if has!("avx512f") {
            return if has!("avx512bf16") {
                "avx512 + avx512_bf16".into()
            } else {
                "avx512".into()
            };
        }
        if has!("avx2") && has!("fma") {
            return "avx2".into();
        }
        "sse2".into()
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        std::env::consts::ARCH.into()
    }
}

fn cpu_model() -> Option<String> {
    let text = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    text.lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, v)| v.trim().to_string())
}

fn os() -> Option<String> {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").ok()?;
    Some(format!("{} {}", std::env::consts::OS, release.trim()))
}
