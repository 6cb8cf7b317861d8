//! Counting global allocator: wraps mimalloc, counts heap bytes exactly and attributes every
//! block to the phase that was current when it was allocated.
//!
//! Counters are process-wide atomics (candle allocates on rayon threads, so thread-locals would
//! miss work done on behalf of a phase). Each block carries a small header holding the phase
//! that allocated it, so a free is charged back to the right phase. Sizes are the sizes asked
//! for (`Layout::size`), not what mimalloc rounds them up to: "heap live" is what the program
//! holds, and RSS (from /proc) is reported beside it for what the OS sees.
//!
//! Install it in a binary with `#[global_allocator] static A: CountingAlloc = CountingAlloc;`.
//! Without it (e.g. in library unit tests) every counter stays at zero and [`is_active`] is false.

use crate::instrument::scope::{self, MAX_MODULES};
use mimalloc::MiMalloc;
use serde::{Deserialize, Serialize};
use std::alloc::{GlobalAlloc, Layout};
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU64, AtomicU8, Ordering::Relaxed};

/// What the program is doing; every allocation is charged to the phase current at the time.
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    Idle = 0,
    Load = 1,
    Forward = 2,
    Backward = 3,
    Optimizer = 4,
    Prefill = 5,
    Decode = 6,
    Other = 7,
}

pub const N_PHASES: usize = 8;

impl Phase {
    pub const ALL: [Phase; N_PHASES] = [
        Phase::Idle,
        Phase::Load,
        Phase::Forward,
        Phase::Backward,
        Phase::Optimizer,
        Phase::Prefill,
        Phase::Decode,
        Phase::Other,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Phase::Idle => "idle",
            Phase::Load => "load",
            Phase::Forward => "forward",
            Phase::Backward => "backward",
            Phase::Optimizer => "optimizer",
            Phase::Prefill => "prefill",
            Phase::Decode => "decode",
            Phase::Other => "other",
        }
    }

    fn from_u8(v: u8) -> Phase {
        Phase::ALL.get(v as usize).copied().unwrap_or(Phase::Other)
    }
}

/// Bytes reserved in front of every block for its phase tag; also the minimum alignment used.
const HEADER: usize = 16;

static ACTIVE: AtomicBool = AtomicBool::new(false);
static COUNTING: AtomicBool = AtomicBool::new(true);
static PHASE: AtomicU8 = AtomicU8::new(Phase::Idle as u8);

static CURR_BYTES: AtomicU64 = AtomicU64::new(0);
static MAX_BYTES: AtomicU64 = AtomicU64::new(0);
static CURR_BLOCKS: AtomicU64 = AtomicU64::new(0);
static TOTAL_BLOCKS: AtomicU64 = AtomicU64::new(0);
static TOTAL_BYTES: AtomicU64 = AtomicU64::new(0);

#[allow(clippy::declare_interior_mutable_const)]
const ZERO: AtomicU64 = AtomicU64::new(0);
static PHASE_CURR: [AtomicU64; N_PHASES] = [ZERO; N_PHASES];
static PHASE_TOTAL_BYTES: [AtomicU64; N_PHASES] = [ZERO; N_PHASES];
static PHASE_TOTAL_BLOCKS: [AtomicU64; N_PHASES] = [ZERO; N_PHASES];

/// Heap live by the model module that allocated it (`instrument::scope` ids).
static MODULE_CURR: [AtomicU64; MAX_MODULES] = [ZERO; MAX_MODULES];
/// Highest module id seen, so snapshots copy only the slots in use.
static MODULE_TOP: AtomicU16 = AtomicU16::new(0);

