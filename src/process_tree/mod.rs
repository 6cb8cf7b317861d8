//! Which processes make up a tree (what `watch` samples; a sweep worker and the torch engine it
//! starts): the root and every descendant alive now, found through
//! `/proc/PID/task/TID/children` (a full `/proc` scan where that file is missing).

pub mod reap;

use std::collections::{BTreeSet, HashMap};

/// The root and its live descendants, root first, then in discovery order.
pub fn descendants(root: u32) -> Vec<u32> {
    match via_children_files(root) {
        Some(v) => v,
        None => via_scan(root),
    }
}

fn via_children_files(root: u32) -> Option<Vec<u32>> {
    let mut out = vec![root];
    let mut seen: BTreeSet<u32> = BTreeSet::from([root]);
    let mut i = 0;
    while i < out.len() {
        let pid = out[i];
        i += 1;
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
            continue; // gone since its parent listed it
        };
        for t in tasks.flatten() {
            let path = t.path().join("children");
            match std::fs::read_to_string(&path) {
                Ok(text) => {
                    for c in text
                        .split_whitespace()
                        .filter_map(|s| s.parse::<u32>().ok())
                    {
                        if seen.insert(c) {
                            out.push(c);
                        }
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound && pid == root && i == 1 => {
                    // The task may have exited; only a missing file on a live root means
                    // the kernel lacks CONFIG_PROC_CHILDREN.
                    if std::path::Path::new(&format!("/proc/{pid}")).exists()
                        && !std::path::Path::new(&format!("/proc/{pid}/task/{pid}/children"))
                            .exists()
                        && std::path::Path::new(&format!("/proc/{pid}/task/{pid}")).exists()
                    {
                        return None;
                    }
                }
                Err(_) => {}
            }
        }
    }
    Some(out)
}

fn via_scan(root: u32) -> Vec<u32> {
    let mut kids: HashMap<u32, Vec<u32>> = HashMap::new();
    if let Ok(all) = procfs::process::all_processes() {
        for p in all.flatten() {
            if let Ok(st) = p.stat() {
                kids.entry(st.ppid as u32).or_default().push(p.pid as u32);
            }
        }
    }
    let mut out = vec![root];
    let mut i = 0;
    while i < out.len() {
        if let Some(c) = kids.get(&out[i]) {
            out.extend(c.iter().copied().filter(|c| *c != root));
        }
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spawned_child_is_a_descendant() {
        let mut c = std::process::Command::new("sleep")
            .arg("2")
            .spawn()
            .unwrap();
        let me = std::process::id();
        let d = descendants(me);
        assert_eq!(d[0], me);
        assert!(d.contains(&c.id()), "{d:?}");
        let _ = c.kill();
        let _ = c.wait();
    }
}
