//! `--data`: real token files feed the workloads. The loss `bench --mode infer` reports equals an
//! independent computation (the model's logits, then log-sum-exp − logit[target] in f64) on the
//! windows the file gives; train's first loss equals infer's on the same batch; the Record names
//! the file. Hostile token files are in tests/hardening.rs.

mod support;
use candle_core::{DType, Tensor};
use memscope::input::tokens::Tokens;
use memscope::model::config::ModelConfig;
use memscope::model::store::{ParamStore, Purpose};
use memscope::model::{param_specs, Model};
use memscope::spec::DataSpec;
use std::path::Path;
use support::memscope;

/// 3000 u16 ids below 1000 (the tiny presets' vocabulary), written as a nanoGPT .bin.
fn token_file(dir: &Path) -> std::path::PathBuf {
    let ids: Vec<u16> = (0..3000u32)
        .map(|i| ((i * 7919 + 13) % 997) as u16)
        .collect();
    let path = dir.join("train.bin");
    std::fs::write(
        &path,
        ids.iter()
            .flat_map(|i| i.to_le_bytes())
            .collect::<Vec<u8>>(),
    )
    .unwrap();
    path
}

fn record(args: &[&str], data: &Path, json: &Path) -> serde_json::Value {
    memscope()
        .args(args)
        .args(["--threads", "1", "--seed", "5", "-q", "--data"])
        .arg(data)
        .arg("--json")
        .arg(json)
        .assert()
        .success();
    serde_json::from_str(&std::fs::read_to_string(json).unwrap()).unwrap()
}

fn losses(r: &serde_json::Value) -> Vec<f64> {
    r["loss"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap())
        .collect()
}

/// Mean over rows of logsumexp(logits) − logits[target], in f64 from the f32 logits.
fn independent_loss(logits: &Tensor, targets: &[u32]) -> f64 {
    let (b, t, v) = logits.dims3().unwrap();
    let flat: Vec<f32> = logits.reshape((b * t * v,)).unwrap().to_vec1().unwrap();
    let mut sum = 0.0;
    for (row, &target) in flat.chunks(v).zip(targets) {
        let max = row.iter().fold(f64::MIN, |m, &x| m.max(x as f64));
        let lse = max
            + row
                .iter()
                .map(|&x| (x as f64 - max).exp())
                .sum::<f64>()
                .ln();
        sum += lse - row[target as usize] as f64;
    }
    sum / (b * t) as f64
}

#[test]
fn infer_loss_equals_an_independent_computation_for_every_family() {
    let dir = tempfile::tempdir().unwrap();
    let data = token_file(dir.path());
    let (batch, seq, steps) = (2usize, 24usize, 3usize);
    for name in ["tiny-gpt2", "tiny-llama", "tiny-bert"] {
        let json = dir.path().join(format!("{name}.json"));
        let r = record(
            &[
                "bench", "--model", name, "--mode", "infer", "--batch", "2", "--seq", "24",
                "--warmup", "1", "--steps", "2",
            ],
            &data,
            &json,
        );
        let ours = losses(&r);
        assert_eq!(
            ours.len(),
            steps,
            "{name}: one loss per batch, warm-up included"
        );

        // The same model (seeded random parameters, as the binary builds them) and the same windows.
        let cfg = ModelConfig::preset(name).unwrap();
        let store =
            ParamStore::random(&param_specs(&cfg), 5, DType::F32, Purpose::Forward).unwrap();
        let model = Model::load(&cfg, &store).unwrap();
        let tokens = Tokens::open(&DataSpec {
            path: data.clone(),
            bin_dtype: None,
        })
        .unwrap();
        for (k, &got) in ours.iter().enumerate() {
            let w = tokens
                .batch(k as u64, batch, seq, 5, cfg.vocab_size)
                .unwrap();
            let rows: Vec<&[u32]> = w.chunks(seq + 1).collect();
            let ids: Vec<u32> = rows.iter().flat_map(|r| r[..seq].to_vec()).collect();
            let targets: Vec<u32> = if name == "tiny-bert" {
                ids.clone() // every position predicts its own token
            } else {
                rows.iter().flat_map(|r| r[1..].to_vec()).collect()
            };
            let ids_t = Tensor::from_vec(ids, (batch, seq), &candle_core::Device::Cpu).unwrap();
            let logits = model.forward(&ids_t, None).unwrap(); // (B, T, V)
            let want = independent_loss(&logits, &targets);
            assert!(
                (got - want).abs() < 1e-5,
                "{name} batch {k}: memscope {got} vs independent {want}"
            );
        }
        assert!(
            ours.windows(2).all(|w| w[0] != w[1]),
            "{name}: batches move through the file: {ours:?}"
        );
        assert_eq!(r["data"]["dtype"], "u16");
        assert_eq!(r["data"]["tokens"], 3000);
        assert_eq!(r["data"]["path"], data.to_str().unwrap());
    }
}

#[test]
fn train_first_loss_is_infer_loss_of_the_same_batch() {
    let dir = tempfile::tempdir().unwrap();
    let data = token_file(dir.path());
    let args = |mode: &'static str| {
        [
            "bench",
            "--model",
            "tiny-llama",
            "--mode",
            mode,
            "--batch",
            "2",
            "--seq",
            "32",
            "--warmup",
            "0",
            "--steps",
            "2",
        ]
    };
    let infer = losses(&record(&args("infer"), &data, &dir.path().join("i.json")));
    let train = losses(&record(&args("train"), &data, &dir.path().join("t.json")));
    // Step 0 runs before any update, on batch 0: the same loss, up to the kernels' f32 sums.
    assert!((infer[0] - train[0]).abs() < 1e-5, "{infer:?} vs {train:?}");
}
