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

use anyhow::{bail, Context};
use std::fs::{self, File, OpenOptions};
use std::io::{ErrorKind, Write};
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

/// Follows symlinks (dangling ones too) to the path a write would reach; at most 40 links.
fn follow(path: &Path) -> anyhow::Result<PathBuf> {
    let mut p = path.to_path_buf();
    for _ in 0..40 {
        match fs::symlink_metadata(&p) {
            Ok(m) if m.file_type().is_symlink() => {
                let link = fs::read_link(&p)?;
                p = match p.parent() {
                    Some(dir) if link.is_relative() => dir.join(link),
                    _ => link,
                };
            }
            _ => return Ok(p),
        }
    }
    bail!("{}: too many levels of symbolic links", path.display())
}

/// The directory that holds `path` ("." for a bare file name).
fn parent_of(path: &Path) -> &Path {
    path.parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
}

/// A name for the file `path` reaches, equal for two spellings of the same file.
fn identity(path: &Path) -> anyhow::Result<PathBuf> {
    let p = follow(path)?;
    if let Ok(c) = fs::canonicalize(&p) {
        return Ok(c);
    }
    let dir = fs::canonicalize(parent_of(&p)).unwrap_or_else(|_| parent_of(&p).to_path_buf());
    Ok(dir.join(p.file_name().unwrap_or_default()))
}

/// Whether a new file can be created in `dir` (tried for real: permission bits do not bind root,
/// and a read-only or virtual file system refuses only at creation).
fn can_create_in(dir: &Path) -> std::io::Result<()> {
    let probe = dir.join(format!(".memscope-probe-{}", std::process::id()));
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&probe)?;
    let _ = fs::remove_file(&probe);
    Ok(())
}

/// `-` as an output path: standard output.
pub fn is_stdout(path: &Path) -> bool {
    path.as_os_str() == "-"
}

/// Set when an output flag was given `-`: the command's own report then goes to stderr.
static STDOUT_IS_OUTPUT: AtomicBool = AtomicBool::new(false);
/// Set when the process started with descriptor 1 closed (`>&-`).
static STDOUT_MISSING: AtomicBool = AtomicBool::new(false);

/// Opens a FIFO for writing without ever blocking in `open`: `Ok(None)` while nobody reads it.
/// The returned descriptor blocks on write again (as a pipe does), once a reader is there.
fn open_fifo_nonblocking(target: &Path) -> std::io::Result<Option<File>> {
    match OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(target)
    {
        Ok(f) => {
            // SAFETY: fcntl on a descriptor this function owns.
            unsafe {
                let fd = f.as_raw_fd();
                let fl = libc::fcntl(fd, libc::F_GETFL);
                if fl >= 0 {
                    libc::fcntl(fd, libc::F_SETFL, fl & !libc::O_NONBLOCK);
                }
            }
            Ok(Some(f))
        }
        Err(e) if e.raw_os_error() == Some(libc::ENXIO) => Ok(None),
        Err(e) => Err(e),
    }
}

/// A whole output (written after the run) onto a FIFO: waits for a reader, saying so once, with
/// SIGINT and SIGTERM at their default action meanwhile, so Ctrl-C ends the wait even in a
/// command that handles those signals (watch, sweep).
fn wait_for_fifo_reader(target: &Path) -> std::io::Result<File> {
    if let Some(f) = open_fifo_nonblocking(target)? {
        return Ok(f);
    }
    eprintln!(
        "memscope: waiting for a reader on the FIFO {} (Ctrl-C gives up)",
        target.display()
    );
    // SAFETY: resetting two signal dispositions to their defaults, restored below.
    let old = unsafe {
        [
            libc::signal(libc::SIGINT, libc::SIG_DFL),
            libc::signal(libc::SIGTERM, libc::SIG_DFL),
        ]
    };
    let result = loop {
        match open_fifo_nonblocking(target) {
            Ok(Some(f)) => break Ok(f),
            Ok(None) => std::thread::sleep(std::time::Duration::from_millis(50)),
            Err(e) => break Err(e),
        }
    };
    // SAFETY: restoring the dispositions saved above.
    unsafe {
        libc::signal(libc::SIGINT, old[0]);
        libc::signal(libc::SIGTERM, old[1]);
    }
    result
}

/// Checks one output path; the error names the flag and what is wrong.
fn check_one(flag: &str, path: &Path) -> anyhow::Result<()> {
    let shown = path.display();
    if path.as_os_str().is_empty() {
        bail!("{flag}: the path is empty");
    }
    if is_stdout(path) {
        if STDOUT_MISSING.load(Ordering::Relaxed) {
            bail!("{flag} -: standard output is closed (>&-); give a file name");
        }
        return Ok(());
    }
    let target = follow(path).with_context(|| format!("{flag} {shown}"))?;
    match fs::metadata(&target) {
        Ok(m) if m.is_dir() => bail!("{flag} {shown}: is a directory; give a file name"),
        Ok(m) if m.is_file() => {
            // Opening for append neither truncates nor changes the file.
            OpenOptions::new()
                .append(true)
                .open(&target)
                .with_context(|| format!("{flag} {shown}: cannot write this file"))?;
            // A regular file is replaced through a temporary file beside it.
            let dir = parent_of(&target);
            can_create_in(dir).with_context(|| {
                format!(
                    "{flag} {shown}: cannot replace this file (no new file can be created in {})",
                    dir.display()
                )
            })?;
        }
        Ok(_) => {} // device, FIFO or socket: written through when the time comes (a FIFO's open never blocks: see `open_stream`, `write_atomic`)
        Err(_) => {
            let dir = parent_of(&target);
            if !dir.is_dir() {
                bail!("{flag} {shown}: directory {} does not exist", dir.display());
            }
            can_create_in(dir).with_context(|| {
                format!("{flag} {shown}: cannot create a file in {}", dir.display())
            })?;
        }
    }
    Ok(())
}

