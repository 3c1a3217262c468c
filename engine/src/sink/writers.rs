//! File and stream writers for the sinks, on arrow's own CSV, JSON, IPC and Parquet writers.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use datafusion::arrow::array::{Array, AsArray, Float32Array, Float64Array};
use datafusion::arrow::csv;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::datatypes::{DataType, FieldRef, Float32Type, Float64Type};
use datafusion::arrow::error::ArrowError;
use datafusion::arrow::ipc::writer::FileWriter;
use datafusion::arrow::json::writer::{Encoder, EncoderFactory, EncoderOptions, NullableEncoder};
use datafusion::arrow::json::{self, LineDelimitedWriter};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::{Result, plan_err};
use datafusion::parquet::arrow::ArrowWriter;
use datafusion::parquet::file::properties::WriterProperties;

use super::batch_writer::BatchWriter;

type Output = BufWriter<Box<dyn Write + Send>>;

/// `path` opened for writing, or `stdout` when there is no path.
pub(super) fn output(path: Option<&PathBuf>, stdout: Box<dyn Write + Send>) -> Result<Output> {
    Ok(BufWriter::with_capacity(
        1 << 16,
        match path {
            Some(path) => Box::new(create(path)?),
            None => stdout,
        },
    ))
}

fn create(path: &Path) -> Result<File> {
    match File::create(path) {
        Ok(file) => Ok(file),
        Err(e) => plan_err!("cannot create output file {}: {e}", path.display()),
    }
}

/// CSV with a header line. Each batch is written out (flushed) as it comes, so that a live
/// stream's rows show at once.
pub struct CsvWriter {
    out: Output,
    header_written: bool,
}

impl CsvWriter {
    pub fn new(out: Output) -> Self {
        Self {
            out,
            header_written: false,
        }
    }
}

impl BatchWriter for CsvWriter {
    fn write(&mut self, batch: &RecordBatch) -> Result<()> {
        // arrow's CSV writer cannot be flushed: each batch is encoded on its own.
        let mut encoded = Vec::new();
        csv::WriterBuilder::new()
            .with_header(!self.header_written)
            .build(&mut encoded)
            .write(batch)?;
        self.header_written = true;
        self.out.write_all(&encoded)?;
        self.out.flush()?;
        Ok(())
    }

    fn finish(mut self: Box<Self>) -> Result<()> {
        self.out.flush()?;
        Ok(())
    }
}

/// One JSON object per row and line.
/// One JSON object per row and line. A float that is NaN or infinite, which JSON numbers
/// cannot hold (arrow writes them as null), is written as the string `"NaN"`, `"Infinity"`
/// or `"-Infinity"`; a null stays a missing key.
pub struct JsonLinesWriter(LineDelimitedWriter<Output>);

impl JsonLinesWriter {
    pub fn new(out: Output) -> Self {
        Self(
            json::WriterBuilder::new()
                .with_encoder_factory(Arc::new(NonFiniteFloatsAsStrings))
                .build(out),
        )
    }
}

/// See [`JsonLinesWriter`].
#[derive(Debug)]
struct NonFiniteFloatsAsStrings;

impl EncoderFactory for NonFiniteFloatsAsStrings {
    fn make_default_encoder<'a>(
        &self,
        _field: &'a FieldRef,
        array: &'a dyn Array,
        _options: &'a EncoderOptions,
    ) -> std::result::Result<Option<NullableEncoder<'a>>, ArrowError> {
        let encoder: Box<dyn Encoder + 'a> = match array.data_type() {
            DataType::Float64 => Box::new(FloatEncoder::F64(array.as_primitive::<Float64Type>())),
            DataType::Float32 => Box::new(FloatEncoder::F32(array.as_primitive::<Float32Type>())),
            _ => return Ok(None),
        };
        Ok(Some(NullableEncoder::new(encoder, array.nulls().cloned())))
    }
}

enum FloatEncoder<'a> {
    F64(&'a Float64Array),
    F32(&'a Float32Array),
}

impl Encoder for FloatEncoder<'_> {
    fn encode(&mut self, idx: usize, out: &mut Vec<u8>) {
        // Debug is the shortest text that reads back as the same float, in JSON syntax.
        let (value, finite_text) = match self {
            Self::F64(values) => (values.value(idx), format!("{:?}", values.value(idx))),
            Self::F32(values) => (
                f64::from(values.value(idx)),
                format!("{:?}", values.value(idx)),
            ),
        };
        let text = if value.is_nan() {
            "\"NaN\""
        } else if value == f64::INFINITY {
            "\"Infinity\""
        } else if value == f64::NEG_INFINITY {
            "\"-Infinity\""
        } else {
            &finite_text
        };
        out.extend_from_slice(text.as_bytes());
    }
}

impl BatchWriter for JsonLinesWriter {
    /// Each batch is flushed as it comes, so that a live stream's rows show at once.
    fn write(&mut self, batch: &RecordBatch) -> Result<()> {
        self.0.write(batch)?;
        self.0.get_mut().flush()?;
        Ok(())
    }

    fn finish(mut self: Box<Self>) -> Result<()> {
        self.0.finish()?;
        self.0.into_inner().flush()?;
        Ok(())
    }
}

/// A Parquet file, in row groups of [`ROW_GROUP_ROWS`] rows.
pub struct ParquetFileWriter(ArrowWriter<File>);

/// Rows per Parquet row group: several per file of a million rows (as DuckDB and Spark
/// write them), so that a replay of the file can be split into source partitions by row
/// group; arrow's default (a million rows) leaves such a file one indivisible group.
pub const ROW_GROUP_ROWS: usize = 128 * 1024;

impl ParquetFileWriter {
    pub fn create(path: &Path, schema: &SchemaRef) -> Result<Self> {
        let properties = WriterProperties::builder()
            .set_max_row_group_row_count(Some(ROW_GROUP_ROWS))
            .build();
        Ok(Self(ArrowWriter::try_new(
            create(path)?,
            schema.clone(),
            Some(properties),
        )?))
    }
}

impl BatchWriter for ParquetFileWriter {
    fn write(&mut self, batch: &RecordBatch) -> Result<()> {
        Ok(self.0.write(batch)?)
    }

    fn finish(self: Box<Self>) -> Result<()> {
        self.0.close()?;
        Ok(())
    }
}

/// An Arrow IPC file.
pub struct ArrowFileWriter(FileWriter<BufWriter<File>>);

impl ArrowFileWriter {
    pub fn create(path: &Path, schema: &SchemaRef) -> Result<Self> {
        Ok(Self(FileWriter::try_new(
            BufWriter::new(create(path)?),
            schema,
        )?))
    }
}

impl BatchWriter for ArrowFileWriter {
    fn write(&mut self, batch: &RecordBatch) -> Result<()> {
        Ok(self.0.write(batch)?)
    }

    fn finish(mut self: Box<Self>) -> Result<()> {
        self.0.finish()?;
        Ok(())
    }
}

/// Discards rows; the sink's summary counts them.
pub struct NullWriter;

impl BatchWriter for NullWriter {
    fn write(&mut self, _batch: &RecordBatch) -> Result<()> {
        Ok(())
    }

    fn finish(self: Box<Self>) -> Result<()> {
        Ok(())
    }
}
