//! Which engine path a run takes: the memory-saving techniques as switches, each an honest
//! implementation (`memscope optimize` ranks them by running them). The default is memscope's
//! own engine: fused attention, fused kernels, no checkpointing, the dtype everywhere.

use serde::{Deserialize, Serialize};

/// How attention is computed.
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    clap::ValueEnum,
    schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Attention {
    /// memscope's kernel, flash-style: only the output and a (B, H, T) log-sum-exp kept;
    /// backward recomputes the scores
    #[default]
    #[value(alias = "flash")]
    #[serde(alias = "flash")]
    Fused,
    /// Op by op, as eager PyTorch without SDPA: scores and probabilities (B, H, T, S)
    /// materialised and kept for backward
    Naive,
}

/// Whether the norms, activations, RoPE, loss and optimizer run as fused kernels.
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    clap::ValueEnum,
    schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Fusion {
    /// memscope's kernels (one pass each, their own backward, AdamW in place)
    #[default]
    Full,
    /// candle's op-by-op versions (`model::unfused`, candle-nn's AdamW), as a plain PyTorch
    /// script runs them: every intermediate is a tensor, and backward keeps what it needs
    None,
    /// `torch.compile` of the model (--engine torch only): Inductor fuses the elementwise ops
    /// between the products
    Compile,
}

/// Where the weights and the optimizer state live when training in bf16/f16.
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    clap::ValueEnum,
    schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    /// Everything in --dtype: weights, gradients, optimizer moments
    #[default]
    Pure,
    /// f32 master weights, f32 gradients and f32 optimizer state; each step computes in --dtype
    /// from a cast copy of the weights (torch.autocast-style)
    Mixed,
}

/// The engine path of a run. `Default` is memscope's engine.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
pub struct Variant {
    #[serde(default)]
    pub attention: Attention,
    #[serde(default)]
    pub fusion: Fusion,
    /// Activation checkpointing: forward keeps only each block's input; backward recomputes the
    /// block (train).
    #[serde(default)]
    pub checkpoint: bool,
    #[serde(default)]
    pub precision: Precision,
}

impl Variant {
    pub fn is_default(&self) -> bool {
        *self == Variant::default()
    }

    /// The variant as the flags that give it: `--attention fused --fusion full --precision
    /// pure` (and `--checkpoint` when on), for messages that set two variants side by side.
    pub fn flags(&self) -> String {
        let mut s = format!(
            "--attention {} --fusion {} --precision {}",
            value_name(&self.attention),
            value_name(&self.fusion),
            value_name(&self.precision)
        );
        if self.checkpoint {
            s += " --checkpoint";
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_old_record_without_variant_fields_reads_as_the_default() {
        let v: Variant = serde_json::from_str("{}").unwrap();
        assert!(v.is_default());
        let v: Variant =
            serde_json::from_str(r#"{"attention":"naive","checkpoint":true}"#).unwrap();
        assert_eq!(v.attention, Attention::Naive);
        assert!(v.checkpoint && v.fusion == Fusion::Full && v.precision == Precision::Pure);
    }
}

/// A flag value's name as clap spells it.
fn value_name<T: clap::ValueEnum>(v: &T) -> String {
    v.to_possible_value()
        .map_or_else(|| "?".into(), |p| p.get_name().to_string())
}
