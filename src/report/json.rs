//! JSON export: one Record as an object, several as an array.

use crate::record::Record;
use crate::report::Export;

pub struct Json;

impl Export for Json {
    fn render(&self, records: &[Record]) -> anyhow::Result<String> {
        Ok(match records {
            [one] => one.to_json()?,
            many => serde_json::to_string_pretty(many)? + "\n",
        })
    }
}
