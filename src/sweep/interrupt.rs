//! SIGINT and SIGTERM during a sweep or fit: a flag the loop polls (it then kills the current
//! worker's process group and stops, keeping the finished rows), and the exit code that says so.

use std::sync::atomic::{AtomicBool, Ordering};

/// Exit code of a sweep or fit stopped by SIGINT or SIGTERM.
pub const EXIT_INTERRUPTED: u8 = 130;

pub static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

/// SIGINT and SIGTERM set a flag; the loop kills the current worker group and stops.
pub fn install_interrupt_handler() {
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as usize;
        libc::sigemptyset(&mut sa.sa_mask);
        sa.sa_flags = libc::SA_RESTART;
        libc::sigaction(libc::SIGINT, &sa, std::ptr::null_mut());
        libc::sigaction(libc::SIGTERM, &sa, std::ptr::null_mut());
    }
}
