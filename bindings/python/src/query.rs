//! `freshet.Query`: a planned streaming query, run when its results are first read, and its
//! results read a batch at a time, as a C stream, or (bounded queries) whole.

use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use datafusion::arrow::array::RecordBatchReader;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::error::ArrowError;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::execution::SendableRecordBatchStream;
use datafusion::physical_plan::ExecutionPlanProperties;
use freshet::StreamingQuery;
use futures::StreamExt;
use pyo3::prelude::*;
use pyo3::types::{PyCapsule, PyDict};

use crate::arrow_ffi::{ExportedBatch, ExportedSchema, export_stream};
use crate::errors::{FreshetError, to_py};
use crate::provider::TableExport;
use crate::runtime::{SIGNAL_CHECK, runtime};
use crate::write::{KEEP_LATE_RECORDS, Origin, WriteOptions, planned_again, write};

/// Where a query's results stand.
enum Results {
    /// Planned; nothing runs yet.
    NotStarted,
    /// Running: the merged result stream.
    Running(SendableRecordBatchStream),
    /// Handed out as a C stream, to be read there.
    HandedOut,
    /// A thread is waiting for the next batch.
    Busy,
    /// Ended, stopped by an interrupt, or failed.
    Ended,
}

/// What one wait for the next batch gave.
enum Next {
    Batch(RecordBatch),
    End,
    /// Nothing within the wait's time limit.
    Pending,
}

/// A planned streaming query.
#[pyclass(module = "freshet._freshet", frozen)]
pub struct Query {
    planned: StreamingQuery,
    /// The query planned again to keep its late records whole, when they were asked for
    /// and its first plan judged lateness from partial states.
    replanned: OnceLock<StreamingQuery>,
    /// The context and text it was planned from.
    origin: Origin,
    results: Mutex<Results>,
    /// The late-record side output, asked for before the query started.
    late: Mutex<Option<SendableRecordBatchStream>>,
}

impl Query {
    pub fn new(query: StreamingQuery, origin: Origin) -> Self {
        Self {
            planned: query,
            replanned: OnceLock::new(),
            origin,
            results: Mutex::new(Results::NotStarted),
            late: Mutex::new(None),
        }
    }

    /// The plan that runs.
    fn query(&self) -> &StreamingQuery {
        self.replanned.get().unwrap_or(&self.planned)
    }

    /// The result stream, started if it was not, for the caller to read (the query is busy
    /// until the caller puts it back); `None` once it ended.
    fn take_stream(&self) -> PyResult<Option<SendableRecordBatchStream>> {
        let mut results = self.results.lock().map_err(poisoned)?;
        match std::mem::replace(&mut *results, Results::Busy) {
            Results::NotStarted => {
                // DataFusion spawns the partitions' tasks as it executes: on the runtime.
                let _guard = runtime()?.enter();
                match self.query().execute_merged() {
                    Ok(stream) => Ok(Some(stream)),
                    Err(error) => {
                        *results = Results::Ended;
                        Err(to_py(error))
                    }
                }
            }
            Results::Running(stream) => Ok(Some(stream)),
            Results::HandedOut => {
                *results = Results::HandedOut;
                Err(FreshetError::new_err(
                    "the results were handed out as an Arrow C stream: read them there",
                ))
            }
            Results::Busy => Err(FreshetError::new_err(
                "another thread is reading this query's results: read a query from one thread at a time",
            )),
            Results::Ended => {
                *results = Results::Ended;
                Ok(None)
            }
        }
    }

    /// Puts the results back as `state` after a read.
    fn settle(&self, state: Results) -> PyResult<()> {
        *self.results.lock().map_err(poisoned)? = state;
        Ok(())
    }