// The peak snapshot: while armed, the allocation that raises the heap peak copies the live
// bytes by phase and by module (one thread at a time; a racing new peak skips its copy, so
// the snapshot may lag the exact peak by one in-flight allocation).
static SNAP_ARMED: AtomicBool = AtomicBool::new(false);
static SNAP_BUSY: AtomicBool = AtomicBool::new(false);
static SNAP_BYTES: AtomicU64 = AtomicU64::new(0);
static SNAP_PHASE: [AtomicU64; N_PHASES] = [ZERO; N_PHASES];
static SNAP_MODULE: [AtomicU64; MAX_MODULES] = [ZERO; MAX_MODULES];

/// The global allocator. Zero-sized; all state is in statics.
pub struct CountingAlloc;

/// A copy of every counter at one moment. Taking it does not allocate.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HeapStats {
    /// heap live: bytes currently allocated.
    pub curr_bytes: u64,
    /// heap peak: the most `curr_bytes` has been since the last [`reset_peak`].
    pub max_bytes: u64,
    /// live allocations (blocks).
    pub curr_blocks: u64,
    /// allocations made since start.
    pub total_blocks: u64,
    /// bytes allocated since start.
    pub total_bytes: u64,
    /// heap live by the phase that allocated it.
    pub phase_curr: [u64; N_PHASES],
    /// bytes allocated in each phase since start.
    pub phase_total_bytes: [u64; N_PHASES],
    /// allocations made in each phase since start.
    pub phase_total_blocks: [u64; N_PHASES],
}

impl HeapStats {
    pub fn phase_curr(&self, p: Phase) -> u64 {
        self.phase_curr[p as usize]
    }
}

/// True once the counting allocator has served an allocation in this process.
/// mimalloc's `mi_option_purge_delay`: its index in `mi_option_e` in mimalloc v3's mimalloc.h, the
/// version libmimalloc-sys builds unless its `v2` feature is on (v2 numbers it 16).
const MI_OPTION_PURGE_DELAY: libc::c_int = 15;

/// Tells mimalloc to keep freed memory instead of returning it to the OS after 10 ms.
///
/// A training step frees and reallocates gigabytes; with purging on, every step page-faults
/// its temporaries back in and the kernel zeroes them (38% of a gpt2-small step's CPU time in
/// `clear_page_erms`, measured with perf; the step is ~25% faster without it). RSS peak rises
/// by ~1.5% and RSS no longer falls after a phase: "heap live" (counted here) is the exact
/// figure, RSS is what the OS sees. Call once, first thing in `main`. A `MIMALLOC_PURGE_DELAY`
/// set in the environment (mimalloc reads it itself) wins.
pub fn keep_freed_memory() {
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_some() {
        return;
    }
    // SAFETY: plain option setter; valid at any time, the value -1 means "never purge".
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, -1) }
}

/// Undoes [`keep_freed_memory`]: freed memory goes back to the OS at once. For commands that
/// read large inputs and never measure (`analyze`), so that their RSS stays near what they hold.
pub fn return_freed_memory() {
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_some() {
        return;
    }
    // SAFETY: plain option setter; 0 means "purge freed memory immediately".
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, 0) }
}

pub fn is_active() -> bool {
    ACTIVE.load(Relaxed)
}

/// Turns counting off (or back on). Blocks keep their header either way; only the counters
/// stop. Call it once at start-up, before measuring: figures are meaningless across a switch.
pub fn set_counting(on: bool) {
    COUNTING.store(on, Relaxed);
}

pub fn counting() -> bool {
    COUNTING.load(Relaxed)
}

/// Sets the current phase and returns the previous one.
pub fn set_phase(p: Phase) -> Phase {
    Phase::from_u8(PHASE.swap(p as u8, Relaxed))
}

pub fn phase() -> Phase {
    Phase::from_u8(PHASE.load(Relaxed))
}

/// Starts a new peak window: heap peak becomes heap live (and the peak snapshot is cleared).
pub fn reset_peak() {
    MAX_BYTES.store(CURR_BYTES.load(Relaxed), Relaxed);
    SNAP_BYTES.store(0, Relaxed);
}

