//! The names of Unix signals, as every message memscope writes gives them (`SIGKILL`; an
//! unnamed one as `signal 40`): a worker's row, a watched command's end, the torch engine's.

/// `SIGKILL`, `SIGTERM`, …; `signal N` for the others.
pub fn name(sig: i32) -> String {
    let n = match sig {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGTERM => "SIGTERM",
        _ => return format!("signal {sig}"),
    };
    n.to_string()
}
