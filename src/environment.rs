//! The machine and build a run happened on, recorded in every Record.

use crate::record::Environment;

pub fn capture(threads: usize) -> Environment {
    Environment {
        cpu_model: cpu_model().unwrap_or_else(|| "unknown".into()),
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