/// Live bytes at the heap peak of the current window, by allocating phase and module.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PeakSnapshot {
    pub bytes: u64,
    pub by_phase: [u64; N_PHASES],
    /// (module id, live bytes), non-zero slots only.
    pub by_module: Vec<(u16, u64)>,
}

/// Arms (or disarms) the peak snapshot. Armed, every new heap peak copies the per-module
/// counters: cheap per allocation, but not free — arm it for one step, not a whole run.
pub fn arm_peak_snapshot(on: bool) {
    SNAP_ARMED.store(on, Relaxed);
}

/// The snapshot taken at the latest new peak since [`reset_peak`] (bytes 0: none taken).
pub fn peak_snapshot() -> PeakSnapshot {
    while SNAP_BUSY.load(Relaxed) {
        std::hint::spin_loop();
    }
    let top = MODULE_TOP.load(Relaxed) as usize;
    let mut s = PeakSnapshot {
        bytes: SNAP_BYTES.load(Relaxed),
        ..PeakSnapshot::default()
    };
    for i in 0..N_PHASES {
        s.by_phase[i] = SNAP_PHASE[i].load(Relaxed);
    }
    for m in 0..=top.min(MAX_MODULES - 1) {
        let b = SNAP_MODULE[m].load(Relaxed);
        if b > 0 {
            s.by_module.push((m as u16, b));
        }
    }
    s
}

#[cold]
fn take_snapshot(now: u64) {
    if SNAP_BUSY.swap(true, Relaxed) {
        return;
    }
    for i in 0..N_PHASES {
        SNAP_PHASE[i].store(PHASE_CURR[i].load(Relaxed), Relaxed);
    }
    let top = MODULE_TOP.load(Relaxed) as usize;
    for m in 0..=top.min(MAX_MODULES - 1) {
        SNAP_MODULE[m].store(MODULE_CURR[m].load(Relaxed), Relaxed);
    }
    SNAP_BYTES.store(now, Relaxed);
    SNAP_BUSY.store(false, Relaxed);
}

pub fn snapshot() -> HeapStats {
    let mut s = HeapStats {
        curr_bytes: CURR_BYTES.load(Relaxed),
        max_bytes: MAX_BYTES.load(Relaxed),
        curr_blocks: CURR_BLOCKS.load(Relaxed),
        total_blocks: TOTAL_BLOCKS.load(Relaxed),
        total_bytes: TOTAL_BYTES.load(Relaxed),
        ..HeapStats::default()
    };
    for i in 0..N_PHASES {
        s.phase_curr[i] = PHASE_CURR[i].load(Relaxed);
        s.phase_total_bytes[i] = PHASE_TOTAL_BYTES[i].load(Relaxed);
        s.phase_total_blocks[i] = PHASE_TOTAL_BLOCKS[i].load(Relaxed);
    }
    // A racing allocation may have raised curr after max was read.
    s.max_bytes = s.max_bytes.max(s.curr_bytes);
    s
}

#[inline]
fn offset(layout: &Layout) -> usize {
    layout.align().max(HEADER)
}

#[inline]
fn outer(layout: &Layout) -> Option<Layout> {
    let size = layout.size().checked_add(offset(layout))?;
    Layout::from_size_align(size, layout.align().max(HEADER)).ok()
}

/// The tag stored in front of a block: phase and module.
#[derive(Clone, Copy)]
struct Tag {
    phase: u8,
    module: u16,
}

