//! A Record written by the PyTorch recorder (python/, docs/pytorch.md; the fixture is
//! python/tests/scripts/exact.py's Record, counted allocations on CPU): it loads, every command
//! that reads Records reads it, and a Spec without a config is refused where a Spec would run.

use assert_cmd::Command;
use memscope::record::Record;

fn fixture() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/pytorch-record.json")
}

fn record() -> Record {
    serde_json::from_str(&std::fs::read_to_string(fixture()).unwrap()).unwrap()
}

#[test]
fn a_pytorch_record_loads_and_says_which_engine_ran_it() {
    let r = record();
    assert!(r.spec.config.is_none());
    let e = r.spec.engine.as_ref().expect("spec.engine");
    assert_eq!(
        (e.name.as_str(), e.memory.as_str()),
        ("pytorch", "malloc usable")
    );
    assert_eq!(r.model.param_bytes, r.memory.param_bytes);
    // Written back unchanged: no config appears, the engine stays.
    let text = serde_json::to_string(&r).unwrap();
    assert!(!text.contains("\"config\":") && text.contains("\"engine\":"));
    assert_eq!(serde_json::from_str::<Record>(&text).unwrap(), r);
}

#[test]
fn its_spec_cannot_be_run() {
    let err = record().spec.validate().unwrap_err().to_string();
    assert!(err.contains("spec.config is missing"), "{err}");
}

#[test]
fn report_compare_and_diff_read_it() {
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("r.html");
    let out = Command::cargo_bin("memscope")
        .unwrap()
        .args([
            "report",
            fixture().to_str().unwrap(),
            "-o",
            page.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(html.contains("data-chart=\"memory-stacked\""));
    for cmd in ["compare", "diff"] {
        let out = Command::cargo_bin("memscope")
            .unwrap()
            .args([
                cmd,
                fixture().to_str().unwrap(),
                fixture().to_str().unwrap(),
            ])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{cmd}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("optimizer"),
            "{cmd}"
        );
    }
}

#[test]
fn the_memory_table_names_what_the_heap_figures_count() {
    use memscope::report::summary::memory_table;
    let labels = |r: &Record| -> Vec<String> {
        memory_table(r)
            .rows
            .iter()
            .flat_map(|row| [row[0].clone(), row[2].clone()])
            .collect()
    };
    // Counted on the CPU: the counting allocator's heap.
    let cpu = labels(&record());
    assert!(cpu.contains(&"heap peak".to_string()), "{cpu:?}");
    assert!(
        cpu.contains(&"counting allocator, whole run".to_string()),
        "{cpu:?}"
    );
    // The same Record as if measured on CUDA: the caching allocator's allocated bytes, named.
    let mut r = record();
    r.spec.engine.as_mut().unwrap().memory = "cuda allocated".into();
    let cuda = labels(&r);
    assert!(
        cuda.contains(&"CUDA allocated peak".to_string()),
        "{cuda:?}"
    );
    assert!(
        cuda.contains(&"PyTorch's caching allocator, allocated bytes, whole run".to_string()),
        "{cuda:?}"
    );
    assert!(memscope::report::summary::phase_memory_table(&r)
        .title
        .starts_with("CUDA allocated by phase"));
    // Its load, peak and end rows (RSS, the host process's, keeps its own words).
    let device_rows = &cuda[2..8];
    assert!(
        !device_rows
            .iter()
            .any(|l| l.contains("heap") || l.contains("counting")),
        "{cuda:?}"
    );
}

/// A Record measured on a GPU: `bench --engine torch --device cuda --nproc 1 --parallel ddp
/// --model gpt2-small --batch 4 --seq 256` on one NVIDIA H100 (scripts/gpu_check.sh step 7).
fn cuda_ddp_record() -> Record {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/cuda-ddp-record.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[test]
fn a_cuda_ddp_run_s_peak_is_set_against_the_nearer_predicted_peak() {
    use memscope::report::breakdown::breakdown_table;
    let r = cuda_ddp_record();
    // Its first two steps held DDP's first buckets (4,334,146,560 B allocated): the estimate's
    // second-step line (4,313,110,528 B), not the steady step's (3,815,351,296 B), is its match.
    let t = breakdown_table(&r);
    let peak = t.rows.last().unwrap();
    assert_eq!(peak[0], "CUDA allocated peak");
    assert!(
        peak[2].contains("DDP's second step, first buckets held"),
        "{peak:?}"
    );
    assert_eq!(peak[3], "-0.5%", "{peak:?}");
}
