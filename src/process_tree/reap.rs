//! No process of a tree memscope started outlives it (a sweep's worker, the torch engine's
//! torchrun). torchrun starts its ranks in sessions of their own, so a signal to the root's
//! process group does not reach them, and a rank stopped before it armed its parent-death signal
//! outlives torchrun: the tree below the root is noted while it lives (every second, and at each
//! kill), every noted process is signalled beside the root, and once the root has exited the
//! caller waits until each noted process is gone (or a zombie: its memory freed, only its exit
//! status left).

use super::descendants;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// How long the sweep waits for a killed tree's processes to be gone.
const GONE_WITHIN: Duration = Duration::from_secs(10);
/// How often the tree below a live worker is noted again.
const NOTE_EVERY: Duration = Duration::from_secs(1);

/// The processes seen below a worker: pid → its start time (clock ticks after boot), so that a
/// pid the kernel has given to a new process meanwhile is never signalled.
#[derive(Debug, Default)]
pub struct Tree {
    seen: BTreeMap<u32, u64>,
    noted: Option<Instant>,
}

impl Tree {
    /// Notes the processes below `root` now; at most every [`NOTE_EVERY`] unless `now`.
    pub fn note(&mut self, root: u32, now: bool) {
        if !now && self.noted.is_some_and(|t| t.elapsed() < NOTE_EVERY) {
            return;
        }
        self.noted = Some(Instant::now());
        for pid in descendants(root).into_iter().filter(|&p| p != root) {
            if let Some(start) = start_time(pid) {
                self.seen.insert(pid, start);
            }
        }
    }

    /// Sends `sig` to every noted process still running.
    pub fn signal(&self, sig: i32) {
        for pid in self.running() {
            unsafe {
                libc::kill(pid as libc::pid_t, sig);
            }
        }
    }

    /// SIGKILL to every noted process still running, then waits until none is: the pids still
    /// running after [`GONE_WITHIN`] (empty when all are gone).
    pub fn kill_and_wait(&self) -> Vec<u32> {
        let until = Instant::now() + GONE_WITHIN;
        loop {
            let left = self.running();
            if left.is_empty() || Instant::now() > until {
                return left;
            }
            self.signal(libc::SIGKILL);
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The noted processes that are still the same process and not yet a zombie.
    fn running(&self) -> Vec<u32> {
        self.seen
            .iter()
            .filter(|&(&pid, &start)| {
                procfs::process::Process::new(pid as i32)
                    .and_then(|p| p.stat())
                    .is_ok_and(|st| st.starttime == start && st.state != 'Z' && st.state != 'X')
            })
            .map(|(&pid, _)| pid)
            .collect()
    }
}

fn start_time(pid: u32) -> Option<u64> {
    let st = procfs::process::Process::new(pid as i32)
        .ok()?
        .stat()
        .ok()?;
    Some(st.starttime)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    #[test]
    fn a_grandchild_in_a_session_of_its_own_is_killed_and_waited_for() {
        // sh starts a sleep in a new session (setsid) and waits on it: the sleep is not in
        // sh's process group, as torchrun's ranks are not in the worker's.
        let mut sh = Command::new("sh")
            .args(["-c", "setsid sleep 600 & wait"])
            .spawn()
            .unwrap();
        let root = sh.id();
        let mut tree = Tree::default();
        let deadline = Instant::now() + Duration::from_secs(10);
        while tree.running().is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
            tree.note(root, true);
        }
        let below = tree.running();
        assert_eq!(below.len(), 1, "the sleep below sh: {below:?}");
        let _ = sh.kill();
        let _ = sh.wait();
        // sh is gone; its orphan runs on until the tree is killed.
        assert_eq!(tree.running(), below);
        assert!(tree.kill_and_wait().is_empty());
        assert!(tree.running().is_empty());
    }
}
