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

/// `MEMSCOPE_NO_COUNT` set (to anything but `0`): memscope's heap counting is off, in its own
/// process (`main.rs`) and in the torch engine's it starts.
pub fn counting_switched_off() -> bool {
    std::env::var_os("MEMSCOPE_NO_COUNT").is_some_and(|v| v != "0")
}

/// The widest vector instructions memscope's kernels use on this CPU: `avx512 + avx512_bf16`,
/// `avx512`, `avx2`, `sse2` on x86-64 (gemm and `kernels::simd` choose theirs at run time), with
/// `+ amx_bf16` where bf16 products run on AMX tiles (or why they do not: `MEMSCOPE_AMX=0`,
/// Linux's refusal); the architecture's name elsewhere. Figures from an AVX2-only and an AVX-512 machine differ. A
/// build without the `avx512` feature says `avx2 (AVX-512 CPU, build without avx512)` there.
pub fn isa() -> String {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::is_x86_feature_detected as has;
        if has!("avx512f") && !cfg!(feature = "avx512") {
            return "avx2 (AVX-512 CPU, build without avx512)".into();
        }
        if has!("avx512f") {
            let mut isa = String::from("avx512");
            if has!("avx512bf16") {
                isa += " + avx512_bf16";
            }
            if let Some(amx) = crate::kernels::amx_tiles::status() {
                isa += &format!(" + {amx}");
            }
            return isa;
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

#[cfg(test)]
mod tests {
    /// The Record names the kernels this build runs: an AVX-512 CPU runs AVX2 ones in a build
    /// without the `avx512` feature (`cargo test --release --no-default-features --features engine`, run by CI).
    #[test]
    #[cfg(target_arch = "x86_64")]
    fn isa_names_the_kernels_this_build_runs() {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").expect("/proc/cpuinfo");
        let flags = cpuinfo
            .lines()
            .find(|l| l.starts_with("flags"))
            .expect("a flags line in /proc/cpuinfo");
        let has = |f: &str| flags.split_whitespace().any(|x| x == f);
        let isa = super::isa();
        let want = match (has("avx512f"), cfg!(feature = "avx512")) {
            (true, false) => "avx2 (AVX-512 CPU, build without avx512)",
            (true, true) if has("amx_bf16") && has("amx_tile") => {
                // Every AMX CPU has AVX-512 BF16; what follows says whether the tiles are used.
                assert!(isa.starts_with("avx512 + avx512_bf16 + amx_bf16"), "{isa}");
                return;
            }
            (true, true) if has("avx512_bf16") => "avx512 + avx512_bf16",
            (true, true) => "avx512",
            (false, _) if has("avx2") && has("fma") => "avx2",
            (false, _) => "sse2",
        };
        assert_eq!(isa, want);
    }
}
