//! From samples to what the analysis reads: the judged series (per step when the output had step
//! markers, else per sample with its time) and the peaks per process and summed.

use crate::record::leak::MemorySeries;
use crate::record::watch::Peak;
use crate::record::watch::{Totals, TreeSample};
use crate::watch::steps::StepLog;
use std::collections::BTreeMap;

/// What the verdict judges (`--judge`).
#[derive(Clone, Debug, PartialEq)]
pub enum Judge {
    Rss,
    Pss,
    Uss,
    Gpu,
    /// A `--value-pattern` group (its name without the unit suffix).
    Value(String),
}

impl Judge {
    pub fn parse(s: &str) -> Judge {
        match s.to_ascii_lowercase().as_str() {
            "rss" => Judge::Rss,
            "pss" => Judge::Pss,
            "uss" => Judge::Uss,
            "gpu" => Judge::Gpu,
            _ => Judge::Value(crate::input::series_fields::split_unit(s).0),
        }
    }

    fn of(&self, s: &TreeSample) -> Option<f64> {
        let t: &Totals = &s.total;
        match self {
            Judge::Rss => Some(t.rss_bytes as f64),
            Judge::Pss => Some(t.pss_bytes as f64),
            Judge::Uss => Some(t.uss_bytes as f64),
            Judge::Gpu => s
                .gpu
                .as_ref()
                .map(|g| g.process_bytes.unwrap_or(g.device_used_bytes) as f64),
            Judge::Value(_) => None,
        }
    }

    pub fn label(&self) -> String {
        match self {
            Judge::Rss => "summed RSS".into(),
            Judge::Pss => "summed PSS".into(),
            Judge::Uss => "summed USS".into(),
            Judge::Gpu => "GPU memory".into(),
            Judge::Value(n) => n.clone(),
        }
    }
}

/// The judged series, and a note on how it was built. Errors name the flag that fixes them.
pub fn judged(
    samples: &[TreeSample],
    log: &StepLog,
    judge: &Judge,
) -> Result<(MemorySeries, String), String> {
    if let Judge::Value(name) = judge {
        let pts: Vec<_> = log.values.iter().filter(|v| &v.name == name).collect();
        if pts.is_empty() {
            let names: std::collections::BTreeSet<&str> =
                log.values.iter().map(|v| v.name.as_str()).collect();
            return Err(format!(
                "--judge {name}: no such series; use rss, pss, uss, gpu or a --value-pattern group that matched ({})",
                if names.is_empty() { "none matched".to_string() } else { names.into_iter().collect::<Vec<_>>().join(", ") }
            ));
        }
        let mut s = MemorySeries {
            steps: vec![],
            values: vec![],
            seconds: Some(vec![]),
            label: name.clone(),
            unit: None,
            relative: false,
        };
        for (i, p) in pts.iter().enumerate() {
            let step = p.step.unwrap_or(i as u64);
            if s.steps.last().is_some_and(|l| *l >= step) {
                continue;
            }
            s.steps.push(step);
            s.values.push(p.value);
            s.seconds.as_mut().map(|v| v.push(p.time_s));
        }
        let unit = pts[0]
            .unit
            .clone()
            .map_or("as printed".into(), |u| format!("{u}, converted to bytes"));
        return Ok((
            s,
            format!("{name} from the output ({unit}), one value per line"),
        ));
    }
    if *judge == Judge::Gpu && samples.iter().all(|s| s.gpu.is_none()) {
        return Err(
            "--judge gpu: GPU memory is unavailable in this run; use rss, pss or uss".into(),
        );
    }
    let label = judge.label();
    let mut s = MemorySeries {
        steps: vec![],
        values: vec![],
        seconds: Some(vec![]),
        label: label.clone(),
        unit: None,
        relative: false,
    };
    let per_step = !log.markers.is_empty();
    let mut skipped = 0;
    for (i, x) in samples.iter().enumerate() {
        let Some(v) = judge.of(x) else { continue };
        let step = if per_step {
            match x.step {
                Some(st) => st,
                None => continue, // before the first marker
            }
        } else {
            i as u64
        };
        if s.steps.last().is_some_and(|l| *l >= step) {
            if per_step && s.steps.last() != Some(&step) {
                skipped += 1;
            }
            continue; // one sample per step: the first taken after its marker
        }
        s.steps.push(step);
        s.values.push(v);
        s.seconds.as_mut().map(|t| t.push(x.time_s));
    }
    let mut note = if per_step {
        format!(
            "{label} per step: the first sample after each step marker ({} steps with a sample)",
            s.steps.len()
        )
    } else {
        format!("{label} per sample (no step markers in the output: the analysis runs on time)")
    };
    if skipped > 0 {
        note += &format!("; {skipped} samples after a step number went backwards were left out");
    }
    Ok((s, note))
}

/// The summed peak (by RSS) first, then each process's, by pid.
pub fn peaks(samples: &[TreeSample]) -> (Option<Peak>, Vec<Peak>) {
    let mut total: Option<Peak> = None;
    let mut per: BTreeMap<u32, Peak> = BTreeMap::new();
    for s in samples {
        if total
            .as_ref()
            .is_none_or(|p| s.total.rss_bytes > p.rss_bytes)
        {
            total = Some(Peak {
                pid: None,
                command: "all processes".into(),
                rss_bytes: s.total.rss_bytes,
                pss_bytes: s.total.pss_bytes,
                time_s: s.time_s,
                step: s.step,
            });
        }
        for p in &s.processes {
            let e = per.entry(p.pid).or_insert_with(|| Peak {
                pid: Some(p.pid),
                command: p.command.clone(),
                rss_bytes: 0,
                pss_bytes: 0,
                time_s: s.time_s,
                step: s.step,
            });
            if p.rss_bytes > e.rss_bytes {
                *e = Peak {
                    pid: Some(p.pid),
                    command: p.command.clone(),
                    rss_bytes: p.rss_bytes,
                    pss_bytes: p.pss_bytes,
                    time_s: s.time_s,
                    step: s.step,
                };
            }
        }
    }
    (total, per.into_values().collect())
}
