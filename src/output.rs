//! Output files every command shares: checks made before any measurement starts, and atomic writes.

use anyhow::bail;
use std::path::Path;

/// Fails when the directory that would hold `path` does not exist, naming the flag, so a run is
/// never wasted on an output that cannot be written.
pub fn check_parent_dir(flag: &str, path: &Path) -> anyhow::Result<()> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    if !dir.is_dir() {
        bail!(
            "{flag} {}: directory {} does not exist",
            path.display(),
            dir.display()
        );
    }
    Ok(())
}

/// Writes to a temporary file beside `path`, then renames it into place.
pub fn write_atomic(path: &Path, text: &str) -> anyhow::Result<()> {
    let tmp = path.with_extension("memscope-tmp");
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, path)?;
    Ok(())
}
