//! Output files and standard output, for every command: the checks made before any measurement
//! starts, the writes that never destroy what is there, and stdout errors that are reported.
//!
//! - [`check_outputs`] runs before a command reads or measures anything: a path that is a
//!   directory, whose directory is missing or unwritable, that two flags share, or that names one
//!   of the command's inputs (the same file by device and inode, through symlinks, `./` and hard
//!   links) is refused naming the flag(s). `-` is standard output; then the command's own report
//!   goes to stderr ([`print`]).
//! - A FIFO is never opened in a way that blocks: a stream written during the run ([`open_stream`])
//!   is refused when nobody reads it; a whole output written after the run waits for a reader,
//!   saying so, with Ctrl-C (SIGINT, SIGTERM) ending the wait.
//! - [`write_atomic`] replaces a regular file (or creates one) through a temporary file renamed
//!   into place, removed again if anything fails; a symlink is followed and the file it names is
//!   written; a device, FIFO or socket is written through, never replaced by a regular file.
//! - [`print`] writes to stdout and returns the error (a full disk, `> /dev/full`, a closed
//!   descriptor `>&-`) instead of panicking or losing the text; a closed pipe (`| head`) is
//!   [`StdoutClosed`], which `main` treats as success.
//! - [`table`] is the one Markdown pipe-table and CSV writer: every table memscope writes, in
//!   either format, is a [`Table`] drawn there.
//!
//! Every file memscope writes goes out through this room: `paths.rs` the checks, `write.rs` the
//! atomic writes and streams, `stdout.rs` standard output and error, `cache.rs` the peaks caches,
//! `safetensors.rs` weight files (fixtures), `table.rs` the Markdown and CSV tables.

mod cache;
mod paths;
#[cfg(feature = "engine")]
mod safetensors;
mod stdout;
pub mod table;
mod write;

pub use cache::{cache_dir, cache_path, measure_lock, save_peaks, MeasureLock};
pub use paths::{check_outputs, check_parent_dir, is_stdout};
#[cfg(feature = "engine")]
pub use safetensors::write_safetensors;
pub use stdout::{guard_stdout, print, print_stderr, stdout_was_closed, StdoutClosed};
pub use table::Table;
pub use write::{open_stream, write_atomic, write_bytes_atomic, write_if_asked, JsonlStream};
