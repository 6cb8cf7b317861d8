//! `--jsonl`: one JSON line per sample, written and flushed as it is taken, so a watcher that is
//! itself killed loses nothing already sampled (at worst the line being written is cut short).

use crate::record::watch::TreeSample;
use std::fs::File;
use std::io::Write;
use std::path::Path;

pub struct JsonlWriter {
    file: File,
}

impl JsonlWriter {
    /// Creates (truncates) the file; errors name the flag.
    pub fn create(path: &Path) -> anyhow::Result<JsonlWriter> {
        let file = File::create(path)
            .map_err(|e| anyhow::anyhow!("--jsonl {}: cannot create: {e}", path.display()))?;
        Ok(JsonlWriter { file })
    }

    /// One line, written with a single `write_all` of the whole line, then flushed.
    pub fn write(&mut self, s: &TreeSample) -> std::io::Result<()> {
        let mut line = serde_json::to_vec(s).map_err(std::io::Error::other)?;
        line.push(b'\n');
        self.file.write_all(&line)?;
        self.file.flush()
    }
}
