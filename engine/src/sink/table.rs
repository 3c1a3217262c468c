//! The terminal sink: rows as pretty tables, printed as they arrive, up to a row budget;
//! the rest is counted and reported at the end, so an endless stream never floods a terminal
//! and never holds rows back.

use std::io::Write;

use datafusion::arrow::record_batch::RecordBatch;
use datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};
use datafusion::arrow::util::pretty::pretty_format_batches;
use datafusion::common::{DataFusionError, Result};

use super::batch_writer::BatchWriter;

/// Prints at most `max_rows` rows, then a count of the rows not shown.
pub struct TableWriter {
    out: Box<dyn Write + Send>,
    max_rows: usize,
    shown: usize,
    hidden: u64,
    header_printed: bool,
    /// The table's bottom line, printed once at the end: chunks printed as they come join
    /// into one table.
    bottom: Option<String>,
}

impl TableWriter {
    pub fn new(out: Box<dyn Write + Send>, max_rows: usize) -> Self {
        Self {
            out,
            max_rows,
            shown: 0,
            hidden: 0,
            header_printed: false,
            bottom: None,
        }
    }
}

impl BatchWriter for TableWriter {
    fn write(&mut self, batch: &RecordBatch) -> Result<()> {
        let take = (self.max_rows - self.shown).min(batch.num_rows());
        self.hidden += (batch.num_rows() - take) as u64;
        if take == 0 {
            return Ok(());
        }
        let shown = batch.slice(0, take);
        check_displayable(&shown)?;
        let table = pretty_format_batches(&[shown])?.to_string();
        // Later chunks repeat no header: skip the table's first three lines.
        let mut lines: Vec<&str> = table.lines().collect();
        self.bottom = lines.pop().map(str::to_string);
        let body = if self.header_printed {
            &lines[3.min(lines.len())..]
        } else {
            &lines[..]
        };
        for line in body {
            writeln!(self.out, "{line}")?;
        }
        self.out.flush()?;
        self.header_printed = true;
        self.shown += take;
        Ok(())
    }

    fn finish(mut self: Box<Self>) -> Result<()> {
        match &self.bottom {
            Some(bottom) => writeln!(self.out, "{bottom}")?,
            None => writeln!(self.out, "(no rows)")?,
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

/// Fails on a value that cannot be shown (a timestamp out of range), naming its column, as
/// the file sinks fail, rather than letting the table print an `ERROR` cell.
fn check_displayable(batch: &RecordBatch) -> Result<()> {
    let options = FormatOptions::default().with_display_error(false);
    for (column, field) in batch.columns().iter().zip(batch.schema().fields()) {
        let formatter = ArrayFormatter::try_new(column.as_ref(), &options)?;
        for row in 0..batch.num_rows() {
            if let Err(error) = formatter.value(row).try_to_string() {
                return Err(DataFusionError::Execution(format!(
                    "column '{}' cannot be shown: {error}",
                    field.name()
                )));
            }
        }
    }
    Ok(())
}
