//! PyTorch's CUDA caching allocator under its default settings, replayed on a sequence of
//! allocations and frees, to predict the bytes it reserves from the driver (what `nvidia-smi`
//! shows, less the CUDA context). The rules (c10/cuda/CUDACachingAllocator.cpp):
//! - every request is rounded up to a multiple of 512 B (at least 512 B);
//! - requests of at most 1 MiB are served from the small pool, whose segments are 2 MiB; larger
//!   ones from the large pool, whose segments are 20 MiB for requests under 10 MiB and the request
//!   rounded up to 2 MiB otherwise;
//! - a request takes the smallest free block of its pool that fits (best fit); the rest of the
//!   block is split off as a free block when at least 512 B remain (small pool) or more than
//!   1 MiB (large pool);
//! - a freed block merges with free neighbours in its segment and stays reserved;
//! - a segment belongs to the stream that asked for it, and its free blocks serve only requests
//!   made on that stream (`get_free_block` compares streams): FSDP2's gradient shards, made on
//!   its reduce-scatter stream, never reuse the compute stream's freed activations;
//! - when a new segment would pass the cap (`set_per_process_memory_fraction`), the segments that
//!   are wholly free are released first; if it still does not fit, the request fails (OOM).

use std::collections::{BTreeMap, BTreeSet};

pub const MIN_BLOCK: u64 = 512;
pub const SMALL_SIZE: u64 = 1 << 20;
pub const SMALL_BUFFER: u64 = 2 << 20;
pub const MIN_LARGE_ALLOC: u64 = 10 << 20;
pub const LARGE_BUFFER: u64 = 20 << 20;
pub const ROUND_LARGE: u64 = 2 << 20;

/// A request's size as the allocator counts it (`allocated_bytes`).
pub fn round_size(n: u64) -> u64 {
    n.max(1).div_ceil(MIN_BLOCK) * MIN_BLOCK
}

/// The segment reserved for a rounded request that no free block fits.
pub fn segment_size(rounded: u64) -> u64 {
    if rounded <= SMALL_SIZE {
        SMALL_BUFFER
    } else if rounded < MIN_LARGE_ALLOC {
        LARGE_BUFFER
    } else {
        rounded.div_ceil(ROUND_LARGE) * ROUND_LARGE
    }
}

/// A block handed out: its segment and offset there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Handle {
    seg: usize,
    offset: u64,
}

#[derive(Debug)]
struct Segment {
    size: u64,
    small: bool,
    stream: u32,
    /// offset → (size, free)
    blocks: BTreeMap<u64, (u64, bool)>,
}

/// The request could not be served under the cap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OutOfMemory {
    pub requested: u64,
    pub allocated: u64,
    pub reserved: u64,
}

#[derive(Debug, Default)]
pub struct CachingAllocator {
    limit: Option<u64>,
    segments: Vec<Option<Segment>>,
    /// Free blocks by pool (0 large, 1 small): (stream, size, segment, offset), each stream's
    /// smallest first.
    free: [BTreeSet<(u32, u64, usize, u64)>; 2],
    pub allocated: u64,
    pub reserved: u64,
    pub peak_allocated: u64,
    pub peak_reserved: u64,
}

impl CachingAllocator {
    /// An allocator whose reserved bytes may not pass `limit` (None: the card's memory).
    pub fn new(limit: Option<u64>) -> Self {
        CachingAllocator {
            limit,
            ..Default::default()
        }
    }

    /// `n` bytes on the compute stream.
    pub fn malloc(&mut self, n: u64) -> Result<Handle, OutOfMemory> {
        self.malloc_on(n, 0)
    }

    /// `n` bytes on `stream` (0 the compute stream; others numbered as the trace met them).
    pub fn malloc_on(&mut self, n: u64, stream: u32) -> Result<Handle, OutOfMemory> {
        let size = round_size(n);
        let small = size <= SMALL_SIZE;
        let pool = small as usize;
        let found = self.free[pool]
            .range((stream, size, 0, 0)..(stream + 1, 0, 0, 0))
            .next()
            .copied();
        let (bsize, seg, offset) = match found {
            Some(b) => {
                self.free[pool].remove(&b);
                (b.1, b.2, b.3)
            }
            None => self.new_segment(size, small, stream)?,
        };
        let remaining = bsize - size;
        let split = if small {
            remaining >= MIN_BLOCK
        } else {
            remaining > SMALL_SIZE
        };
        let s = self.segments[seg].as_mut().expect("live segment");
        let taken = if split {
            s.blocks.insert(offset + size, (remaining, true));
            self.free[pool].insert((stream, remaining, seg, offset + size));
            size
        } else {
            bsize
        };
        s.blocks.insert(offset, (taken, false));
        self.allocated += taken;
        self.peak_allocated = self.peak_allocated.max(self.allocated);
        Ok(Handle { seg, offset })
    }

