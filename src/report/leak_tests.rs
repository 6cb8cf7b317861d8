//! Renderers: sentence first, units named, every parameter listed, CSV one row, JSON contract fields.

use super::*;
use crate::analysis::leak::analyze;
use crate::analysis::targets::{evaluate, Target, TargetKind};
use crate::record::leak::{LeakParams, MemorySeries};
const MIB: f64 = 1048576.0;
const GIB: f64 = 1073741824.0;

fn plateau() -> LeakReport {
    let steps: Vec<u64> = (1..=240).collect();
    let values = steps
        .iter()
        .map(|&s| {
            let t = s as f64;
            let floor = if t < 90.0 {
                5.2 * GIB + 12.2 * GIB * t / 90.0
            } else {
                17.4 * GIB
            };
            floor + 0.25 * GIB * ((s % 8) as f64 / 7.0)
        })
        .collect();
    let s = MemorySeries {
        steps,
        values,
        seconds: None,
        label: "heap live".into(),
        ..Default::default()
    };
    analyze(
        &s,
        &LeakParams {
            budget_bytes: Some(20.0 * GIB),
            ..Default::default()
        },
    )
}

fn rows(r: &LeakReport) -> Vec<TargetRow> {
    let t = [
        Target::parse(TargetKind::MaxGrowthPerStep, "1MiB").unwrap(),
        Target::parse(TargetKind::MaxPostWarmupRange, "500MB").unwrap(),
        Target::parse(TargetKind::MaxPeak, "2GB").unwrap(),
    ];
    evaluate(&t, r, None, None)
}

#[test]
fn text_states_the_sentence_first_then_numbers_and_parameters() {
    let r = plateau();
    let t = to_text(&r, &rows(&r));
    assert!(t.starts_with("No leak: heap live grew "), "{t}");
    assert_eq!(t.lines().next().unwrap(), r.sentence);
    for needle in [
        "Verdict",
        "plateau (heap live)",
        "Warm-up end",
        "Level after warm-up",
        "GiB",
        "/step",
        "per 1,000 steps",
        "99% CI",
        "+10,000 steps",
        "Growth per hour",
        "unknown (no timestamps; pass --steps-per-hour)",
        "Until the budget",
        "Smallest detectable leak",
        "Parameters",
        "confidence 0.99",
        "halves confidence 0.95",
        "min points after warm-up 12",
        "| Metric | Target | Achieved | Status |",
        "| Peak memory | ≤ 2GB | unknown (peak memory not measured) | FAIL |",
    ] {
        assert!(t.contains(needle), "missing {needle:?} in\n{t}");
    }
    assert!(!t.contains("NaN"));
}

#[test]
fn markdown_has_bold_sentence_and_targets_table() {
    let r = plateau();
    let m = to_markdown(&r, &rows(&r));
    assert!(m.starts_with("**No leak: "), "{m}");
    assert!(m.contains("| Quantity | Value |"));
    assert!(m.contains("| Metric | Target | Achieved | Status |\n|---|---|---|---|\n"));
    assert!(m.contains("| Range after warm-up | ≤ 500MB |"), "{m}");
}

#[test]
fn csv_is_one_row_with_units_in_column_names() {
    let r = plateau();
    let c = to_csv(&r, &rows(&r)).unwrap();
    let mut rdr = ::csv::Reader::from_reader(c.as_bytes());
    let header = rdr.headers().unwrap().clone();
    let recs: Vec<::csv::StringRecord> = rdr.records().map(|r| r.unwrap()).collect();
    assert_eq!(recs.len(), 1);
    assert_eq!(recs[0].len(), header.len());
    let get = |name: &str| recs[0][header.iter().position(|h| h == name).unwrap()].to_string();
    assert_eq!(get("verdict"), "plateau");
    assert_eq!(get("sentence"), r.sentence);
    assert_eq!(get("targets"), "fail");
    assert!(get("slope_ci_low_bytes_per_step").parse::<f64>().is_ok());
    assert!(header.iter().any(|h| h == "plateau_max_bytes"));
    assert!(header
        .iter()
        .filter(|h| h.contains("slope"))
        .all(|h| h.ends_with("_per_step")));
}

#[test]
fn json_has_the_contract_fields() {
    let r = plateau();
    let j: serde_json::Value = serde_json::from_str(&to_json(&r, &rows(&r))).unwrap();
    assert_eq!(j["verdict"], "plateau");
    assert!(j["warmup_end_step"].is_u64());
    assert!(j["slope_bytes_per_step"].is_f64());
    assert_eq!(j["slope_ci_bytes_per_step"].as_array().unwrap().len(), 2);
    assert!(j["plateau_min_bytes"].is_f64() && j["plateau_max_bytes"].is_f64());
    assert!(j["min_detectable_bytes_per_step"].is_f64());
    assert_eq!(j["targets"].as_array().unwrap().len(), 3);
    assert_eq!(j["params"]["confidence"], 0.99);
    let no_targets: serde_json::Value = serde_json::from_str(&to_json(&r, &[])).unwrap();
    assert!(no_targets.get("targets").is_none());
}

#[test]
fn empty_series_renders_without_nan() {
    let r = analyze(&MemorySeries::default(), &LeakParams::default());
    for out in [
        to_text(&r, &[]),
        to_markdown(&r, &[]),
        to_csv(&r, &[]).unwrap(),
        to_json(&r, &[]),
    ] {
        assert!(!out.contains("NaN") && !out.contains("inf "), "{out}");
        assert!(out.contains("nconclusive"), "{out}");
    }
    assert!(to_text(&r, &[]).starts_with("Inconclusive: there are no samples."));
}

#[test]
fn leak_text_shows_rates_in_binary_units() {
    let steps: Vec<u64> = (0..300).collect();
    let values = steps
        .iter()
        .map(|&s| GIB + MIB * s as f64 + if s % 3 == 0 { 2.0 * MIB } else { 0.0 })
        .collect();
    let r = analyze(
        &MemorySeries {
            steps,
            values,
            seconds: None,
            label: "RSS".into(),
            ..Default::default()
        },
        &LeakParams {
            steps_per_hour: Some(3600.0),
            ..Default::default()
        },
    );
    let t = to_text(&r, &[]);
    assert!(t.starts_with("Leak: RSS keeps growing by "), "{t}");
    assert!(t.contains("GiB/h (at 3600 steps/h)"), "{t}");
}

/// docs/design.md: analysis and report never import candle.
#[test]
fn analysis_and_report_do_not_import_candle() {
    let sources = [
        include_str!("leak.rs"),
        include_str!("../analysis/leak.rs"),
        include_str!("../analysis/leak_text.rs"),
        include_str!("../analysis/trend.rs"),
        include_str!("../analysis/warmup.rs"),
        include_str!("../analysis/aggregate.rs"),
        include_str!("../units.rs"),
        include_str!("../analysis/targets.rs"),
    ];
    let needle = ["candle", "_core"].concat();
    let needle2 = ["use ", "candle"].concat();
    for s in sources {
        assert!(!s.contains(&needle) && !s.contains(&needle2));
    }
}

#[test]
fn json_round_trips() {
    let r = plateau();
    let back: LeakReport = serde_json::from_str(&to_json(&r, &[])).unwrap();
    assert_eq!(back, r);
}