#[inline]
fn on_alloc(size: u64) -> Tag {
    let phase = PHASE.load(Relaxed);
    let module = scope::current().min(MAX_MODULES as u16 - 1);
    if COUNTING.load(Relaxed) {
        MODULE_CURR[module as usize].fetch_add(size, Relaxed);
        if module > MODULE_TOP.load(Relaxed) {
            MODULE_TOP.fetch_max(module, Relaxed);
        }
        let now = CURR_BYTES.fetch_add(size, Relaxed) + size;
        if now > MAX_BYTES.load(Relaxed) {
            let prev = MAX_BYTES.fetch_max(now, Relaxed);
            if now > prev && SNAP_ARMED.load(Relaxed) {
                take_snapshot(now);
            }
        }
        CURR_BLOCKS.fetch_add(1, Relaxed);
        TOTAL_BLOCKS.fetch_add(1, Relaxed);
        TOTAL_BYTES.fetch_add(size, Relaxed);
        let p = phase as usize % N_PHASES;
        PHASE_CURR[p].fetch_add(size, Relaxed);
        PHASE_TOTAL_BYTES[p].fetch_add(size, Relaxed);
        PHASE_TOTAL_BLOCKS[p].fetch_add(1, Relaxed);
    }
    Tag { phase, module }
}

#[inline]
fn on_free(size: u64, tag: Tag) {
    if COUNTING.load(Relaxed) {
        CURR_BYTES.fetch_sub(size, Relaxed);
        CURR_BLOCKS.fetch_sub(1, Relaxed);
        PHASE_CURR[tag.phase as usize % N_PHASES].fetch_sub(size, Relaxed);
        MODULE_CURR[tag.module as usize % MAX_MODULES].fetch_sub(size, Relaxed);
    }
}

/// Writes the tag into the 3 bytes before `p` (module little-endian, then phase).
#[inline]
unsafe fn write_tag(p: *mut u8, t: Tag) {
    let m = t.module.to_le_bytes();
    *p.sub(3) = m[0];
    *p.sub(2) = m[1];
    *p.sub(1) = t.phase;
}

#[inline]
unsafe fn read_tag(p: *mut u8) -> Tag {
    Tag {
        phase: *p.sub(1),
        module: u16::from_le_bytes([*p.sub(3), *p.sub(2)]),
    }
}

// SAFETY: every block handed out is `offset(layout)` bytes past the start of a mimalloc block
// allocated with `outer(layout)`; the 3 bytes before it hold the tag (module, phase). `dealloc`
// and `realloc` receive the same layout (GlobalAlloc contract), so they recompute the same offset.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        self.alloc_with(layout, false)
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        self.alloc_with(layout, true)
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        let off = offset(&layout);
        on_free(layout.size() as u64, read_tag(ptr));
        // `outer` succeeded when this block was allocated with the same layout.
        let outer =
            Layout::from_size_align_unchecked(layout.size() + off, layout.align().max(HEADER));
        MiMalloc.dealloc(ptr.sub(off), outer);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let off = offset(&layout);
        let old_tag = read_tag(ptr);
        let Some(new_outer_size) = new_size.checked_add(off) else {
            return std::ptr::null_mut();
        };
        let old_outer =
            Layout::from_size_align_unchecked(layout.size() + off, layout.align().max(HEADER));
        let base = MiMalloc.realloc(ptr.sub(off), old_outer, new_outer_size);
        if base.is_null() {
            return base;
        }
        on_free(layout.size() as u64, old_tag);
        let tag = on_alloc(new_size as u64);
        let p = base.add(off);
        write_tag(p, tag);
        p
    }
}

impl CountingAlloc {
    unsafe fn alloc_with(&self, layout: Layout, zeroed: bool) -> *mut u8 {
        let Some(outer) = outer(&layout) else {
            return std::ptr::null_mut();
        };
        let base = if zeroed {
            MiMalloc.alloc_zeroed(outer)
        } else {
            MiMalloc.alloc(outer)
        };
        if base.is_null() {
            return base;
        }
        if !ACTIVE.load(Relaxed) {
            ACTIVE.store(true, Relaxed);
        }
        let tag = on_alloc(layout.size() as u64);
        let p = base.add(offset(&layout));
        write_tag(p, tag);
        p
    }
}

/// Runs `f` with `p` as the current phase, restoring the previous phase afterwards.
pub fn in_phase<T>(p: Phase, f: impl FnOnce() -> T) -> T {
    let prev = set_phase(p);
    let out = f();
    set_phase(prev);
    out
}
