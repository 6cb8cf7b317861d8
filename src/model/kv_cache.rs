//! Preallocated key/value cache for decoding: one (B, KV, S_max, D) buffer per layer and per
//! K and V, so its size is exact and known before generation starts.

use candle_core::{DType, Device, Result, Tensor};

pub struct LayerCache {
    k: Tensor, // (B, KV, S_max, D)
    v: Tensor, // (B, KV, S_max, D)
}

pub struct KvCache {
    layers: Vec<LayerCache>,
    len: usize,
    max_len: usize,
    pending: usize,
}

impl KvCache {
    pub fn new(
        n_layers: usize,
        batch: usize,
        kv_heads: usize,
        max_len: usize,
        head_dim: usize,
        dtype: DType,
        device: &Device,
    ) -> Result<Self> {
        let layers = (0..n_layers)
            .map(|_| {
                Ok(LayerCache {
                    k: Tensor::zeros((batch, kv_heads, max_len, head_dim), dtype, device)?,
                    v: Tensor::zeros((batch, kv_heads, max_len, head_dim), dtype, device)?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            layers,
            len: 0,
            max_len,
            pending: 0,
        })
    }

    /// Positions already stored (the offset of the next token).
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Forgets every stored position; the buffers stay allocated.
    pub fn reset(&mut self) {
        self.len = 0;
        self.pending = 0;
    }

    /// Bytes held by the buffers.
    pub fn bytes(&self) -> u64 {
        self.layers
            .iter()
            .map(|l| {
                (l.k.elem_count() + l.v.elem_count()) as u64 * l.k.dtype().size_in_bytes() as u64
            })
            .sum()
    }

    /// Stores layer `layer`'s new k, v (B, KV, T, D), any layout, after the positions already
    /// held and returns all keys and values so far (B, KV, len + T, D) as views into the cache,
    /// not copies: the attention kernel reads them in place. Call `advance` once all layers are
    /// done.
    pub fn append(&mut self, layer: usize, k: &Tensor, v: &Tensor) -> Result<(Tensor, Tensor)> {
        let t = k.dim(2)?;
        if self.len + t > self.max_len {
            candle_core::bail!(
                "KV cache full: {} + {} positions exceed the {} reserved for --prompt-len + --new-tokens",
                self.len,
                t,
                self.max_len
            );
        }
        let c = &self.layers[layer];
        c.k.slice_set(&k.contiguous()?, 2, self.len)?;
        c.v.slice_set(&v.contiguous()?, 2, self.len)?;
        self.pending = t;
        let total = self.len + t;
        Ok((
            c.k.narrow(2, 0, total)?, // (B, KV, S, D)
            c.v.narrow(2, 0, total)?, // (B, KV, S, D)
        ))
    }

    /// Commits the positions appended by the last forward pass.
    pub fn advance(&mut self) {
        self.len += self.pending;
        self.pending = 0;
    }
}
