//! What the OS sees of this process (or another one): RSS, peak RSS (VmHWM) and PSS, and the
//! machine's total memory, from /proc.
//! Each returns None where /proc cannot tell (not Linux, process gone, field missing).

use procfs::process::Process;

/// Resident set size now, bytes (/proc/PID/statm).
pub fn rss_bytes(pid: Option<i32>) -> Option<u64> {
    let p = process(pid)?;
    let pages = p.statm().ok()?.resident;
    Some(pages * procfs::page_size())
}

/// Peak resident set size, bytes (VmHWM in /proc/PID/status).
pub fn vm_hwm_bytes(pid: Option<i32>) -> Option<u64> {
    let kib = process(pid)?.status().ok()?.vmhwm?;
    Some(kib * 1024)
}

/// Proportional set size, bytes (/proc/PID/smaps_rollup).
pub fn pss_bytes(pid: Option<i32>) -> Option<u64> {
    let rollup = process(pid)?.smaps_rollup().ok()?;
    rollup
        .memory_map_rollup
        .iter()
        .find_map(|m| m.extension.map.get("Pss").copied())
}

/// PSS of `pid` and every process below it (a worker and the torch engine it starts), bytes;
/// None when `pid` itself cannot be read.
pub fn tree_pss_bytes(pid: i32) -> Option<u64> {
    let own = pss_bytes(Some(pid))?;
    let below: u64 = crate::process_tree::descendants(pid as u32)
        .into_iter()
        .filter(|&c| c != pid as u32)
        .filter_map(|c| pss_bytes(Some(c as i32)))
        .sum();
    Some(own + below)
}

/// This machine's memory, bytes (MemTotal in /proc/meminfo).
pub fn mem_total_bytes() -> Option<u64> {
    use procfs::Current;
    procfs::Meminfo::current().ok().map(|m| m.mem_total)
}

fn process(pid: Option<i32>) -> Option<Process> {
    match pid {
        Some(pid) => Process::new(pid).ok(),
        None => Process::myself().ok(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_process_figures_are_plausible() {
        let rss = rss_bytes(None).expect("rss");
        let hwm = vm_hwm_bytes(None).expect("hwm");
        let pss = pss_bytes(None).expect("pss");
        assert!(rss > 1 << 20, "rss {rss}");
        assert!(hwm >= rss / 2, "hwm {hwm} rss {rss}");
        assert!(pss > 0 && pss <= hwm * 2, "pss {pss}");
    }
}
