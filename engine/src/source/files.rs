//! Opening Parquet, CSV, JSON-lines and Arrow IPC files (one file or a directory of them) as a
//! DataFusion `ListingTable`, which reads them batch by batch (Parquet row group by row
//! group), never whole.
//!
//! Before DataFusion sees the files, each one's schema is read from its footer or header:
//! a missing path, an unreadable file, or a directory whose files disagree on their schema
//! is reported with the file's name, instead of failing (or silently merging schemas) later.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, FieldRef, Schema, SchemaRef, TimeUnit};
use datafusion::arrow::ipc::reader::{FileReader, StreamReader};
use datafusion::catalog::{Session, TableProvider};
use datafusion::common::{Result, plan_err};
use datafusion::datasource::file_format::FileFormat;
use datafusion::datasource::file_format::arrow::ArrowFormat;
use datafusion::datasource::file_format::csv::CsvFormat;
use datafusion::datasource::file_format::json::JsonFormat;
use datafusion::datasource::file_format::parquet::ParquetFormat;
use datafusion::datasource::listing::{
    ListingOptions, ListingTable, ListingTableConfig, ListingTableUrl,
};
use datafusion::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

use super::text_errors::locate_json_syntax_error;

/// File formats a stream can be replayed from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileFormatKind {
    Parquet,
    Csv,
    Arrow,
    /// Newline-delimited JSON: one object a line.
    JsonLines,
}

impl FileFormatKind {
    /// The format a path's extension names (`.parquet`, `.csv`, `.arrow` / `.ipc` /
    /// `.feather`, `.jsonl` / `.ndjson` / `.json`); for a directory, the format of the files in
    /// it.
    /// A directory whose data files are of several formats, or of one format under several
    /// extensions, is an error: every file is read or none.
    pub fn detect(path: &Path) -> Result<Option<Self>> {
        if !path.is_dir() {
            return Ok(Self::from_extension(path));
        }
        let mut extensions: Vec<(String, Self)> = std::fs::read_dir(path)?
            .filter_map(|entry| entry.ok().map(|e| e.path()))
            .filter(|file| file.is_file())
            .filter_map(|file| {
                let format = Self::from_extension(&file)?;
                Some((file.extension()?.to_str()?.to_string(), format))
            })
            .collect();
        extensions.sort_by(|a, b| a.0.cmp(&b.0));
        extensions.dedup_by(|a, b| a.0 == b.0);
        match extensions.as_slice() {
            [] => plan_err!(
                "directory {} holds no data files: name them .parquet, .csv, .arrow or .jsonl",
                path.display()
            ),
            [(_, format)] => Ok(Some(*format)),
            several => {
                let names: Vec<String> = several.iter().map(|(e, _)| format!(".{e}")).collect();
                plan_err!(
                    "directory {} holds {} files: a stream reads files of one format and extension; move the others out",
                    path.display(),
                    names.join(" and ")
                )
            }
        }
    }

    fn from_extension(path: &Path) -> Option<Self> {
        match path.extension()?.to_str()? {
            "parquet" => Some(Self::Parquet),
            "csv" => Some(Self::Csv),
            "arrow" | "ipc" | "feather" => Some(Self::Arrow),
            "jsonl" | "ndjson" | "json" => Some(Self::JsonLines),
            _ => None,
        }
    }

    fn extension(self) -> &'static str {
        match self {
            Self::Parquet => ".parquet",
            Self::Csv => ".csv",
            Self::Arrow => ".arrow",
            Self::JsonLines => ".jsonl",
        }
    }

    fn listing_format(self) -> Arc<dyn FileFormat> {
        match self {
            Self::Parquet => Arc::new(ParquetFormat::default()),
            Self::Csv => Arc::new(CsvFormat::default().with_has_header(true)),
            Self::Arrow => Arc::new(ArrowFormat),
            Self::JsonLines => Arc::new(JsonFormat::default()),
        }
    }

    /// The schema stored in one file (Parquet footer or Arrow IPC header); `None` for CSV and
    /// JSON lines, whose schema DataFusion infers from the data.
    fn file_schema(self, file: &Path) -> Result<Option<SchemaRef>> {
        let open = || match File::open(file) {
            Ok(handle) => Ok(handle),
            Err(e) => plan_err!("cannot open {}: {e}", file.display()),
        };
        match self {
            Self::Parquet => match ParquetRecordBatchReaderBuilder::try_new(open()?) {
                Ok(reader) => Ok(Some(Arc::clone(reader.schema()))),
                Err(e) => plan_err!("{} is not a readable Parquet file: {e}", file.display()),
            },
            // The IPC file format (with a footer), or the stream format (without one).
            Self::Arrow => match FileReader::try_new(open()?, None) {
                Ok(reader) => Ok(Some(reader.schema())),
                Err(file_error) => match StreamReader::try_new(open()?, None) {
                    Ok(reader) => Ok(Some(reader.schema())),
                    Err(_) => plan_err!(
                        "{} is not a readable Arrow IPC file (file or stream format): {file_error}",
                        file.display()
                    ),
                },
            },
            Self::Csv | Self::JsonLines => Ok(None),
        }
    }
}

