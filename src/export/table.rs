//! The one Markdown pipe-table and CSV writer every table memscope writes goes through: a plain
//! [`Table`] (title, header, rows of cells) and its two renderers. Cells arrive as finished text;
//! formatting figures and any special processing of a cell stay with the caller.
//!
//! - Markdown ([`Table::markdown`], drawn as a [`MarkdownStyle`] says): `**title**` and a blank
//!   line when asked, the header line `| a | b |`, the separator row with each column's rule
//!   ([`Align`]: `---`, `---:` or `--:`), then one line `| x | y |` per row; every line ends in
//!   `\n` and nothing follows the last row. An empty header cell is written `| |` (a blank
//!   corner); an empty row cell keeps both spaces, `|  |`. Cells are written as they are unless
//!   the style escapes `|` as `\|` in the header and rows; [`escape`] does it for one column or
//!   a title.
//! - CSV ([`Table::csv`]): through the `csv` crate, the header then the rows (no title), `\n` after
//!   each record, a field quoted only where it needs it.

/// A plain table: what the summary, breakdown, peaks and report sections produce, drawn by the
/// terminal, HTML, Markdown and CSV renderers. `title` is empty where a table has none.
#[derive(Clone, Debug, Default)]
pub struct Table {
    pub title: String,
    pub header: Vec<String>,
    pub rows: Vec<Vec<String>>,
}

/// A column's rule in the Markdown separator row, the alignment a Markdown viewer reads from it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Align {
    /// `---`: no alignment given (left).
    Left,
    /// `---:`: right-aligned.
    Right,
    /// `--:`: right-aligned, written with the shorter rule.
    RightShort,
}

impl Align {
    /// The rule as written between the pipes.
    pub fn rule(self) -> &'static str {
        match self {
            Align::Left => "---",
            Align::Right => "---:",
            Align::RightShort => "--:",
        }
    }
}

/// How [`Table::markdown`] draws a table.
#[derive(Clone, Copy, Debug)]
pub struct MarkdownStyle {
    /// `**title**` and a blank line above the header (the title is written as it is).
    pub title: bool,
    /// Each column's rule, in order; columns past the end take the last entry, and an empty
    /// slice makes every column [`Align::Left`].
    pub align: &'static [Align],
    /// `|` in header and row cells written `\|`.
    pub escape: bool,
}

impl MarkdownStyle {
    /// No title, every column `---`, cells as they are.
    pub const PLAIN: MarkdownStyle = MarkdownStyle {
        title: false,
        align: &[],
        escape: false,
    };

    /// Column `column`'s alignment.
    fn column(&self, column: usize) -> Align {
        self.align
            .get(column)
            .or_else(|| self.align.last())
            .copied()
            .unwrap_or(Align::Left)
    }
}

/// A cell with each `|` written `\|`, so that it stays one Markdown table cell.
pub fn escape(cell: &str) -> String {
    cell.replace('|', "\\|")
}

impl Table {
    /// A table with this header, no title and no rows yet.
    pub fn new<I, S>(header: I) -> Table
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Table {
            title: String::new(),
            header: header.into_iter().map(Into::into).collect(),
            rows: Vec::new(),
        }
    }

    /// Adds one row of cells.
    pub fn push<I, S>(&mut self, cells: I)
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.rows.push(cells.into_iter().map(Into::into).collect());
    }

    /// The table as a Markdown pipe table, drawn as `style` says.
    pub fn markdown(&self, style: &MarkdownStyle) -> String {
        let cell = |c: &String| {
            if style.escape {
                escape(c)
            } else {
                c.clone()
            }
        };
        let mut out = String::new();
        if style.title {
            out += "**";
            out += &self.title;
            out += "**\n\n";
        }
        out.push('|');
        for h in &self.header {
            if h.is_empty() {
                out += " |";
            } else {
                out.push(' ');
                out += &cell(h);
                out += " |";
            }
        }
        out += "\n|";
        for i in 0..self.header.len() {
            out += style.column(i).rule();
            out.push('|');
        }
        out.push('\n');
        for r in &self.rows {
            out += "| ";
            out += &r.iter().map(&cell).collect::<Vec<_>>().join(" | ");
            out += " |\n";
        }
        out
    }

    /// The header and rows as CSV through the `csv` crate (the title is not written; a field
    /// with a comma, a quote or a line break quoted, quotes doubled). Every row has as many cells
    /// as the header, or this fails.
    pub fn csv(&self) -> anyhow::Result<String> {
        let mut w = ::csv::Writer::from_writer(Vec::new());
        w.write_record(&self.header)?;
        for r in &self.rows {
            w.write_record(r)?;
        }
        Ok(String::from_utf8(w.into_inner()?)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markdown_draws_title_rules_escapes_and_a_blank_corner() {
        let mut t = Table::new(["", "a|b", "c"]);
        t.title = "T".into();
        t.push(["x|y", "", "z"]);
        let style = MarkdownStyle {
            title: true,
            align: &[Align::Left, Align::Right],
            escape: true,
        };
        assert_eq!(
            t.markdown(&style),
            "**T**\n\n| | a\\|b | c |\n|---|---:|---:|\n| x\\|y |  | z |\n"
        );
        assert_eq!(
            t.markdown(&MarkdownStyle::PLAIN),
            "| | a|b | c |\n|---|---|---|\n| x|y |  | z |\n"
        );
        let short = MarkdownStyle {
            align: &[Align::Left, Align::RightShort, Align::Left],
            ..MarkdownStyle::PLAIN
        };
        assert!(t.markdown(&short).contains("\n|---|--:|---|\n"));
    }

    #[test]
    fn csv_quotes_what_needs_it() {
        let mut t = Table::new(["a", "b"]);
        t.push(["x,y", "\"q\""]);
        assert_eq!(t.csv().unwrap(), "a,b\n\"x,y\",\"\"\"q\"\"\"\n");
        t.push(["one"]);
        assert!(t.csv().is_err());
    }
}
