//! Where the peaks caches live (`MEMSCOPE_CACHE_DIR`) and how one is saved.

use std::path::PathBuf;

use super::write::write_atomic;

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

/// Held while one process measures a machine's peaks: a second `memscope peaks` for the same
/// fingerprint waits for it rather than measuring beside it (two measuring at once contend for
/// the cores and cache each other's contended roofs). Released when dropped.
pub struct MeasureLock(#[allow(dead_code)] std::fs::File);

/// Takes the measuring lock of `fingerprint` (a `.lock` file beside its cache file), waiting
/// for another process that holds it; `waiting` is called once when it has to wait.
pub fn measure_lock(fingerprint: &str, waiting: impl FnOnce()) -> anyhow::Result<MeasureLock> {
    use std::os::fd::AsRawFd;
    std::fs::create_dir_all(cache_dir())?;
    let path = cache_path(fingerprint).with_extension("lock");
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| anyhow::anyhow!("{}: {e}; set MEMSCOPE_CACHE_DIR", path.display()))?;
    // SAFETY: flock on a descriptor this function owns; no memory is passed.
    if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        waiting();
        if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) } != 0 {
            anyhow::bail!("{}: {}", path.display(), std::io::Error::last_os_error());
        }
    }
    Ok(MeasureLock(f))
}
