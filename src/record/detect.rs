//! What `report`, `compare` and `diff` read: any file memscope writes, recognised by its content
//! (not its name) so that files from another machine work. A bad file is refused naming it and
//! saying what it is not.
//!
//! - a benchmark Record: `bench --json`, `leak --record` (has `schema_version`);
//! - a leak verdict: `leak --json`, `analyze --json` (has `verdict` and `sentence`);
//! - an estimate: `estimate --json` (has `categories` and `peak_bytes`, no `schema_version`);
//! - a torch estimate: `estimate --engine torch --json` (`"kind": "torch-estimate"`; a
//!   comparison of plans, `"kind": "torch-plans"`, is refused by name);
//! - a sweep: `sweep --jsonl` (one row per line, each with `status` and `spec`);
//! - a roofline: `roofline --json` (has `run.roofs` and `sections`);
//! - a watch: `watch --json` (has `"schema": "memscope-watch"`).

use crate::record::estimate::EstimateFile;
use crate::record::leak::LeakReport;
use crate::record::roofline::RooflineFile;
use crate::record::sweep_row::Row;
use crate::record::torch_estimate::TorchEstimateFile;
use crate::record::watch::{WatchFile, WATCH_SCHEMA};
use crate::record::{Record, SCHEMA_VERSION};
use anyhow::{bail, Context};
use serde_json::Value;

/// One input file, parsed.
#[derive(Clone, Debug)]
pub enum Input {
    Record(Box<Record>),
    Leak(Box<LeakReport>),
    Estimate(Box<EstimateFile>),
    TorchEstimate(Box<TorchEstimateFile>),
    Sweep(Vec<Row>),
    Roofline(Box<RooflineFile>),
    Watch(Box<WatchFile>),
}

impl Input {
    pub fn kind(&self) -> &'static str {
        match self {
            Input::Record(_) => "Record",
            Input::Leak(_) => "leak verdict",
            Input::Estimate(_) => "estimate",
            Input::TorchEstimate(_) => "torch estimate",
            Input::Sweep(_) => "sweep JSONL",
            Input::Roofline(_) => "roofline",
            Input::Watch(_) => "watch",
        }
    }
}

impl Input {
    /// Its kind with its article: "a Record", "an estimate".
    pub fn a_kind(&self) -> String {
        let k = self.kind();
        let an = k.starts_with(['a', 'e', 'i', 'o', 'u']);
        format!("{} {k}", if an { "an" } else { "a" })
    }
}

/// An input and the name it is shown under (the file name as given).
#[derive(Clone, Debug)]
pub struct Named {
    pub name: String,
    pub input: Input,
}

const WHAT: &str = "expected a memscope Record (bench --json, leak --record), a leak verdict \
                    (leak --json, analyze --json), an estimate (estimate --json, either engine), a \
                    sweep's --jsonl, a roofline --json or a watch --json";

/// Parses one file's text; `name` is the file as the user gave it, used in every error.
pub fn parse(name: &str, text: &str) -> anyhow::Result<Input> {
    let trimmed = text.trim();
    if trimmed.is_empty() {
        bail!("{name}: the file is empty; {WHAT}");
    }
    match serde_json::from_str::<Value>(trimmed) {
        Ok(v) => return parse_value(name, v),
        // One JSON value that ends early (not JSON Lines: its first line is no value alone).
        Err(e)
            if e.is_eof()
                && serde_json::from_str::<Value>(trimmed.lines().next().unwrap_or("")).is_err() =>
        {
            bail!(
                "{name}: truncated: the JSON ends before it is complete ({e}); the file was cut off (a run killed while writing it, a full disk, or a partial copy)"
            )
        }
        Err(_) => {}
    }
    // Not one JSON value: JSON Lines (a sweep).
    let mut rows = Vec::new();
    for (i, line) in trimmed.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let v: Value = serde_json::from_str(line)
            .map_err(|e| anyhow::anyhow!("{name}: line {}: not JSON ({e}); {WHAT}", i + 1))?;
        if v.get("heap_live_bytes").is_some() && v.get("step").is_some() {
            bail!(
                "{name}: a per-step memory series (a .steps.jsonl the recorder writes beside its Record), not a Record or a sweep: `memscope analyze {name}` judges it (leaking or warming up?); report, compare and diff read the Record beside it"
            );
        }
        if v.get("status").is_none() || v.get("spec").is_none() {
            bail!(
                "{name}: line {}: a JSON line without `status` and `spec` is not a sweep row; {WHAT}",
                i + 1
            );
        }
        let row: Row =
            typed(v).with_context(|| format!("{name}: line {}: not a sweep row", i + 1))?;
        rows.push(row);
    }
    Ok(Input::Sweep(rows))
}

