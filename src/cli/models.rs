//! `memscope models`: the built-in presets with exact parameter counts.

use super::flags::JsonOut;
use crate::export::{check_outputs, write_atomic};
use crate::model::config::ModelConfig;
use crate::model::cost;
use crate::out;
use crate::report;
use clap::Args;
use std::process::ExitCode;

#[derive(Args, Debug)]
#[command(mut_arg("json", |a| a.help(r#"Print JSON instead of a table (written to FILE when one is given)"#).num_args(0..=1).default_missing_value("-")))]
pub struct ModelsArgs {
    #[command(flatten)]
    pub json: JsonOut,
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
    if let Some(path) = &*a.json {
        // `--json` alone is standard output.
        check_outputs::<&std::path::Path>(&[("--json", Some(path))], &[])?;
        write_atomic(path, &(serde_json::to_string_pretty(&rows)? + "\n"))?;
    } else {
        out!("{}", report::models::render_table(&rows))?;
    }
    Ok(ExitCode::SUCCESS)
}
