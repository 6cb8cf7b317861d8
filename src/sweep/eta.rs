//! How long a planned sweep will take, said before it starts: each configuration's matmul FLOPs
//! (the estimator's count) over half of this machine's measured f32 matmul peak (`memscope peaks`;
//! the engine reaches about half on a transformer step), times its warm-up and measured steps,
//! plus one second per worker for process start and model build. Up to [`SAMPLED`] configurations
//! are estimated (evenly spaced in plan order) and the rest extrapolated from them.

use crate::spec::Spec;
use crate::sweep::plan::Point;
use std::time::Duration;

/// Configurations estimated one by one; beyond this the mean of an even sample is used.
pub const SAMPLED: usize = 64;
/// The fraction of the matmul peak a step is assumed to reach.
const EFFICIENCY: f64 = 0.5;
/// Seconds per worker for process start, model build and the Record.
const PER_WORKER_S: f64 = 1.0;

/// The estimated wall time, or `None` when this machine's peaks are not cached.
pub fn estimate(
    points: &[Point],
    spec_of: &dyn Fn(&Point) -> anyhow::Result<Spec>,
) -> Option<Duration> {
    let first = spec_of(points.first()?).ok()?;
    let peak = crate::measure::peaks::cached(first.threads)?
        .matmul_gflops
        .get("f32")
        .copied()
        .filter(|g| *g > 0.0)?;
    let stride = points.len().div_ceil(SAMPLED).max(1);
    let sample: Vec<f64> = points
        .iter()
        .step_by(stride)
        .map(|p| spec_of(p).map_or(0.0, |spec| seconds(&spec, peak)))
        .collect();
    let mean = sample.iter().sum::<f64>() / sample.len() as f64;
    let total = mean * points.len() as f64;
    total.is_finite().then(|| Duration::from_secs_f64(total))
}

fn seconds(spec: &Spec, peak_gflops: f64) -> f64 {
    let steps = (spec.warmup + spec.steps) as f64;
    let flops = match spec.validate() {
        Ok(()) => crate::estimate::estimate(&crate::estimate::Request::for_spec(spec))
            .map_or(0.0, |e| e.flops.total as f64),
        Err(_) => 0.0, // an error row: no worker runs
    };
    PER_WORKER_S + steps * flops / (EFFICIENCY * peak_gflops * 1e9)
}

/// A wall time rounded for a person: "40 s", "12 min", "3.5 h", "2.1 days".
pub fn rough(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s < 90.0 {
        format!("{s:.0} s")
    } else if s < 5400.0 {
        format!("{:.0} min", s / 60.0)
    } else if s < 172_800.0 {
        format!("{:.1} h", s / 3600.0)
    } else {
        format!("{:.1} days", s / 86_400.0)
    }
}