fn parse_value(name: &str, v: Value) -> anyhow::Result<Input> {
    let Some(obj) = v.as_object() else {
        bail!("{name}: the JSON is not an object; {WHAT}");
    };
    if obj.get("schema").and_then(|s| s.as_str()) == Some(WATCH_SCHEMA) {
        let w: WatchFile = typed(v).with_context(|| {
            format!("{name}: says memscope-watch but is not a watch --json file")
        })?;
        return Ok(Input::Watch(Box::new(w)));
    }
    if let Some(ver) = obj.get("schema_version") {
        let ver = ver.as_u64().unwrap_or(0);
        if ver != SCHEMA_VERSION as u64 {
            bail!(
                "{name}: Record schema_version {ver}; this memscope reads schema_version \
                 {SCHEMA_VERSION} (re-run the benchmark with this version, or use the memscope \
                 that wrote it)"
            );
        }
        let r: Record = typed(v)
            .with_context(|| format!("{name}: schema_version {ver} but not a valid Record"))?;
        return Ok(Input::Record(Box::new(r)));
    }
    if obj.get("kind").and_then(|k| k.as_str()) == Some(TorchEstimateFile::KIND) {
        let e: TorchEstimateFile = typed(v).with_context(|| {
            format!(
                "{name}: says {} but is not an estimate --engine torch --json file",
                TorchEstimateFile::KIND
            )
        })?;
        return Ok(Input::TorchEstimate(Box::new(e)));
    }
    if obj.get("kind").and_then(|k| k.as_str())
        == Some(crate::record::torch_estimate::TorchPlansFile::KIND)
    {
        bail!(
            "{name}: a comparison of plans (`estimate --engine torch --parallel A,B,… --json`), which report, compare and diff do not read; give one plan's estimate (`--parallel A --json`)"
        );
    }
    if obj.contains_key("verdict") && obj.contains_key("sentence") {
        let r: LeakReport =
            typed(v).with_context(|| format!("{name}: has `verdict` but is not a leak verdict"))?;
        return Ok(Input::Leak(Box::new(r)));
    }
    if obj.contains_key("categories") && obj.contains_key("peak_bytes") {
        let e: EstimateFile = typed(v).with_context(|| {
            format!("{name}: has `categories` and `peak_bytes` but is not an estimate --json file")
        })?;
        return Ok(Input::Estimate(Box::new(e)));
    }
    if obj.contains_key("status") && obj.contains_key("spec") {
        let row: Row =
            typed(v).with_context(|| format!("{name}: has `status` but is not a sweep row"))?;
        return Ok(Input::Sweep(vec![row]));
    }
    if obj.get("run").is_some_and(|r| r.get("roofs").is_some()) && obj.contains_key("sections") {
        let r: RooflineFile = typed(v).with_context(|| {
            format!("{name}: has `run.roofs` but is not a roofline --json file")
        })?;
        return Ok(Input::Roofline(Box::new(r)));
    }
    bail!(
        "{name}: no `schema_version`, `kind`, `verdict`, `categories`, `status` or `run.roofs` field; {WHAT}"
    )
}

/// `v` as `T`, an error naming the field that does not fit (`memory.heap_peak_bytes: invalid
/// value: integer \`-5\`, expected u64`), not serde's message alone.
fn typed<T: serde::de::DeserializeOwned>(v: Value) -> anyhow::Result<T> {
    serde_path_to_error::deserialize(v).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if path == "." {
            anyhow::anyhow!("{inner}")
        } else {
            anyhow::anyhow!("field `{path}`: {inner}")
        }
    })
}

/// Reads and parses `path`.
pub fn load(path: &std::path::Path) -> anyhow::Result<Named> {
    let name = path.display().to_string();
    use crate::capped::{read_capped_string, MAX_RESULT_FILE};
    let text = read_capped_string(path, MAX_RESULT_FILE, "memscope result file")
        .with_context(|| format!("{name}: cannot read"))?;
    let input = parse(&name, &text)?;
    if let Input::Sweep(rows) = &input {
        if rows.is_empty() {
            bail!("{name}: no rows; {WHAT}");
        }
    }
    Ok(Named { name, input })
}

/// A short label for a Record: model, mode, batch × seq, dtype.
pub fn record_label(r: &Record) -> String {
    // A sequence length only where one is known (not for a user's model fed floats).
    let seq = if r.spec.seq == 0 {
        String::new()
    } else {
        format!(" s{}", r.spec.seq)
    };
    format!(
        "{} {} b{}{seq} {}",
        r.spec.model,
        r.spec.mode.name(),
        r.spec.batch,
        r.spec.dtype.name()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_and_foreign_files_name_the_file() {
        let e = parse("x.json", "  \n").unwrap_err().to_string();
        assert!(e.contains("x.json") && e.contains("empty"), "{e}");
        let e = parse("y.json", "{\"a\": 1}").unwrap_err().to_string();
        assert!(e.contains("y.json") && e.contains("schema_version"), "{e}");
        let e = parse("z.json", "{\"schema_version\": 7}")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("z.json") && e.contains("schema_version 7"),
            "{e}"
        );
        let e = parse("w.jsonl", "{\"a\":1}\n{\"b\":2}")
            .unwrap_err()
            .to_string();
        assert!(e.contains("w.jsonl") && e.contains("line 1"), "{e}");
    }
}
