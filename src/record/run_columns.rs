//! The columns that tell unlike runs apart in a table (`bench --csv`, `sweep --csv`): which
//! engine, device and plan made a row, and what its heap figures count.

use crate::spec::Spec;

/// The columns a table row of this run carries so rows of unlike runs are told apart: the
/// engine (`candle`, `torch`, or a recorded loop's `pytorch`), the device, the data-parallel
/// plan as `--parallel` takes it (empty for one process), the ranks, and what the row's heap
/// figures count.
pub fn run_columns(spec: &Spec) -> [String; 5] {
    let (engine, device, memory) = match (&spec.engine, &spec.torch) {
        (Some(e), _) => (e.name.clone(), e.device.clone(), e.memory.clone()),
        (None, Some(t)) => (
            "torch".into(),
            t.device.clone(),
            if t.is_cuda() {
                "cuda allocated".into()
            } else {
                "malloc usable".into()
            },
        ),
        (None, None) => (
            "candle".into(),
            "cpu".into(),
            "heap (counting allocator)".into(),
        ),
    };
    let parallel = spec.parallel();
    [
        engine,
        device,
        parallel.map_or(String::new(), |p| p.flag()),
        parallel.map_or(1, |p| p.world).to_string(),
        memory,
    ]
}

/// Their column names.
pub const RUN_COLUMNS: [&str; 5] = ["engine", "device", "plan", "world", "heap_measures"];
