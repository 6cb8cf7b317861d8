//! The `memscope models` listing: every preset with its exact size.

use crate::units::{bytes, thousands};
use serde::Serialize;

#[derive(Clone, Debug, Serialize)]
pub struct ModelRow {
    pub name: String,
    pub family: String,
    pub n_layers: usize,
    pub d_model: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub d_ff: usize,
    pub vocab_size: usize,
    pub max_seq_len: usize,
    /// Exact parameter count.
    pub params: u64,
    /// Exact parameter bytes in f32.
    pub f32_bytes: u64,
    /// Every field of the model's config, as a Spec carries it (what the torch engine builds).
    pub config: serde_json::Value,
}

pub fn render_table(rows: &[ModelRow]) -> String {
    let mut t = comfy_table::Table::new();
    t.load_preset(comfy_table::presets::UTF8_FULL_CONDENSED)
        .set_header([
            "preset",
            "family",
            "layers",
            "d_model",
            "heads",
            "kv heads",
            "d_ff",
            "vocab",
            "context",
            "params (exact)",
            "f32 bytes",
        ]);
    for r in rows {
        t.add_row([
            r.name.clone(),
            r.family.clone(),
            r.n_layers.to_string(),
            r.d_model.to_string(),
            r.n_heads.to_string(),
            r.n_kv_heads.to_string(),
            r.d_ff.to_string(),
            thousands(r.vocab_size as u64),
            r.max_seq_len.to_string(),
            thousands(r.params),
            bytes(r.f32_bytes as f64),
        ]);
    }
    for i in 2..11 {
        if let Some(c) = t.column_mut(i) {
            c.set_cell_alignment(comfy_table::CellAlignment::Right);
        }
    }
    format!("{t}\n")
}
