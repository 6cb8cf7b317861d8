//! Step markers and extra values in the child's output lines. `--step-pattern` closes a step on each
//! match (its `step` group, else its first group, else a count of matches); `--value-pattern` named
//! groups become extra series, with the unit written in the group name (`allocated_mb` → MB).

use crate::input::series_fields::split_unit;
use crate::record::watch::ValuePoint;
use crate::units::Unit;
use regex::Regex;

/// Recognises `step 12`, `Step 12:`, `iter 12`, `iteration 12`, `it 12/500`.
pub const DEFAULT_STEP_PATTERN: &str = r"(?i)\b(?:step|iter(?:ation)?|it)\s*[:#=]?\s*(?P<step>\d+)";

/// The compiled patterns.
#[derive(Clone, Debug)]
pub struct Patterns {
    step: Regex,
    values: Vec<(Regex, Vec<(String, String, Option<Unit>)>)>,
}

impl Patterns {
    /// Compiles the patterns; errors name the flag.
    pub fn new(step: Option<&str>, values: &[String]) -> anyhow::Result<Patterns> {
        let step = Regex::new(step.unwrap_or(DEFAULT_STEP_PATTERN))
            .map_err(|e| anyhow::anyhow!("--step-pattern: invalid regex: {e}"))?;
        let mut vs = Vec::new();
        for v in values {
            let re = Regex::new(v)
                .map_err(|e| anyhow::anyhow!("--value-pattern {v}: invalid regex: {e}"))?;
            let names: Vec<(String, String, Option<Unit>)> = re
                .capture_names()
                .flatten()
                .map(|n| {
                    let (base, unit) = split_unit(n);
                    (n.to_string(), base, unit)
                })
                .collect();
            anyhow::ensure!(
                !names.is_empty(),
                "--value-pattern {v}: needs a named group, e.g. 'allocated=(?P<allocated_mb>[\\d.]+)'"
            );
            vs.push((re, names));
        }
        Ok(Patterns { step, values: vs })
    }

    /// The series names the value patterns define (their groups without the unit suffix).
    pub fn value_names(&self) -> Vec<&str> {
        self.values
            .iter()
            .flat_map(|(_, names)| names.iter().map(|n| n.1.as_str()))
            .collect()
    }

    /// The step this line closes, if it is a marker. `count` is the number of markers so far (used
    /// when the pattern captures no number).
    pub fn step_of(&self, line: &str, count: u64) -> Option<u64> {
        let c = self.step.captures(line)?;
        let g = c.name("step").or_else(|| c.get(1));
        match g {
            Some(m) => m.as_str().parse().ok(),
            None => Some(count + 1),
        }
    }

    /// The values printed on this line.
    pub fn values_of(&self, line: &str, step: Option<u64>, time_s: f64) -> Vec<ValuePoint> {
        let mut out = Vec::new();
        for (re, names) in &self.values {
            let Some(c) = re.captures(line) else { continue };
            for (group, base, unit) in names {
                let Some(m) = c.name(group) else { continue };
                let Ok(v) = m.as_str().replace(',', "").parse::<f64>() else {
                    continue;
                };
                if !v.is_finite() {
                    continue;
                }
                out.push(ValuePoint {
                    name: base.clone(),
                    value: unit.map_or(v, |u| v * u.factor()),
                    unit: unit.map(|u| u.name().to_string()),
                    step,
                    time_s,
                });
            }
        }
        out
    }
}

/// What the output has said so far, shared by the two output readers and the sampler.
#[derive(Debug, Default)]
pub struct StepLog {
    /// The last step closed.
    pub current: Option<u64>,
    /// Markers seen.
    pub count: u64,
    /// (step, seconds since start) per marker.
    pub markers: Vec<(u64, f64)>,
    pub values: Vec<ValuePoint>,
}

impl StepLog {
    /// Reads one output line; true when it closed a step.
    pub fn line(&mut self, p: &Patterns, line: &str, time_s: f64) -> bool {
        let closed = p.step_of(line, self.count);
        if let Some(s) = closed {
            self.count += 1;
            self.current = Some(s);
            self.markers.push((s, time_s));
        }
        let v = p.values_of(line, self.current, time_s);
        self.values.extend(v);
        closed.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_pattern_reads_the_usual_markers() {
        let p = Patterns::new(None, &[]).unwrap();
        assert_eq!(p.step_of("step 12", 0), Some(12));
        assert_eq!(p.step_of("Step 12: loss 3.1", 0), Some(12));
        assert_eq!(p.step_of("iter 7 loss", 0), Some(7));
        assert_eq!(p.step_of(" 40%|███ | it 12/500 [00:01]", 0), Some(12));
        assert_eq!(p.step_of("loading weights", 0), None);
        assert_eq!(p.step_of("stepping up", 0), None);
    }

    #[test]
    fn value_groups_carry_their_unit() {
        let p = Patterns::new(None, &["allocated=(?P<allocated_mb>[\\d.]+)".into()]).unwrap();
        let v = p.values_of("step 3 allocated=2.5", Some(3), 1.0);
        assert_eq!(v.len(), 1);
        assert_eq!(v[0].name, "allocated");
        assert_eq!(v[0].value, 2.5e6);
        assert!(Patterns::new(None, &["x=(\\d+)".into()]).is_err());
    }
}
