//! The token batches the measured loop reads: windows of a `--data` file at seeded offsets, or
//! one random batch fixed for the whole run.

use crate::input::tokens::Tokens;
use crate::model::config::{Family, ModelConfig};
use crate::record::DataInfo;
use crate::spec::Spec;
use candle_core::{Device, Tensor};
use rand::Rng;

/// Random token ids (B, T) and their targets (B, T), fixed for the whole run so every step
/// does identical work (used without `--data`).
pub fn random_batch(
    rng: &mut rand::rngs::StdRng,
    batch: usize,
    seq: usize,
    cfg: &ModelConfig,
    dev: &Device,
) -> candle_core::Result<(Tensor, Tensor)> {
    let tokens: Vec<u32> = (0..batch * (seq + 1))
        .map(|_| rng.random_range(0..cfg.vocab_size as u32))
        .collect();
    windows_to_batch(tokens, batch, seq, cfg.family, dev)
}

/// `batch` windows of `seq + 1` ids → inputs (B, T) = window[..T] and targets (B, T):
/// window[1..] (next token) for decoders; for BERT every position predicts its own token
/// (targets = inputs, nothing masked: the masked-LM head's loss on the unmasked batch, the
/// convention `scripts/check_transformers.py` uses too).
fn windows_to_batch(
    tokens: Vec<u32>,
    batch: usize,
    seq: usize,
    family: Family,
    dev: &Device,
) -> candle_core::Result<(Tensor, Tensor)> {
    let all = Tensor::from_vec(tokens, (batch, seq + 1), dev)?; // (B, T+1)
    let ids = all.narrow(1, 0, seq)?.contiguous()?; // (B, T)
    let targets = match family {
        Family::Bert => ids.clone(),               // (B, T)
        _ => all.narrow(1, 1, seq)?.contiguous()?, // (B, T)
    };
    Ok((ids, targets))
}

/// The run's token source: the `--data` file's batches, or none (the caller's fixed random batch).
pub struct Batches<'a> {
    tokens: Option<Tokens>,
    spec: &'a Spec,
    dev: &'a Device,
}

impl<'a> Batches<'a> {
    /// The `--data` file opened (and what the Record says about it), or no file.
    pub fn open(spec: &'a Spec, dev: &'a Device) -> anyhow::Result<(Self, Option<DataInfo>)> {
        let tokens = match &spec.data {
            Some(d) => Some(Tokens::open(d)?),
            None => None,
        };
        let data = tokens
            .as_ref()
            .zip(spec.data.as_ref())
            .map(|(t, d)| DataInfo {
                path: d.path.clone(),
                dtype: t.dtype.clone(),
                tokens: t.len(),
            });
        Ok((Batches { tokens, spec, dev }, data))
    }

    /// Batch `k` of `seq` positions from the file (inputs, targets), or None without `--data`.
    pub fn get(&self, k: u64, seq: usize) -> anyhow::Result<Option<(Tensor, Tensor)>> {
        let Some(t) = &self.tokens else {
            return Ok(None);
        };
        let (s, cfg) = (self.spec, self.spec.arch());
        let ids = t.batch(k, s.batch, seq, s.seed, cfg.vocab_size)?;
        Ok(Some(windows_to_batch(
            ids, s.batch, seq, cfg.family, self.dev,
        )?))
    }
}
