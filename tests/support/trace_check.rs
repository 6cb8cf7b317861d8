//! The Trace Event Format checks shared by tests/trace.rs, tests/watch.rs and tests/sweep.rs
//! (included with `#[path]`): every event has name, ph, pid, tid; X events ts and dur ≥ 0; C events
//! ts ≥ 0 and non-empty numeric args; M events args.name; X events on one thread never overlap.

use serde_json::Value;

/// Validates the required fields; returns the events.
pub fn validate(doc: &Value) -> Vec<Value> {
    assert_eq!(doc["displayTimeUnit"], "ms");
    let ev = doc["traceEvents"]
        .as_array()
        .expect("traceEvents array")
        .clone();
    assert!(!ev.is_empty());
    for e in &ev {
        assert!(e["name"].is_string(), "no name: {e}");
        assert!(e["pid"].is_u64() && e["tid"].is_u64(), "pid/tid: {e}");
        match e["ph"].as_str().expect("ph") {
            "X" => {
                assert!(e["ts"].as_f64().unwrap() >= 0.0, "{e}");
                assert!(e["dur"].as_f64().unwrap() >= 0.0, "{e}");
            }
            "C" => {
                assert!(e["ts"].as_f64().unwrap() >= 0.0, "{e}");
                let args = e["args"].as_object().expect("counter args");
                assert!(
                    !args.is_empty() && args.values().all(|v| v.is_number()),
                    "{e}"
                );
            }
            "M" => assert!(e["args"]["name"].is_string(), "{e}"),
            other => panic!("unexpected ph {other}: {e}"),
        }
    }
    // Complete events on one thread never overlap (Perfetto nests or rejects overlaps).
    let tids: std::collections::BTreeSet<u64> = ev
        .iter()
        .filter(|e| e["ph"] == "X")
        .map(|e| e["tid"].as_u64().unwrap())
        .collect();
    for tid in tids {
        let mut spans: Vec<(f64, f64)> = ev
            .iter()
            .filter(|e| e["ph"] == "X" && e["tid"] == tid)
            .map(|e| (e["ts"].as_f64().unwrap(), e["dur"].as_f64().unwrap()))
            .collect();
        spans.sort_by(|a, b| a.0.total_cmp(&b.0));
        for w in spans.windows(2) {
            assert!(
                w[0].0 + w[0].1 <= w[1].0 + 1e-3,
                "overlap on tid {tid}: {w:?}"
            );
        }
    }
    ev
}

/// The names of the events of one phase type, in file order.
#[allow(dead_code)]
pub fn names(ev: &[Value], ph: &str) -> Vec<String> {
    ev.iter()
        .filter(|e| e["ph"] == ph)
        .map(|e| e["name"].as_str().unwrap().to_string())
        .collect()
}
