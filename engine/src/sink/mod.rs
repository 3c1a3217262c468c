//! Sinks: where a query's results go.
//!
//! A sink drains one stream of batches into a [`BatchWriter`]: a bounded pretty table on
//! stdout, CSV or JSON lines (stdout or a file), Parquet or Arrow IPC files, or `null`,
//! which only counts (for benchmarks). Embedding applications take the stream itself instead.

mod batch_writer;
pub mod exactly_once;
mod table;
mod writers;

use std::path::PathBuf;

use datafusion::common::{Result, plan_err};
use datafusion::execution::SendableRecordBatchStream;
use futures::StreamExt;

pub use batch_writer::BatchWriter;
use batch_writer::NamedFileWriter;
pub use table::TableWriter;
pub use writers::{ArrowFileWriter, CsvWriter, JsonLinesWriter, NullWriter, ParquetFileWriter};

/// Where results go, as the command line's `--output` names it.
#[derive(Debug, Clone, PartialEq)]
pub enum SinkSpec {
    /// A pretty table on stdout showing at most this many rows, then a count of the rest.
    Table { max_rows: usize },
    /// CSV with a header, to stdout or a file.
    Csv(Option<PathBuf>),
    /// One JSON object per line, to stdout or a file.
    JsonLines(Option<PathBuf>),
    /// A Parquet file.
    Parquet(PathBuf),
    /// An Arrow IPC file.
    Arrow(PathBuf),
    /// Discard rows, count them.
    Null,
}

impl SinkSpec {
    /// Refuses this late output where it is the query's `output`, or inside it, or holds it
    /// (with a checkpoint directory each is a directory of part files).
    pub fn refuse_overlap_with(&self, output: &SinkSpec) -> Result<()> {
        let (Some(late), Some(output)) = (self.path(), output.path()) else {
            return Ok(());
        };
        let absolute = |path: &std::path::Path| std::path::absolute(path).unwrap_or(path.into());
        let (late, output) = (absolute(late), absolute(output));
        if output.starts_with(&late) || late.starts_with(&output) {
            return plan_err!(
                "the late output {} and the output {} overlap: write them to different places (with a checkpoint directory each is a directory of its own part files)",
                late.display(),
                output.display()
            );
        }
        Ok(())
    }

    /// The file the rows go to, if they go to one.
    pub fn path(&self) -> Option<&std::path::Path> {
        match self {
            Self::Csv(path) | Self::JsonLines(path) => path.as_deref(),
            Self::Parquet(path) | Self::Arrow(path) => Some(path),
            Self::Table { .. } | Self::Null => None,
        }
    }
}

impl std::str::FromStr for SinkSpec {
    type Err = datafusion::error::DataFusionError;

    fn from_str(text: &str) -> Result<Self> {
        let (kind, path) = match text.split_once('=') {
            Some((kind, path)) if !path.is_empty() => (kind, Some(PathBuf::from(path))),
            _ => (text, None),
        };
        Ok(match (kind, path) {
            ("table", None) => Self::Table { max_rows: 40 },
            ("table", Some(rows)) => match rows.to_string_lossy().parse() {
                Ok(max_rows) => Self::Table { max_rows },
                Err(_) => {
                    return plan_err!("output table={}: expected a row count", rows.display());
                }
            },
            ("csv", path) => Self::Csv(path),
            ("jsonl" | "json", path) => Self::JsonLines(path),
            ("parquet", Some(path)) => Self::Parquet(path),
            ("arrow" | "ipc", Some(path)) => Self::Arrow(path),
            ("null", None) => Self::Null,
            ("parquet" | "arrow" | "ipc", None) => {
                return plan_err!("output format '{kind}' writes a file: use {kind}=PATH");
            }
            _ => {
                return plan_err!(
                    "unknown output format '{text}': expected table, csv[=PATH], jsonl[=PATH], parquet=PATH, arrow=PATH or null"
                );
            }
        })
    }
}

/// What a sink wrote.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SinkSummary {
    pub rows: u64,
    pub batches: u64,
}

impl SinkSpec {
    /// Opens the writer for results of `schema`; stdout outputs go to `stdout`.
    pub fn open(
        &self,
        schema: &datafusion::arrow::datatypes::SchemaRef,
        stdout: Box<dyn std::io::Write + Send>,
    ) -> Result<Box<dyn BatchWriter>> {
        let writer: Box<dyn BatchWriter> = match self {
            Self::Table { max_rows } => Box::new(TableWriter::new(stdout, *max_rows)),
            Self::Csv(path) => Box::new(CsvWriter::new(writers::output(path.as_ref(), stdout)?)),
            Self::JsonLines(path) => Box::new(JsonLinesWriter::new(writers::output(
                path.as_ref(),
                stdout,
            )?)),
            Self::Parquet(path) => Box::new(ParquetFileWriter::create(path, schema)?),
            Self::Arrow(path) => Box::new(ArrowFileWriter::create(path, schema)?),
            Self::Null => Box::new(NullWriter),
        };
        Ok(match self.path() {
            Some(path) => Box::new(NamedFileWriter {
                inner: writer,
                path: path.to_path_buf(),
            }),
            None => writer,
        })
    }
}

/// Writes the whole of the bounded generated stream `spec` to `sink`; returns the records
/// written.
pub fn write_generated(spec: &crate::GeneratorSpec, sink: &SinkSpec) -> Result<u64> {
    let mut writer = sink.open(&spec.schema(), Box::new(std::io::sink()))?;
    let mut index = 0;
    let mut records = 0;
    while let Some(batch) = spec.batch_at(index)? {
        records += batch.num_rows() as u64;
        writer.write(&batch)?;
        index += 1;
    }
    writer.finish()?;
    Ok(records)
}

/// Drains `stream` into `writer`.
pub async fn drain(
    mut stream: SendableRecordBatchStream,
    mut writer: Box<dyn BatchWriter>,
) -> Result<SinkSummary> {
    let mut summary = SinkSummary::default();
    while let Some(batch) = stream.next().await {
        let batch = batch?;
        // Operators pass on empty batches as progress; they are nothing to write.
        if batch.num_rows() == 0 {
            continue;
        }
        summary.rows += batch.num_rows() as u64;
        summary.batches += 1;
        writer.write(&batch)?;
    }
    writer.finish()?;
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_output_specs() {
        assert_eq!("null".parse::<SinkSpec>().unwrap(), SinkSpec::Null);
        assert_eq!("csv".parse::<SinkSpec>().unwrap(), SinkSpec::Csv(None));
        assert_eq!(
            "parquet=out.parquet".parse::<SinkSpec>().unwrap(),
            SinkSpec::Parquet(PathBuf::from("out.parquet"))
        );
        assert_eq!(
            "table=5".parse::<SinkSpec>().unwrap(),
            SinkSpec::Table { max_rows: 5 }
        );
    }

    #[test]
    fn rejects_unknown_formats() {
        let error = "xml".parse::<SinkSpec>().unwrap_err().to_string();
        assert!(error.contains("unknown output format 'xml'"), "{error}");
        assert!("parquet".parse::<SinkSpec>().is_err());
    }
}
