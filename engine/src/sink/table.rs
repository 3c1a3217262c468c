//! The terminal sink: rows as a pretty table, printed as they arrive, up to a row budget;
//! the rest is counted and reported at the end, so an endless stream never floods a terminal
//! and never holds rows back.
//!
//! Rows arrive a batch at a time and are printed at once, so the columns' widths cannot wait
//! for the last row. Each column is as wide as its name and every value shown so far; a
//! batch with a wider value widens its column and prints the header again at the new widths
//! before its rows, so that every row lines up with the header above it.

use std::io::Write;

use datafusion::arrow::record_batch::RecordBatch;
use datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};
use datafusion::common::{DataFusionError, Result};
use unicode_width::UnicodeWidthStr;

use super::batch_writer::BatchWriter;

/// Prints at most `max_rows` rows, then a count of the rows not shown.
pub struct TableWriter {
    out: Box<dyn Write + Send>,
    max_rows: usize,
    shown: usize,
    hidden: u64,
    /// The column names, once the first rows have been printed under them.
    header: Vec<String>,
    /// Each column's width: its name's and every shown value's.
    widths: Vec<usize>,
}

impl TableWriter {
    pub fn new(out: Box<dyn Write + Send>, max_rows: usize) -> Self {
        Self {
            out,
            max_rows,
            shown: 0,
            hidden: 0,
            header: Vec::new(),
            widths: Vec::new(),
        }
    }

    fn rule(&self) -> String {
        let dashes: Vec<String> = self.widths.iter().map(|w| "-".repeat(w + 2)).collect();
        format!("+{}+", dashes.join("+"))
    }

    /// A row's lines: as many as its cell of the most lines has (an EXPLAIN plan, a value
    /// with line breaks), each cell's lines padded to its column's width.
    fn lines(&self, cells: &[String]) -> String {
        let cell_lines: Vec<Vec<&str>> = cells
            .iter()
            .map(|cell| cell.split('\n').collect())
            .collect();
        let height = cell_lines.iter().map(Vec::len).max().unwrap_or(1);
        let mut text = String::new();
        for index in 0..height {
            let padded: Vec<String> = cell_lines
                .iter()
                .zip(&self.widths)
                .map(|(lines, &width)| {
                    let line = lines.get(index).copied().unwrap_or("");
                    format!("{line}{}", " ".repeat(width - display_width(line)))
                })
                .collect();
            text.push_str(&format!("| {} |\n", padded.join(" | ")));
        }
        text
    }
}

impl BatchWriter for TableWriter {
    fn write(&mut self, batch: &RecordBatch) -> Result<()> {
        let take = (self.max_rows - self.shown).min(batch.num_rows());
        self.hidden += (batch.num_rows() - take) as u64;
        if take == 0 {
            return Ok(());
        }
        let rows = cells(&batch.slice(0, take))?;
        let first = self.header.is_empty();
        if first {
            self.header = batch
                .schema()
                .fields()
                .iter()
                .map(|f| f.name().clone())
                .collect();
            self.widths = self.header.iter().map(|name| display_width(name)).collect();
        }
        let mut widened = false;
        for row in &rows {
            for (width, cell) in self.widths.iter_mut().zip(row) {
                if display_width(cell) > *width {
                    *width = display_width(cell);
                    widened = true;
                }
            }
        }
        let mut text = String::new();
        if first || widened {
            let rule = self.rule();
            text.push_str(&format!("{rule}\n{}{rule}\n", self.lines(&self.header)));
        }
        for row in &rows {
            text.push_str(&self.lines(row));
        }
        self.out.write_all(text.as_bytes())?;
        self.out.flush()?;
        self.shown += take;
        Ok(())
    }

    fn finish(mut self: Box<Self>) -> Result<()> {
        if self.header.is_empty() {
            writeln!(self.out, "(no rows)")?;
        } else {
            let rule = self.rule();
            writeln!(self.out, "{rule}")?;
        }
        if self.hidden > 0 {
            writeln!(
                self.out,
                "… {} more rows not shown ({} rows in all)",
                self.hidden,
                self.hidden + self.shown as u64
            )?;
        }
        self.out.flush()?;
        Ok(())
    }
}

/// The columns a cell takes on a terminal: those of its longest line, a wide character (of
/// Chinese, Japanese or Korean, an emoji) counting two, as arrow's own table measures it.
fn display_width(cell: &str) -> usize {
    cell.split('\n')
        .map(UnicodeWidthStr::width)
        .max()
        .unwrap_or(0)
}