/// The device and inode a path reaches (symlinks followed), if it exists.
fn dev_ino(path: &Path) -> Option<(u64, u64)> {
    fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

/// Whether writing `output` would write the file `input` names: the same device and inode, or
/// (for a file that does not exist yet) the same path once symlinks and `.`/`..` are resolved.
fn same_file(output: &Path, input: &Path) -> bool {
    if is_stdout(output) || is_stdout(input) {
        return false;
    }
    match (dev_ino(output), dev_ino(input)) {
        (Some(o), Some(i)) => o == i,
        (None, Some(_)) => false,
        _ => matches!((identity(output), identity(input)), (Ok(o), Ok(i)) if o == i),
    }
}

/// Checks every output a command was given against each other and against the command's inputs,
/// before it reads or measures anything. `outputs` pairs each flag with its path (`None` when the
/// flag was not given); `inputs` pairs each input's flag (or argument name) with its path.
pub fn check_outputs<P: AsRef<Path>>(
    outputs: &[(&str, Option<&Path>)],
    inputs: &[(&str, P)],
) -> anyhow::Result<()> {
    let mut seen: Vec<(&str, &Path, PathBuf)> = Vec::new();
    for &(flag, path) in outputs {
        let Some(path) = path else { continue };
        check_one(flag, path)?;
        if let Some((input_flag, input)) = inputs.iter().find(|(_, i)| same_file(path, i.as_ref()))
        {
            bail!(
                "{flag} {} names the same file as {input_flag} {}: writing it would destroy the input; give {flag} another file",
                path.display(),
                input.as_ref().display()
            );
        }
        let id = if is_stdout(path) {
            PathBuf::from("-")
        } else {
            identity(path)?
        };
        if let Some((other, _, _)) = seen
            .iter()
            .find(|(_, p, i)| *i == id || (!is_stdout(path) && same_file(path, p)))
        {
            let what = if is_stdout(path) {
                "standard output".to_string()
            } else {
                path.display().to_string()
            };
            bail!(
                "{other} and {flag} both name {what}: one would overwrite the other; give each its own file"
            );
        }
        if is_stdout(path) {
            STDOUT_IS_OUTPUT.store(true, Ordering::Relaxed);
        }
        seen.push((flag, path, id));
    }
    Ok(())
}

/// Fails when the directory that would hold `path` does not exist, naming the flag.
pub fn check_parent_dir(flag: &str, path: &Path) -> anyhow::Result<()> {
    check_outputs::<&Path>(&[(flag, Some(path))], &[])
}

/// Opens an output that is written as it goes (a JSONL stream): `-` is standard output, a FIFO
/// the descriptor [`check_outputs`] opened, anything else a file, appended to or truncated.
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
            f.write_all(text.as_bytes())
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

/// A temporary file name beside `target` that no other writer uses: the process id and a count
/// within the process, so two processes (ranks, concurrent sessions) or two threads writing the
/// same output never write into one temporary file.
fn temporary_beside(target: &Path) -> PathBuf {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let name = target.file_name().unwrap_or_default().to_string_lossy();
    target.with_file_name(format!(".{name}.{}.{n}.memscope-tmp", std::process::id()))
}

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

fn write_stdout(text: &str) -> anyhow::Result<()> {
    if STDOUT_MISSING.load(Ordering::Relaxed) {
        bail!("standard output is closed (>&-): the report could not be written; redirect it to a file instead");
    }
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
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
    write_stdout(text)
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
        $crate::output::print(&format!($($t)*))
    };
}

/// `println!` that returns write errors instead of panicking (see [`print`]).
#[macro_export]
macro_rules! outln {
    () => {
        $crate::output::print("\n")
    };
    ($($t:tt)*) => {
        $crate::output::print(&(format!($($t)*) + "\n"))
    };
}

/// `$XDG_CACHE_HOME/memscope` or `~/.cache/memscope`; `MEMSCOPE_CACHE_DIR` overrides both.
pub fn cache_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("MEMSCOPE_CACHE_DIR") {
        return PathBuf::from(d);
    }
    if let Some(d) = std::env::var_os("XDG_CACHE_HOME") {
        return PathBuf::from(d).join("memscope");
    }
    let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("/tmp"), PathBuf::from);
    home.join(".cache").join("memscope")
}

/// The peaks cache file for a fingerprint (FNV-1a of it, so the name is short and stable):
/// `memscope peaks`, either engine.
pub fn cache_path(fingerprint: &str) -> PathBuf {
    let h = fingerprint.bytes().fold(0xcbf29ce484222325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100000001b3)
    });
    cache_dir().join(format!("peaks-{h:016x}.json"))
}

/// Writes a peaks file to its cache path; says where, or why not ("measured now, cached in …").
pub fn save_peaks(fingerprint: &str, text: &str) -> String {
    let path = cache_path(fingerprint);
    let saved = std::fs::create_dir_all(cache_dir())
        .map_err(anyhow::Error::from)
        .and_then(|()| write_atomic(&path, text));
    match saved {
        Ok(()) => format!("measured now, cached in {}", path.display()),
        Err(e) => format!("measured now; not cached ({e:#}; set MEMSCOPE_CACHE_DIR)"),
    }
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
