//! `memscope models`: the built-in presets with exact parameter counts.

use crate::model::config::ModelConfig;
use crate::model::cost;
use crate::report;
use crate::{out, outln};
use clap::Args;
use std::process::ExitCode;

#[derive(Args, Debug)]
pub struct ModelsArgs {
    /// Print JSON instead of a table
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: ModelsArgs) -> anyhow::Result<ExitCode> {
    let rows: Vec<report::models::ModelRow> = ModelConfig::presets()
        .into_iter()
        .map(|c| {
            let params = cost::param_count(&c).unwrap_or(u64::MAX);
            let config = serde_json::to_value(&c).unwrap_or_default();
            report::models::ModelRow {
                family: c.family.to_string(),
                n_layers: c.n_layers,
                d_model: c.d_model,
                n_heads: c.n_heads,
                n_kv_heads: c.n_kv_heads,
                d_ff: c.d_ff,
                vocab_size: c.vocab_size,
                max_seq_len: c.max_seq_len,
                params,
                f32_bytes: params.saturating_mul(4),
                name: c.name,
                config,
            }
        })
        .collect();
    if a.json {
        outln!("{}", serde_json::to_string_pretty(&rows)?)?;
    } else {
        out!("{}", report::models::render_table(&rows))?;
    }
    Ok(ExitCode::SUCCESS)
}
