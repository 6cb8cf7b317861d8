//! The child's stdout and stderr passed through byte for byte (each read written at once, binary and
//! partial lines included) by one thread per stream, which also cuts the bytes into lines for the step
//! markers. Writes to the terminal go through [`Console`] so the live status line is erased first.

use crate::watch::steps::{Patterns, StepLog};
use std::io::{Read, Write};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// Lines longer than this are scanned by their first bytes only (binary output has no newlines).
const MAX_LINE: usize = 64 * 1024;

/// Serialises what reaches the terminal: the status line is drawn only between whole lines.
#[derive(Debug, Default)]
pub struct Console {
    pub state: Mutex<ConsoleState>,
}

#[derive(Debug)]
pub struct ConsoleState {
    /// A status line is on screen (stderr) and must be erased before other output.
    pub drawn: bool,
    /// The last byte written to each stream was a newline (or nothing was written).
    pub at_line_start: [bool; 2],
}

impl Default for ConsoleState {
    fn default() -> Self {
        ConsoleState {
            drawn: false,
            at_line_start: [true, true],
        }
    }
}

/// Which of our streams the child's stream goes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stream {
    Stdout = 0,
    Stderr = 1,
}

/// What a reader thread needs.
pub struct Relay {
    pub stream: Stream,
    pub patterns: Arc<Patterns>,
    pub log: Arc<Mutex<StepLog>>,
    pub console: Arc<Console>,
    pub wake: Sender<()>,
    pub start: Instant,
}

/// Copies `from` to our stream until end of file, scanning lines. Write errors (a closed pipe) stop
/// the copy, never the reading, so the child is never blocked on a full pipe.
pub fn relay(mut from: impl Read, r: Relay) {
    let mut buf = vec![0u8; 64 * 1024];
    let mut line: Vec<u8> = Vec::new();
    let mut writable = true;
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        let chunk = &buf[..n];
        if writable {
            writable = write_through(&r, chunk);
        }
        for &b in chunk {
            if b == b'\n' {
                scan(&r, &line);
                line.clear();
            } else if line.len() < MAX_LINE {
                line.push(b);
            }
        }
    }
    if !line.is_empty() {
        scan(&r, &line);
    }
}

fn write_through(r: &Relay, chunk: &[u8]) -> bool {
    let mut st = r.console.state.lock().unwrap_or_else(|e| e.into_inner());
    if st.drawn {
        let mut e = std::io::stderr().lock();
        let _ = e.write_all(b"\r\x1b[K");
        let _ = e.flush();
        st.drawn = false;
    }
    let ok = match r.stream {
        Stream::Stdout => {
            let mut o = std::io::stdout().lock();
            o.write_all(chunk).and_then(|_| o.flush()).is_ok()
        }
        Stream::Stderr => {
            let mut o = std::io::stderr().lock();
            o.write_all(chunk).and_then(|_| o.flush()).is_ok()
        }
    };
    if let Some(&last) = chunk.last() {
        st.at_line_start[r.stream as usize] = last == b'\n';
    }
    ok
}

fn scan(r: &Relay, line: &[u8]) {
    let text = String::from_utf8_lossy(line);
    let t = r.start.elapsed().as_secs_f64();
    let closed = {
        let mut log = r.log.lock().unwrap_or_else(|e| e.into_inner());
        log.line(&r.patterns, text.trim_end_matches('\r'), t)
    };
    if closed {
        let _ = r.wake.send(());
    }
}
