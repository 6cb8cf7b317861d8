//! The scratch directory where workers write their Records and step series.

use anyhow::Context;
use std::path::PathBuf;

/// Scratch directory for the workers' Records and series, removed on drop.
pub struct Scratch(pub PathBuf);

impl Scratch {
    pub fn new() -> anyhow::Result<Scratch> {
        // Unique per call: `optimize` holds one while each variant's `fit` search makes its own
        // (and removes it on drop).
        static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("memscope-sweep-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("creating {} (set TMPDIR)", dir.display()))?;
        Ok(Scratch(dir))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
