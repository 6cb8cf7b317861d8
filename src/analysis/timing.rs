//! Raw per-phase samples → the Record's timing statistics and the noise warnings that go with
//! them. Inputs are milliseconds, one per measured step.

use crate::analysis::stats::{noise_warnings, summarize};
use crate::record::{PhaseTiming, Throughput};
use std::collections::BTreeMap;

/// Summarises each phase; phases without samples are left out. Warnings name the phase.
pub fn phase_timings(
    samples: &[(String, Vec<f64>)],
) -> (BTreeMap<String, PhaseTiming>, Vec<String>) {
    let mut out = BTreeMap::new();
    let mut warnings = Vec::new();
    for (name, xs) in samples {
        let Ok(s) = summarize(xs) else {
            continue;
        };
        warnings.extend(noise_warnings(xs, &s, name));
        out.insert(
            name.clone(),
            PhaseTiming {
                samples_ms: xs.clone(),
                n: s.n,
                mean_ms: s.mean,
                std_ms: s.std,
                cv_pct: s.cv_pct,
                median_ms: s.median,
                min_ms: s.min,
                max_ms: s.max,
                p90_ms: s.p90,
                p99_ms: s.p99,
                mad_ms: s.mad,
                outliers: s.outliers,
            },
        );
    }
    (out, warnings)
}

/// Throughput over the median step: `tokens` and `sequences` processed by one step. The step
/// time is the `step` phase (train), `forward` (infer), or prefill + decode (generate).
pub fn throughput(
    timing: &BTreeMap<String, PhaseTiming>,
    tokens: u64,
    sequences: u64,
    decoded_per_seq: u64,
) -> Throughput {
    let median = |k: &str| timing.get(k).map(|t| t.median_ms);
    let step_ms = median("step").or_else(|| median("forward")).or_else(|| {
        let prefill = median("prefill")?;
        let decode = median("decode")?;
        Some(prefill + decode * decoded_per_seq as f64)
    });
    let per_s = |count: u64| {
        step_ms
            .filter(|ms| *ms > 0.0)
            .map(|ms| count as f64 * 1e3 / ms)
    };
    Throughput {
        tokens_per_s: per_s(tokens),
        samples_per_s: per_s(sequences),
        decode_tokens_per_s: median("decode")
            .filter(|ms| *ms > 0.0)
            .map(|ms| sequences as f64 * 1e3 / ms),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summarises_each_phase_and_skips_empty_ones() {
        let samples = vec![
            ("step".to_string(), vec![10.0, 12.0, 11.0]),
            ("forward".to_string(), vec![]),
        ];
        let (t, _) = phase_timings(&samples);
        assert_eq!(t.len(), 1);
        let s = &t["step"];
        assert_eq!(s.median_ms, 11.0);
        assert_eq!(s.mean_ms, 11.0);
        assert_eq!(s.std_ms, Some(1.0));
        assert_eq!(s.samples_ms, vec![10.0, 12.0, 11.0]);
    }

    #[test]
    fn throughput_uses_the_median_step() {
        let (t, _) = phase_timings(&[("step".to_string(), vec![100.0, 200.0, 300.0])]);
        let tp = throughput(&t, 1000, 4, 0);
        assert_eq!(tp.tokens_per_s, Some(5000.0));
        assert_eq!(tp.samples_per_s, Some(20.0));
        assert_eq!(tp.decode_tokens_per_s, None);
    }

    #[test]
    fn generate_throughput_counts_prefill_and_decode() {
        let (t, _) = phase_timings(&[
            ("prefill".to_string(), vec![50.0]),
            ("decode".to_string(), vec![10.0]),
        ]);
        // one step = 50 + 10 × 5 = 100 ms for 2 sequences of (8 prompt + 5 new) tokens
        let tp = throughput(&t, 26, 2, 5);
        assert_eq!(tp.tokens_per_s, Some(260.0));
        assert_eq!(tp.decode_tokens_per_s, Some(200.0));
    }
}
