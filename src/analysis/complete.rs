//! The one place a Record is completed from what was measured: the per-phase statistics of the
//! raw step times, the throughput over its Spec's tokens and sequences, the warning for losses
//! that are not finite numbers, and the memory breakdown (beside the estimate when it has one).
//! memscope's engine (`runner`), the torch engine (`runner`, after the estimate is added) and
//! the recorder (`_native.finish_record`) all finish their Records here.

use crate::analysis::breakdown::breakdown;
use crate::analysis::timing::{phase_timings, throughput};
use crate::record::Record;
use crate::spec::Mode;

/// Sets `r.timing` from the raw samples (phase → milliseconds per measured step), adds their
/// noise warnings and the non-finite-loss warning, then [`refresh`]es the derived figures.
pub fn complete(r: &mut Record, samples: &[(String, Vec<f64>)]) {
    let (timing, warnings) = phase_timings(samples);
    r.timing = timing;
    r.warnings.extend(warnings);
    r.warnings
        .extend(crate::record::nonfinite::warning(&r.loss));
    refresh(r);
}

/// The figures derived from the timing, the Spec and the memory: throughput (tokens per step
/// from `Spec::tokens_per_step`, sequences = batch × micro-batches, decoded tokens per sequence
/// in generation; a count of 0 — a recorder session that was not told its batch or sequence
/// length — gives no rate rather than 0/s) and the breakdown. Idempotent: called again after
/// the estimate is set.
pub fn refresh(r: &mut Record) {
    let s = &r.spec;
    let tokens = s.tokens_per_step();
    let sequences = (s.batch as u64).saturating_mul(s.grad_accum as u64);
    let decoded = if s.mode == Mode::Generate {
        s.new_tokens as u64
    } else {
        0
    };
    let mut t = throughput(&r.timing, tokens, sequences, decoded);
    if tokens == 0 {
        t.tokens_per_s = None;
    }
    if sequences == 0 {
        t.samples_per_s = None;
        t.decode_tokens_per_s = None;
    }
    r.throughput = t;
    r.memory.breakdown = breakdown(&r.memory, s.mode);
}
