//! Helpers every test binary shares: `mod support;` at the top of a test file, then
//! `use support::{memscope, fixture, stderr_of};`.
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
