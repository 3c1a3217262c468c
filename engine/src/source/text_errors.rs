//! Where a CSV or JSON-lines stream's bad record is: its file and line.
//!
//! DataFusion reads a text file in byte ranges (one per source partition, or more), each
//! with a decoder of its own, and arrow's decoders number records from the start of what
//! they were given: the "line" an error names is a line of some range, not of the file.
//! When a text stream's read fails, the source looks for the bad record itself:
//!
//! 1. Each of the scan's files is read again, in order, as the scan reads it (same schema,
//!    columns and CSV dialect), by one decoder fed the file line by line, so that it knows
//!    the line each batch starts at.
//! 2. The first batch that fails is read again one record at a time: the line where a record
//!    fails is the line to report.
//!
//! Only the columns the query reads are parsed, as in the scan, so a bad value in a column
//! the query never reads is never reported. This runs only after a read has failed.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::error::ArrowError;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::arrow::{csv, json};
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::datasource::physical_plan::{CsvSource, FileScanConfig};
use datafusion::datasource::source::DataSourceExec;
use datafusion::physical_plan::ExecutionPlan;

/// Records decoded at a time while looking for the failing batch.
const SEARCH_BATCH_ROWS: usize = 4096;

/// A text stream's files and how its scan parses them.
#[derive(Debug)]
pub struct TextFiles {
    files: Vec<PathBuf>,
    schema: SchemaRef,
    /// The columns of `schema` the scan parses.
    projection: Option<Vec<usize>>,
    format: TextFormat,
}

#[derive(Debug)]
enum TextFormat {
    Csv(Arc<CsvSource>),
    JsonLines,
}

/// One of the two decoders, with its batch size.
struct Decoder {
    kind: DecoderKind,
    batch_rows: usize,
}

enum DecoderKind {
    Csv(Box<csv::reader::Decoder>),
    Json(json::reader::Decoder),
}

impl Decoder {
    /// Decodes `line`, and flushes (parses) the batch once it is full. `true` when a batch
    /// was flushed.
    fn feed(&mut self, line: &[u8]) -> Result<bool, ArrowError> {
        let mut fed = 0;
        let mut flushed = false;
        while fed < line.len() {
            let read = match &mut self.kind {
                DecoderKind::Csv(decoder) => decoder.decode(&line[fed..])?,
                DecoderKind::Json(decoder) => decoder.decode(&line[fed..])?,
            };
            fed += read;
            if self.buffered() >= self.batch_rows {
                self.flush()?;
                flushed = true;
            } else if read == 0 {
                // Never expected; a decoder that takes nothing must not make this spin.
                break;
            }
        }
        Ok(flushed)
    }

    /// Complete records decoded and not yet flushed.
    fn buffered(&self) -> usize {
        match &self.kind {
            DecoderKind::Csv(decoder) => self.batch_rows - decoder.capacity(),
            DecoderKind::Json(decoder) => decoder.len(),
        }
    }

    fn flush(&mut self) -> Result<Option<RecordBatch>, ArrowError> {
        match &mut self.kind {
            DecoderKind::Csv(decoder) => decoder.flush(),
            DecoderKind::Json(decoder) => decoder.flush(),
        }
    }
}

impl TextFiles {
    /// The text files `plan` scans (a CSV or JSON-lines `DataSourceExec` in it), if any.
    pub fn of_plan(plan: &Arc<dyn ExecutionPlan>) -> Option<Arc<Self>> {
        let mut found = None;
        let _ = plan.apply(|node| {
            let config = node
                .downcast_ref::<DataSourceExec>()
                .and_then(|source| source.data_source().downcast_ref::<FileScanConfig>());
            if let Some(config) = config {
                found = Self::of_scan(config);
                return Ok(TreeNodeRecursion::Stop);
            }
            Ok(TreeNodeRecursion::Continue)
        });
        found.map(Arc::new)
    }

