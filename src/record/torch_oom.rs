//! The torch engine's out-of-memory report (`python/memscope/_workers/engine.py`): one stderr line
//! `memscope-oom {json}` (then the exception's own message), parsed back into a sweep row's facts
//! (`Row::torch_oom`).

use serde::{Deserialize, Serialize};

/// What starts the line.
pub const PREFIX: &str = "memscope-oom ";

/// Exit code of the engine after an out-of-memory error (not a crash, not a usage error).
pub const EXIT_OOM: i32 = 3;

/// What a process under a memory limit says when an allocation fails where the engine cannot
/// report it: a shared object that cannot be mapped, C++'s `bad_alloc` (a rank's gloo thread
/// or library `new` refused by the heap limit: "terminate called after throwing an instance of
/// 'std::bad_alloc'", then SIGABRT), Python's MemoryError, the loader's thread-local block.
pub const ALLOC_FAILURES: [&str; 5] = [
    "failed to map segment",
    "std::bad_alloc",
    "MemoryError",
    "cannot allocate memory",
    "thread-local data",
];

/// PyTorch's figures when an allocation failed.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct OomFacts {
    /// `cpu`, `cuda:0`, …
    pub device: String,
    /// A data-parallel run: the rank that ran out of memory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rank: Option<usize>,
    /// The allocation that failed, bytes (from the exception's message; absent when it says none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requested_bytes: Option<u64>,
    /// Bytes live when it failed: CUDA allocated bytes, or the counting allocator's live bytes
    /// on the CPU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allocated_bytes: Option<u64>,
    /// CUDA only: the caching allocator's reserved bytes when it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reserved_bytes: Option<u64>,
    /// CUDA only: the per-process cap (`--memory-limit`), bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit_bytes: Option<u64>,
    /// The phase running when it failed (`forward`, `backward`, `optimizer`, `load`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// A pipeline's rank: (stage index, first block, end block) of each stage it holds.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stages: Vec<(usize, usize, usize)>,
}

impl OomFacts {
    /// The facts in the engine's stderr lines, if it reported an out-of-memory error.
    pub fn find(stderr: &[String]) -> Option<OomFacts> {
        stderr
            .iter()
            .find_map(|l| l.trim().strip_prefix(PREFIX.trim_end()))
            .and_then(|j| serde_json::from_str(j.trim()).ok())
    }

    /// One sentence for a row's reason.
    pub fn describe(&self) -> String {
        let b = |v: u64| crate::units::bytes(v as f64);
        let mut s = match self.rank {
            Some(r) if !self.stages.is_empty() => {
                let stages: Vec<String> = self
                    .stages
                    .iter()
                    .map(|&(st, lo, hi)| format!("stage {st}: blocks {lo}–{}", hi.max(lo + 1) - 1))
                    .collect();
                format!(
                    "PyTorch ran out of memory on rank {r} ({}; {})",
                    self.device,
                    stages.join(", ")
                )
            }
            Some(r) => format!("PyTorch ran out of memory on rank {r} ({})", self.device),
            None => format!("PyTorch ran out of memory on {}", self.device),
        };
        if let Some(p) = &self.phase {
            s += &format!(" in {p}");
        }
        if let Some(r) = self.requested_bytes {
            s += &format!(": tried to allocate {}", b(r));
        }
        let mut held = Vec::new();
        if let Some(a) = self.allocated_bytes {
            // CUDA: the caching allocator's allocated bytes; CPU: the counting allocator's heap
            // live (every malloc of the engine process).
            let what = if self.device.starts_with("cuda") {
                "allocated"
            } else {
                "heap live"
            };
            held.push(format!("{} {what}", b(a)));
        }
        if let Some(r) = self.reserved_bytes {
            held.push(format!("{} reserved", b(r)));
        }
        if !held.is_empty() {
            s += &format!(" with {}", held.join(", "));
        }
        if let Some(l) = self.limit_bytes {
            s += &format!(" (cap {})", b(l));
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_engine_line_is_found_among_others_and_described() {
        let lines = vec![
            "Traceback (most recent call last):".to_string(),
            r#"memscope-oom {"device":"cuda:0","requested_bytes":2147483648,"allocated_bytes":1073741824,"reserved_bytes":1610612736,"phase":"backward"}"#.to_string(),
        ];
        let f = OomFacts::find(&lines).unwrap();
        assert_eq!(f.requested_bytes, Some(2 << 30));
        assert_eq!(
            f.describe(),
            "PyTorch ran out of memory on cuda:0 in backward: tried to allocate 2.00 GiB with 1.00 GiB allocated, 1.50 GiB reserved"
        );
        assert!(OomFacts::find(&["memscope-oom not json".to_string()]).is_none());
        assert!(OomFacts::find(&[]).is_none());
    }
}
