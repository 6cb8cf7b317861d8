//! Tests of config parsing, validation and presets.

use super::*;
use crate::model::cost;
use serde_json::Value;

const SRC: &str = "models/my.json";

fn parse(text: &str) -> Result<ModelConfig, ConfigError> {
    ModelConfig::from_json_str(text, SRC)
}

fn err(text: &str) -> String {
    let e = parse(text).expect_err("expected an error");
    let msg = e.to_string();
    assert!(msg.starts_with(SRC), "error does not name the file: {msg}");
    msg
}

/// A valid llama config in our schema with `patch` merged over it.
fn ours_with(patch: &str) -> String {
    let mut base: serde_json::Map<String, Value> = serde_json::from_str(
        r#"{"family": "llama", "vocab_size": 1000, "max_seq_len": 256, "n_layers": 4,
            "n_heads": 4, "n_kv_heads": 2, "d_model": 128, "d_ff": 352}"#,
    )
    .unwrap();
    let patch: serde_json::Map<String, Value> = serde_json::from_str(patch).unwrap();
    base.extend(patch);
    Value::Object(base).to_string()
}

// --- presets -------------------------------------------------------------------------

#[test]
fn presets_are_listed_in_order_and_found_by_name() {
    let names: Vec<String> = ModelConfig::presets().into_iter().map(|c| c.name).collect();
    assert_eq!(
        names,
        [
            "gpt2-small",
            "gpt2-medium",
            "gpt2-large",
            "gpt2-xl",
            "cs336-small",
            "cs336-medium",
            "cs336-large",
            "cs336-xl",
            "cs336-2.7b",
            "tinyllama-1.1b",
            "bert-base",
            "distilbert",
            "tiny-gpt2",
            "tiny-llama",
            "tiny-bert"
        ]
    );
    assert_eq!(ModelConfig::preset("tiny-llama").unwrap().n_kv_heads, 2);
    assert!(ModelConfig::preset("gpt3").is_none());
}

#[test]
fn every_preset_validates() {
    for cfg in ModelConfig::presets() {
        cfg.validate()
            .unwrap_or_else(|e| panic!("{}: {e}", cfg.name));
    }
}

#[test]
fn tiny_presets_are_tiny() {
    for name in ["tiny-gpt2", "tiny-llama", "tiny-bert"] {
        let cfg = ModelConfig::preset(name).unwrap();
        assert!(cost::param_count(&cfg).unwrap() < 2_000_000, "{name}");
    }
}

#[test]
fn preset_shapes() {
    let t = ModelConfig::preset("tinyllama-1.1b").unwrap();
    assert_eq!(
        (t.n_heads, t.n_kv_heads, t.head_dim(), t.d_ff),
        (32, 4, 64, 5632)
    );
    let b = ModelConfig::preset("bert-base").unwrap();
    assert_eq!(
        (b.type_vocab_size, b.norm_eps, b.tie_embeddings),
        (2, 1e-12, true)
    );
    let d = ModelConfig::preset("distilbert").unwrap();
    assert_eq!((d.n_layers, d.type_vocab_size), (6, 0));
    let g = ModelConfig::preset("gpt2-xl").unwrap();
    assert_eq!(
        (g.n_heads, g.d_model, g.d_ff, g.head_dim()),
        (25, 1600, 6400, 64)
    );
    let c = ModelConfig::preset("cs336-2.7b").unwrap();
    assert_eq!(
        (c.family, c.tie_embeddings, c.d_ff, c.vocab_size),
        (Family::Llama, false, 10240, 10000)
    );
    assert_eq!(Family::Gpt2.to_string(), "gpt2");
    assert_eq!(Family::Llama.to_string(), "llama");
    assert_eq!(Family::Bert.to_string(), "bert");
}

// --- our schema ----------------------------------------------------------------------

#[test]
fn our_schema_round_trips_every_preset() {
    for cfg in ModelConfig::presets() {
        let text = serde_json::to_string_pretty(&cfg).unwrap();
        assert_eq!(parse(&text).unwrap(), cfg, "{text}");
    }
}