    fn new_segment(
        &mut self,
        size: u64,
        small: bool,
        stream: u32,
    ) -> Result<(u64, usize, u64), OutOfMemory> {
        let alloc = segment_size(size);
        if self.limit.is_some_and(|l| self.reserved + alloc > l) {
            self.release_cached();
            if self.limit.is_some_and(|l| self.reserved + alloc > l) {
                return Err(OutOfMemory {
                    requested: size,
                    allocated: self.allocated,
                    reserved: self.reserved,
                });
            }
        }
        let seg = self.segments.len();
        self.segments.push(Some(Segment {
            size: alloc,
            small,
            stream,
            blocks: BTreeMap::from([(0, (alloc, true))]),
        }));
        self.reserved += alloc;
        self.peak_reserved = self.peak_reserved.max(self.reserved);
        Ok((alloc, seg, 0))
    }

    /// Gives back every segment that is one free block (what `empty_cache` does).
    pub fn release_cached(&mut self) {
        for i in 0..self.segments.len() {
            let whole = self.segments[i]
                .as_ref()
                .is_some_and(|s| s.blocks.len() == 1 && s.blocks[&0].1);
            if whole {
                let s = self.segments[i].take().expect("checked");
                self.free[s.small as usize].remove(&(s.stream, s.size, i, 0));
                self.reserved -= s.size;
            }
        }
    }

    pub fn free(&mut self, h: Handle) {
        let s = self.segments[h.seg]
            .as_mut()
            .expect("a live block's segment");
        let (pool, stream) = (s.small as usize, s.stream);
        let (mut size, was_free) = s.blocks[&h.offset];
        debug_assert!(!was_free, "double free");
        self.allocated -= size;
        let mut offset = h.offset;
        // Merge with the next block, then the previous one, when free.
        if let Some(&(nsize, true)) = s.blocks.get(&(offset + size)) {
            s.blocks.remove(&(offset + size));
            self.free[pool].remove(&(stream, nsize, h.seg, offset + size));
            size += nsize;
        }
        if let Some((&poff, &(psize, true))) = s.blocks.range(..offset).next_back() {
            s.blocks.remove(&offset);
            self.free[pool].remove(&(stream, psize, h.seg, poff));
            offset = poff;
            size += psize;
        }
        s.blocks.insert(offset, (size, true));
        self.free[pool].insert((stream, size, h.seg, offset));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn sizes_round_and_pick_their_segment() {
        assert_eq!(round_size(1), 512);
        assert_eq!(round_size(513), 1024);
        assert_eq!(segment_size(MIB), SMALL_BUFFER);
        assert_eq!(segment_size(MIB + 512), LARGE_BUFFER);
        assert_eq!(segment_size(10 * MIB), 10 * MIB);
        assert_eq!(segment_size(11 * MIB + 1), 12 * MIB);
    }

    #[test]
    fn a_block_freed_on_one_stream_serves_only_that_stream() {
        let mut a = CachingAllocator::new(None);
        let x = a.malloc(30 * MIB).unwrap();
        a.free(x);
        // The compute stream's free 30 MiB does not serve the reduce-scatter stream's request.
        let y = a.malloc_on(30 * MIB, 1).unwrap();
        assert_eq!(a.reserved, 60 * MIB);
        a.free(y);
        // Each stream takes its own block back.
        a.malloc(30 * MIB).unwrap();
        a.malloc_on(30 * MIB, 1).unwrap();
        assert_eq!(a.reserved, 60 * MIB);
    }

    #[test]
    fn small_requests_share_a_two_mib_segment_and_merge_back() {
        let mut a = CachingAllocator::new(None);
        let x = a.malloc(1000).unwrap();
        let y = a.malloc(100).unwrap();
        assert_eq!((a.allocated, a.reserved), (1024 + 512, SMALL_BUFFER));
        a.free(x);
        a.free(y);
        assert_eq!((a.allocated, a.reserved), (0, SMALL_BUFFER));
        // Merged into one free block: a 2 MiB small request fits again without a new segment.
        let z = a.malloc(MIB).unwrap();
        assert_eq!(a.reserved, SMALL_BUFFER);
        a.free(z);
    }

    #[test]
    fn large_blocks_split_only_past_one_mib_and_best_fit_reuses() {
        let mut a = CachingAllocator::new(None);
        // 3 MiB from a 20 MiB segment: 17 MiB split off.
        let x = a.malloc(3 * MIB).unwrap();
        assert_eq!((a.allocated, a.reserved), (3 * MIB, 20 * MIB));
        // 16.5 MiB leaves 0.5 MiB: not split, the whole 17 MiB block is handed out.
        let y = a.malloc(16 * MIB + MIB / 2).unwrap();
        assert_eq!(a.allocated, 20 * MIB);
        a.free(x);
        a.free(y);
        // The two merged into one free 20 MiB block, which a 12 MiB request splits (best fit).
        let z = a.malloc(12 * MIB).unwrap();
        assert_eq!(a.reserved, 20 * MIB);
        a.free(z);
    }

    #[test]
    fn a_cap_releases_cached_segments_then_fails() {
        let mut a = CachingAllocator::new(Some(40 * MIB));
        let x = a.malloc(15 * MIB).unwrap(); // 16 MiB segment
        a.free(x); // cached
        let y = a.malloc(30 * MIB).unwrap(); // 30 MiB: over the cap with the cache, fits without
        assert_eq!(a.reserved, 30 * MIB);
        let e = a.malloc(12 * MIB).unwrap_err();
        assert_eq!(e.reserved, 30 * MIB);
        assert_eq!(e.requested, 12 * MIB);
        a.free(y);
    }
}