    /// Waits at most `limit` (or until the next batch or the end) for the next result,
    /// with the GIL released, checking for signals every [`SIGNAL_CHECK`]. A signal
    /// handler's exception (KeyboardInterrupt) stops the query and is raised.
    fn next_within(&self, py: Python<'_>, limit: Option<Duration>) -> PyResult<Next> {
        let Some(mut stream) = self.take_stream()? else {
            return Ok(Next::End);
        };
        let runtime = runtime()?;
        let started = Instant::now();
        loop {
            let slice = match limit {
                Some(limit) => SIGNAL_CHECK.min(limit.saturating_sub(started.elapsed())),
                None => SIGNAL_CHECK,
            };
            let next = py.detach(|| {
                runtime.block_on(async { tokio::time::timeout(slice, stream.next()).await })
            });
            match next {
                // Operators pass on empty batches as progress: nothing to hand out.
                Ok(Some(Ok(batch))) if batch.num_rows() == 0 => {}
                Ok(Some(Ok(batch))) => {
                    self.settle(Results::Running(stream))?;
                    return Ok(Next::Batch(batch));
                }
                Ok(Some(Err(error))) => {
                    self.settle(Results::Ended)?;
                    return Err(to_py(error));
                }
                Ok(None) => {
                    self.settle(Results::Ended)?;
                    return Ok(Next::End);
                }
                Err(_elapsed) => {}
            }
            // Between batches, or after a slice without one (progress batches may come
            // more often than a slice lasts).
            if let Err(interrupt) = py.check_signals() {
                // Stopped like the command line's first Ctrl-C, then dropped: the query's
                // tasks end and nothing is left running.
                self.query().stop();
                drop(stream);
                self.settle(Results::Ended)?;
                return Err(interrupt);
            }
            if limit.is_some_and(|limit| started.elapsed() >= limit) {
                self.settle(Results::Running(stream))?;
                return Ok(Next::Pending);
            }
        }
    }
}

fn poisoned<T>(_: T) -> PyErr {
    FreshetError::new_err("a query was used after a thread panicked while reading it")
}

