//! A plain table (title, header, rows of cells): what the summary, breakdown and peaks sections
//! produce and the terminal, HTML and Markdown renderers draw. The type lives in `export::table`,
//! beside the one Markdown and CSV writer; this name stays for the report files that use it.

pub use crate::export::table::Table;
