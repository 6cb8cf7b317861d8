//! The clock: wall time of a closure, read after the device has finished its work.

use candle_core::Device;
use std::time::Instant;

/// Runs `f` and returns its result with the elapsed milliseconds. The clock is read after the
/// device synchronises (a no-op on CPU, mandatory on CUDA).
pub fn time_ms<T>(
    device: &Device,
    f: impl FnOnce() -> candle_core::Result<T>,
) -> candle_core::Result<(T, f64)> {
    let t0 = Instant::now();
    let out = f()?;
    device.synchronize()?;
    Ok((out, t0.elapsed().as_secs_f64() * 1e3))
}
