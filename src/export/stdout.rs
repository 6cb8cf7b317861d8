//! Standard output and error: a report that cannot be written is an error, never a panic or a
//! silent loss; a reader that closed the pipe is not a failure.

use anyhow::{bail, Context};
use std::io::{ErrorKind, Write};
use std::sync::atomic::{AtomicBool, Ordering};

/// Set when an output flag was given `-`: the command's own report then goes to stderr.
pub(super) static STDOUT_IS_OUTPUT: AtomicBool = AtomicBool::new(false);
/// Set when the process started with descriptor 1 closed (`>&-`).
pub(super) static STDOUT_MISSING: AtomicBool = AtomicBool::new(false);

/// Standard output was closed when the process started (noted before Rust's runtime reopened
/// it on /dev/null): [`print`] then fails rather than lose the report.
pub fn stdout_was_closed() {
    STDOUT_MISSING.store(true, Ordering::Relaxed);
}

/// Records whether descriptor 1 is open; a closed one (`>&-`) is taken by /dev/null so that no
/// file opened later lands on it, and [`print`] then fails instead of losing the report. `main`
/// calls this first.
pub fn guard_stdout() {
    // SAFETY: fcntl(F_GETFD) only queries; open/dup2 on descriptors this process owns.
    unsafe {
        if libc::fcntl(1, libc::F_GETFD) < 0 {
            STDOUT_MISSING.store(true, Ordering::Relaxed);
            let fd = libc::open(c"/dev/null".as_ptr(), libc::O_WRONLY);
            if fd >= 0 && fd != 1 {
                libc::dup2(fd, 1);
                libc::close(fd);
            }
        }
    }
}

pub(super) fn write_stdout(text: &[u8]) -> anyhow::Result<()> {
    if STDOUT_MISSING.load(Ordering::Relaxed) {
        bail!("standard output is closed (>&-): the report could not be written; redirect it to a file instead");
    }
    let mut out = std::io::stdout().lock();
    match out.write_all(text).and_then(|()| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == ErrorKind::BrokenPipe => Err(StdoutClosed.into()),
        Err(e) => Err(anyhow::Error::new(e).context("writing to standard output")),
    }
}

/// Standard output was closed by its reader (`memscope … | head`): not a failure.
#[derive(Debug, thiserror::Error)]
#[error("standard output was closed")]
pub struct StdoutClosed;

/// Writes a command's report to standard output — or to stderr when an output flag took
/// standard output (`--json -`); a write error is returned (naming stdout), never a panic.
pub fn print(text: &str) -> anyhow::Result<()> {
    if STDOUT_IS_OUTPUT.load(Ordering::Relaxed) {
        let mut err = std::io::stderr().lock();
        return err
            .write_all(text.as_bytes())
            .and_then(|()| err.flush())
            .context("writing to standard error");
    }
    write_stdout(text.as_bytes())
}

/// Writes a report to standard error; a write error (`2> /dev/full`) is returned.
pub fn print_stderr(text: &str) -> anyhow::Result<()> {
    let mut err = std::io::stderr().lock();
    err.write_all(text.as_bytes())
        .and_then(|()| err.flush())
        .context("writing the report to standard error")
}

/// `print!` that returns write errors instead of panicking (see [`print`]).
#[macro_export]
macro_rules! out {
    ($($t:tt)*) => {
        $crate::export::print(&format!($($t)*))
    };
}

/// `println!` that returns write errors instead of panicking (see [`print`]).
#[macro_export]
macro_rules! outln {
    () => {
        $crate::export::print("\n")
    };
    ($($t:tt)*) => {
        $crate::export::print(&(format!($($t)*) + "\n"))
    };
}