/// Each row's values as text (a value with line breaks spans as many lines). Fails on
/// a value that cannot be shown (a timestamp out of range), naming its column, as the file
/// sinks fail, rather than printing an `ERROR` cell.
fn cells(batch: &RecordBatch) -> Result<Vec<Vec<String>>> {
    let options = FormatOptions::default().with_display_error(false);
    let mut rows = vec![Vec::with_capacity(batch.num_columns()); batch.num_rows()];
    for (column, field) in batch.columns().iter().zip(batch.schema().fields()) {
        let formatter = ArrayFormatter::try_new(column.as_ref(), &options)?;
        for (row, cells) in rows.iter_mut().enumerate() {
            let cell = formatter.value(row).try_to_string().map_err(|error| {
                DataFusionError::Execution(format!(
                    "column '{}' cannot be shown: {error}",
                    field.name()
                ))
            })?;
            cells.push(cell);
        }
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use datafusion::arrow::array::{Int64Array, StringArray};
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    use datafusion::arrow::util::pretty::pretty_format_batches;

    use super::*;

    /// A writer whose text the test reads back.
    #[derive(Clone, Default)]
    struct Shared(Arc<Mutex<Vec<u8>>>);

    impl Write for Shared {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0
                .lock()
                .expect("not poisoned")
                .extend_from_slice(bytes);
            Ok(bytes.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn batch(names: &[Option<&str>], counts: &[i64]) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("name", DataType::Utf8, true),
            Field::new("n", DataType::Int64, false),
        ]));
        RecordBatch::try_new(
            schema,
            vec![
                Arc::new(StringArray::from(names.to_vec())),
                Arc::new(Int64Array::from(counts.to_vec())),
            ],
        )
        .expect("a batch")
    }

    fn printed(batches: &[RecordBatch], max_rows: usize) -> String {
        let out = Shared::default();
        let mut writer = Box::new(TableWriter::new(Box::new(out.clone()), max_rows));
        for batch in batches {
            writer.write(batch).expect("printed");
        }
        writer.finish().expect("finished");
        let bytes = out.0.lock().expect("not poisoned").clone();
        String::from_utf8(bytes).expect("text")
    }

    /// Prints `rows` as one batch, checks the text against arrow's table of it, and returns it.
    fn printed_as_arrow_prints(rows: RecordBatch) -> String {
        let expected = pretty_format_batches(std::slice::from_ref(&rows))
            .expect("formatted")
            .to_string();
        let text = printed(&[rows], 40);
        assert_eq!(text, format!("{expected}\n"));
        text
    }

    #[test]
    fn one_batch_prints_as_arrow_prints_it() {
        printed_as_arrow_prints(batch(&[Some("bob"), None, Some("alice")], &[4, 10, 123]));
    }

    #[test]
    fn a_value_with_line_breaks_spans_lines_as_arrow_prints_it() {
        // An EXPLAIN plan is one such value per row.
        let text = printed_as_arrow_prints(batch(
            &[Some("Projection\n  Filter\n    Scan"), Some("x")],
            &[4, 10],
        ));
        assert!(text.contains("\n|   Filter   |    |\n"), "{text}");
    }

    #[test]
    fn wide_characters_line_up_as_arrow_prints_them() {
        let text = printed_as_arrow_prints(batch(
            &[Some("東京"), Some("abc"), Some("😀x")],
            &[1, 22, 333],
        ));
        assert!(text.contains("| 東京 | 1   |"), "{text}");
    }

    #[test]
    fn a_wider_value_later_prints_the_header_again_at_the_new_widths() {
        let text = printed(
            &[
                batch(&[Some("bob")], &[4]),
                batch(&[Some("al")], &[5]),
                batch(&[Some("alice")], &[12345]),
            ],
            40,
        );
        let expected = "\
+------+---+
| name | n |
+------+---+
| bob  | 4 |
| al   | 5 |
+-------+-------+
| name  | n     |
+-------+-------+
| alice | 12345 |
+-------+-------+
";
        assert_eq!(text, expected);
        // Every row lines up with the rule above it.
        let mut rule_length = 0;
        for line in text.lines() {
            if line.starts_with('+') {
                rule_length = line.chars().count();
            }
            assert_eq!(line.chars().count(), rule_length, "{line}");
        }
    }

    #[test]
    fn rows_beyond_the_budget_are_counted_not_printed() {
        let text = printed(
            &[
                batch(&[Some("a"), Some("b")], &[1, 2]),
                batch(&[Some("c")], &[3]),
            ],
            2,
        );
        assert!(!text.contains("| c "), "{text}");
        assert!(
            text.ends_with("… 1 more rows not shown (3 rows in all)\n"),
            "{text}"
        );
        assert_eq!(printed(&[], 40), "(no rows)\n");
    }
}
