//! [`WeightSet`]: a single file or a sharded index (`model.safetensors.index.json`), as one
//! name → tensor table; shard paths stay inside the index's directory.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::io;
use std::path::{Component, Path, PathBuf};

use serde::de::{self, Deserializer as _, IgnoredAny, MapAccess, Visitor};

use super::file::SafetensorsFile;
use super::header::*;
use super::parse::check_name;
use super::types::*;

/// Either a single file or a sharded index: name -> tensor.
#[derive(Debug)]
pub struct WeightSet {
    source: PathBuf,
    files: Vec<SafetensorsFile>,
    /// name -> (index into `files`, index into that file's tensors)
    index: BTreeMap<String, (usize, usize)>,
}

impl WeightSet {
    /// Opens `*.index.json` as a sharded checkpoint, anything else as one safetensors file.
    pub fn open(path: &Path) -> Result<Self, WeightsError> {
        let is_index = path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.ends_with(".index.json"));
        if is_index {
            open_sharded(path)
        } else {
            let file = SafetensorsFile::open(path)?;
            let index = file
                .tensors()
                .iter()
                .enumerate()
                .map(|(i, t)| (t.name.clone(), (0, i)))
                .collect();
            Ok(WeightSet {
                source: path.into(),
                files: vec![file],
                index,
            })
        }
    }

    /// The path this set was opened from (the file or the index).
    pub fn source(&self) -> &Path {
        &self.source
    }

    /// Every tensor name, sorted.
    pub fn names(&self) -> Vec<String> {
        self.index.keys().cloned().collect()
    }

    /// Header information of one tensor.
    pub fn info(&self, name: &str) -> Option<&TensorInfo> {
        let &(f, t) = self.index.get(name)?;
        self.files.get(f)?.tensors().get(t)
    }

    /// Copies one tensor's bytes out of its file.
    pub fn read(&self, name: &str) -> Result<RawTensor, WeightsError> {
        let found = self
            .index
            .get(name)
            .and_then(|&(f, t)| Some((self.files.get(f)?, t)));
        match found {
            Some((file, t)) => file.read_index(t),
            None => Err(WeightsError::TensorNotFound {
                path: self.source.clone(),
                name: name.into(),
                count: self.index.len(),
            }),
        }
    }
}

/// The parts of a Hugging Face `*.index.json` we use, with order and duplicates preserved.
pub(super) struct IndexJson {
    weight_map: Vec<(String, String)>,
}

pub(super) struct IndexVisitor;

impl<'de> Visitor<'de> for IndexVisitor {
    type Value = IndexJson;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object {\"metadata\": {..}, \"weight_map\": {tensor name: shard file}}")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut weight_map: Option<Vec<(String, String)>> = None;
        let mut metadata_seen = false;
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "weight_map" if weight_map.is_none() => {
                    weight_map = Some(map.next_value::<OrderedStrings>()?.0);
                }
                "metadata" if !metadata_seen => {
                    map.next_value::<IgnoredAny>()?;
                    metadata_seen = true;
                }
                "weight_map" | "metadata" => {
                    return Err(de::Error::custom(format_args!("key {key:?} appears twice")));
                }
                other => {
                    return Err(de::Error::custom(format_args!(
                        "unknown key {other:?}; valid keys are \"metadata\" and \"weight_map\""
                    )));
                }
            }
        }
        let weight_map = weight_map.ok_or_else(|| de::Error::missing_field("weight_map"))?;
        Ok(IndexJson { weight_map })
    }
}

/// The files a weights path reads: the path itself and, for a sharded index, every shard it
/// names (as far as the index can be read; opening the set reports what is wrong with it).
pub fn files_of(path: &Path) -> Vec<PathBuf> {
    let mut out = vec![path.to_path_buf()];
    let is_index = path
        .file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.ends_with(".index.json"));
    if let (true, Ok(ix)) = (is_index, read_index_json(path)) {
        let dir = path.parent().unwrap_or(Path::new(""));
        for (name, shard) in &ix.weight_map {
            if let Ok(rel) = safe_shard_path(path, name, shard) {
                let p = dir.join(rel);
                if !out.contains(&p) {
                    out.push(p);
                }
            }
        }
    }
    out
}

/// Reads and parses an index file (size-capped, strict UTF-8 JSON).
pub(super) fn read_index_json(path: &Path) -> Result<IndexJson, WeightsError> {
    let io_err = |error| WeightsError::Io {
        path: path.into(),
        error,
    };
    let bad = |problem: String| WeightsError::InvalidIndex {
        path: path.into(),
        problem,
    };
    use crate::capped::{read_capped, CappedError};
    let bytes = match read_capped(path, MAX_INDEX_LEN, "weights index") {
        Ok(b) => b,
        Err(CappedError::Io(e)) => return Err(io_err(e)),
        Err(e @ CappedError::TooLarge { .. }) => return Err(bad(e.to_string())),
    };
    let text = std::str::from_utf8(&bytes).map_err(|e| {
        bad(format!(
            "not valid UTF-8 (first bad byte at offset {}); valid is UTF-8 JSON",
            e.valid_up_to()
        ))
    })?;
    let mut de = serde_json::Deserializer::from_str(text);
    let parsed = de
        .deserialize_map(IndexVisitor)
        .and_then(|ix| de.end().map(|()| ix));
    parsed.map_err(|e| bad(e.to_string()))
}

