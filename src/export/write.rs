//! Writing outputs: whole files atomically, streams a line at a time.

use anyhow::{bail, Context};
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::fd::FromRawFd;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

use super::paths::{follow, is_stdout, open_fifo_nonblocking, wait_for_fifo_reader};
use super::stdout::write_stdout;

/// Opens an output that is written as it goes (a JSONL stream): `-` is standard output, a FIFO
/// the descriptor `check_outputs` opened, anything else a file, appended to or truncated.
pub fn open_stream(path: &Path, append: bool) -> std::io::Result<File> {
    if is_stdout(path) {
        // SAFETY: dup of descriptor 1, owned by the returned File.
        let fd = unsafe { libc::dup(1) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: `fd` is a fresh descriptor nothing else owns.
        return Ok(unsafe { File::from_raw_fd(fd) });
    }
    let target = follow(path).map_err(std::io::Error::other)?;
    if fs::metadata(&target).is_ok_and(|m| m.file_type().is_fifo()) {
        // A stream starts before the run: refused rather than waiting for a reader.
        return open_fifo_nonblocking(&target)?.ok_or_else(|| {
            std::io::Error::other(format!(
                "a FIFO that nobody reads; start its reader first (e.g. `cat {} &`)",
                path.display()
            ))
        });
    }
    let mut o = OpenOptions::new();
    o.write(true).create(true);
    if append {
        o.append(true);
    } else {
        o.truncate(true);
    }
    o.open(path)
}

/// A JSON Lines output written as it goes (`sweep --jsonl`, `watch --jsonl`): each line in one
/// `write_all`, then flushed, and synced to disk when asked and the output is a regular file, so a
/// process killed mid-run loses nothing already written (at worst the line under way is cut
/// short; the readers skip a cut-off last line with a warning).
pub struct JsonlStream {
    file: File,
    sync: bool,
}

impl JsonlStream {
    /// Opens `path` as [`open_stream`] does (`-` is standard output; `append` keeps what is there).
    pub fn open(path: &Path, append: bool, sync: bool) -> std::io::Result<JsonlStream> {
        Ok(JsonlStream {
            file: open_stream(path, append)?,
            sync,
        })
    }

    /// `sweep --jsonl`: rows appended to what is there (a sweep picked up again), each synced.
    pub fn appending(path: &Path) -> anyhow::Result<JsonlStream> {
        JsonlStream::open(path, true, true).with_context(|| format!("--jsonl {}", path.display()))
    }

    /// Writes one line (the kind's own writer made it, line ending included).
    pub fn write_line(&mut self, line: &str) -> std::io::Result<()> {
        self.file.write_all(line.as_bytes())?;
        self.file.flush()?;
        // A pipe or terminal (`--jsonl -`, a FIFO) has nothing to sync.
        if self.sync && self.file.metadata().is_ok_and(|m| m.is_file()) {
            self.file.sync_data()?;
        }
        Ok(())
    }
}

/// Writes `text` to `path` without ever leaving a half-written regular file or replacing a
/// device, FIFO, socket or symlink (see the module docs); `-` writes to standard output.
pub fn write_atomic(path: &Path, text: &str) -> anyhow::Result<()> {
    write_bytes_atomic(path, text.as_bytes())
}

/// [`write_atomic`] for bytes that need not be text (a safetensors file).
pub fn write_bytes_atomic(path: &Path, text: &[u8]) -> anyhow::Result<()> {
    if is_stdout(path) {
        return write_stdout(text);
    }
    let target = follow(path)?;
    match fs::metadata(&target) {
        Ok(m) if m.is_dir() => bail!("{} is a directory", path.display()),
        Ok(m) if !m.is_file() => {
            let special = m.file_type();
            let kind = if special.is_fifo() {
                "FIFO"
            } else {
                "special file"
            };
            let opened = if special.is_fifo() {
                wait_for_fifo_reader(&target)
            } else {
                OpenOptions::new().write(true).open(&target)
            };
            let mut f =
                opened.with_context(|| format!("opening the {kind} {}", target.display()))?;
            f.write_all(text)
                .and_then(|()| f.flush())
                .with_context(|| format!("writing to the {kind} {}", target.display()))?;
            Ok(())
        }
        _ => {
            let tmp = temporary_beside(&target);
            let result = fs::write(&tmp, text).and_then(|()| fs::rename(&tmp, &target));
            if result.is_err() {
                let _ = fs::remove_file(&tmp);
            }
            result.map_err(anyhow::Error::from)
        }
    }
}

/// `flag FILE`, when the flag was given, written with `text()` (made only then) as
/// [`write_atomic`] writes; an error names the flag and the file.
pub fn write_if_asked(
    flag: &str,
    path: Option<&Path>,
    text: impl FnOnce() -> anyhow::Result<String>,
) -> anyhow::Result<()> {
    if let Some(p) = path {
        write_atomic(p, &text()?).with_context(|| format!("{flag} {}", p.display()))?;
    }
    Ok(())
}

/// A temporary file name beside `target` that no other writer uses: the process id and a count
/// within the process, so two processes (ranks, concurrent sessions) or two threads writing the
/// same output never write into one temporary file.
fn temporary_beside(target: &Path) -> PathBuf {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let name = target.file_name().unwrap_or_default().to_string_lossy();
    target.with_file_name(format!(".{name}.{}.{n}.memscope-tmp", std::process::id()))
}

#[cfg(test)]
mod tests {
    /// Concurrent writers of one output (threads here; ranks are processes, whose ids differ)
    /// never share a temporary file, and each write leaves a whole file.
    #[test]
    fn concurrent_writers_use_their_own_temporary_files() {
        let dir = std::env::temp_dir().join(format!("memscope-tmp-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let target = dir.join("run.json");
        let a = super::temporary_beside(&target);
        let b = super::temporary_beside(&target);
        assert_ne!(a, b);
        let texts: Vec<String> = (0..8)
            .map(|i| format!("{}\n", i.to_string().repeat(100_000)))
            .collect();
        std::thread::scope(|s| {
            for t in &texts {
                let target = &target;
                s.spawn(move || super::write_atomic(target, t).unwrap());
            }
        });
        let got = std::fs::read_to_string(&target).unwrap();
        assert!(texts.contains(&got), "a write was interleaved with another");
        let left: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
        assert_eq!(left.len(), 1, "temporary files left behind");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
