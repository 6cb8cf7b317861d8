//! The Rust ↔ Python contract (`src/contract.rs`): the checked-in schema the Python package reads
//! is the one the Rust types generate. After changing a message's type, regenerate it with
//! `MEMSCOPE_UPDATE_CONTRACT=1 cargo test --release --test contract`.

use serde_json::Value;

const CHECKED_IN: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/python/memscope/contract.schema.json"
);

#[test]
fn the_checked_in_schema_is_the_one_the_rust_types_generate() {
    let generated = memscope::contract::schema_json();
    if std::env::var_os("MEMSCOPE_UPDATE_CONTRACT").is_some() {
        std::fs::write(CHECKED_IN, &generated).unwrap();
    }
    let on_disk = std::fs::read_to_string(CHECKED_IN).unwrap_or_default();
    assert!(
        on_disk == generated,
        "python/memscope/contract.schema.json differs from the schema the Rust types generate: \
         regenerate it with MEMSCOPE_UPDATE_CONTRACT=1 cargo test --release --test contract"
    );
}

/// The schema holds what the Python side relies on: each message, with the types it checks.
#[test]
fn the_schema_names_every_message_and_their_fields() {
    let s: Value = serde_json::from_str(&memscope::contract::schema_json()).unwrap();
    let props = &s["properties"];
    for m in [
        "request",
        "engine_line",
        "trace_answer",
        "oom_facts",
        "record",
    ] {
        assert!(props.get(m).is_some(), "no {m} in the contract");
    }
    let spec = &s["$defs"]["Spec"];
    assert_eq!(spec["properties"]["batch"]["type"], "integer");
    let required: Vec<&str> = spec["required"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert!(
        required.contains(&"model") && required.contains(&"seq"),
        "{required:?}"
    );
    // A Record's loss: numbers or the names of values that are not finite.
    let loss = serde_json::to_string(&s["$defs"]["LossValue"]).unwrap();
    assert!(
        loss.contains("number") && loss.contains("NotFiniteName"),
        "{loss}"
    );
    let names = &s["$defs"]["NotFiniteName"]["enum"];
    assert_eq!(*names, serde_json::json!(["NaN", "Infinity", "-Infinity"]));
}
