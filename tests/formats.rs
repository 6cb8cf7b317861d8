//! Every kind of file memscope writes, read back through its type in `memscope::record` and
//! written again by that type's writer: byte for byte the file the binary wrote. The fixtures in
//! tests/fixtures/formats/ were written by the release binary (tiny-gpt2 and tiny-llama runs, a
//! watched Python child), so a field lost, renamed, reordered or re-typed by a change to a record
//! type fails here.

use memscope::record::detect::{parse, Input};
use memscope::record::optimize::OptimizeFile;
use std::path::PathBuf;

fn text(name: &str) -> String {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/formats")
        .join(name);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn input(name: &str) -> (String, Input) {
    let t = text(name);
    let i = parse(name, &t).unwrap_or_else(|e| panic!("{name}: {e:#}"));
    (t, i)
}

#[test]
fn run_records_round_trip_byte_for_byte() {
    for name in ["record-bench.json", "record-leak.json"] {
        let (t, i) = input(name);
        let Input::Record(r) = i else {
            panic!("{name}: read as {}", i.kind())
        };
        assert_eq!(r.to_json().unwrap(), t, "{name}");
    }
}

#[test]
fn sweep_rows_round_trip_byte_for_byte() {
    let (t, i) = input("sweep.jsonl");
    let Input::Sweep(rows) = i else {
        panic!("read as {}", i.kind())
    };
    assert_eq!(rows.len(), 2);
    let again: String = rows.iter().map(|r| r.to_jsonl_line().unwrap()).collect();
    assert_eq!(again, t);
}

#[test]
fn estimates_round_trip_byte_for_byte() {
    for name in ["estimate.json", "estimate-fits.json"] {
        let (t, i) = input(name);
        let Input::Estimate(e) = i else {
            panic!("{name}: read as {}", i.kind())
        };
        assert_eq!(e.to_json().unwrap(), t, "{name}");
    }
}

#[test]
fn roofline_round_trips_byte_for_byte() {
    let (t, i) = input("roofline.json");
    let Input::Roofline(r) = i else {
        panic!("read as {}", i.kind())
    };
    assert_eq!(r.to_json().unwrap(), t);
}

#[test]
fn watch_file_round_trips_byte_for_byte() {
    let (t, i) = input("watch.json");
    let Input::Watch(w) = i else {
        panic!("read as {}", i.kind())
    };
    assert_eq!(w.to_json().unwrap(), t);
}

#[test]
fn leak_report_round_trips_byte_for_byte() {
    let (t, i) = input("leak-report.json");
    let Input::Leak(r) = i else {
        panic!("read as {}", i.kind())
    };
    assert_eq!(memscope::report::leak::to_json(&r, &[]), t);
}

/// Files written before the leak report gained its horizon and approach fields still read.
#[test]
fn older_leak_reports_and_watch_files_still_read() {
    for name in ["leak-report-older.json", "watch-older.json"] {
        let (_, i) = input(name);
        assert!(
            matches!(i, Input::Leak(_) | Input::Watch(_)),
            "{name}: {}",
            i.kind()
        );
    }
}

#[test]
fn optimize_file_round_trips_byte_for_byte() {
    let t = text("optimize.json");
    let o: OptimizeFile = serde_json::from_str(&t).unwrap();
    assert!(o.variants.len() >= 4, "{} variants", o.variants.len());
    assert_eq!(o.to_json().unwrap(), t);
}

/// The round trip can fail: a file with one field changed in type is refused, and one with a
/// field dropped writes back different bytes.
#[test]
fn a_changed_file_is_caught() {
    let t = text("roofline.json").replacen("\"batch\": 1", "\"batch\": \"one\"", 1);
    assert!(parse("bad.json", &t).is_err());
    let t = text("optimize.json");
    let mut o: OptimizeFile = serde_json::from_str(&t).unwrap();
    o.variants.pop();
    assert_ne!(o.to_json().unwrap(), t);
}
