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
    /// The line may share its text with another process's: a job's ranks write one stderr,
    /// and a library's line written in pieces can run into it. So the prefix is looked for
    /// anywhere in a line, the first JSON value after it read, whatever follows; where that
    /// value is cut off, the next prefix is tried.
    pub fn find(stderr: &[String]) -> Option<OomFacts> {
        let prefix = PREFIX.trim_end();
        stderr.iter().find_map(|l| {
            l.match_indices(prefix).find_map(|(at, _)| {
                serde_json::Deserializer::from_str(&l[at + prefix.len()..])
                    .into_iter::<OomFacts>()
                    .next()?
                    .ok()
            })
        })
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

    #[test]
    fn a_line_run_into_another_process_s_is_still_read() {
        // Two ranks printing at once, each line's text and newline written apart: one rank's
        // line lands after a piece of the other's, or the other's runs on after its JSON.
        let cut = r#"memscope-oom {"device":"cpu","rank":1memscope-oom {"device":"cpu","rank":0,"requested_bytes":1024}"#;
        let run_on = r#"[W] a warning memscope-oom {"device":"cpu","rank":1,"requested_bytes":2048}out of memory: x"#;
        let f = OomFacts::find(&[cut.to_string()]).unwrap();
        assert_eq!((f.rank, f.requested_bytes), (Some(0), Some(1024)));
        let f = OomFacts::find(&[run_on.to_string()]).unwrap();
        assert_eq!((f.rank, f.requested_bytes), (Some(1), Some(2048)));
        let first = OomFacts::find(&[r#"memscope-oom {"device":"cpu","rank":1"#.to_string()]);
        assert_eq!(first, None, "a cut JSON value is not read as facts");
    }
}
