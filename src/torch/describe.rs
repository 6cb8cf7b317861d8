//! A config.json transformers builds (`ModelConfig::transformers`): what it builds from it, asked
//! of transformers itself on PyTorch's meta device (`python -m memscope._workers.describe`: no
//! memory, no weights, a few seconds) — the class, its widths, its exact parameter count — once per
//! config in a process.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use anyhow::Context;

use crate::model::config::{BuiltModel, ModelConfig};

/// What `describe` reads on stdin.
#[derive(serde::Serialize, schemars::JsonSchema)]
pub struct DescribeRequest<'a> {
    pub model_type: &'a str,
    /// The config.json as given.
    pub config: &'a serde_json::Map<String, serde_json::Value>,
    /// The config file, for messages.
    pub origin: &'a str,
}

/// `cfg` with what transformers builds from it; `cfg` itself when memscope's engine builds it
/// or it was built already.
pub fn built(cfg: &ModelConfig, origin: &str) -> anyhow::Result<ModelConfig> {
    let Some(t) = cfg.transformers.as_ref().filter(|t| t.built.is_none()) else {
        return Ok(cfg.clone());
    };
    static SEEN: OnceLock<Mutex<HashMap<String, BuiltModel>>> = OnceLock::new();
    let request = serde_json::to_string(&DescribeRequest {
        model_type: &t.model_type,
        config: &t.config,
        origin,
    })?;
    let seen = SEEN.get_or_init(Default::default);
    if let Some(b) = seen.lock().expect("not poisoned").get(&request) {
        return Ok(cfg.with_built(b.clone()));
    }
    let what = format!("transformers building {origin}");
    let text = crate::torch::oneshot::answer("memscope._workers.describe", &request, &what)?;
    let b: BuiltModel =
        serde_json::from_str(text.trim()).with_context(|| format!("{what}: its answer"))?;
    seen.lock()
        .expect("not poisoned")
        .insert(request, b.clone());
    let built = cfg.with_built(b);
    built
        .validate()
        .with_context(|| format!("{origin}: the model transformers built"))?;
    Ok(built)
}