/// Opens `path` (a file or a directory of files) in `format` as a table provider.
pub async fn open_file_source(
    state: &dyn Session,
    path: &str,
    format: FileFormatKind,
    event_time: Option<&str>,
) -> Result<Arc<dyn TableProvider>> {
    let location = Path::new(path);
    if !location.exists() {
        return plan_err!("file or directory not found: {path}");
    }
    let files = files_of(location, format)?;
    check_same_schema(&files, format, path)?;

    // A directory's files are listed by the extension of its first one (`.json` and `.jsonl`
    // are both JSON lines, but one directory holds one kind).
    let extension = files[0]
        .extension()
        .map(|e| format!(".{}", e.to_string_lossy()))
        .unwrap_or_default();
    let (url, extension) = if location.is_dir() {
        let dir = location.canonicalize()?;
        (format!("{}/", dir.display()), extension)
    } else {
        let file = location.canonicalize()?;
        (file.display().to_string(), extension)
    };
    let options = ListingOptions::new(format.listing_format()).with_file_extension(extension);
    let config = ListingTableConfig::new(ListingTableUrl::parse(&url)?)
        .with_listing_options(options)
        .infer_schema(state)
        .await;
    let config = match config {
        Ok(config) => config,
        Err(e) if format == FileFormatKind::JsonLines => {
            return match locate_json_syntax_error(&files) {
                Some(located) => plan_err!("cannot read the schema of {located}"),
                None => Err(e.context(format!("cannot read the schema of {path}"))),
            };
        }
        Err(e) => return Err(e.context(format!("cannot read the schema of {path}"))),
    };
    let text_times = match (format, event_time, &config.file_schema) {
        (FileFormatKind::Csv | FileFormatKind::JsonLines, Some(column), Some(schema)) => {
            text_time_read_as_timestamp(schema, column)
        }
        _ => None,
    };
    let config = match text_times {
        Some(schema) => config.with_schema(schema),
        None => config,
    };
    Ok(Arc::new(ListingTable::try_new(config)?))
}

/// `schema` with its event-time column `column` read as a millisecond timestamp, when the
/// text formats' inference left it a string: JSON has no timestamp type, so ISO 8601 times
/// (as `freshet gen` writes them) infer as text. A value that is not a time then fails the
/// read, naming the stream.
fn text_time_read_as_timestamp(schema: &SchemaRef, column: &str) -> Option<SchemaRef> {
    let (index, field) = schema.column_with_name(column)?;
    if !matches!(
        field.data_type(),
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View
    ) {
        return None;
    }
    let mut fields: Vec<FieldRef> = schema.fields().iter().cloned().collect();
    fields[index] = Arc::new(
        field
            .as_ref()
            .clone()
            .with_data_type(DataType::Timestamp(TimeUnit::Millisecond, None)),
    );
    Some(Arc::new(Schema::new_with_metadata(
        fields,
        schema.metadata().clone(),
    )))
}

/// The files `path` stands for: itself, or the files with `format`'s extension in it.
fn files_of(path: &Path, format: FileFormatKind) -> Result<Vec<PathBuf>> {
    if !path.is_dir() {
        return Ok(vec![path.to_path_buf()]);
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(path)?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|file| file.is_file() && FileFormatKind::from_extension(file) == Some(format))
        .collect();
    files.sort();
    // DataFusion lists a directory by one extension: the first file's.
    let first_extension = files
        .first()
        .and_then(|file| file.extension())
        .map(ToOwned::to_owned);
    files.retain(|file| file.extension().map(ToOwned::to_owned) == first_extension);
    if files.is_empty() {
        return plan_err!(
            "directory {} holds no {} files",
            path.display(),
            format.extension()
        );
    }
    Ok(files)
}

fn check_same_schema(files: &[PathBuf], format: FileFormatKind, path: &str) -> Result<()> {
    let mut first: Option<(&PathBuf, SchemaRef)> = None;
    for file in files {
        let Some(schema) = format.file_schema(file)? else {
            continue;
        };
        match &first {
            None => first = Some((file, schema)),
            Some((first_file, first_schema)) => {
                if !first_schema.fields().iter().eq(schema.fields().iter()) {
                    return plan_err!(
                        "files of {path} have different schemas: {} has ({}) but {} has ({}); a stream's files must share one schema",
                        first_file.display(),
                        describe(first_schema),
                        file.display(),
                        describe(&schema)
                    );
                }
            }
        }
    }
    Ok(())
}

fn describe(schema: &SchemaRef) -> String {
    schema
        .fields()
        .iter()
        .map(|f| format!("{} {}", f.name(), f.data_type()))
        .collect::<Vec<_>>()
        .join(", ")
}
