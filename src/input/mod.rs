//! Reading data other programs wrote: memory series from CSV, JSONL and text logs; token files
//! for `--data`.

pub mod capped;
pub mod series;
pub mod series_csv;
pub mod series_fields;
pub mod series_jsonl;
pub mod series_log;
pub mod series_types;
pub mod tokens;
