//! Output paths: every output checked before anything runs (against the other outputs and the
//! command's inputs, by device and inode), `-` as standard output, FIFOs opened without blocking.

use anyhow::{bail, Context};
use std::fs::{self, File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

use super::stdout::{STDOUT_IS_OUTPUT, STDOUT_MISSING};

/// Follows symlinks (dangling ones too) to the path a write would reach; at most 40 links.
pub(super) fn follow(path: &Path) -> anyhow::Result<PathBuf> {
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

/// Opens a FIFO for writing without ever blocking in `open`: `Ok(None)` while nobody reads it.
/// The returned descriptor blocks on write again (as a pipe does), once a reader is there.
pub(super) fn open_fifo_nonblocking(target: &Path) -> std::io::Result<Option<File>> {
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
pub(super) fn wait_for_fifo_reader(target: &Path) -> std::io::Result<File> {
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
