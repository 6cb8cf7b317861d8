//! CI targets for `memscope leak` / `memscope analyze`: `--max-growth 10MB/h`,
//! `--max-growth-per-step 1MiB`, `--max-post-warmup-range 500MB`, `--max-load 1GB`, `--max-peak 2GB`.
//!
//! Invariants: a limit is finite and ≥ 0; a target whose achieved value is unknown FAILS (CI is never
//! fooled by a missing number), and so does a growth target when the leak verdict is inconclusive
//! (a run too short or too noisy to tell says nothing about the growth rate).

use crate::record::leak::TargetRow;
use serde::Serialize;

use crate::record::leak::{LeakReport, Verdict};
use crate::units::{fmt_bytes, parse_size, UNIT_NAMES};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum TargetKind {
    /// Growth per hour after warm-up (bytes/hour).
    MaxGrowthPerHour,
    /// Growth per step after warm-up (bytes/step).
    MaxGrowthPerStep,
    /// Post-warm-up range max − min (bytes).
    MaxPostWarmupRange,
    /// Memory after loading the model (bytes).
    MaxLoad,
    /// Peak memory (bytes).
    MaxPeak,
}

impl TargetKind {
    /// The command-line flag that sets this target.
    pub fn flag(self) -> &'static str {
        match self {
            TargetKind::MaxGrowthPerHour => "--max-growth",
            TargetKind::MaxGrowthPerStep => "--max-growth-per-step",
            TargetKind::MaxPostWarmupRange => "--max-post-warmup-range",
            TargetKind::MaxLoad => "--max-load",
            TargetKind::MaxPeak => "--max-peak",
        }
    }

    /// The metric's name in the table.
    pub fn metric(self) -> &'static str {
        match self {
            TargetKind::MaxGrowthPerHour => "Growth per hour after warm-up",
            TargetKind::MaxGrowthPerStep => "Growth per step after warm-up",
            TargetKind::MaxPostWarmupRange => "Range after warm-up",
            TargetKind::MaxLoad => "Load memory",
            TargetKind::MaxPeak => "Peak memory",
        }
    }
}

/// A limit on one metric. `limit_bytes` is bytes, bytes per hour or bytes per step per `kind`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Target {
    pub kind: TargetKind,
    pub limit_bytes: f64,
    /// The limit as the user wrote it (shown in the table).
    pub text: String,
}

/// The time base of a rate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Per {
    None,
    Hour,
    Step,
}

/// Parses a size with an optional rate suffix: `10MB/h`, `10 MB/hour`, `1MiB/step`, `1MiB`.
pub fn parse_rate(s: &str) -> Result<(f64, Per), String> {
    let t = s.trim();
    let (size, per) = match t.rsplit_once('/') {
        None => (t, Per::None),
        Some((size, suffix)) => {
            let per = match suffix.trim().to_ascii_lowercase().as_str() {
                "h" | "hr" | "hour" => Per::Hour,
                "step" | "it" | "iter" => Per::Step,
                other => {
                    return Err(format!("invalid rate '{s}': unknown time base '/{other}'; use /h or /step (e.g. 10MB/h, 1MiB/step)"))
                }
            };
            (size, per)
        }
    };
    Ok((
        parse_size(size).map_err(|e| format!("{e}; rates are written like 10MB/h or 1MiB/step"))?,
        per,
    ))
}

impl Target {
    /// Parses the value of `kind`'s flag. A growth limit may be per hour or per step whichever flag
    /// was used (`--max-growth 1MiB/step` is a per-step target); sizes take no rate.
    pub fn parse(kind: TargetKind, value: &str) -> Result<Target, String> {
        let flag = kind.flag();
        let (limit, per) = parse_rate(value).map_err(|e| format!("{flag}: {e}"))?;
        let kind = match (kind, per) {
            (TargetKind::MaxGrowthPerHour | TargetKind::MaxGrowthPerStep, Per::Hour) => TargetKind::MaxGrowthPerHour,
            (TargetKind::MaxGrowthPerHour | TargetKind::MaxGrowthPerStep, Per::Step) => TargetKind::MaxGrowthPerStep,
            (TargetKind::MaxGrowthPerHour, Per::None) => {
                return Err(format!("{flag} {value}: a growth limit needs a time base, e.g. 10MB/h (or 1MiB/step)"))
            }
            (TargetKind::MaxGrowthPerStep, Per::None) => TargetKind::MaxGrowthPerStep,
            (k, Per::None) => k,
            (_, _) => {
                return Err(format!(
                    "{flag} {value}: this limit is a size, not a rate; write e.g. 500MB (units: {UNIT_NAMES})"
                ))
            }
        };
        Ok(Target {
            kind,
            limit_bytes: limit,
            text: value.trim().to_string(),
        })
    }
}

