//! FSDP2's CPU offload of a CUDA job (`--fsdp-offload`): a trace's allocations split between
//! the device and the host. The trace (`python/memscope/_tracer.py`) names the blocks in host
//! memory (the optimizer's state) and the device blocks copied to the host as they are made
//! (the reduce-scatter's output, the gradients' shards); the parameters' shards are the host's
//! from the wrap on. The device replays the rest, each copied block freed as soon as it is
//! made; the host holds the parameters and the gradients' copies in pinned memory, which
//! PyTorch's pinned host allocator rounds up to a power of two a block and keeps once freed
//! (reused by a later allocation of the same rounded size), and the optimizer's state pageable.

use super::Trace;
use crate::record::torch_estimate::HostMemory;
use std::collections::{BTreeMap, HashMap};

impl Trace {
    /// The device's side of an offloaded trace and the host's memory; None when nothing was
    /// offloaded.
    pub(super) fn on_device(&self) -> Option<(Trace, HostMemory)> {
        if !self.params_on_host {
            return None;
        }
        let host: HashMap<usize, bool> = self.host_blocks.iter().copied().collect();
        let copied: HashMap<usize, &Vec<u64>> =
            self.copied_to_host.iter().map(|(b, s)| (*b, s)).collect();
        let streams: HashMap<usize, u32> = self.side_streams.iter().copied().collect();
        let mut device = self.clone();
        device.param_sizes.clear();
        device.events.clear();
        device.side_streams.clear();
        // Each trace block's id on the device (None: never there, or freed as made).
        let mut ids: Vec<Option<usize>> = Vec::new();
        let (mut next, mut live, mut peak) = (0usize, 0u64, 0u64);
        let mut sizes: Vec<u64> = Vec::new();
        for &v in &self.events {
            if v >= 0 {
                let block = ids.len();
                if host.contains_key(&block) {
                    ids.push(None);
                    continue;
                }
                let k = next;
                next += 1;
                device.events.push(v);
                sizes.push(v as u64);
                live += v as u64;
                peak = peak.max(live);
                if let Some(&s) = streams.get(&block) {
                    device.side_streams.push((k, s));
                }
                if copied.contains_key(&block) {
                    device.events.push(-(k as i64 + 1));
                    live -= v as u64;
                    ids.push(None);
                } else {
                    ids.push(Some(k));
                }
            } else if let Some(&Some(k)) = ids.get((-v - 1) as usize) {
                device.events.push(-(k as i64 + 1));
                live -= sizes[k];
            }
        }
        // The trace's figures without what the host holds: the gradients and everything the
        // optimizer made; the peak's live bytes the device's.
        for p in device
            .ends
            .iter_mut()
            .chain(std::iter::once(&mut device.peak))
        {
            p.gradients = 0;
            p.by_phase.remove("optimizer");
        }
        device.peak.live = peak;
        device.host_blocks.clear();
        device.copied_to_host.clear();
        device.params_on_host = false;
        Some((device, self.host_memory(&host, &copied)))
    }

    /// The host's bytes over the trace: the parameters' shards pinned from the start, the
    /// gradients' copies pinned while their device block lives in the trace, the optimizer's
    /// blocks pageable.
    fn host_memory(
        &self,
        host: &HashMap<usize, bool>,
        copied: &HashMap<usize, &Vec<u64>>,
    ) -> HostMemory {
        let mut pinned = PinnedPool::default();
        for &n in &self.param_sizes {
            pinned.allocate(n);
        }
        let parameters_bytes = pinned.held();
        let (mut pageable, mut pageable_peak, mut peak) = (0u64, 0u64, pinned.held());
        let (mut grads, mut grads_peak) = (0u64, 0u64);
        let mut block = 0usize;
        let mut sizes: Vec<u64> = Vec::new();
        for &v in &self.events {
            let (id, alloc) = if v >= 0 {
                sizes.push(v as u64);
                block += 1;
                (block - 1, true)
            } else {
                ((-v - 1) as usize, false)
            };
            match (host.get(&id), copied.get(&id)) {
                (Some(true), _) => pinned.change(sizes[id], alloc),
                (Some(false), _) if alloc => pageable += sizes[id],
                (Some(false), _) => pageable -= sizes[id],
                (None, Some(copies)) => {
                    for &n in copies.iter() {
                        pinned.change(n, alloc);
                    }
                    let n: u64 = copies.iter().map(|&n| n.next_power_of_two()).sum();
                    grads = if alloc { grads + n } else { grads - n };
                    grads_peak = grads_peak.max(grads);
                }
                (None, None) => continue,
            }
            pageable_peak = pageable_peak.max(pageable);
            peak = peak.max(pinned.held() + pageable);
        }
        HostMemory {
            peak_bytes: peak,
            pinned_bytes: pinned.held(),
            parameters_bytes,
            gradients_bytes: grads_peak,
            pageable_peak_bytes: pageable_peak,
        }
    }
}

