//! [`LateRecords`]: the side output of records that arrived after their windows closed (or,
//! in a join, after their partners may have been freed).
//!
//! Late records are always dropped and counted; when a consumer asks for them
//! (`StreamingQuery::late_records`), the operators also send them into a channel the consumer
//! reads, as batches of one schema the consumer chooses: each operator's input columns are
//! placed by name, and columns its input lacks are null (the two sides of a join, or two
//! windows over different inputs, share one side output). Nobody asking costs nothing.
//!
//! Each batch goes out with the number of checkpoint barriers its operator partition had
//! passed when it dropped the rows: in a checkpointed run the late output is committed
//! with the checkpoints, and the rows dropped before barrier `e` belong to checkpoint `e`.

use std::sync::Arc;

use datafusion::arrow::array::{BooleanArray, new_null_array};
use datafusion::arrow::compute::filter_record_batch;
use datafusion::arrow::datatypes::{Field, Schema, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::Result;
use parking_lot::Mutex;
use tokio::sync::mpsc;

use crate::checkpoint::PassedBarriers;

/// Late rows, and how many checkpoint barriers the operator partition that dropped them had
/// passed (in this run).
pub type LateBatch = (u64, RecordBatch);

/// Where an operator sends its late records, once a consumer has subscribed.
#[derive(Debug, Clone, Default)]
pub struct LateRecords {
    sender: Arc<Mutex<Option<Subscriber>>>,
    /// The barriers of the operator partition that sends (see [`Self::of_partition`]).
    passed: Option<(Arc<PassedBarriers>, usize)>,
}

/// A consumer of late records, and the schema it reads them in.
#[derive(Debug)]
struct Subscriber {
    sender: mpsc::UnboundedSender<LateBatch>,
    schema: SchemaRef,
}

impl LateRecords {
    /// Routes late records to `sender` from now on, in `schema` (see the module
    /// documentation).
    pub fn subscribe(&self, sender: mpsc::UnboundedSender<LateBatch>, schema: SchemaRef) {
        *self.sender.lock() = Some(Subscriber { sender, schema });
    }

    /// The late records of partition `partition` of an operator whose partitions record
    /// the barriers they pass in `passed`: each batch it sends says how many it had passed.
    pub fn of_partition(&self, passed: &Arc<PassedBarriers>, partition: usize) -> Self {
        Self {
            sender: Arc::clone(&self.sender),
            passed: Some((Arc::clone(passed), partition)),
        }
    }

    /// Whether somebody reads late records.
    pub fn wanted(&self) -> bool {
        self.sender.lock().is_some()
    }

    /// Sends the rows of `batch` selected by `late`.
    pub fn send(&self, batch: &RecordBatch, late: &BooleanArray) -> Result<()> {
        let guard = self.sender.lock();
        let Some(subscriber) = guard.as_ref() else {
            return Ok(());
        };
        let rows = filter_record_batch(batch, late)?;
        let rows = match rows.schema() == subscriber.schema {
            true => rows,
            false => conform(&rows, &subscriber.schema)?,
        };
        let passed = self
            .passed
            .as_ref()
            .map_or(0, |(passed, partition)| passed.passed(*partition));
        // A reader that went away no longer wants them.
        let _ = subscriber.sender.send((passed, rows));
        Ok(())
    }
}

/// `rows` in `schema`: its columns by name (where the type matches), nulls for the others.
fn conform(rows: &RecordBatch, schema: &SchemaRef) -> Result<RecordBatch> {
    let columns = schema
        .fields()
        .iter()
        .map(|field| match rows.schema().column_with_name(field.name()) {
            Some((index, own)) if own.data_type() == field.data_type() => {
                Arc::clone(rows.column(index))
            }
            _ => new_null_array(field.data_type(), rows.num_rows()),
        })
        .collect();
    Ok(RecordBatch::try_new(Arc::clone(schema), columns)?)
}

/// The schema one side output of records of `inputs` takes: every column of each, once per
/// name, all nullable. (A column whose name an earlier input took with another type stays
/// null: the side output keeps the first.)
pub fn side_output_schema(inputs: &[SchemaRef]) -> SchemaRef {
    let mut fields: Vec<Field> = Vec::new();
    for schema in inputs {
        for field in schema.fields() {
            if !fields.iter().any(|f| f.name() == field.name()) {
                fields.push(field.as_ref().clone().with_nullable(true));
            }
        }
    }
    Arc::new(Schema::new(fields))
}
