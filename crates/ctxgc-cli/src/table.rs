//! Plain-text tables for terminal reports.

use comfy_table::{Cell, CellAlignment, Table, presets};

/// A titled table of a report, shown in the terminal and in the HTML report alike.
pub struct Section {
    /// What the table shows.
    pub title: String,
    /// Column names.
    pub header: Vec<String>,
    /// Cells, row by row.
    pub rows: Vec<Vec<String>>,
}

/// A table with a header row; numeric cells are right-aligned.
pub fn render(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut table = Table::new();
    table.load_preset(presets::ASCII_MARKDOWN);
    table.set_header(header.iter().map(Cell::new));
    for row in rows {
        table.add_row(row.iter().map(|v| {
            let cell = Cell::new(v);
            if looks_numeric(v) {
                cell.set_alignment(CellAlignment::Right)
            } else {
                cell
            }
        }));
    }
    table.to_string()
}

fn looks_numeric(v: &str) -> bool {
    let core = v
        .trim_start_matches(['$', '-', '+'])
        .trim_end_matches(['%', 'x']);
    !core.is_empty()
        && core
            .chars()
            .all(|c| c.is_ascii_digit() || c == ',' || c == '.')
}

/// `1234567` -> `1,234,567`.
pub fn num(n: impl Into<u64>) -> String {
    ctxgc_core::trim::lines::group(n.into())
}
