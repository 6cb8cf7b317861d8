//! Output files and standard output, for every command: the checks made before any measurement
//! starts, the writes that never destroy what is there, and stdout errors that are reported.
//!
//! - [`check_outputs`] runs before a command measures anything: a path that is a directory, whose
//!   directory is missing or unwritable, or that two flags share, is refused naming the flag(s).
//! - [`write_atomic`] replaces a regular file (or creates one) through a temporary file renamed
//!   into place, removed again if anything fails; a symlink is followed and the file it names is
//!   written; a device, FIFO or socket is written through, never replaced by a regular file.
//! - [`print`] writes to stdout and returns the error (a full disk, `> /dev/full`) instead of
//!   panicking; a closed pipe (`| head`) is [`StdoutClosed`], which `main` treats as success.

use anyhow::{bail, Context};
use std::fs::{self, OpenOptions};
use std::io::{ErrorKind, Write};
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};

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

/// Checks one output path; the error names the flag and what is wrong.
fn check_one(flag: &str, path: &Path) -> anyhow::Result<()> {
    let shown = path.display();
    if path.as_os_str().is_empty() {
        bail!("{flag}: the path is empty");
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
        }
        Ok(_) => {} // device, FIFO or socket: written through when the time comes (a FIFO's open waits for a reader)
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

/// Checks every output a command was given, before it measures anything. `outputs` pairs each
/// flag with its path (`None` when the flag was not given).
pub fn check_outputs(outputs: &[(&str, Option<&Path>)]) -> anyhow::Result<()> {
    let mut seen: Vec<(&str, PathBuf)> = Vec::new();
    for &(flag, path) in outputs {
        let Some(path) = path else { continue };
        check_one(flag, path)?;
        let id = identity(path)?;
        if let Some((other, _)) = seen.iter().find(|(_, p)| *p == id) {
            bail!(
                "{other} and {flag} both name {}: one would overwrite the other; give each its own file",
                path.display()
            );
        }
        seen.push((flag, id));
    }
    Ok(())
}

/// Fails when the directory that would hold `path` does not exist, naming the flag.
pub fn check_parent_dir(flag: &str, path: &Path) -> anyhow::Result<()> {
    check_outputs(&[(flag, Some(path))])
}

/// Writes `text` to `path` without ever leaving a half-written regular file or replacing a
/// device, FIFO, socket or symlink (see the module docs).
pub fn write_atomic(path: &Path, text: &str) -> anyhow::Result<()> {
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
            let mut f = OpenOptions::new()
                .write(true)
                .open(&target)
                .with_context(|| format!("opening the {kind} {}", target.display()))?;
            f.write_all(text.as_bytes())
                .and_then(|()| f.flush())
                .with_context(|| format!("writing to the {kind} {}", target.display()))?;
            Ok(())
        }
        _ => {
            let name = target.file_name().unwrap_or_default().to_string_lossy();
            let tmp = target.with_file_name(format!("{name}.memscope-tmp"));
            let result = fs::write(&tmp, text).and_then(|()| fs::rename(&tmp, &target));
            if result.is_err() {
                let _ = fs::remove_file(&tmp);
            }
            result.map_err(anyhow::Error::from)
        }
    }
}

/// Standard output was closed by its reader (`memscope … | head`): not a failure.
#[derive(Debug, thiserror::Error)]
#[error("standard output was closed")]
pub struct StdoutClosed;

/// Writes to standard output; a write error is returned (naming stdout), never a panic.
pub fn print(text: &str) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == ErrorKind::BrokenPipe => Err(StdoutClosed.into()),
        Err(e) => Err(anyhow::Error::new(e).context("writing to standard output")),
    }
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
