//! `freshet.StreamingContext`: the command line's session (its stream count, strategy,
//! settings, default tables) with Python's ways to register streams.

use std::sync::Arc;

use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::plan_err;
use datafusion::error::DataFusionError;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use freshet::cli::{
    SessionArgs, TableSource, TableSpec, register_table, session, session_statement,
};
use freshet::{FileFormatKind, StreamingContext};
use futures::StreamExt;
use parking_lot::Mutex;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::arrow_ffi::import_stream;
use crate::errors::{FreshetError, to_py};
use crate::options::{option_pairs, option_text};
use crate::provider::TableExport;
use crate::query::Query;
use crate::runtime::wait;
use crate::write::Origin;

/// A streaming session: register streams, then run streaming SQL over them.
#[pyclass(module = "freshet._freshet", frozen)]
pub struct Context {
    ctx: StreamingContext,
    /// The session as the command line's arguments would give it (what a checkpoint
    /// compares on resume).
    args: Mutex<SessionArgs>,
    /// The event-time column of every stream registered without one.
    event_time: Option<String>,
    /// The watermark delay of every stream registered without one.
    watermark: Option<String>,
}

impl Context {
    /// Registers `spec` with `options` set on it, the context's event time and watermark
    /// filling in what the options leave out.
    fn register(
        &self,
        py: Python<'_>,
        mut spec: TableSpec,
        options: Vec<(String, String)>,
    ) -> PyResult<()> {
        let mut event_time_given = false;
        let mut watermark_given = false;
        for (key, value) in &options {
            event_time_given |= key == "event_time";
            watermark_given |= key == "watermark" || key == "out_of_orderness";
            spec.set(key, value).map_err(to_py)?;
        }
        if let (false, Some(column)) = (event_time_given, &self.event_time)
            && matches!(spec.source, TableSource::Files(_))
        {
            spec.set("event_time", column).map_err(to_py)?;
        }
        if let (false, Some(delay)) = (watermark_given, &self.watermark) {
            spec.set("watermark", delay).map_err(to_py)?;
        }
        let name = spec.name.clone();
        self.replacing(&name, || {
            let ctx = self.ctx.clone();
            wait(py, async move { register_table(&ctx, spec).await })?.map_err(to_py)
        })
    }

    /// Runs `register`, which registers a stream `name`, in place of the stream of that name
    /// if there is one (registering a name again replaces its stream, as the command line's
    /// `--table` replaces a default table); a registration that fails leaves the old stream
    /// registered.
    fn replacing(&self, name: &str, register: impl FnOnce() -> PyResult<()>) -> PyResult<()> {
        let previous = self.ctx.session().deregister_table(name).map_err(to_py)?;
        let registered = register();
        if let (Err(_), Some(previous)) = (&registered, previous) {
            self.ctx
                .session()
                .register_table(name, previous)
                .map_err(to_py)?;
        }
        registered
    }

    /// Stream options as `(key, value)` pairs, with the context's defaults for those left out.
    fn stream_options(&self, options: &[(String, String)]) -> PyResult<freshet::StreamOptions> {
        let mut stream_options = freshet::StreamOptions::default();
        let given = |name: &str| options.iter().any(|(key, _)| key == name);
        if let (false, Some(column)) = (given("event_time"), &self.event_time) {
            stream_options.set("event_time", column).map_err(to_py)?;
        }
        if let (false, Some(delay)) = (given("watermark"), &self.watermark) {
            stream_options.set("watermark", delay).map_err(to_py)?;
        }
        for (key, value) in options {
            if !stream_options.set(key, value).map_err(to_py)? {
                return Err(FreshetError::new_err(format!(
                    "unknown option '{key}'; valid options are {}",
                    freshet::StreamOptions::KEYS.join(", ")
                )));
            }
        }
        Ok(stream_options)
    }
}

#[pymethods]
impl Context {
    #[new]
    #[pyo3(signature = (partitions=None, strategy=None, event_time=None, watermark=None, settings=None))]
    fn new(
        py: Python<'_>,
        partitions: Option<usize>,
        strategy: Option<String>,
        event_time: Option<String>,
        watermark: Option<Bound<'_, PyAny>>,
        settings: Option<Bound<'_, PyDict>>,
    ) -> PyResult<Self> {
        let watermark = watermark
            .map(|w| option_text("watermark", &w))
            .transpose()?;
        let settings = option_pairs(settings.as_ref())?
            .into_iter()
            .map(|(key, value)| format!("{key}={value}"))
            .collect();
        let args = SessionArgs {
            settings,
            tables: Vec::new(),
            partitions,
            event_time: None,
            watermark: watermark.clone(),
            strategy,
        };
        let ctx = {
            let args = args.clone();
            wait(py, async move { session(&args).await })?.map_err(to_py)?
        };
        Ok(Self {
            ctx,
            args: Mutex::new(args),
            event_time,
            watermark,
        })
    }

    /// Sets a session setting, as `SET key = 'value'` would (a key without a dot is a
    /// `freshet.` setting).
    fn set(&self, py: Python<'_>, key: &str, value: Bound<'_, PyAny>) -> PyResult<()> {
        let value = option_text(key, &value)?.replace('\'', "''");
        let key = match key.contains('.') {
            true => key.to_string(),
            false => format!("freshet.{key}"),
        };
        let ctx = self.ctx.clone();
        let statement = format!("SET {key} = '{value}'");
        wait(py, async move { session_statement(&ctx, &statement).await })?.map_err(to_py)?;
        self.args.lock().settings.push(format!("{key}={value}"));
        Ok(())
    }

