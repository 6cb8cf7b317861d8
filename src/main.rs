//! memscope: parse arguments, dispatch, turn errors into exit codes.

use memscope::instrument::alloc::{keep_freed_memory, set_counting, CountingAlloc};
use std::process::ExitCode;

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

fn main() -> ExitCode {
    keep_freed_memory();
    if std::env::var_os("MEMSCOPE_NO_COUNT").is_some_and(|v| v != "0") {
        set_counting(false);
    }
    match memscope::cli::run() {
        Ok(code) => code,
        // `memscope … | head`: the reader has what it wanted.
        Err(e) if e.is::<memscope::output::StdoutClosed>() => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}
