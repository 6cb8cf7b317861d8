//! Per-op wall time inside the real step: the one instrumentation point. Every kernel entry
//! (forward and backward) and the remaining candle call sites in the families open an
//! [`op_scope`]; when profiling is off that costs one relaxed atomic load and nothing else.
//! When on, the guard reads the clock on the calling thread (kernels run multi-threaded via
//! rayon *inside* one call, so the call's wall time is the op's time) and adds it to a global
//! table keyed by (phase, module, op kind, pass). Nested scopes (an op calling another) count
//! once, at the outermost. Nothing here prints.

use crate::instrument::alloc::{self, Phase};
use crate::instrument::scope;
use std::cell::Cell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::Instant;

/// Forward or backward: which function of the op ran (the phase says where in the step).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Pass {
    Forward,
    Backward,
}

impl Pass {
    pub fn name(self) -> &'static str {
        match self {
            Pass::Forward => "forward",
            Pass::Backward => "backward",
        }
    }
}

static ON: AtomicBool = AtomicBool::new(false);

type Key = (Phase, u16, &'static str, Pass);

/// (total ns, calls) per key.
static TABLE: Mutex<Option<HashMap<Key, (u128, u64)>>> = Mutex::new(None);

thread_local! {
    static DEPTH: Cell<u32> = const { Cell::new(0) };
}

/// Turns profiling on or off (off: every scope is one atomic load).
pub fn set_enabled(on: bool) {
    ON.store(on, Relaxed);
}

pub fn enabled() -> bool {
    ON.load(Relaxed)
}

/// Clears the table (the workload calls it before the first measured step).
pub fn reset() {
    if let Ok(mut t) = TABLE.lock() {
        *t = None;
    }
}

/// One op's accumulated time.
#[derive(Clone, Debug, PartialEq)]
pub struct OpTime {
    pub phase: Phase,
    /// `instrument::scope` name of the module the op ran in.
    pub module: String,
    pub kind: &'static str,
    pub pass: Pass,
    pub total_ms: f64,
    pub calls: u64,
}

/// Everything recorded since the last [`reset`], sorted by (phase, module, kind, pass).
pub fn take() -> Vec<OpTime> {
    let table = TABLE.lock().map(|mut t| t.take()).unwrap_or_default();
    let mut v: Vec<(Key, (u128, u64))> = table.unwrap_or_default().into_iter().collect();
    v.sort_by_key(|(k, _)| *k);
    v.into_iter()
        .map(|((phase, m, kind, pass), (ns, calls))| OpTime {
            phase,
            module: scope::name(m),
            kind,
            pass,
            total_ms: ns as f64 / 1e6,
            calls,
        })
        .collect()
}

/// Times until dropped; inert when profiling is off.
pub struct OpGuard(Option<(Instant, Key)>);

/// Opens a scope for op `kind` in the current module.
#[inline]
pub fn op_scope(kind: &'static str, pass: Pass) -> OpGuard {
    if !ON.load(Relaxed) {
        return OpGuard(None);
    }
    start(scope::current(), kind, pass)
}

/// As [`op_scope`] in module `module` (a backward names the module its forward ran in).
#[inline]
pub fn op_scope_in(module: u16, kind: &'static str, pass: Pass) -> OpGuard {
    if !ON.load(Relaxed) {
        return OpGuard(None);
    }
    start(module, kind, pass)
}

#[cold]
fn start(module: u16, kind: &'static str, pass: Pass) -> OpGuard {
    let outer = DEPTH.with(|d| {
        d.set(d.get() + 1);
        d.get() == 1
    });
    let key = (alloc::phase(), module, kind, pass);
    OpGuard(Some((Instant::now(), key)).filter(|_| outer).or_else(|| {
        // Nested: only the depth is tracked; the outer scope holds the time.
        Some((Instant::now(), (key.0, u16::MAX, "", key.3)))
    }))
}

impl Drop for OpGuard {
    fn drop(&mut self) {
        let Some((t0, key)) = self.0.take() else {
            return;
        };
        let ns = t0.elapsed().as_nanos();
        DEPTH.with(|d| d.set(d.get().saturating_sub(1)));
        if key.2.is_empty() {
            return; // a nested scope
        }
        if let Ok(mut t) = TABLE.lock() {
            let e = t.get_or_insert_with(HashMap::new).entry(key).or_default();
            e.0 += ns;
            e.1 += 1;
        }
    }
}

/// Calls `f` inside an op scope (for candle call sites in the families).
#[inline]
pub fn timed<T>(kind: &'static str, f: impl FnOnce() -> T) -> T {
    let _g = op_scope(kind, Pass::Forward);
    f()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn off_records_nothing_on_records_outermost_once() {
        set_enabled(false);
        reset();
        drop(op_scope("x", Pass::Forward));
        assert!(take().is_empty());
        set_enabled(true);
        {
            let _a = op_scope("outer", Pass::Forward);
            let _b = op_scope("inner", Pass::Forward);
        }
        set_enabled(false);
        let t = take();
        assert_eq!(t.len(), 1);
        assert_eq!((t[0].kind, t[0].calls), ("outer", 1));
    }
}
