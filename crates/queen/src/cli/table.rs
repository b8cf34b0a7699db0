//! A plain aligned table for people: a header row, columns padded to their
//! widest cell (counted in chars), two spaces between columns, the last
//! column unpadded. No borders, no colours, so it pipes well.

/// Rows of text under a header.
pub(crate) struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these column titles.
    pub(crate) fn new<const N: usize>(header: [&str; N]) -> Self {
        Table { header: header.iter().map(|h| (*h).to_owned()).collect(), rows: Vec::new() }
    }

    /// Adds a row (missing cells are blank, extra ones dropped).
    pub(crate) fn row<I, S>(&mut self, cells: I)
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let mut row: Vec<String> = cells.into_iter().map(Into::into).take(self.header.len()).collect();
        row.resize(self.header.len(), String::new());
        self.rows.push(row);
    }

    /// The table as text, one line per row, each ending in a newline.
    pub(crate) fn render(&self) -> String {
        let mut widths: Vec<usize> = self.header.iter().map(|h| h.chars().count()).collect();
        for row in &self.rows {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(cell.chars().count());
            }
        }
        let mut out = String::new();
        for row in std::iter::once(&self.header).chain(&self.rows) {
            let last = row.len().saturating_sub(1);
            let mut line = String::new();
            for (i, (cell, w)) in row.iter().zip(&widths).enumerate() {
                line.push_str(cell);
                if i < last {
                    let pad = w - cell.chars().count() + 2;
                    line.extend(std::iter::repeat_n(' ', pad));
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

/// `text` cut to `max` chars, with an ellipsis when cut; newlines become spaces.
pub(crate) fn clip(text: &str, max: usize) -> String {
    let flat: String = text.chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
    if flat.chars().count() <= max {
        return flat;
    }
    let mut cut: String = flat.chars().take(max.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

/// Aligned `name  value` lines (a vertical record).
pub(crate) fn record(fields: &[(&str, String)]) -> String {
    let width = fields.iter().map(|(k, _)| k.chars().count()).max().unwrap_or(0);
    let mut out = String::new();
    for (k, v) in fields {
        out.push_str(&format!("{k:<width$}  {v}\n"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_align_on_the_widest_cell_and_the_last_is_unpadded() {
        let mut t = Table::new(["A", "LONG HEADER", "C"]);
        t.row(["wide cell", "x", "end"]);
        t.row(["y"]);
        assert_eq!(t.render(), "A          LONG HEADER  C\nwide cell  x            end\ny\n");
    }

    #[test]
    fn clip_cuts_with_an_ellipsis_and_flattens_newlines() {
        assert_eq!(clip("abc", 3), "abc");
        assert_eq!(clip("abcd", 3), "ab…");
        assert_eq!(clip("a\nb", 5), "a b");
        assert_eq!(clip("ééé", 2), "é…");
    }
}
