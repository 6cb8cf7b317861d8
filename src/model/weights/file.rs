//! [`SafetensorsFile`]: one validated, memory-mapped file.

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};

use memmap2::Mmap;

use super::parse::parse_header;
use super::types::*;

/// One validated, memory-mapped safetensors file.
#[derive(Debug)]
pub struct SafetensorsFile {
    path: PathBuf,
    mmap: Mmap,
    data_start: usize,
    tensors: Vec<TensorInfo>,
    by_name: HashMap<String, usize>,
}

impl SafetensorsFile {
    /// Maps the file and validates its whole header and layout.
    pub fn open(path: &Path) -> Result<Self, WeightsError> {
        let io_err = |error| WeightsError::Io {
            path: path.into(),
            error,
        };
        let file = File::open(path).map_err(io_err)?;
        if !file.metadata().map_err(io_err)?.is_file() {
            return Err(WeightsError::NotAFile { path: path.into() });
        }
        // SAFETY: the map is only read through `&[u8]` and every tensor is copied out. The one
        // hazard is another process truncating or rewriting the file while it is mapped: a
        // truncation turns reads past the new end into SIGBUS. That is acceptable here because
        // weights are read inside a worker process, and the parent classifies such a death as
        // "input changed" (docs/reliability.md case 12) and the sweep goes on.
        let mmap = unsafe { Mmap::map(&file) }.map_err(io_err)?;
        let (tensors, data_start) = parse_header(&mmap, path)?;
        let by_name = tensors
            .iter()
            .enumerate()
            .map(|(i, t)| (t.name.clone(), i))
            .collect();
        Ok(SafetensorsFile {
            path: path.into(),
            mmap,
            data_start,
            tensors,
            by_name,
        })
    }

    /// The file this was opened from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Every tensor, sorted by data offset.
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }

    /// Copies one tensor's bytes out of the file.
    pub fn read(&self, name: &str) -> Result<RawTensor, WeightsError> {
        let index =
            self.by_name
                .get(name)
                .copied()
                .ok_or_else(|| WeightsError::TensorNotFound {
                    path: self.path.clone(),
                    name: name.into(),
                    count: self.tensors.len(),
                })?;
        self.read_index(index)
    }

    pub(super) fn read_index(&self, index: usize) -> Result<RawTensor, WeightsError> {
        let missing = |name: &str| WeightsError::TensorNotFound {
            path: self.path.clone(),
            name: name.into(),
            count: self.tensors.len(),
        };
        let info = self
            .tensors
            .get(index)
            .ok_or_else(|| missing("<index out of range>"))?;
        let range = self
            .data_start
            .checked_add(info.begin)
            .zip(self.data_start.checked_add(info.end));
        let bytes = range
            .and_then(|(b, e)| self.mmap.get(b..e))
            .ok_or_else(|| missing(&info.name))?;
        // A copy, never a cast: the bytes may be misaligned for the dtype.
        Ok(RawTensor {
            dtype: info.dtype,
            shape: info.shape.clone(),
            data: bytes.to_vec(),
        })
    }
}