/// PyTorch's pinned host allocator as memory held: each allocation rounded up to a power of
/// two, a freed block kept for the next allocation of its size, nothing returned.
#[derive(Default)]
struct PinnedPool {
    /// Rounded size → (blocks in use, blocks held).
    by_size: BTreeMap<u64, (u64, u64)>,
}

impl PinnedPool {
    fn allocate(&mut self, n: u64) {
        self.change(n, true);
    }

    /// `n` bytes allocated (`alloc`) or freed.
    fn change(&mut self, n: u64, alloc: bool) {
        if n == 0 {
            return;
        }
        let e = self.by_size.entry(n.next_power_of_two()).or_default();
        if alloc {
            e.0 += 1;
            e.1 = e.1.max(e.0);
        } else {
            e.0 = e.0.saturating_sub(1);
        }
    }

    fn held(&self) -> u64 {
        self.by_size
            .iter()
            .map(|(size, (_, held))| size * held)
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trace(json: serde_json::Value) -> Trace {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn the_device_keeps_what_stays_and_the_host_rounds_pinned_blocks_to_powers_of_two() {
        // Block 0: an activation (device); 1: the reduce-scatter's output, copied to the host
        // as two gradients of 300 and 200 bytes; 2: the optimizer's state (pageable host);
        // 3: a temporary on the device.
        let t = trace(serde_json::json!({
            "traced_on": "cpu", "params": 0, "param_sizes": [600, 100], "buffer_sizes": [],
            "events": [1000, 512, -1, 1024, 64, -4, -2],
            "params_on_host": true, "host_blocks": [[2, false]],
            "copied_to_host": [[1, [300, 200]]],
            "side_streams": [[1, 1]],
            "peak": {"phase": "optimizer", "live": 2536, "gradients": 512,
                     "by_phase": {"forward": 1000, "optimizer": 1024}},
        }));
        let (d, h) = t.on_device().unwrap();
        assert!(d.param_sizes.is_empty());
        // The copied block is made and freed at once; the state never reaches the device.
        assert_eq!(d.events, vec![1000, 512, -2, -1, 64, -3]);
        assert_eq!(d.side_streams, vec![(1, 1)]);
        assert_eq!(d.peak.live, 1512);
        assert_eq!(d.peak.gradients, 0);
        assert!(!d.peak.by_phase.contains_key("optimizer"));
        // Parameters 1024 + 128 pinned; gradients 512 + 256 pinned; state 1024 pageable.
        assert_eq!(h.parameters_bytes, 1152);
        assert_eq!(h.gradients_bytes, 768);
        assert_eq!(h.pinned_bytes, 1152 + 768);
        assert_eq!(h.pageable_peak_bytes, 1024);
        assert_eq!(h.peak_bytes, 1920 + 1024);
    }

    #[test]
    fn a_freed_pinned_block_is_reused_by_the_next_of_its_size() {
        let mut p = PinnedPool::default();
        p.allocate(300);
        p.change(300, false);
        p.allocate(500);
        assert_eq!(p.held(), 512);
        p.allocate(257);
        assert_eq!(p.held(), 1024);
    }

    #[test]
    fn a_trace_without_offload_is_the_device_s_alone() {
        let t = trace(serde_json::json!({
            "traced_on": "cpu", "params": 0, "param_sizes": [8], "buffer_sizes": [],
            "events": [8, -1], "peak": {"phase": "forward", "live": 8},
        }));
        assert!(t.on_device().is_none());
    }
}