    /// Registers a Parquet, CSV, JSON-lines or Arrow IPC file or directory as a replay,
    /// in `format` or the one its extension names.
    #[pyo3(signature = (name, path, format=None, **options))]
    fn register_files(
        &self,
        py: Python<'_>,
        name: &str,
        path: std::path::PathBuf,
        format: Option<&str>,
        options: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<()> {
        let path = path.to_string_lossy().into_owned();
        let options = option_pairs(options)?;
        let Some(format) = format else {
            return self.register(py, TableSpec::new(name, TableSource::Files(path)), options);
        };
        let format = match format.to_ascii_lowercase().as_str() {
            "parquet" => FileFormatKind::Parquet,
            "csv" => FileFormatKind::Csv,
            "arrow" | "ipc" => FileFormatKind::Arrow,
            "json" | "jsonl" | "ndjson" => FileFormatKind::JsonLines,
            other => {
                return Err(FreshetError::new_err(format!(
                    "unknown file format '{other}': expected parquet, csv, arrow or json"
                )));
            }
        };
        let stream_options = self.stream_options(&options)?;
        self.replacing(name, || {
            let ctx = self.ctx.clone();
            let name = name.to_string();
            wait(py, async move {
                ctx.register_files(&name, &path, Some(format), stream_options)
                    .await
            })?
            .map_err(to_py)
        })
    }

    /// Registers a built-in generator: market_data, orders, or nexmark for a table named
    /// person, auction or bid (nexmark.person … for other names).
    #[pyo3(signature = (name, kind, **options))]
    fn register_generator(
        &self,
        py: Python<'_>,
        name: &str,
        kind: &str,
        options: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<()> {
        let spec = TableSpec::generator(name, kind).map_err(to_py)?;
        self.register(py, spec, option_pairs(options)?)
    }

    /// Registers Arrow data read whole now (a table, batches, a frame): a bounded replay
    /// whose batches are dealt to the source partitions, their buffers not copied.
    #[pyo3(signature = (name, data, **options))]
    fn register_batches(
        &self,
        py: Python<'_>,
        name: &str,
        data: &Bound<'_, PyAny>,
        options: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<()> {
        let reader = import_stream(data)?;
        let schema = datafusion::arrow::array::RecordBatchReader::schema(&reader);
        let batches: Vec<RecordBatch> =
            py.detach(|| reader.collect::<Result<_, _>>())
                .map_err(|e| {
                    FreshetError::new_err(format!("reading the data for '{name}' failed: {e}"))
                })?;
        let stream_options = self.stream_options(&option_pairs(options)?)?;
        self.replacing(name, || {
            self.ctx
                .register_batches(name, schema, batches, stream_options)
                .map_err(to_py)
        })
    }

    /// Registers a live stream: `data`'s batches read as they come, once, by the first
    /// query over it; `bounded`: the stream ends (planned as a bounded input).
    #[pyo3(signature = (name, data, bounded=false, **options))]
    fn register_live(
        &self,
        name: &str,
        data: &Bound<'_, PyAny>,
        bounded: bool,
        options: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<()> {
        let reader = import_stream(data)?;
        let schema = datafusion::arrow::array::RecordBatchReader::schema(&reader);
        let reader = Arc::new(Mutex::new(Some(reader)));
        // Reading may call into Python (a generator behind a RecordBatchReader), which takes
        // the GIL: read on a blocking thread, a batch at a time, only as the query asks.
        let batches = futures::stream::unfold(reader, |reader| async move {
            let next = {
                let reader = Arc::clone(&reader);
                tokio::task::spawn_blocking(move || {
                    let mut guard = reader.lock();
                    let next = guard.as_mut().and_then(Iterator::next);
                    if !matches!(next, Some(Ok(_))) {
                        // Ended or failed: nothing more is read.
                        *guard = None;
                    }
                    next
                })
                .await
            };
            match next {
                Ok(Some(Ok(batch))) => Some((Ok(batch), reader)),
                Ok(Some(Err(error))) => Some((
                    Err(DataFusionError::ArrowError(Box::new(error), None)),
                    reader,
                )),
                Ok(None) => None,
                Err(join) => Some((plan_err!("reading a live stream failed: {join}"), reader)),
            }
        })
        .boxed();
        let stream = Box::pin(RecordBatchStreamAdapter::new(schema, batches));
        let stream_options = self.stream_options(&option_pairs(options)?)?;
        self.replacing(name, || {
            self.ctx
                .register_live(name, stream, bounded, stream_options)
                .map_err(to_py)
        })
    }

    /// Removes the stream `name`.
    fn deregister(&self, name: &str) -> PyResult<()> {
        self.ctx.session().deregister_table(name).map_err(to_py)?;
        Ok(())
    }

    /// The names of the registered streams.
    fn tables(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .ctx
            .session()
            .catalog("datafusion")
            .and_then(|catalog| catalog.schema("public"))
            .map(|schema| schema.table_names())
            .unwrap_or_default();
        names.sort();
        names
    }

    /// The stream `name` for datafusion-python: `datafusion.SessionContext.register_table`
    /// takes it.
    fn table_provider(&self, py: Python<'_>, name: String) -> PyResult<TableExport> {
        let ctx = self.ctx.clone();
        let provider = wait(py, async move {
            ctx.session().table_provider(name.as_str()).await
        })?
        .map_err(to_py)?;
        Ok(TableExport::new(provider))
    }

    /// Plans `query` (Freshet's streaming SQL, docs/sql.md) as a streaming query; it runs
    /// when its results are first read.
    fn sql(&self, py: Python<'_>, query: String) -> PyResult<Query> {
        let ctx = self.ctx.clone();
        let text = query.clone();
        let planned = wait(py, async move { ctx.sql(&text).await })?.map_err(to_py)?;
        let origin = Origin {
            ctx: self.ctx.clone(),
            args: self.args.lock().clone(),
            sql: query,
        };
        Ok(Query::new(planned, origin))
    }
}