    fn of_scan(config: &FileScanConfig) -> Option<Self> {
        let source = config.file_source();
        let format = match source.file_type() {
            "csv" => TextFormat::Csv(Arc::new(source.downcast_ref::<CsvSource>()?.clone())),
            "json" => TextFormat::JsonLines,
            _ => return None,
        };
        let mut files: Vec<PathBuf> = config
            .file_groups
            .iter()
            .flat_map(|group| group.iter())
            .map(|file| PathBuf::from(format!("/{}", file.object_meta.location)))
            .collect();
        files.sort();
        files.dedup();
        Some(Self {
            files,
            schema: Arc::clone(config.file_schema()),
            projection: source.projection().map(|projection| {
                let columns = config.file_schema().fields().len();
                let mut parsed = projection.column_indices();
                parsed.retain(|&column| column < columns);
                parsed
            }),
            format,
        })
    }

    /// "FILE, line N: what is wrong" for the first bad record of the files, or `None` when
    /// every record reads (the failure was elsewhere) or a file cannot be read again.
    pub fn locate_error(&self) -> Option<String> {
        self.files.iter().find_map(|file| self.locate_in(file))
    }

    fn locate_in(&self, file: &Path) -> Option<String> {
        let failed_from = self.failing_batch_start(file)?;
        // Read that batch again, a record at a time: a record is parsed as soon as it is
        // complete, so the line it fails at is the line it ends on.
        let mut decoder = self.decoder(1, failed_from == 1).ok()?;
        let mut lines = Lines::open(file)?;
        for _ in 1..failed_from {
            lines.next()?;
        }
        loop {
            let Some(line) = lines.next() else {
                let error = decoder.flush().err()?;
                return Some(describe(file, lines.number, &error, Some(&self.schema)));
            };
            if let Err(error) = decoder.feed(&line) {
                return Some(describe(file, lines.number, &error, Some(&self.schema)));
            }
        }
    }

    /// The line the first batch that fails to decode starts at, reading `file` in batches
    /// of [`SEARCH_BATCH_ROWS`] records fed whole lines at a time.
    fn failing_batch_start(&self, file: &Path) -> Option<usize> {
        let mut decoder = self.decoder(SEARCH_BATCH_ROWS, true).ok()?;
        let mut lines = Lines::open(file)?;
        let mut batch_start = 1;
        while let Some(line) = lines.next() {
            match decoder.feed(&line) {
                Ok(false) => {}
                Ok(true) => batch_start = lines.number + 1,
                Err(_) => return Some(batch_start),
            }
        }
        decoder.flush().err().map(|_| batch_start)
    }

    /// A decoder of `batch_rows` records that parses what the scan parses; `header` when it
    /// starts at the top of a file that has one.
    fn decoder(&self, batch_rows: usize, header: bool) -> Result<Decoder, ArrowError> {
        Ok(match &self.format {
            TextFormat::Csv(source) => {
                let mut builder = csv::ReaderBuilder::new(Arc::clone(&self.schema))
                    .with_delimiter(source.delimiter())
                    .with_quote(source.quote())
                    .with_header(header && source.has_header())
                    .with_truncated_rows(source.truncate_rows())
                    .with_batch_size(batch_rows);
                if let Some(terminator) = source.terminator() {
                    builder = builder.with_terminator(terminator);
                }
                if let Some(escape) = source.escape() {
                    builder = builder.with_escape(escape);
                }
                if let Some(comment) = source.comment() {
                    builder = builder.with_comment(comment);
                }
                if let Some(projection) = &self.projection {
                    builder = builder.with_projection(projection.clone());
                }
                Decoder {
                    kind: DecoderKind::Csv(Box::new(builder.build_decoder())),
                    batch_rows,
                }
            }
            TextFormat::JsonLines => {
                let schema = match &self.projection {
                    Some(projection) => Arc::new(self.schema.project(projection)?),
                    None => Arc::clone(&self.schema),
                };
                Decoder {
                    kind: DecoderKind::Json(
                        json::ReaderBuilder::new(schema)
                            .with_batch_size(batch_rows)
                            .build_decoder()?,
                    ),
                    batch_rows,
                }
            }
        })
    }
}

/// Lines of JSON-lines files searched for the one that does not parse, when inferring their
/// schema failed: inference reads the first records only.
const SCHEMA_SEARCH_LINES: usize = 100_000;

