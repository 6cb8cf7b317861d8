//! Stopping a measured run early and keeping what it measured: `leak` installs [`stop_on_signals`]
//! so that SIGINT or SIGTERM end the loop after the step under way (at least one measured step),
//! and the steps so far are analysed and written as a Record like a complete run. A second signal
//! ends the process at once (the handler is reset after the first).

use std::sync::atomic::{AtomicBool, Ordering};

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

/// SIGINT and SIGTERM ask the measured loop to stop after the current step.
pub fn stop_on_signals() {
    // SAFETY: a handler that only stores to an atomic; SA_RESETHAND restores the default action
    // after the first signal, so a second one ends the process.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as usize;
        libc::sigemptyset(&mut sa.sa_mask);
        sa.sa_flags = libc::SA_RESTART | libc::SA_RESETHAND;
        libc::sigaction(libc::SIGINT, &sa, std::ptr::null_mut());
        libc::sigaction(libc::SIGTERM, &sa, std::ptr::null_mut());
    }
}

/// Whether a stop was asked for.
pub fn requested() -> bool {
    STOP.load(Ordering::Relaxed)
}
