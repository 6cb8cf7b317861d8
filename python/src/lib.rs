//! `memscope._native`: the Rust side of the PyTorch recorder. Python gathers raw samples; the
//! statistics (`analysis::timing`), the leak verdict (`analysis::leak`), the Record's completion
//! (`analysis::complete`), its schema and its writer (`record`, `export`) are memscope's
//! own, called from here, never reimplemented in Python. `counter.rs` is the counting malloc the
//! CPU recorder preloads (`python -m memscope run`).

mod counter;

use memscope::analysis::{complete, leak, timing};
use memscope::model::config::ModelConfig;
use memscope::record::leak::{LeakParams, MemorySeries};
use memscope::record::Record;
use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;
use std::path::Path;

/// True when the counting malloc is the process's malloc (the library was preloaded).
#[pyfunction]
fn counter_active() -> bool {
    counter::active()
}

/// (bytes live, peak since the last reset, blocks live, allocations made, bytes allocated), in
/// malloc usable bytes.
#[pyfunction]
fn counter_read() -> (i64, i64, i64, u64, u64) {
    counter::read()
}

/// Starts a new peak window at the bytes live now; returns them.
#[pyfunction]
fn counter_reset_peak() -> i64 {
    counter::reset_peak()
}

/// Holds the process's live bytes to `bytes` (0: no limit): an allocation past it fails with
/// ENOMEM (PyTorch's CPU allocator then raises its out-of-memory error). Only with the counting
/// malloc preloaded.
#[pyfunction]
fn counter_limit(bytes: i64) -> PyResult<()> {
    if !counter::active() {
        return Err(PyValueError::new_err(
            "a heap limit needs the counting malloc: run under `python -m memscope run`",
        ));
    }
    counter::set_limit(bytes);
    Ok(())
}

/// (allocations the heap limit refused, bytes the first of them asked for): (0, 0) while no
/// allocation met the limit.
#[pyfunction]
fn counter_refusals() -> (u64, u64) {
    counter::refusals()
}

/// Per-phase statistics of raw samples (milliseconds): (JSON of phase → the Record's timing
/// entry, noise warnings).
#[pyfunction]
fn phase_timings(samples: Vec<(String, Vec<f64>)>) -> PyResult<(String, Vec<String>)> {
    let (t, w) = timing::phase_timings(&samples);
    Ok((serde_json::to_string(&t).map_err(val)?, w))
}

/// The leak verdict of a per-step series (bytes): the report as JSON, as `memscope leak` gives it.
#[pyfunction]
#[pyo3(signature = (steps, values, label))]
fn leak_verdict(steps: Vec<u64>, values: Vec<f64>, label: String) -> PyResult<String> {
    let s = MemorySeries {
        steps,
        values,
        seconds: None,
        label,
        unit: None,
        relative: false,
    };
    serde_json::to_string(&leak::analyze(&s, &LeakParams::default())).map_err(val)
}

/// Completes a Record the recorder assembled, as every Record is completed
/// (`analysis::complete`: timing statistics from the raw samples, throughput over its Spec's
/// batch, sequence length and micro-batches, the breakdown), checks it against the schema, and
/// writes it atomically to `path` when given. Returns the Record's JSON.
/// ``cli_advice``: the run was started from memscope's command line (the torch engine), so its
/// warnings name the CLI's flags; else (a user's own loop) Python's knobs.
#[pyfunction]
#[pyo3(signature = (record_json, samples, path=None, cli_advice=false))]
fn finish_record(
    record_json: &str,
    samples: Vec<(String, Vec<f64>)>,
    path: Option<String>,
    cli_advice: bool,
) -> PyResult<String> {
    let mut r: Record = serde_json::from_str(record_json)
        .map_err(|e| PyValueError::new_err(format!("the Record does not fit its schema: {e}")))?;
    let first_new = r.warnings.len();
    complete::complete(&mut r, &samples);
    // A user's loop: the statistics' advice names Python's knobs, not the CLI's.
    if !cli_advice {
        for w in &mut r.warnings[first_new..] {
            *w = python_advice(std::mem::take(w));
        }
    }
    let text = serde_json::to_string_pretty(&r).map_err(val)? + "\n";
    if let Some(p) = path {
        memscope::export::write_atomic(Path::new(&p), &text)
            .map_err(|e| PyOSError::new_err(format!("{e:#}")))?;
    }
    Ok(text)
}

