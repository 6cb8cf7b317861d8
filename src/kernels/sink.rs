//! Parameter gradients accumulated where the kernels compute them, instead of through candle's
//! gradient store.
//!
//! candle adds every gradient into its store as `zeros_like(param) + grad`: for a weight that is
//! two more weight-sized buffers alive beside the gradient (441 MiB at GPT-2 small's tied
//! 50257×768 head, the heap peak of its train step). While a sink is open (segmented backward,
//! `model::segments`), `kernels::linear` and `kernels::embedding` hand a variable weight's
//! gradient here and return none to candle: the first contribution is stored as computed, and
//! later ones (a tied embedding's second use, the next segment) are added into it in place.
//! Backward runs on the calling thread, so the sink is that thread's.

use candle_core::{DType, Result, Tensor, TensorId};
use std::cell::RefCell;
use std::collections::HashMap;

thread_local! {
    static SINK: RefCell<Option<HashMap<TensorId, Tensor>>> = const { RefCell::new(None) };
    static MASTERS: RefCell<Masters> = RefCell::new(Masters::new());
}

/// Mixed precision: the working copy's tensor id → its f32 master variable's id and dtype.
pub type Masters = HashMap<TensorId, (TensorId, DType)>;

/// Runs `f` (a mixed-precision backward) with `masters` known to the sink: a gradient the
/// kernels make for a working copy goes to its master, in the master's dtype, so it skips the
/// cast's backward (rounded to bf16, cast back to f32, added into zeros by candle).
pub fn with_masters<T>(masters: Masters, f: impl FnOnce() -> T) -> T {
    MASTERS.with(|m| *m.borrow_mut() = masters);
    let out = f();
    MASTERS.with(|m| m.borrow_mut().clear());
    out
}

/// The id `w`'s gradient is kept under, and its dtype there: its master's when it has one.
fn target(w: &Tensor) -> (TensorId, DType) {
    MASTERS
        .with(|m| m.borrow().get(&w.id()).copied())
        .unwrap_or((w.id(), w.dtype()))
}

/// The dtype `w`'s gradient is kept in by the sink (its master's, for a working copy).
pub fn dtype(w: &Tensor) -> DType {
    target(w).1
}

/// Runs `f` (backward passes) with a sink open, holding `seed` (gradients accumulated so far,
/// which the kernels add into in place) → its result and the sink's gradients, by the
/// parameter's tensor id. The sink is closed again when `f` fails.
pub fn collect<T>(
    seed: HashMap<TensorId, Tensor>,
    f: impl FnOnce() -> Result<T>,
) -> Result<(T, HashMap<TensorId, Tensor>)> {
    SINK.with(|s| *s.borrow_mut() = Some(seed));
    let out = f();
    let grads = SINK.with(|s| s.borrow_mut().take()).unwrap_or_default();
    Ok((out?, grads))
}

/// Whether `w`'s gradient goes to the sink: one is open and `w` is a variable or a working
/// copy of one ([`with_masters`]).
pub fn takes(w: &Tensor) -> bool {
    (w.is_variable() || MASTERS.with(|m| m.borrow().contains_key(&w.id())))
        && SINK.with(|s| s.borrow().is_some())
}

/// Adds a contribution to `w`'s gradient (its master's, for a working copy):
/// `add_into(existing)` in place when the sink holds one, else `fresh()` becomes it; both in
/// [`dtype`]`(w)`. Call only when [`takes`] is true.
pub fn add(
    w: &Tensor,
    fresh: impl FnOnce() -> Result<Tensor>,
    add_into: impl FnOnce(&Tensor) -> Result<()>,
) -> Result<()> {
    let id = target(w).0;
    let existing = SINK.with(|s| s.borrow_mut().as_mut().and_then(|m| m.remove(&id)));
    let g = match existing {
        Some(g) => {
            add_into(&g)?;
            g
        }
        None => fresh()?,
    };
    SINK.with(|s| {
        if let Some(m) = s.borrow_mut().as_mut() {
            m.insert(id, g);
        }
    });
    Ok(())
}
