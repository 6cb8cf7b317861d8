//! The counting allocator on known allocations. Its own test binary, so the allocator is the
//! global one here. The counters are process-wide, so the checks run one after another on the
//! one thread of a binary without libtest's harness: its waiting thread, or parallel test
//! threads, would allocate in the middle of an exact comparison.

use memscope::instrument::alloc::{self, CountingAlloc, Phase};
use memscope::measure::phases::PhaseTracker;

#[global_allocator]
static A: CountingAlloc = CountingAlloc;

const MIB: usize = 1 << 20;

fn counts_a_known_allocation_exactly() {
    assert!(alloc::is_active());
    let before = alloc::snapshot();
    let v: Vec<u8> = Vec::with_capacity(3 * MIB);
    let during = alloc::snapshot();
    assert_eq!(during.curr_bytes - before.curr_bytes, 3 * MIB as u64);
    assert_eq!(during.curr_blocks - before.curr_blocks, 1);
    assert_eq!(during.total_blocks - before.total_blocks, 1);
    assert_eq!(during.total_bytes - before.total_bytes, 3 * MIB as u64);
    drop(v);
    let after = alloc::snapshot();
    assert_eq!(after.curr_bytes, before.curr_bytes);
    assert_eq!(after.curr_blocks, before.curr_blocks);
    assert_eq!(after.total_blocks - before.total_blocks, 1);
}

fn peak_is_exact_and_resettable() {
    alloc::reset_peak();
    let base = alloc::snapshot().curr_bytes;
    let a = vec![1u8; 5 * MIB];
    let b = vec![2u8; 2 * MIB];
    drop(a);
    let c = vec![3u8; MIB];
    let s = alloc::snapshot();
    assert_eq!(
        s.max_bytes - base,
        7 * MIB as u64,
        "max {} base {} curr {}",
        s.max_bytes,
        base,
        s.curr_bytes
    );
    assert_eq!(s.curr_bytes - base, 3 * MIB as u64);
    alloc::reset_peak();
    assert_eq!(alloc::snapshot().max_bytes, alloc::snapshot().curr_bytes);
    drop((b, c));
}

fn allocations_are_charged_to_the_phase_that_made_them() {
    let before = alloc::snapshot();
    let fwd = alloc::in_phase(Phase::Forward, || vec![0u8; 4 * MIB]);
    let mid = alloc::snapshot();
    assert_eq!(
        mid.phase_curr(Phase::Forward) - before.phase_curr(Phase::Forward),
        4 * MIB as u64
    );
    // Freed in another phase: still taken off the phase that allocated it.
    alloc::in_phase(Phase::Backward, || drop(fwd));
    let after = alloc::snapshot();
    assert_eq!(
        after.phase_curr(Phase::Forward),
        before.phase_curr(Phase::Forward)
    );
    assert_eq!(
        after.phase_curr(Phase::Backward),
        before.phase_curr(Phase::Backward)
    );
    assert_eq!(alloc::phase(), Phase::Idle);
}

fn realloc_moves_the_bytes_to_the_current_phase() {
    let before = alloc::snapshot();
    let mut v: Vec<u8> = alloc::in_phase(Phase::Load, || Vec::with_capacity(MIB));
    v.resize(MIB, 0);
    alloc::in_phase(Phase::Optimizer, || v.reserve_exact(3 * MIB));
    let s = alloc::snapshot();
    assert_eq!(s.curr_bytes - before.curr_bytes, 4 * MIB as u64);
    assert_eq!(s.phase_curr(Phase::Load), before.phase_curr(Phase::Load));
    assert_eq!(
        s.phase_curr(Phase::Optimizer) - before.phase_curr(Phase::Optimizer),
        4 * MIB as u64
    );
    assert!(v.iter().all(|b| *b == 0));
    drop(v);
    assert_eq!(alloc::snapshot().curr_bytes, before.curr_bytes);
}

fn over_aligned_blocks_round_trip() {
    #[repr(align(4096))]
    struct Page([u8; 4096]);
    let before = alloc::snapshot();
    let pages: Vec<Box<Page>> = (0..8).map(|_| Box::new(Page([7; 4096]))).collect();
    for p in &pages {
        assert_eq!(&**p as *const Page as usize % 4096, 0);
        assert_eq!(p.0[4095], 7);
    }
    let s = alloc::snapshot();
    // 8 pages + the Vec of 8 pointers.
    assert_eq!(s.curr_bytes - before.curr_bytes, 8 * 4096 + 8 * 8);
    drop(pages);
    assert_eq!(alloc::snapshot().curr_bytes, before.curr_bytes);
}

fn phase_tracker_reports_peak_and_retained_bytes() {
    let mut t = PhaseTracker::new();
    let kept = t.run(Phase::Forward, || {
        let temp = vec![0u8; 6 * MIB];
        let kept = vec![0u8; 2 * MIB];
        drop(temp);
        kept
    });
    let base = alloc::snapshot().curr_bytes - 2 * MIB as u64;
    assert_eq!(t.retained_first(Phase::Forward), 2 * MIB as i64);
    assert_eq!(t.peak_of(Phase::Forward), base + 8 * MIB as u64);
    let rec = t.to_record();
    assert_eq!(rec["forward"].allocations_last, 2);
    assert_eq!(rec["forward"].allocated_bytes_last, 8 * MIB as u64);
    assert!(!rec.contains_key("backward"));
    drop(kept);
}

/// No libtest harness (`harness = false` in Cargo.toml): the checks run here, on the process's
/// only thread, so nothing else allocates in the middle of an exact comparison.
fn main() {
    counting_allocator();
    println!("test counting_allocator ... ok");
}

fn counting_allocator() {
    counts_a_known_allocation_exactly();
    peak_is_exact_and_resettable();
    allocations_are_charged_to_the_phase_that_made_them();
    realloc_moves_the_bytes_to_the_current_phase();
    over_aligned_blocks_round_trip();
    phase_tracker_reports_peak_and_retained_bytes();
}
