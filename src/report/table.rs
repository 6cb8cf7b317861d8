//! A plain table (title, header, rows of cells): what the summary, breakdown and peaks sections
//! produce and the terminal and Markdown renderers draw.

pub struct Table {
    pub title: String,
    pub header: Vec<String>,
    pub rows: Vec<Vec<String>>,
}
