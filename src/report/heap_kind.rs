//! What a Record's heap figures count, named in every table that shows them: memscope's
//! counting allocator, or what another engine's Record says it measured.

use crate::record::Record;

/// What a Record's heap figures count, as a row's name and its source: memscope's counting
/// allocator, unless another engine's Record says otherwise (on CUDA, the caching allocator's
/// allocated bytes; without the preloaded allocator, RSS).
pub fn heap_kind(r: &Record) -> (&'static str, &'static str) {
    match r.spec.engine.as_ref().map(|e| e.memory.as_str()) {
        Some("cuda allocated") => (
            "CUDA allocated",
            "PyTorch's caching allocator, allocated bytes",
        ),
        Some("rss") => ("RSS", "resident set size (no counting allocator)"),
        _ => ("heap", "counting allocator"),
    }
}

/// `heap` → `Heap`; names already capitalized as they are.
pub fn capitalized(s: &str) -> String {
    let mut c = s.chars();
    c.next()
        .map_or(String::new(), |f| f.to_uppercase().chain(c).collect())
}
