//! memscope: parse arguments, dispatch, turn errors into exit codes.

use memscope::instrument::alloc::{keep_freed_memory, set_counting, CountingAlloc};
use std::process::ExitCode;

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

/// Runs before Rust's runtime starts, which reopens a closed descriptor 1 on /dev/null: notes
/// whether standard output was closed (`>&-`), so that a report is not lost with exit 0.
extern "C" fn note_closed_stdout() {
    // SAFETY: F_GETFD only queries the descriptor.
    if unsafe { libc::fcntl(1, libc::F_GETFD) } < 0 {
        memscope::export::stdout_was_closed();
    }
}

#[used]
#[link_section = ".init_array"]
static NOTE_CLOSED_STDOUT: extern "C" fn() = note_closed_stdout;

fn main() -> ExitCode {
    keep_freed_memory();
    memscope::export::guard_stdout();
    if memscope::environment::counting_switched_off() {
        set_counting(false);
    }
    match memscope::cli::run() {
        Ok(code) => code,
        // `memscope … | head`: the reader has what it wanted.
        Err(e) if e.is::<memscope::export::StdoutClosed>() => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}