/// "FILE, line N: what is wrong" for the first line of `files` that is not a JSON value,
/// when inferring their schema failed (the error names a line of the one record).
pub fn locate_json_syntax_error(files: &[PathBuf]) -> Option<String> {
    files.iter().find_map(|file| {
        let mut lines = Lines::open(file)?;
        while lines.number < SCHEMA_SEARCH_LINES {
            let line = lines.next()?;
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            if let Err(error) = json::reader::infer_json_schema(&mut line.as_slice(), None) {
                return Some(describe(file, lines.number, &error, None));
            }
        }
        None
    })
}

/// A file's lines, counted.
struct Lines {
    reader: BufReader<File>,
    number: usize,
}

impl Lines {
    fn open(file: &Path) -> Option<Self> {
        Some(Self {
            reader: BufReader::new(File::open(file).ok()?),
            number: 0,
        })
    }

    /// The next line with its terminator; `None` at the end or on a read error.
    fn next(&mut self) -> Option<Vec<u8>> {
        let mut line = Vec::new();
        match self.reader.read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => None,
            Ok(_) => {
                self.number += 1;
                Some(line)
            }
        }
    }
}

/// "FILE, line N: message", with the names of the columns a CSV message numbers.
fn describe(file: &Path, line: usize, error: &ArrowError, columns: Option<&SchemaRef>) -> String {
    let mut message = without_relative_lines(&error.to_string());
    if let Some(schema) = columns {
        message = with_column_names(&message, schema);
    }
    format!("{}, line {line}: {message}", file.display())
}

/// `message` with each "column N" (arrow's CSV errors number the file's columns from 0)
/// followed by the column's name.
fn with_column_names(message: &str, schema: &SchemaRef) -> String {
    const MARKER: &str = "column ";
    let mut named = String::with_capacity(message.len());
    let mut rest = message;
    while let Some(at) = rest.find(MARKER) {
        let after = &rest[at + MARKER.len()..];
        let digits = after
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(after.len());
        named.push_str(&rest[..at + MARKER.len() + digits]);
        if let Some(field) = after[..digits]
            .parse::<usize>()
            .ok()
            .and_then(|index| schema.fields().get(index))
        {
            named.push_str(&format!(" ('{}')", field.name()));
        }
        rest = &after[digits..];
    }
    named.push_str(rest);
    named
}

/// `message` without arrow's kind prefixes and its line numbers (which count from the start
/// of a decoder's input, not of the file).
fn without_relative_lines(message: &str) -> String {
    let mut text = message.to_string();
    for prefix in ["Csv error: ", "Json error: ", "Parser error: "] {
        text = text.replace(prefix, "");
    }
    for marker in [" at line ", " for line "] {
        while let Some(start) = text.find(marker) {
            let digits = text[start + marker.len()..]
                .find(|c: char| !c.is_ascii_digit())
                .map_or(text.len(), |end| start + marker.len() + end);
            let mut end = digits;
            // serde's "at line 1 column 5"
            if let Some(rest) = text[end..].strip_prefix(" column ") {
                end += " column ".len()
                    + rest
                        .find(|c: char| !c.is_ascii_digit())
                        .unwrap_or(rest.len());
            }
            text.replace_range(start..end, "");
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::datatypes::{DataType, Field, Schema};

    use super::*;

    #[test]
    fn columns_are_named() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("symbol", DataType::Utf8, false),
            Field::new("price", DataType::Float64, false),
        ]));
        assert_eq!(
            with_column_names("value 'x' for column 1. Row data: '[column 7]'", &schema),
            "value 'x' for column 1 ('price'). Row data: '[column 7]'"
        );
    }

    #[test]
    fn relative_line_numbers_are_taken_out() {
        assert_eq!(
            without_relative_lines(
                "Csv error: incorrect number of fields for line 1535, expected 3 got 2"
            ),
            "incorrect number of fields, expected 3 got 2"
        );
        assert_eq!(
            without_relative_lines(
                "Parser error: Error while parsing value 'x' as type 'Float64' for column 1 at line 12. Row data: '[a,x]'"
            ),
            "Error while parsing value 'x' as type 'Float64' for column 1. Row data: '[a,x]'"
        );
        assert_eq!(
            without_relative_lines(
                "Json error: Not valid JSON: EOF while parsing a value at line 1 column 5"
            ),
            "Not valid JSON: EOF while parsing a value"
        );
    }
}
