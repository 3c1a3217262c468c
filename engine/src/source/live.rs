//! [`LiveBatches`]: a stream of record batches handed to Freshet by an application (a reader
//! it already has, batches it produces as they come), read once, in its order, by one
//! source partition.
//!
//! A replay can be read again and again, by every query that names it; batches that arrive
//! from elsewhere cannot: the first query that runs over them takes the stream, and a second
//! one gets an error that says so. The batches are checked against the declared schema as
//! they arrive, so a producer that changes its columns mid-stream fails the query with the
//! difference rather than with a confusing error further up.

use std::fmt;
use std::sync::Arc;

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::{DataFusionError, Result, exec_err};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::streaming::PartitionStream;
use futures::StreamExt;
use parking_lot::Mutex;

/// Batches that arrive from an application, taken by the first query that reads them.
pub struct LiveBatches {
    schema: SchemaRef,
    /// Whether the producer says its stream ends (a reader over a finite input).
    ends: bool,
    stream: Mutex<Option<SendableRecordBatchStream>>,
}

impl LiveBatches {
    /// `stream`'s batches, all of `stream`'s schema; `ends`: the producer's word that the
    /// stream ends, so that the query may be planned as over a bounded input.
    pub fn new(stream: SendableRecordBatchStream, ends: bool) -> Self {
        Self {
            schema: stream.schema(),
            ends,
            stream: Mutex::new(Some(stream)),
        }
    }

    /// The batches' schema.
    pub fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    /// Whether the producer says the stream ends.
    pub fn ends(&self) -> bool {
        self.ends
    }

    /// Whether a query has taken the stream already.
    pub fn taken(&self) -> bool {
        self.stream.lock().is_none()
    }

    /// The stream, for the one partition that reads it, as a [`PartitionStream`] of `name`.
    pub(crate) fn partition(self: &Arc<Self>, name: &str) -> Arc<dyn PartitionStream> {
        Arc::new(LivePartition {
            name: name.to_string(),
            batches: Arc::clone(self),
        })
    }
}

impl fmt::Debug for LiveBatches {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LiveBatches")
            .field("ends", &self.ends)
            .field("taken", &self.taken())
            .finish()
    }
}

/// `(name TYPE, ...)` of `schema`'s columns, for error messages.
fn describe_columns(schema: &SchemaRef) -> String {
    let columns: Vec<String> = schema
        .fields()
        .iter()
        .map(|field| format!("{} {}", field.name(), field.data_type()))
        .collect();
    format!("({})", columns.join(", "))
}

/// The one partition of a live stream.
#[derive(Debug)]
struct LivePartition {
    name: String,
    batches: Arc<LiveBatches>,
}

impl PartitionStream for LivePartition {
    fn schema(&self) -> &SchemaRef {
        &self.batches.schema
    }

    fn execute(&self, _ctx: Arc<TaskContext>) -> SendableRecordBatchStream {
        let schema = self.batches.schema();
        let name = self.name.clone();
        let Some(stream) = self.batches.stream.lock().take() else {
            let error: Result<_> = exec_err!(
                "stream '{name}' was read by an earlier query: batches handed over by the application are read once; register them again for another query"
            );
            return Box::pin(RecordBatchStreamAdapter::new(
                schema,
                futures::stream::once(async move { error }),
            ));
        };
        let expected = Arc::clone(&schema);
        let checked = stream.map(move |batch| {
            let batch = batch?;
            let same_columns = batch.num_columns() == expected.fields().len()
                && batch
                    .schema()
                    .fields()
                    .iter()
                    .zip(expected.fields())
                    .all(|(got, want)| {
                        got.name() == want.name() && got.data_type() == want.data_type()
                    });
            if !same_columns {
                return Err(DataFusionError::Execution(format!(
                    "stream '{name}': a batch has columns {}, the stream was registered with {}",
                    describe_columns(&batch.schema()),
                    describe_columns(&expected)
                )));
            }
            // The stream's schema (nullability, metadata) is what the plan was made with.
            Ok(RecordBatch::try_new(
                Arc::clone(&expected),
                batch.columns().to_vec(),
            )?)
        });
        Box::pin(RecordBatchStreamAdapter::new(schema, checked))
    }
}
