//! [`ModelConfig::validate`]: sizes, divisibility, finite positive epsilons, and parameter bytes
//! that fit in a `u64` (so later estimates can count without overflow checks).

use super::{ConfigError, Family, ModelConfig};
use crate::model::cost;

/// Bytes per element used by validation's overflow check (the widest dtype we handle, f64).
const WIDEST_DTYPE_BYTES: u64 = 8;

impl ModelConfig {
    /// Checks sizes, divisibility, finite positive epsilons and that the parameter bytes fit in u64.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.validate_as(&format!("config `{}`", self.name), &|field| {
            field.to_string()
        })
    }

    /// `validate`, with errors starting with `origin` and fields shown as `display(field)`
    /// (the Hugging Face key a value came from, for HF configs).
    pub(super) fn validate_as(
        &self,
        origin: &str,
        display: &dyn Fn(&str) -> String,
    ) -> Result<(), ConfigError> {
        let invalid = |field: &str, reason: String| ConfigError::Invalid {
            origin: origin.to_string(),
            key: display(field),
            reason,
        };
        let sizes = [
            ("vocab_size", self.vocab_size),
            ("max_seq_len", self.max_seq_len),
            ("n_layers", self.n_layers),
            ("n_heads", self.n_heads),
            ("n_kv_heads", self.n_kv_heads),
            ("d_model", self.d_model),
            ("d_ff", self.d_ff),
        ];
        for (field, value) in sizes {
            if value == 0 {
                return Err(invalid(field, "must be at least 1".into()));
            }
        }
        // transformers owns the architecture of a model it builds: it refuses what it cannot
        // build, and these shapes are memscope's families' rules.
        if self.transformers.is_some() {
            return cost::checked_param_bytes(self, WIDEST_DTYPE_BYTES)
                .map(|_| ())
                .map_err(|e| ConfigError::Overflow {
                    origin: origin.to_string(),
                    product: e.product,
                });
        }
        if !self.d_model.is_multiple_of(self.n_heads) {
            let reason = format!(
                "({}) must be divisible by `{}` ({})",
                self.d_model,
                display("n_heads"),
                self.n_heads
            );
            return Err(invalid("d_model", reason));
        }
        match self.family {
            Family::Llama => {
                if !self.n_heads.is_multiple_of(self.n_kv_heads) {
                    let reason = format!(
                        "({}) must be divisible by `{}` ({}) for grouped-query attention",
                        self.n_heads,
                        display("n_kv_heads"),
                        self.n_kv_heads
                    );
                    return Err(invalid("n_heads", reason));
                }
                if !self.head_dim().is_multiple_of(2) {
                    let reason = format!(
                        "/ `{}` = {} / {} = {} must be even: RoPE rotates pairs of dimensions",
                        display("n_heads"),
                        self.d_model,
                        self.n_heads,
                        self.head_dim()
                    );
                    return Err(invalid("d_model", reason));
                }
            }
            Family::Gpt2 | Family::Bert => {
                if self.n_kv_heads != self.n_heads {
                    let reason = format!(
                        "({}) must equal `{}` ({}) for {}; grouped-query attention is llama only",
                        self.n_kv_heads,
                        display("n_heads"),
                        self.n_heads,
                        self.family
                    );
                    return Err(invalid("n_kv_heads", reason));
                }
            }
        }
        if self.family != Family::Bert && self.type_vocab_size != 0 {
            let reason = format!(
                "({}) must be 0 for {}; token types are bert only",
                self.type_vocab_size, self.family
            );
            return Err(invalid("type_vocab_size", reason));
        }
        for (field, value) in [("norm_eps", self.norm_eps), ("rope_theta", self.rope_theta)] {
            if !(value.is_finite() && value > 0.0) {
                return Err(invalid(
                    field,
                    format!("must be finite and > 0, found {value}"),
                ));
            }
        }
        cost::checked_param_bytes(self, WIDEST_DTYPE_BYTES)
            .map(|_| ())
            .map_err(|e| ConfigError::Overflow {
                origin: origin.to_string(),
                product: e.product,
            })
    }
}
