//! Property test: no input makes the series parsers (every format, detected or forced) or the model
//! config parser panic; they return a value or an error. Case counts are modest (the suite runs on
//! 2 cores); inputs mix random bytes with fragments of real logs and configs.

use memscope::input::series::{parse_reader, parse_series, ParseOptions, SeriesFormat};
use memscope::model::config::ModelConfig;
use proptest::prelude::*;

/// Lines built from pieces real logs and configs contain.
fn fragments() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        Just("step,rss_mb\n".to_string()),
        Just("run,cumulative_mb\n".to_string()),
        Just("{\"step\": 1, \"heap\": 100}\n".to_string()),
        Just("2024-01-01 10:00:00,123 - INFO - Step 0: 1000 MB\n".to_string()),
        Just("-0.46".to_string()),
        Just("1e400".to_string()),
        Just("NaN".to_string()),
        Just("18446744073709551615".to_string()),
        Just("1.7976931348623157e308".to_string()),
        Just(",".to_string()),
        Just("\"".to_string()),
        Just("\n".to_string()),
        Just("\t".to_string()),
        Just("{".to_string()),
        Just("\u{feff}".to_string()),
        Just("1,234.5 MiB".to_string()),
        "[0-9]{1,5}".prop_map(|s| s),
        "[ -~]{0,12}".prop_map(|s| s),
    ];
    prop::collection::vec(piece, 0..40).prop_map(|v| v.concat())
}

fn formats() -> impl Strategy<Value = Option<SeriesFormat>> {
    prop_oneof![
        Just(None),
        Just(Some(SeriesFormat::Csv)),
        Just(Some(SeriesFormat::Jsonl)),
        Just(Some(SeriesFormat::Log)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn series_parsers_never_panic_on_text(text in fragments(), format in formats()) {
        let opts = ParseOptions { format, ..Default::default() };
        let _ = parse_series(&text, &opts);
    }

    #[test]
    fn series_parsers_never_panic_on_bytes(bytes in prop::collection::vec(any::<u8>(), 0..512), format in formats()) {
        let opts = ParseOptions { format, ..Default::default() };
        let _ = parse_reader(&mut &bytes[..], &opts);
    }

    #[test]
    fn series_then_verdict_never_panics(text in fragments()) {
        if let Ok((s, _)) = parse_series(&text, &ParseOptions::default()) {
            let r = memscope::analysis::leak::analyze(&s, &Default::default());
            prop_assert!(!r.sentence.contains("NaN"));
        }
    }

    #[test]
    fn model_config_parser_never_panics(text in prop_oneof![
        "[ -~]{0,64}".prop_map(|s| s),
        prop::collection::vec(prop_oneof![
            Just("{".to_string()), Just("}".to_string()), Just("\"n_layer\": ".to_string()),
            Just("\"n_head\": ".to_string()), Just("\"n_embd\": ".to_string()),
            Just("\"vocab_size\": ".to_string()), Just("\"model_type\": \"gpt2\"".to_string()),
            Just("\"num_key_value_heads\": ".to_string()), Just(",".to_string()),
            Just("1e309".to_string()), Just("-1".to_string()), Just("0".to_string()),
            Just("18446744073709551615".to_string()), Just("[".to_string()), Just("]".to_string()),
            "[0-9]{1,6}".prop_map(|s| s),
        ], 0..30).prop_map(|v| v.concat()),
    ]) {
        let _ = ModelConfig::from_json_str(&text, "prop.json");
    }
}