#[test]
fn our_schema_defaults() {
    let cfg = parse(
        r#"{"family": "gpt2", "vocab_size": 1000, "max_seq_len": 256, "n_layers": 4,
            "n_heads": 4, "d_model": 128}"#,
    )
    .unwrap();
    assert_eq!(
        cfg,
        ModelConfig {
            name: "my".into(),
            ..ModelConfig::preset("tiny-gpt2").unwrap()
        }
    );

    let cfg = parse(
        r#"{"name": "b", "family": "bert", "vocab_size": 1000, "max_seq_len": 256,
            "n_layers": 4, "n_heads": 4, "d_model": 128}"#,
    )
    .unwrap();
    assert_eq!(
        cfg,
        ModelConfig {
            name: "b".into(),
            ..ModelConfig::preset("tiny-bert").unwrap()
        }
    );

    let cfg = parse(&ours_with("{}")).unwrap();
    assert_eq!(
        cfg,
        ModelConfig {
            name: "my".into(),
            ..ModelConfig::preset("tiny-llama").unwrap()
        }
    );
}

#[test]
fn unknown_key_is_named_with_valid_keys_and_a_hint() {
    let msg = err(&ours_with(r#"{"n_haeds": 4}"#));
    assert!(msg.contains("unknown field `n_haeds`"), "{msg}");
    assert!(msg.contains("did you mean `n_heads`?"), "{msg}");
    let msg = err(&ours_with(r#"{"dmodel": 4}"#));
    assert!(
        msg.contains("unknown field `dmodel` (did you mean `d_model`?)"),
        "{msg}"
    );
    let msg = err(&ours_with(r#"{"n_head": 4}"#));
    assert!(msg.contains("it is `n_heads`"), "{msg}");
    assert!(
        msg.contains("valid fields: name, family, vocab_size"),
        "{msg}"
    );
    let msg = err(&ours_with(r#"{"hidden_size": 128}"#));
    assert!(
        msg.contains("`hidden_size` is a Hugging Face config.json key"),
        "{msg}"
    );
    assert!(msg.contains("it is `d_model`"), "{msg}");
}

#[test]
fn llama_requires_d_ff() {
    let text = r#"{"family": "llama", "vocab_size": 10, "max_seq_len": 8, "n_layers": 1,
                   "n_heads": 1, "d_model": 8}"#;
    assert!(err(text).contains("missing required field `d_ff`"));
}

#[test]
fn missing_key_is_named() {
    let text = r#"{"family": "gpt2", "vocab_size": 10, "n_layers": 1, "n_heads": 1, "d_model": 8}"#;
    let msg = err(text);
    assert!(
        msg.contains("missing required field `max_seq_len`"),
        "{msg}"
    );
}

#[test]
fn unknown_family_lists_the_valid_ones() {
    let msg = err(&ours_with(r#"{"family": "gpt3"}"#));
    assert!(msg.contains("field `family`"), "{msg}");
    assert!(msg.contains(r#"one of "gpt2", "llama", "bert""#), "{msg}");
}

#[test]
fn duplicate_key_is_rejected() {
    let text = r#"{"family": "gpt2", "vocab_size": 10, "max_seq_len": 8, "n_layers": 1,
                   "n_heads": 1, "d_model": 8, "n_heads": 0}"#;
    assert!(err(text).contains("field `n_heads` appears more than once"));
}

// --- type errors ---------------------------------------------------------------------

#[test]
fn wrong_types_name_the_key() {
    let cases = [
        (
            r#"{"d_model": 768.5}"#,
            "field `d_model`: expected a non-negative integer, found 768.5",
        ),
        (
            r#"{"d_model": 128.0}"#,
            "field `d_model`: expected a non-negative integer that fits in u64",
        ),
        (
            r#"{"n_layers": -4}"#,
            "field `n_layers`: expected a non-negative integer, found -4",
        ),
        (
            r#"{"vocab_size": "1000"}"#,
            "field `vocab_size`: expected a non-negative integer, found string \"1000\"",
        ),
        (
            r#"{"n_heads": null}"#,
            "field `n_heads`: expected a non-negative integer, found null",
        ),
        (
            r#"{"n_layers": 1e30}"#,
            "field `n_layers`: expected a non-negative integer that fits in u64",
        ),
        (
            r#"{"vocab_size": 18446744073709551616}"#,
            "field `vocab_size`",
        ),
        (
            r#"{"norm_eps": "1e-5"}"#,
            "field `norm_eps`: expected a number",
        ),
        (
            r#"{"tie_embeddings": 1}"#,
            "field `tie_embeddings`: expected true or false, found 1",
        ),
        (r#"{"name": 7}"#, "field `name`: expected a string, found 7"),
        (r#"{"family": 2}"#, "field `family`: expected a string"),
    ];
    for (patch, expected) in cases {
        let msg = err(&ours_with(patch));
        assert!(msg.contains(expected), "{patch}: {msg}");
    }
}

// --- JSON syntax ---------------------------------------------------------------------

#[test]
fn invalid_json_reports_line_and_column() {
    let msg = err("{\n  \"family\": \"gpt2\",\n  \"n_layers\": 4,,\n}");
    assert!(
        msg.contains("invalid JSON at line 3, column 17: key must be a string"),
        "{msg}"
    );
    assert!(err("").contains("invalid JSON at line 1"));
    assert!(err("{} x").contains("trailing characters"));
}

#[test]
fn top_level_must_be_an_object() {
    assert!(err("[1, 2]").contains("the top level must be a JSON object, found sequence"));
    assert!(err("12").contains("the top level must be a JSON object"));
}

#[test]
fn nan_and_infinity_name_the_key() {
    for token in ["NaN", "Infinity", "-Infinity", "+Infinity", "-NaN"] {
        let text =
            format!("{{\n  \"family\": \"gpt2\",\n  \"norm_eps\": {token},\n  \"d_model\": 8\n}}");
        let msg = err(&text);
        assert!(
            msg.contains("field `norm_eps`: NaN/Infinity is not a number (line 3"),
            "{token}: {msg}"
        );
    }
    // In a Hugging Face file, nested, before any other check.
    let msg =
        err(r#"{"model_type": "llama", "rope_scaling": {"type": "linear", "factor": Infinity}}"#);
    assert!(
        msg.contains("field `rope_scaling.factor`: NaN/Infinity"),
        "{msg}"
    );
    let msg = err(r#"{"model_type": "gpt2", "x": [1, 2, NaN]}"#);
    assert!(msg.contains("field `x[2]`: NaN/Infinity"), "{msg}");
    let msg = err(r#"{"a\"b": NaN}"#);
    assert!(msg.contains(r#"field `a"b`"#), "{msg}");
    // A key or string that merely contains the word is not confused with a value.
    let msg = err(r#"{"NaN": 1,, "x": 2}"#);
    assert!(msg.contains("invalid JSON"), "{msg}");
}

#[test]
fn nesting_deeper_than_serde_json_allows_is_an_error() {
    let deep = format!(
        "{{\"family\": \"gpt2\", \"junk\": {}1{}}}",
        "[".repeat(200),
        "]".repeat(200)
    );
    let msg = err(&deep);
    assert!(
        msg.contains("field `junk`: nested 128 or more levels deep"),
        "{msg}"
    );
    assert!(msg.contains("recursion limit"), "{msg}");
    // 127 levels parse (and then fail on the unknown key, not on depth).
    let ok_depth = format!(
        "{{\"family\": \"gpt2\", \"junk\": {}1{}}}",
        "[".repeat(126),
        "]".repeat(126)
    );
    assert!(err(&ok_depth).contains("unknown field `junk`"));
    // Deep objects, too.
    let deep = format!(
        "{{\"model_type\": \"bert\", \"a\": {}{}}}",
        "{\"b\": ".repeat(300),
        "}".repeat(300)
    );
    assert!(err(&deep).contains("field `a`: nested 128 or more levels deep"));
}

// --- validation ----------------------------------------------------------------------

#[test]
fn zero_sizes_name_the_key() {
    for key in [
        "vocab_size",
        "max_seq_len",
        "n_layers",
        "n_heads",
        "n_kv_heads",
        "d_model",
        "d_ff",
    ] {
        let msg = err(&ours_with(&format!("{{\"{key}\": 0}}")));
        assert!(
            msg.contains(&format!("`{key}` must be at least 1")),
            "{msg}"
        );
    }
}

#[test]
fn divisibility_errors_name_the_keys() {
    let msg = err(&ours_with(r#"{"d_model": 130}"#));
    assert!(
        msg.contains("`d_model` (130) must be divisible by `n_heads` (4)"),
        "{msg}"
    );
    let msg = err(&ours_with(r#"{"n_kv_heads": 3}"#));
    assert!(
        msg.contains("`n_heads` (4) must be divisible by `n_kv_heads` (3)"),
        "{msg}"
    );
    let msg = err(&ours_with(r#"{"n_kv_heads": 8}"#));
    assert!(
        msg.contains("`n_heads` (4) must be divisible by `n_kv_heads` (8)"),
        "{msg}"
    );
    let msg = err(&ours_with(r#"{"d_model": 12}"#));
    assert!(
        msg.contains("`d_model` / `n_heads` = 12 / 4 = 3 must be even"),
        "{msg}"
    );
}

#[test]
fn family_specific_fields_are_checked() {
    let gpt2 = r#"{"family": "gpt2", "vocab_size": 10, "max_seq_len": 8, "n_layers": 1,
                   "n_heads": 2, "d_model": 8, "n_kv_heads": 1}"#;
    assert!(err(gpt2).contains("`n_kv_heads` (1) must equal `n_heads` (2) for gpt2"));
    let msg = err(&ours_with(r#"{"type_vocab_size": 2}"#));
    assert!(
        msg.contains("`type_vocab_size` (2) must be 0 for llama"),
        "{msg}"
    );
}

#[test]
fn eps_and_theta_must_be_finite_and_positive() {
    for (key, value) in [
        ("norm_eps", "0"),
        ("norm_eps", "-1e-5"),
        ("rope_theta", "0.0"),
        ("rope_theta", "-10000"),
    ] {
        let msg = err(&ours_with(&format!("{{\"{key}\": {value}}}")));
        assert!(
            msg.contains(&format!("`{key}` must be finite and > 0")),
            "{msg}"
        );
    }
    // 1e400 parses as infinity in serde_json; it must not slip through.
    let msg = err(&ours_with("{}").replacen('{', r#"{"rope_theta": 1e400,"#, 1));
    assert!(
        msg.contains("(in field `rope_theta`): number out of range"),
        "{msg}"
    );
    let mut cfg = ModelConfig::preset("tiny-llama").unwrap();
    cfg.norm_eps = f64::NAN;
    let msg = cfg.validate().unwrap_err().to_string();
    assert!(
        msg.contains("config `tiny-llama`: `norm_eps` must be finite and > 0, found NaN"),
        "{msg}"
    );
}

#[test]
fn overflowing_sizes_name_the_product() {
    let huge = u64::MAX / 2;
    let msg = err(&ours_with(&format!(r#"{{"vocab_size": {huge}}}"#)));
    assert!(msg.contains("overflow"), "{msg}");
    assert!(msg.contains("vocab_size × d_model"), "{msg}");
    // Fits in u64 as a count but not at 8 bytes per parameter.
    let v = u64::MAX / 8 / 128;
    let msg = err(&ours_with(&format!(r#"{{"vocab_size": {v}}}"#)));
    assert!(msg.contains("parameter count × bytes per element"), "{msg}");
    // d_ff default 4 × d_model overflow in our schema.
    let text = format!(
        r#"{{"family": "gpt2", "vocab_size": 10, "max_seq_len": 8, "n_layers": 1, "n_heads": 1, "d_model": {}}}"#,
        u64::MAX / 2
    );
    assert!(err(&text).contains("d_ff = 4 × d_model"));
    // validate() on a struct built in code.
    let cfg = ModelConfig {
        n_layers: usize::MAX,
        ..ModelConfig::preset("tiny-bert").unwrap()
    };
    let msg = cfg.validate().unwrap_err().to_string();
    assert!(msg.contains("n_layers × parameters per layer"), "{msg}");
}

// --- Hugging Face config.json --------------------------------------------------------

const HF_GPT2_MEDIUM: &str = r#"{
  "activation_function": "gelu_new",
  "architectures": ["GPT2LMHeadModel"],
  "attn_pdrop": 0.1,
  "bos_token_id": 50256,
  "embd_pdrop": 0.1,
  "eos_token_id": 50256,
  "initializer_range": 0.02,
  "layer_norm_epsilon": 1e-05,
  "model_type": "gpt2",
  "n_ctx": 1024,
  "n_embd": 1024,
  "n_head": 16,
  "n_inner": null,
  "n_layer": 24,
  "n_positions": 1024,
  "n_special": 0,
  "predict_special_tokens": true,
  "reorder_and_upcast_attn": false,
  "resid_pdrop": 0.1,
  "scale_attn_by_inverse_layer_idx": false,
  "scale_attn_weights": true,
  "summary_activation": null,
  "summary_first_dropout": 0.1,
  "summary_proj_to_labels": true,
  "summary_type": "cls_index",
  "summary_use_proj": true,
  "task_specific_params": {"text-generation": {"do_sample": true, "max_length": 50}},
  "use_cache": true,
  "vocab_size": 50257
}"#;

/// TinyLlama/TinyLlama-1.1B-Chat-v1.0 config.json, verbatim field set.
const HF_TINYLLAMA: &str = r#"{
  "architectures": ["LlamaForCausalLM"],
  "attention_bias": false,
  "bos_token_id": 1,
  "eos_token_id": 2,
  "hidden_act": "silu",
  "hidden_size": 2048,
  "initializer_range": 0.02,
  "intermediate_size": 5632,
  "max_position_embeddings": 2048,
  "model_type": "llama",
  "num_attention_heads": 32,
  "num_hidden_layers": 22,
  "num_key_value_heads": 4,
  "pretraining_tp": 1,
  "rms_norm_eps": 1e-05,
  "rope_scaling": null,
  "rope_theta": 10000.0,
  "tie_word_embeddings": false,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.35.0",
  "use_cache": true,
  "vocab_size": 32000
}"#;

const HF_BERT: &str = r#"{
  "architectures": ["BertForMaskedLM"],
  "attention_probs_dropout_prob": 0.1,
  "gradient_checkpointing": false,
  "hidden_act": "gelu",
  "hidden_dropout_prob": 0.1,
  "hidden_size": 768,
  "initializer_range": 0.02,
  "intermediate_size": 3072,
  "layer_norm_eps": 1e-12,
  "max_position_embeddings": 512,
  "model_type": "bert",
  "num_attention_heads": 12,
  "num_hidden_layers": 12,
  "pad_token_id": 0,
  "position_embedding_type": "absolute",
  "transformers_version": "4.6.0.dev0",
  "type_vocab_size": 2,
  "use_cache": true,
  "vocab_size": 30522
}"#;

const HF_DISTILBERT: &str = r#"{
  "activation": "gelu",
  "architectures": ["DistilBertForMaskedLM"],
  "attention_dropout": 0.1,
  "dim": 768,
  "dropout": 0.1,
  "hidden_dim": 3072,
  "initializer_range": 0.02,
  "max_position_embeddings": 512,
  "model_type": "distilbert",
  "n_heads": 12,
  "n_layers": 6,
  "pad_token_id": 0,
  "qa_dropout": 0.1,
  "seq_classif_dropout": 0.2,
  "sinusoidal_pos_embds": false,
  "tie_weights_": true,
  "transformers_version": "4.10.0.dev0",
  "vocab_size": 30522
}"#;

fn hf(text: &str) -> ModelConfig {
    ModelConfig::from_json_str(text, "hub/snapshots/abc/config.json").unwrap()
}

#[test]
fn hf_gpt2_with_null_n_inner() {
    let want = ModelConfig {
        name: "gpt2".into(),
        ..ModelConfig::preset("gpt2-medium").unwrap()
    };
    assert_eq!(hf(HF_GPT2_MEDIUM), want);
    assert_eq!(cost::param_count(&want), Some(354_823_168));
}

#[test]
fn hf_tinyllama() {
    let want = ModelConfig {
        name: "llama".into(),
        ..ModelConfig::preset("tinyllama-1.1b").unwrap()
    };
    assert_eq!(hf(HF_TINYLLAMA), want);
    let named = HF_TINYLLAMA.replacen(
        '{',
        r#"{"_name_or_path": "TinyLlama/TinyLlama-1.1B-Chat-v1.0","#,
        1,
    );
    assert_eq!(hf(&named).name, "TinyLlama/TinyLlama-1.1B-Chat-v1.0");
    // A file named after the model keeps its stem.
    let cfg = ModelConfig::from_json_str(HF_TINYLLAMA, "tinyllama.json").unwrap();
    assert_eq!(cfg.name, "tinyllama");
}

#[test]
fn hf_bert_and_distilbert() {
    let want = ModelConfig {
        name: "bert".into(),
        ..ModelConfig::preset("bert-base").unwrap()
    };
    assert_eq!(hf(HF_BERT), want);
    assert_eq!(
        hf(HF_DISTILBERT),
        ModelConfig::preset("distilbert").unwrap()
    );
}

#[test]
fn hf_defaults() {
    // No tie_word_embeddings: llama untied, gpt2 tied; no num_key_value_heads: MHA; llama eps 1e-6.
    let text = r#"{"model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
                   "max_position_embeddings": 32, "num_attention_heads": 4,
                   "num_hidden_layers": 2, "vocab_size": 100}"#;
    let cfg = hf(text);
    assert_eq!(
        (
            cfg.tie_embeddings,
            cfg.n_kv_heads,
            cfg.norm_eps,
            cfg.rope_theta
        ),
        (false, 4, 1e-6, 10000.0)
    );
    let text = r#"{"model_type": "gpt2", "n_embd": 64, "n_positions": 32, "n_head": 4,
                   "n_layer": 2, "vocab_size": 100}"#;
    let cfg = hf(text);
    assert_eq!(
        (cfg.tie_embeddings, cfg.d_ff, cfg.type_vocab_size),
        (true, 256, 0)
    );
}

#[test]
fn hf_errors_name_the_hf_key() {
    let msg =
        err(&HF_TINYLLAMA.replace("\"num_key_value_heads\": 4", "\"num_key_value_heads\": 5"));
    assert!(
        msg.contains("`num_attention_heads` (32) must be divisible by `num_key_value_heads` (5)"),
        "{msg}"
    );
    let msg =
        err(&HF_TINYLLAMA.replace("\"num_attention_heads\": 32", "\"num_attention_heads\": 0"));
    assert!(
        msg.contains("`num_attention_heads` must be at least 1"),
        "{msg}"
    );
    let msg = err(&HF_BERT.replace("\"hidden_size\": 768", "\"hidden_size\": 770"));
    assert!(
        msg.contains("`hidden_size` (770) must be divisible by `num_attention_heads` (12)"),
        "{msg}"
    );
    let msg = err(&HF_GPT2_MEDIUM.replace("\"n_layer\": 24", "\"n_layer\": 24.5"));
    assert!(
        msg.contains("field `n_layer`: expected a non-negative integer, found 24.5"),
        "{msg}"
    );
    let msg = err(&HF_BERT.replace("\"layer_norm_eps\": 1e-12", "\"layer_norm_eps\": 0"));
    assert!(
        msg.contains("`layer_norm_eps` must be finite and > 0"),
        "{msg}"
    );
    let msg = err(&HF_TINYLLAMA.replace("\"rms_norm_eps\": 1e-05", "\"rms_norm_eps\": NaN"));
    assert!(
        msg.contains("field `rms_norm_eps`: NaN/Infinity is not a number"),
        "{msg}"
    );
    let msg =
        err(&HF_TINYLLAMA.replace("\"vocab_size\": 32000", "\"vocab_size\": 1099511627776000"));
    assert!(msg.contains("overflow"), "{msg}");
    let msg = err(&HF_BERT.replace("\"num_hidden_layers\": 12,", ""));
    assert!(
        msg.contains("missing required field `n_layer` or `num_hidden_layers` or `n_layers`"),
        "{msg}"
    );
    let msg = err(&HF_TINYLLAMA.replace("\"intermediate_size\": 5632,", ""));
    assert!(
        msg.contains("missing required field `intermediate_size`"),
        "{msg}"
    );
}

#[test]
fn hf_model_type_memscope_does_not_build_is_kept_whole_for_transformers() {
    let msg = err(r#"{"hidden_size": 8}"#);
    assert!(
        msg.contains("no `model_type` key") && msg.contains("gpt2, llama, bert, distilbert"),
        "{msg}"
    );
    let text = HF_TINYLLAMA.replace("\"llama\"", "\"mistral\"");
    let cfg = parse(&text).unwrap();
    let t = cfg.transformers.as_ref().expect("kept for transformers");
    assert_eq!(t.model_type, "mistral");
    assert_eq!(t.config.len(), parse_object_len(&text));
    assert!(t.built.is_none() && cfg.built().is_none());
    // The config's own numbers until transformers has built it.
    assert_eq!((cfg.d_model, cfg.n_layers, cfg.n_kv_heads), (2048, 22, 4));
    let msg = err(&HF_TINYLLAMA.replace("\"llama\"", "\"qwen2\"").replace(
        "\"hidden_size\"",
        "\"auto_map\": {\"AutoModelForCausalLM\": \"x.Y\"}, \"hidden_size\"",
    ));
    assert!(
        msg.contains("field `auto_map`") && msg.contains("trust_remote_code"),
        "{msg}"
    );
    let msg = err(r#"{"model_type": 3}"#);
    assert!(
        msg.contains("field `model_type`: expected a string"),
        "{msg}"
    );
}

fn parse_object_len(text: &str) -> usize {
    serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(text)
        .unwrap()
        .len()
}

#[test]
fn a_built_model_s_count_and_widths_are_transformers_own() {
    let cfg = parse(&HF_TINYLLAMA.replace("\"llama\"", "\"qwen2\"")).unwrap();
    let b = BuiltModel {
        class: "Qwen2ForCausalLM".into(),
        objective: Objective::Masked,
        parameters: 1_234_567,
        n_layers: 2,
        d_model: 64,
        n_heads: 4,
        n_kv_heads: 2,
        head_dim: 32,
        d_ff: 96,
        vocab_size: 100,
        max_seq_len: 128,
        tie_embeddings: true,
        experts: None,
    };
    let built = cfg.with_built(b.clone());
    assert_eq!(crate::model::cost::param_count(&built), Some(1_234_567));
    assert_eq!(built.head_dim(), 32);
    assert_eq!(built.family, Family::Bert);
    assert_eq!(built.built(), Some(&b));
    built.validate().unwrap();
}

#[test]
fn hf_structural_options_are_rejected_not_ignored() {
    let msg = err(&HF_TINYLLAMA.replace("\"attention_bias\": false", "\"attention_bias\": true"));
    assert!(
        msg.contains("field `attention_bias`: true is not supported for llama"),
        "{msg}"
    );
    let msg = err(&HF_TINYLLAMA.replacen('{', r#"{"head_dim": 128,"#, 1));
    assert!(msg.contains("field `head_dim` (128) differs"), "{msg}");
    assert_eq!(
        hf(&HF_TINYLLAMA.replacen('{', r#"{"head_dim": 64,"#, 1)).head_dim(),
        64
    );
    let msg = err(&HF_BERT.replace("\"absolute\"", "\"relative_key\""));
    assert!(msg.contains("field `position_embedding_type`"), "{msg}");
}

#[test]
fn hf_conflicting_aliases_are_rejected() {
    let msg = err(&HF_GPT2_MEDIUM.replace("\"n_ctx\": 1024", "\"n_ctx\": 2048"));
    assert!(
        msg.contains("fields `n_positions` (1024) and `n_ctx` (2048) disagree"),
        "{msg}"
    );
}

// --- files ---------------------------------------------------------------------------

#[test]
fn from_file_reads_and_names_the_path() {
    let dir = std::env::temp_dir().join(format!("memscope-config-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let good = dir.join("config.json");
    std::fs::write(&good, HF_DISTILBERT).unwrap();
    assert_eq!(
        ModelConfig::from_file(&good).unwrap(),
        ModelConfig::preset("distilbert").unwrap()
    );

    let bad = dir.join("bad.json");
    std::fs::write(&bad, b"{\"family\": \"gpt2\xff\"}").unwrap();
    let msg = ModelConfig::from_file(&bad).unwrap_err().to_string();
    assert!(
        msg.starts_with(&bad.display().to_string()) && msg.contains("not UTF-8"),
        "{msg}"
    );

    let missing = dir.join("missing.json");
    let msg = ModelConfig::from_file(&missing).unwrap_err().to_string();
    assert!(
        msg.starts_with(&missing.display().to_string()) && msg.contains("cannot read"),
        "{msg}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

const HF_LLAMA_SMALL: &str = r#"{"model_type": "llama", "hidden_size": 64, "intermediate_size": 160,
  "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
  "max_position_embeddings": 128, "vocab_size": 100, "hidden_act": "silu", "PATCH": 0}"#;

fn llama_with(patch: &str) -> String {
    HF_LLAMA_SMALL.replace(r#""PATCH": 0"#, patch)
}

#[test]
fn transformers_5_rope_parameters_llama3_are_read() {
    let cfg = hf(&llama_with(
        r#""rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
            "low_freq_factor": 1.0, "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192}"#,
    ));
    assert_eq!(cfg.rope_theta, 500000.0);
    assert_eq!(
        cfg.rope_scaling,
        RopeScaling::Llama3 {
            factor: 8.0,
            low_freq_factor: 1.0,
            high_freq_factor: 4.0,
            original_max_position_embeddings: 8192
        }
    );
    // What memscope writes reads back through its own schema.
    let text = serde_json::to_string(&cfg).unwrap();
    assert!(
        text.contains(r#""rope_scaling":{"rope_type":"llama3""#),
        "{text}"
    );
    assert_eq!(parse(&text).unwrap(), cfg);
    // A plain config writes no rope_scaling key at all.
    let plain = serde_json::to_string(&ModelConfig::preset("tiny-llama").unwrap()).unwrap();
    assert!(!plain.contains("rope_scaling"), "{plain}");
}

#[test]
fn older_rope_theta_and_rope_scaling_are_read() {
    let cfg = hf(&llama_with(
        r#""rope_theta": 1000000.0, "rope_scaling": {"type": "linear", "factor": 4.0}"#,
    ));
    assert_eq!(cfg.rope_theta, 1_000_000.0);
    assert_eq!(cfg.rope_scaling, RopeScaling::Linear { factor: 4.0 });
    let cfg = hf(&llama_with(
        r#""rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}"#,
    ));
    assert_eq!(
        (cfg.rope_theta, cfg.rope_scaling),
        (10000.0, RopeScaling::Default)
    );
}

#[test]
fn unsupported_rope_types_and_fields_are_refused_by_name() {
    let e = err(&llama_with(
        r#""rope_parameters": {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0}"#,
    ));
    assert!(
        e.contains("`rope_parameters.rope_type`: \"yarn\" is not supported"),
        "{e}"
    );
    assert!(e.contains("default, linear, llama3"), "{e}");
    let e = err(&llama_with(
        r#""rope_scaling": {"type": "dynamic", "factor": 2.0}"#,
    ));
    assert!(e.contains("`rope_scaling.type`: \"dynamic\""), "{e}");
    let e = err(&llama_with(
        r#""rope_parameters": {"rope_type": "linear", "rope_theta": 10000.0}"#,
    ));
    assert!(e.contains("rope_parameters.factor"), "{e}");
    let e = err(&llama_with(
        r#""rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "mscale": 1.0}"#,
    ));
    assert!(
        e.contains("`rope_parameters.mscale` is not supported"),
        "{e}"
    );
    let e = err(&llama_with(
        r#""rope_parameters": {"rope_theta": 10000.0, "partial_rotary_factor": 0.5}"#,
    ));
    assert!(e.contains("partial_rotary_factor"), "{e}");
    let e = err(&llama_with(
        r#""rope_theta": 500000.0, "rope_parameters": {"rope_theta": 10000.0}"#,
    ));
    assert!(
        e.contains("`rope_theta`") && e.contains("rope_parameters.rope_theta"),
        "{e}"
    );
}

#[test]
fn activations_and_attention_scaling_other_than_ours_are_refused() {
    let e = err(&llama_with(r#""hidden_act": "gelu""#).replace(r#""hidden_act": "silu", "#, ""));
    assert!(
        e.contains("field `hidden_act`: string \"gelu\" is not supported for llama"),
        "{e}"
    );
    let gpt2 = r#"{"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 4,
        "n_positions": 64, "vocab_size": 100, "PATCH": 0}"#;
    let e = err(&gpt2.replace(r#""PATCH": 0"#, r#""activation_function": "relu""#));
    assert!(e.contains("`activation_function`: string \"relu\""), "{e}");
    assert!(e.contains("gelu_new"), "{e}");
    let e = err(&gpt2.replace(
        r#""PATCH": 0"#,
        r#""scale_attn_by_inverse_layer_idx": true"#,
    ));
    assert!(e.contains("`scale_attn_by_inverse_layer_idx`"), "{e}");
    hf(&gpt2.replace(r#""PATCH": 0"#, r#""activation_function": "gelu_new""#));
}