/// memscope's model config as the CLI resolves `--model NAME` / `--config FILE` (a preset, or a
/// file in memscope's schema or Hugging Face's config.json, validated): (its JSON, its exact
/// parameter count). ValueError names what is wrong.
#[pyfunction]
#[pyo3(signature = (model, config=None))]
fn model_config(model: &str, config: Option<String>) -> PyResult<(String, u64)> {
    let cfg = ModelConfig::resolve(model, config.as_deref().map(Path::new))
        .map_err(|e| PyValueError::new_err(e.to_string()))?;
    let params = memscope::model::cost::param_count(&cfg).ok_or_else(|| {
        PyValueError::new_err(format!("{}: its parameter count overflows u64", cfg.name))
    })?;
    Ok((serde_json::to_string(&cfg).map_err(val)?, params))
}

/// memscope's rules for output paths (`export::check_outputs`, the CLI's): each `(name, path)`
/// output checked (a directory, a missing or unwritable directory), against the others and
/// against the `(name, path)` inputs (by device and inode). ValueError names the output.
#[pyfunction]
fn check_outputs(outputs: Vec<(String, String)>, inputs: Vec<(String, String)>) -> PyResult<()> {
    let outs: Vec<(&str, Option<&Path>)> = outputs
        .iter()
        .map(|(n, p)| (n.as_str(), Some(Path::new(p))))
        .collect();
    let ins: Vec<(&str, &Path)> = inputs
        .iter()
        .map(|(n, p)| (n.as_str(), Path::new(p)))
        .collect();
    memscope::export::check_outputs(&outs, &ins)
        .map_err(|e| PyValueError::new_err(format!("{e:#}")))
}

/// A timing warning's advice in the recorder's terms (the CLI's flags mean nothing in a user's
/// script).
fn python_advice(w: String) -> String {
    w.replace(
        "use more --steps or fewer --threads",
        "record more steps, or run fewer threads (torch.set_num_threads)",
    )
    .replace("add --warmup", "raise Session(warmup=…)")
}

/// This machine as a Record's `environment` (JSON), for a run on `threads` threads.
#[pyfunction]
fn environment(threads: usize) -> PyResult<String> {
    serde_json::to_string(&memscope::environment::capture(threads)).map_err(val)
}

/// A `--data` token file, opened once (`input::tokens`, the one implementation both engines
/// read): the torch engine's batches are memscope's, window for window.
#[pyclass(unsendable)]
struct TokenFile {
    tokens: memscope::input::tokens::Tokens,
}

#[pymethods]
impl TokenFile {
    /// `path` with the Spec's `bin_dtype` ("u16", "u32" or None); ValueError names the file and
    /// the flag.
    #[new]
    #[pyo3(signature = (path, bin_dtype=None))]
    fn new(path: String, bin_dtype: Option<String>) -> PyResult<Self> {
        let bin_dtype = bin_dtype
            .map(|d| serde_json::from_value(serde_json::Value::String(d)))
            .transpose()
            .map_err(val)?;
        let spec = memscope::spec::DataSpec {
            path: path.into(),
            bin_dtype,
        };
        let tokens = memscope::input::tokens::Tokens::open(&spec)
            .map_err(|e| PyValueError::new_err(e.to_string()))?;
        Ok(TokenFile { tokens })
    }

    /// Batch `k`: `batch` windows of `seq + 1` ids, row-major, each checked against `vocab`.
    fn batch(
        &self,
        k: u64,
        batch: usize,
        seq: usize,
        seed: u64,
        vocab: usize,
    ) -> PyResult<Vec<u32>> {
        self.tokens
            .batch(k, batch, seq, seed, vocab)
            .map_err(|e| PyValueError::new_err(e.to_string()))
    }

