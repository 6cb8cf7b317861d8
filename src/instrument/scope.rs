//! Module names for memory attribution: which part of the model an allocation belongs to.
//! The models set the current module while they run (the counting allocator tags each block
//! with it) and the estimator uses the same names, so measured and predicted hotspots line up.

use std::sync::atomic::{AtomicU16, Ordering::Relaxed};

pub const EMBEDDING: &str = "embedding";
pub const HEAD: &str = "lm head + loss";
/// Allocations made outside the model's forward: parameters at load, backward's gradients and
/// temporaries (candle's backward runs outside our modules), the optimizer.
pub const OUTSIDE: &str = "outside the forward (backward, optimizer)";

pub fn attention(layer: usize) -> String {
    format!("layer {layer} attention")
}

pub fn mlp(layer: usize) -> String {
    format!("layer {layer} mlp")
}

pub fn norms(layer: usize) -> String {
    format!("layer {layer} norms")
}

/// Slots for module ids; ids past the last share it.
pub const MAX_MODULES: usize = 1024;

/// Module ids: 0 other (outside any module), 1 embedding, 2 head, then 3 per layer.
pub const OTHER_ID: u16 = 0;
pub const EMBEDDING_ID: u16 = 1;
pub const HEAD_ID: u16 = 2;

pub fn attention_id(layer: usize) -> u16 {
    layer_id(layer, 0)
}
pub fn mlp_id(layer: usize) -> u16 {
    layer_id(layer, 1)
}
pub fn norms_id(layer: usize) -> u16 {
    layer_id(layer, 2)
}

fn layer_id(layer: usize, part: usize) -> u16 {
    (3 + 3 * layer + part).min(MAX_MODULES - 1) as u16
}

/// The name of a module id (the last slot collects every later layer).
pub fn name(id: u16) -> String {
    match id {
        OTHER_ID => OUTSIDE.into(),
        EMBEDDING_ID => EMBEDDING.into(),
        HEAD_ID => HEAD.into(),
        i if i as usize == MAX_MODULES - 1 => "later layers".into(),
        i => {
            let (layer, part) = ((i as usize - 3) / 3, (i as usize - 3) % 3);
            match part {
                0 => attention(layer),
                1 => mlp(layer),
                _ => norms(layer),
            }
        }
    }
}

static CURRENT: AtomicU16 = AtomicU16::new(OTHER_ID);

/// Sets the module now running; returns the previous one.
pub fn enter(id: u16) -> u16 {
    CURRENT.swap(id, Relaxed)
}

pub fn current() -> u16 {
    CURRENT.load(Relaxed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_and_names_round_trip() {
        assert_eq!(name(attention_id(0)), "layer 0 attention");
        assert_eq!(name(mlp_id(5)), "layer 5 mlp");
        assert_eq!(name(norms_id(11)), "layer 11 norms");
        assert_eq!(name(EMBEDDING_ID), EMBEDDING);
        assert_eq!(name(HEAD_ID), HEAD);
        assert_eq!(name(attention_id(100_000)), "later layers");
    }
}