#[pymethods]
impl Query {
    /// The next batch of results (starting the query if it has not started), `None` at the
    /// end. With `timeout` (seconds), `False` when no batch came within it.
    #[pyo3(signature = (timeout=None))]
    fn next_batch(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<Py<PyAny>> {
        let limit = timeout.map(|seconds| Duration::from_secs_f64(seconds.max(0.0)));
        Ok(match self.next_within(py, limit)? {
            Next::Batch(batch) => Bound::new(py, ExportedBatch::new(batch))?
                .into_any()
                .unbind(),
            Next::End => py.None(),
            Next::Pending => false.into_pyobject(py)?.to_owned().into_any().unbind(),
        })
    }

    /// Runs the query into one of the command line's outputs (`table`, `csv=PATH`,
    /// `parquet=PATH`, …), with its late records into `late_output`, and with checkpoints in
    /// `checkpoint_dir` (resuming from its latest one) as `freshet query` does; returns what
    /// the run did. Ctrl-C stops the query as the command line's does (at the next
    /// checkpoint under checkpoints), closes the output, then raises KeyboardInterrupt.
    #[pyo3(signature = (output="table".to_string(), late_output=None, checkpoint_dir=None, checkpoint_interval="10s".to_string(), checkpoints_kept=3))]
    fn write<'py>(
        &self,
        py: Python<'py>,
        output: String,
        late_output: Option<String>,
        checkpoint_dir: Option<std::path::PathBuf>,
        checkpoint_interval: String,
        checkpoints_kept: usize,
    ) -> PyResult<Bound<'py, PyDict>> {
        if !matches!(*self.results.lock().map_err(poisoned)?, Results::NotStarted) {
            return Err(FreshetError::new_err(
                "the query's results are being read: write() runs a query that has not started",
            ));
        }
        *self.results.lock().map_err(poisoned)? = Results::Ended;
        let options = WriteOptions {
            output,
            late_output,
            checkpoint_dir,
            checkpoint_interval,
            checkpoints_kept,
        };
        write(py, self.query(), &self.origin, options)
    }

    /// The query's results for datafusion-python: each scan there runs the query.
    fn table_provider(&self) -> TableExport {
        TableExport::of_query(self.query().clone())
    }

    /// The results' schema (for `pyarrow.schema(…)`).
    fn schema(&self) -> ExportedSchema {
        ExportedSchema::new(self.query().schema())
    }

    /// Whether the query ends: every stream it reads is bounded.
    fn is_bounded(&self) -> bool {
        !self.query().plan().boundedness().is_unbounded()
    }

    /// The plan, as `freshet explain` prints it.
    fn explain(&self) -> String {
        self.query().explain()
    }

    /// Ends every stream the query reads, as if their data had ended: open windows are
    /// emitted and the results end.
    fn stop(&self) {
        self.query().stop();
    }

    /// Stops the query and drops what it still runs, without reading further results.
    fn close(&self) -> PyResult<()> {
        self.query().stop();
        let previous =
            std::mem::replace(&mut *self.results.lock().map_err(poisoned)?, Results::Ended);
        drop(previous);
        Ok(())
    }

    /// Records read by the query's sources so far.
    fn records_read(&self) -> usize {
        self.query().records_read()
    }

    /// Records dropped as late so far (by window aggregations, window functions, joins).
    fn late_records_dropped(&self) -> usize {
        self.query().metric_total("late_records_dropped")
    }

    /// Starts collecting the records the query drops as late; ask before reading results.
    fn subscribe_late_records(&self, py: Python<'_>) -> PyResult<ExportedSchema> {
        if !matches!(*self.results.lock().map_err(poisoned)?, Results::NotStarted) {
            return Err(FreshetError::new_err(
                "ask for late records before reading the query's results",
            ));
        }
        let mut late = self.late.lock().map_err(poisoned)?;
        if late.is_none() && self.query().defers_lateness().map_err(to_py)? {
            let query = planned_again(py, &self.origin, KEEP_LATE_RECORDS)?;
            let _ = self.replanned.set(query);
        }
        let stream = late.get_or_insert_with(|| self.query().late_records());
        Ok(ExportedSchema::new(stream.schema()))
    }

    /// The late records collected so far (after `subscribe_late_records`), without waiting.
    fn late_batches(&self, py: Python<'_>) -> PyResult<Vec<Py<PyAny>>> {
        let mut late = self.late.lock().map_err(poisoned)?;
        let Some(stream) = late.as_mut() else {
            return Err(FreshetError::new_err(
                "late records were not asked for before the query started",
            ));
        };
        let mut batches = Vec::new();
        let _guard = runtime()?.enter();
        let waker = futures::task::noop_waker();
        let mut context = std::task::Context::from_waker(&waker);
        while let std::task::Poll::Ready(Some(batch)) = stream.poll_next_unpin(&mut context) {
            let batch = batch.map_err(to_py)?;
            batches.push(
                Bound::new(py, ExportedBatch::new(batch))?
                    .into_any()
                    .unbind(),
            );
        }
        Ok(batches)
    }

    /// The results as an Arrow C stream (`pyarrow.RecordBatchReader.from_stream(query)`):
    /// the reader blocks for each batch; read once.
    #[pyo3(signature = (requested_schema=None))]
    fn __arrow_c_stream__<'py>(
        &self,
        py: Python<'py>,
        requested_schema: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyCapsule>> {
        let _ = requested_schema;
        let Some(stream) = self.take_stream()? else {
            return Err(FreshetError::new_err(
                "the query's results were read already",
            ));
        };
        *self.results.lock().map_err(poisoned)? = Results::HandedOut;
        let reader = BlockingReader {
            schema: stream.schema(),
            stream,
        };
        export_stream(py, Box::new(reader))
    }
}

/// A result stream read synchronously, for the C stream interface: each batch is waited
/// for on the runtime from the reading thread (not a runtime thread).
struct BlockingReader {
    schema: SchemaRef,
    stream: SendableRecordBatchStream,
}

impl Iterator for BlockingReader {
    type Item = Result<RecordBatch, ArrowError>;

    fn next(&mut self) -> Option<Self::Item> {
        let runtime = match runtime() {
            Ok(runtime) => runtime,
            Err(error) => {
                return Some(Err(ArrowError::ExternalError(Box::new(
                    std::io::Error::other(error.to_string()),
                ))));
            }
        };
        runtime
            .block_on(self.stream.next())
            .map(|batch| batch.map_err(|e| ArrowError::ExternalError(Box::new(e))))
    }
}

impl RecordBatchReader for BlockingReader {
    fn schema(&self) -> SchemaRef {
        std::sync::Arc::clone(&self.schema)
    }
}
