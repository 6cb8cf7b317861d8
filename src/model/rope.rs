//! Rotary position embedding tables: the inverse frequencies of a config's `rope_type`
//! (`default`, `linear`, `llama3`, as Hugging Face's `ROPE_INIT_FUNCTIONS` compute them) and
//! the cos / sin tables the llama attention applies.

use crate::model::config::{ModelConfig, RopeScaling};
use candle_core::{DType, Device, Result, Tensor};

/// The D/2 inverse frequencies of the rotary embedding, in f64.
/// default: θ^(−2i/D); linear: that / factor; llama3: Llama 3.1's blend (low frequencies / factor,
/// high ones kept, smooth between), as transformers' `_compute_llama3_parameters`.
pub fn inv_freq(cfg: &ModelConfig) -> Vec<f64> {
    let hd = cfg.head_dim();
    let base = (0..hd / 2).map(|i| 1.0 / cfg.rope_theta.powf((2 * i) as f64 / hd as f64));
    match &cfg.rope_scaling {
        RopeScaling::Default => base.collect(),
        RopeScaling::Linear { factor } => base.map(|f| f / factor).collect(),
        RopeScaling::Llama3 {
            factor,
            low_freq_factor: low,
            high_freq_factor: high,
            original_max_position_embeddings: orig,
        } => {
            let orig = *orig as f64;
            let (low_wavelen, high_wavelen) = (orig / low, orig / high);
            base.map(|f| {
                let wavelen = 2.0 * std::f64::consts::PI / f;
                if wavelen < high_wavelen {
                    f
                } else if wavelen > low_wavelen {
                    f / factor
                } else {
                    let smooth = (orig / wavelen - low) / (high - low);
                    (1.0 - smooth) * f / factor + smooth * f
                }
            })
            .collect()
        }
    }
}

/// cos and sin of the rotary angles for positions offset..offset+t, duplicated over both halves
/// of the head dim (Hugging Face's rotate-half convention) → (T, D) each.
pub fn rope_tables(
    cfg: &ModelConfig,
    offset: usize,
    t: usize,
    dtype: DType,
    dev: &Device,
) -> Result<(Tensor, Tensor)> {
    let hd = cfg.head_dim();
    let mut cos = Vec::with_capacity(t * hd);
    let mut sin = Vec::with_capacity(t * hd);
    let inv_freq = inv_freq(cfg);
    for pos in offset..offset + t {
        let angles = inv_freq.iter().map(|f| pos as f64 * f);
        let (c, s): (Vec<f32>, Vec<f32>) = angles.map(|a| (a.cos() as f32, a.sin() as f32)).unzip();
        for _half in 0..2 {
            cos.extend_from_slice(&c);
            sin.extend_from_slice(&s);
        }
    }
    Ok((
        Tensor::from_vec(cos, (t, hd), dev)?.to_dtype(dtype)?, // (T, D)
        Tensor::from_vec(sin, (t, hd), dev)?.to_dtype(dtype)?, // (T, D)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(scaling: RopeScaling, theta: f64) -> ModelConfig {
        ModelConfig {
            rope_theta: theta,
            rope_scaling: scaling,
            d_model: 8 * 4, // head_dim 8 → 4 frequencies
            n_heads: 4,
            n_kv_heads: 4,
            ..ModelConfig::preset("tiny-llama").unwrap()
        }
    }

    #[test]
    fn default_and_linear_frequencies_by_hand() {
        let f = inv_freq(&cfg(RopeScaling::Default, 10000.0));
        let want = [1.0, 0.1, 0.01, 0.001]; // 10000^(-2i/8) = 10^(-i)
        for (a, b) in f.iter().zip(want) {
            assert!((a - b).abs() < 1e-15, "{f:?}");
        }
        let f = inv_freq(&cfg(RopeScaling::Linear { factor: 4.0 }, 10000.0));
        for (a, b) in f.iter().zip(want) {
            assert!((a - b / 4.0).abs() < 1e-15, "{f:?}");
        }
    }

    #[test]
    fn llama3_keeps_high_divides_low_and_blends_between() {
        // θ = 10000, D = 8: inv_freq 1, 0.1, 0.01, 0.001 → wavelengths 2π, 20π, 200π, 2000π.
        // original 1000, low 1, high 4: low_wavelen 1000, high_wavelen 250.
        let s = RopeScaling::Llama3 {
            factor: 8.0,
            low_freq_factor: 1.0,
            high_freq_factor: 4.0,
            original_max_position_embeddings: 1000,
        };
        let f = inv_freq(&cfg(s, 10000.0));
        assert_eq!(f[0], 1.0); // 6.28 < 250: kept
        assert_eq!(f[1], 0.1); // 62.8 < 250: kept
                               // 628.3 between 250 and 1000: smooth = (1000/628.3 − 1)/3 = 0.19718…
        let smooth = (1000.0 / (200.0 * std::f64::consts::PI) - 1.0) / 3.0;
        let want = (1.0 - smooth) * 0.01 / 8.0 + smooth * 0.01;
        assert!((f[2] - want).abs() < 1e-18, "{} vs {want}", f[2]);
        assert!((f[2] - 0.0029754).abs() < 1e-7, "{}", f[2]); // 0.80282·0.00125 + 0.19718·0.01
        assert_eq!(f[3], 0.001 / 8.0); // 6283 > 1000: divided by factor
    }

    #[test]
    fn tables_are_cos_sin_of_position_times_frequency() {
        let c = cfg(RopeScaling::Linear { factor: 2.0 }, 10000.0);
        let (cos, sin) = rope_tables(&c, 3, 2, DType::F32, &Device::Cpu).unwrap();
        let cos = cos.to_vec2::<f32>().unwrap();
        let sin = sin.to_vec2::<f32>().unwrap();
        // position 4 (offset 3 + row 1), frequency 0.1 / 2: angle 0.2; both halves equal.
        assert!((cos[1][1] - 0.2f32.cos()).abs() < 1e-7);
        assert!((sin[1][5] - 0.2f32.sin()).abs() < 1e-7);
    }
}