/// Evaluates each target against the report (and the load / peak memory, when measured).
pub fn evaluate(
    targets: &[Target],
    report: &LeakReport,
    load_bytes: Option<f64>,
    peak_bytes: Option<f64>,
) -> Vec<TargetRow> {
    targets
        .iter()
        .map(|t| evaluate_one(t, report, load_bytes, peak_bytes))
        .collect()
}

/// True when every row passes (an empty table passes).
pub fn all_pass(rows: &[TargetRow]) -> bool {
    rows.iter().all(|r| r.pass)
}

fn evaluate_one(t: &Target, r: &LeakReport, load: Option<f64>, peak: Option<f64>) -> TargetRow {
    let finite = |v: Option<f64>| v.filter(|x| x.is_finite());
    let (value, unit, why_unknown) = match t.kind {
        TargetKind::MaxGrowthPerHour => (
            finite(r.growth_bytes_per_hour),
            "/h",
            if r.slope_bytes_per_step.is_none() {
                "no slope (see the verdict)"
            } else {
                "no timestamps; pass --steps-per-hour"
            },
        ),
        TargetKind::MaxGrowthPerStep => (
            finite(r.slope_bytes_per_step),
            "/step",
            "no slope (see the verdict)",
        ),
        TargetKind::MaxPostWarmupRange => (
            finite(r.plateau_max_bytes)
                .zip(finite(r.plateau_min_bytes))
                .map(|(hi, lo)| hi - lo),
            "",
            "no samples after warm-up",
        ),
        TargetKind::MaxLoad => (finite(load), "", "load memory not measured"),
        TargetKind::MaxPeak => (finite(peak), "", "peak memory not measured"),
    };
    let growth = matches!(
        t.kind,
        TargetKind::MaxGrowthPerHour | TargetKind::MaxGrowthPerStep
    );
    let target = format!("≤ {}", t.text);
    let (achieved, pass) = match value {
        None => (format!("unknown ({why_unknown})"), false),
        Some(v) if growth && r.verdict == Verdict::Inconclusive => (
            format!("{}{unit} (verdict inconclusive: run longer)", fmt_bytes(v)),
            false,
        ),
        Some(v) => (format!("{}{unit}", fmt_bytes(v)), v <= t.limit_bytes),
    };
    TargetRow {
        metric: t.kind.metric().to_string(),
        target,
        achieved,
        pass,
        limit: t.limit_bytes,
        value,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::leak::analyze;
    use crate::record::leak::{LeakParams, MemorySeries};
    const MIB: f64 = 1048576.0;

    #[test]
    fn parses_flag_values() {
        assert_eq!(parse_size("500MB").unwrap(), 500e6);
        assert_eq!(parse_size("1.5GiB").unwrap(), 1.5 * 1073741824.0);
        assert_eq!(parse_rate("10MB/h").unwrap(), (10e6, Per::Hour));
        assert_eq!(parse_rate("10 MB/hour").unwrap(), (10e6, Per::Hour));
        assert_eq!(parse_rate("1MiB/step").unwrap(), (MIB, Per::Step));
        assert_eq!(parse_rate("1MiB").unwrap(), (MIB, Per::None));
        let t = Target::parse(TargetKind::MaxGrowthPerHour, "10MB/h").unwrap();
        assert_eq!(
            (t.kind, t.limit_bytes, t.text.as_str()),
            (TargetKind::MaxGrowthPerHour, 10e6, "10MB/h")
        );
        let t = Target::parse(TargetKind::MaxGrowthPerStep, "1MiB").unwrap();
        assert_eq!((t.kind, t.limit_bytes), (TargetKind::MaxGrowthPerStep, MIB));
        let t = Target::parse(TargetKind::MaxGrowthPerHour, "1MiB/step").unwrap();
        assert_eq!(t.kind, TargetKind::MaxGrowthPerStep);
        assert_eq!(
            Target::parse(TargetKind::MaxPeak, "2GB")
                .unwrap()
                .limit_bytes,
            2e9
        );
    }

    #[test]
    fn parse_errors_say_what_is_valid() {
        let e = Target::parse(TargetKind::MaxGrowthPerHour, "10MB").unwrap_err();
        assert!(e.contains("--max-growth") && e.contains("10MB/h"), "{e}");
        let e = Target::parse(TargetKind::MaxLoad, "1GB/h").unwrap_err();
        assert!(e.contains("--max-load") && e.contains("500MB"), "{e}");
        let e = parse_rate("10MB/day").unwrap_err();
        assert!(e.contains("/h or /step"), "{e}");
        for bad in ["", "ten MB", "NaN", "inf", "-1GB", "1e400", "5 XB"] {
            let e = parse_size(bad).unwrap_err();
            assert!(
                e.contains("KiB")
                    || e.contains("finite")
                    || e.contains("negative")
                    || e.contains("large"),
                "{bad}: {e}"
            );
        }
    }

    fn leak_report(steps_per_hour: Option<f64>) -> LeakReport {
        let steps: Vec<u64> = (0..300).collect();
        let values = steps
            .iter()
            .map(|&s| 1e9 + MIB * s as f64 + if s % 2 == 0 { 1e5 } else { 0.0 })
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
                steps_per_hour,
                ..Default::default()
            },
        )
    }

    #[test]
    fn evaluates_and_unknown_fails() {
        let r = leak_report(None);
        assert_eq!(r.verdict, Verdict::Leak);
        let targets = vec![
            Target::parse(TargetKind::MaxGrowthPerStep, "2MiB").unwrap(),
            Target::parse(TargetKind::MaxGrowthPerStep, "512KiB").unwrap(),
            Target::parse(TargetKind::MaxGrowthPerHour, "10MB/h").unwrap(),
            Target::parse(TargetKind::MaxPostWarmupRange, "500MB").unwrap(),
            Target::parse(TargetKind::MaxLoad, "1GB").unwrap(),
            Target::parse(TargetKind::MaxPeak, "2GB").unwrap(),
        ];
        let rows = evaluate(&targets, &r, Some(0.5e9), None);
        let pass: Vec<bool> = rows.iter().map(|r| r.pass).collect();
        // 1 MiB/step ≤ 2 MiB pass; > 512 KiB fail; per hour unknown (no timestamps) fail;
        // range ~150 MiB ≤ 500 MB pass; load 0.5 GB pass; peak unknown fail.
        assert_eq!(pass, vec![true, false, false, true, true, false]);
        assert!(
            rows[2].achieved.starts_with("unknown (no timestamps"),
            "{}",
            rows[2].achieved
        );
        assert!(rows[5].achieved.starts_with("unknown"));
        assert_eq!(rows[0].target, "≤ 2MiB");
        assert!(!all_pass(&rows));
        assert!(all_pass(&rows[..1]));
        // With a rate: 3600 steps/h x 1 MiB = 3.5 GiB/h > 10 MB/h.
        let rows = evaluate(&targets[2..3], &leak_report(Some(3600.0)), None, None);
        assert!(!rows[0].pass && rows[0].value.unwrap() > 3e9);
    }

    #[test]
    fn inconclusive_growth_fails() {
        let s = MemorySeries {
            steps: (0..5).collect(),
            values: vec![1e9; 5],
            seconds: None,
            label: String::new(),
            ..Default::default()
        };
        let r = analyze(&s, &LeakParams::default());
        assert_eq!(r.verdict, Verdict::Inconclusive);
        let rows = evaluate(
            &[Target::parse(TargetKind::MaxGrowthPerStep, "1GiB").unwrap()],
            &r,
            None,
            None,
        );
        assert!(!rows[0].pass);
    }
}
