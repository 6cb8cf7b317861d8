//! Helpers every test binary shares: `mod support;` at the top of a test file, then
//! `use support::{memscope, fixture, stderr_of};`. Only helpers that were copied identically
//! between test files live here.
#![allow(dead_code)] // each test binary uses some of them

use assert_cmd::Command;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The release binary under test, with a guard against hangs (not a timing assertion).
pub fn memscope() -> Command {
    let mut c = Command::cargo_bin("memscope").unwrap();
    c.timeout(Duration::from_secs(300));
    c
}

/// A file of tests/fixtures/ (written by the real binary unless its name says otherwise).
pub fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// A finished command's stderr as text.
pub fn stderr_of(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Runs `args` and asserts exit 2 with every needle in stderr; returns the stderr.
pub fn fails_with(args: &[&str], needles: &[&str]) -> String {
    let out = memscope().args(args).output().unwrap();
    let e = stderr_of(&out);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {e}");
    for n in needles {
        assert!(e.contains(n), "{args:?}: {e:?} lacks {n:?}");
    }
    e
}

/// Makes a FIFO at `p`.
pub fn mkfifo(p: &Path) {
    let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
}

/// A JSONL file's rows (none when it is missing).
pub fn rows(p: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(p)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}