    fn __len__(&self) -> usize {
        self.tokens.len() as usize
    }
}

/// A user's own workload traced under FakeTensorMode (``memscope.estimate``): the trace's answer
/// replayed as `estimate --engine torch` replays its own (`torch::estimate::from_trace`), its
/// FLOPs by phase from the traced ops, and its step time from the roofs `peaks --engine torch`
/// cached for `device` at `threads` threads, when there are any. Returns (the estimate's JSON,
/// the matmul and attention FLOPs of one step, why no time was predicted or None, the predicted
/// time by op kind as (kind, ms, what bounds it, FLOPs) — an op without a formula is its own
/// kind, `uncosted`).
#[pyfunction]
#[pyo3(signature = (trace_json, device, train, threads, limit=None))]
fn torch_estimate(
    trace_json: &str,
    device: &str,
    train: bool,
    threads: usize,
    limit: Option<u64>,
) -> PyResult<(
    String,
    u64,
    Option<String>,
    Vec<(&'static str, f64, &'static str, f64)>,
)> {
    use memscope::analysis::{aten_cost, torch_time};
    let (mut e, ops) = memscope::torch::estimate::from_trace(trace_json, device, train, limit)
        .map_err(|e| PyValueError::new_err(format!("{e:#}")))?;
    e.flops = aten_cost::flops_by_phase(&ops);
    let mut kinds = Vec::new();
    let why = match memscope::torch::peaks::cached(device, threads) {
        Some(p) => {
            let prediction = torch_time::predict(&ops, &p);
            e.predicted_ms = prediction.ms_by_phase();
            kinds = prediction
                .by_kind
                .iter()
                .map(|k| (k.kind.name(), k.predicted_s * 1e3, k.bound(), k.flops))
                .collect();
            None
        }
        None => Some(
            memscope::torch::peaks::cache_problem(device, threads).unwrap_or_else(|| {
                format!(
                    "no roofs measured for {device} at {threads} threads; `memscope peaks --engine torch --device {device} --threads {threads}` measures them once (seconds)"
                )
            }),
        ),
    };
    Ok((
        serde_json::to_string(&e).map_err(val)?,
        aten_cost::product_flops(&ops),
        why,
        kinds,
    ))
}

/// `text` as bytes by memscope's one convention (`24GiB`, `512MiB`, `1e9`: binary units, as
/// every flag takes them); ValueError naming `flag`.
#[pyfunction]
fn parse_bytes(flag: &str, text: &str) -> PyResult<u64> {
    memscope::units::parse_bytes(flag, text).map_err(|e| PyValueError::new_err(format!("{e:#}")))
}

fn val(e: serde_json::Error) -> PyErr {
    PyValueError::new_err(e.to_string())
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("SCHEMA_VERSION", memscope::record::SCHEMA_VERSION)?;
    m.add("MEMSCOPE_VERSION", env!("CARGO_PKG_VERSION"))?;
    for f in [
        wrap_pyfunction!(counter_active, m)?,
        wrap_pyfunction!(counter_read, m)?,
        wrap_pyfunction!(counter_reset_peak, m)?,
        wrap_pyfunction!(counter_limit, m)?,
        wrap_pyfunction!(counter_refusals, m)?,
        wrap_pyfunction!(phase_timings, m)?,
        wrap_pyfunction!(leak_verdict, m)?,
        wrap_pyfunction!(finish_record, m)?,
        wrap_pyfunction!(environment, m)?,
        wrap_pyfunction!(check_outputs, m)?,
        wrap_pyfunction!(model_config, m)?,
        wrap_pyfunction!(torch_estimate, m)?,
        wrap_pyfunction!(parse_bytes, m)?,
    ] {
        m.add_function(f)?;
    }
    m.add_class::<TokenFile>()?;
    Ok(())
}
