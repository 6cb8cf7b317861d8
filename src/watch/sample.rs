//! One sample of a process tree: per process and summed RSS, PSS, USS, swap, threads and CPU %, read
//! from `/proc/PID/stat` and `/proc/PID/smaps_rollup` with the procfs crate. PSS and USS fall back to
//! RSS (with a note) where `smaps_rollup` cannot be read (another user's process, an old kernel).
//!
//! Cost: `stat` is cheap; reading `smaps_rollup` makes the kernel walk every page table entry of the
//! process (about 0.3 ms for a 50 MiB Python, proportionally more for a 10 GiB trainer). So PSS, USS
//! and swap are re-read only when the time since the last read is at least [`SMAPS_BUDGET`] ×
//! processes × the last read's own cost: their reads then take under 1/SMAPS_BUDGET of one core in
//! all. Between reads a process carries its last figures, with their age (`smaps_age_s`). With
//! `every_sample` (`--judge pss|uss`) they are read every sample.

use crate::record::watch::{ProcSample, Totals, TreeSample};
use procfs::process::{SmapsRollup, Stat, Status};
use procfs::FromRead;
use std::collections::HashMap;
use std::time::Instant;

/// `smaps_rollup` reads may take at most 1/SMAPS_BUDGET of one core (0.25%).
pub const SMAPS_BUDGET: f64 = 400.0;

/// The last `smaps_rollup` figures of a process.
#[derive(Clone, Copy, Debug)]
struct Smaps {
    pss: u64,
    uss: u64,
    swap: u64,
    read_at: Instant,
    cost_s: f64,
}

/// Keeps the previous CPU ticks of each process to turn them into a percentage.
pub struct Sampler {
    prev: HashMap<u32, (u64, Instant)>,
    smaps: HashMap<u32, Smaps>,
    /// Read `smaps_rollup` every sample (`--judge pss|uss`).
    pub every_sample: bool,
    /// Seconds spent reading `smaps_rollup`, and how many reads.
    pub smaps_cost_s: f64,
    pub smaps_reads: u64,
    ticks_per_s: f64,
    page: u64,
    /// Processes whose `smaps_rollup` could not be read (for the closing note).
    pub no_smaps: Vec<(u32, String)>,
}

impl Default for Sampler {
    fn default() -> Self {
        Self::new()
    }
}

impl Sampler {
    pub fn new() -> Sampler {
        Sampler {
            prev: HashMap::new(),
            smaps: HashMap::new(),
            every_sample: false,
            smaps_cost_s: 0.0,
            smaps_reads: 0,
            ticks_per_s: procfs::ticks_per_second() as f64,
            page: procfs::page_size(),
            no_smaps: Vec::new(),
        }
    }

    /// Samples `pids` (processes that vanished meanwhile are skipped).
    pub fn sample(&mut self, pids: &[u32], time_s: f64, step: Option<u64>) -> TreeSample {
        let now = Instant::now();
        let mut processes = Vec::with_capacity(pids.len());
        for &pid in pids {
            if let Some(p) = self.one(pid, now, pids.len()) {
                processes.push(p);
            }
        }
        self.prev.retain(|pid, _| pids.contains(pid));
        self.smaps.retain(|pid, _| pids.contains(pid));
        let mut total = Totals {
            processes: processes.len(),
            ..Totals::default()
        };
        for p in &processes {
            total.rss_bytes += p.rss_bytes;
            total.pss_bytes += p.pss_bytes;
            total.uss_bytes += p.uss_bytes;
            total.swap_bytes += p.swap_bytes;
            total.threads += p.threads;
            total.cpu_percent += p.cpu_percent;
        }
        TreeSample {
            time_s,
            step,
            total,
            processes,
            gpu: None,
        }
    }

    fn one(&mut self, pid: u32, now: Instant, n_procs: usize) -> Option<ProcSample> {
        // Each file read directly (open, read, close) and parsed by procfs: no per-process
        // directory handle.
        let stat = Stat::from_file(format!("/proc/{pid}/stat")).ok()?;
        if stat.state == 'Z' || stat.rss == 0 {
            // Exited and not yet reaped, or caught inside exec between its old and new address
            // space: it holds no memory at this instant, and a 0 would read as a drop.
            return None;
        }
        let rss = stat.rss * self.page;
        let ticks = stat.utime + stat.stime;
        let cpu_percent = match self.prev.insert(pid, (ticks, now)) {
            Some((t0, i0)) => {
                let dt = now.duration_since(i0).as_secs_f64();
                if dt > 0.0 {
                    (ticks.saturating_sub(t0) as f64 / self.ticks_per_s) / dt * 100.0
                } else {
                    0.0
                }
            }
            None => 0.0,
        };
        let due = match self.smaps.get(&pid) {
            None => true,
            Some(_) if self.every_sample => true,
            Some(m) => {
                now.duration_since(m.read_at).as_secs_f64()
                    >= m.cost_s * SMAPS_BUDGET * n_procs as f64
            }
        };
        if due {
            let t0 = Instant::now();
            let rollup = SmapsRollup::from_file(format!("/proc/{pid}/smaps_rollup"))
                .ok()
                .and_then(|r| r.memory_map_rollup.0.into_iter().next())
                .map(|m| m.extension.map);
            let cost_s = t0.elapsed().as_secs_f64();
            self.smaps_cost_s += cost_s;
            self.smaps_reads += 1;
            match rollup {
                Some(m) => {
                    let g = |k: &str| m.get(k).copied().unwrap_or(0);
                    self.smaps.insert(
                        pid,
                        Smaps {
                            pss: g("Pss"),
                            uss: g("Private_Clean") + g("Private_Dirty"),
                            swap: g("Swap"),
                            read_at: now,
                            cost_s,
                        },
                    );
                }
                None => {
                    self.smaps.remove(&pid);
                    if !self.no_smaps.iter().any(|(p, _)| *p == pid) {
                        self.no_smaps.push((pid, stat.comm.clone()));
                    }
                }
            }
        }
        let (rss_bytes, pss, uss, swap, smaps, age) = match self.smaps.get(&pid) {
            // PSS and USS never exceed the RSS of the same instant.
            Some(m) => (
                rss,
                m.pss.min(rss),
                m.uss.min(rss),
                m.swap,
                true,
                now.duration_since(m.read_at).as_secs_f64(),
            ),
            None => {
                let swap = Status::from_file(format!("/proc/{pid}/status"))
                    .ok()
                    .and_then(|s| s.vmswap)
                    .map_or(0, |kib| kib * 1024);
                (rss, rss, rss, swap, false, 0.0)
            }
        };
        Some(ProcSample {
            pid,
            ppid: stat.ppid.max(0) as u32,
            command: stat.comm,
            rss_bytes,
            pss_bytes: pss,
            uss_bytes: uss,
            swap_bytes: swap,
            threads: stat.num_threads.max(0) as u64,
            cpu_percent,
            smaps,
            smaps_age_s: age,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_has_memory_and_a_thread() {
        let mut s = Sampler::new();
        let me = std::process::id();
        let t = s.sample(&[me], 0.0, None);
        assert_eq!(t.total.processes, 1);
        let p = &t.processes[0];
        assert!(p.rss_bytes > 0 && p.threads >= 1);
        assert!(p.pss_bytes <= p.rss_bytes && p.uss_bytes <= p.rss_bytes);
    }
}
