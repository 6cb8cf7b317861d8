//! Stopping a measured run early and keeping what it measured: `leak` installs [`stop_on_signals`]
//! so that SIGINT or SIGTERM end the loop after the step under way (at least one measured step),
//! and the steps so far are analysed and written as a Record like a complete run. A second signal
//! ends the process at once (the handler is reset after the first). `bench --timeout` asks the
//! same stop through [`request`] when its time is up.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

static STOP: AtomicBool = AtomicBool::new(false);
static CAUSE: OnceLock<String> = OnceLock::new();

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

/// Asks the measured loop to stop after the current step, as a signal does; `cause` is what
/// the warnings and errors name (`--timeout 30s`).
pub fn request(cause: String) {
    let _ = CAUSE.set(cause);
    STOP.store(true, Ordering::SeqCst);
}

/// What asked the stop: what [`request`] was given, else `a signal`.
pub fn cause() -> String {
    CAUSE.get().cloned().unwrap_or_else(|| "a signal".into())
}

/// Whether a stop was asked for.
pub fn requested() -> bool {
    STOP.load(Ordering::Relaxed)
}