/// Turns a weight_map shard entry into a safe relative path (no `..`, root or prefix).
pub(super) fn safe_shard_path(
    index_path: &Path,
    tensor: &str,
    shard: &str,
) -> Result<PathBuf, WeightsError> {
    let unsafe_path = || WeightsError::UnsafeShardPath {
        path: index_path.into(),
        shard: shard.into(),
        tensor: tensor.into(),
    };
    if shard.contains('\0') {
        return Err(unsafe_path());
    }
    let mut out = PathBuf::new();
    for component in Path::new(shard).components() {
        match component {
            Component::Normal(part) => out.push(part),
            Component::CurDir => {}
            Component::ParentDir | Component::RootDir | Component::Prefix(_) => {
                return Err(unsafe_path())
            }
        }
    }
    if out.as_os_str().is_empty() {
        return Err(unsafe_path());
    }
    Ok(out)
}

/// Opens every shard of an index and checks the index against the shards' headers.
pub(super) fn open_sharded(index_path: &Path) -> Result<WeightSet, WeightsError> {
    let bad = |problem: String| WeightsError::InvalidIndex {
        path: index_path.into(),
        problem,
    };
    let index_json = read_index_json(index_path)?;
    let weight_map = index_json.weight_map;
    if weight_map.is_empty() {
        return Err(bad(
            "weight_map is empty; valid is one entry per tensor".into()
        ));
    }
    if let Some(name) = first_duplicate(weight_map.iter().map(|(k, _)| k.as_str())) {
        return Err(bad(format!(
            "weight_map lists tensor {name:?} twice; each tensor must appear once"
        )));
    }
    // Shard (relative path) -> tensors the index puts there; BTreeMap for a stable order.
    let mut by_shard: BTreeMap<PathBuf, Vec<&str>> = BTreeMap::new();
    let mut expected: HashMap<&str, PathBuf> = HashMap::with_capacity(weight_map.len());
    for (name, shard) in &weight_map {
        check_name(name, index_path)?;
        let rel = safe_shard_path(index_path, name, shard)?;
        by_shard.entry(rel.clone()).or_default().push(name);
        expected.insert(name, rel);
    }
    let dir = index_path.parent().unwrap_or(Path::new(""));
    let mut files = Vec::with_capacity(by_shard.len());
    let mut rel_paths = Vec::with_capacity(by_shard.len());
    for (rel, names) in &by_shard {
        files.push(open_shard(index_path, &dir.join(rel), names)?);
        rel_paths.push(rel.clone());
    }
    let index = index_tensors(index_path, &files)?;
    cross_check(index_path, &files, &rel_paths, &index, &expected)?;
    Ok(WeightSet {
        source: index_path.into(),
        files,
        index,
    })
}

pub(super) fn open_shard(
    index_path: &Path,
    shard: &Path,
    names: &[&str],
) -> Result<SafetensorsFile, WeightsError> {
    match SafetensorsFile::open(shard) {
        Err(WeightsError::Io { error, .. }) if error.kind() == io::ErrorKind::NotFound => {
            Err(WeightsError::ShardMissing {
                path: index_path.into(),
                shard: shard.into(),
                tensor: names.first().map_or(String::new(), |n| n.to_string()),
                others: names.len().saturating_sub(1),
                error,
            })
        }
        other => other,
    }
}

/// name -> (file, tensor) over all shards; a name in two shards' headers is an error.
pub(super) fn index_tensors(
    index_path: &Path,
    files: &[SafetensorsFile],
) -> Result<BTreeMap<String, (usize, usize)>, WeightsError> {
    let mut index: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    for (fi, file) in files.iter().enumerate() {
        for (ti, t) in file.tensors().iter().enumerate() {
            if let Some((prev, _)) = index.insert(t.name.clone(), (fi, ti)) {
                let first = files
                    .get(prev)
                    .map_or_else(PathBuf::new, |f| f.path().into());
                return Err(WeightsError::TensorInTwoShards {
                    path: index_path.into(),
                    name: t.name.clone(),
                    first,
                    second: file.path().into(),
                });
            }
        }
    }
    Ok(index)
}

/// The weight_map and the shard headers must describe exactly the same name -> shard mapping.
pub(super) fn cross_check(
    index_path: &Path,
    files: &[SafetensorsFile],
    rel_paths: &[PathBuf],
    index: &BTreeMap<String, (usize, usize)>,
    expected: &HashMap<&str, PathBuf>,
) -> Result<(), WeightsError> {
    let file_path = |fi: usize| files.get(fi).map_or_else(PathBuf::new, |f| f.path().into());
    for (&name, rel) in expected {
        let found = index.get(name).map(|&(fi, _)| fi);
        if found.and_then(|fi| rel_paths.get(fi)) != Some(rel) {
            let shard = rel_paths
                .iter()
                .position(|r| r == rel)
                .map_or_else(|| rel.clone(), file_path);
            return Err(WeightsError::ShardLacksTensor {
                path: index_path.into(),
                name: name.into(),
                shard,
                found_in: found.map(file_path),
            });
        }
    }
    for (name, &(fi, _)) in index {
        if !expected.contains_key(name.as_str()) {
            return Err(WeightsError::UnlistedTensor {
                path: index_path.into(),
                name: name.clone(),
                shard: file_path(fi),
            });
        }
    }
    Ok(())
}
