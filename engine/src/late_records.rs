//! [`LateRecords`]: the side output of records that arrived after their windows closed.
//!
//! Late records are always dropped from the aggregation and counted; when a consumer asks
//! for them (`StreamingQuery::late_records`), the operators also send them, as batches of the
//! aggregation's input, into a channel the consumer reads. Nobody asking costs nothing.

use std::sync::Arc;

use datafusion::arrow::array::BooleanArray;
use datafusion::arrow::compute::filter_record_batch;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::Result;
use parking_lot::Mutex;
use tokio::sync::mpsc;

/// Where an operator sends its late records, once a consumer has subscribed.
#[derive(Debug, Clone, Default)]
pub struct LateRecords {
    sender: Arc<Mutex<Option<mpsc::UnboundedSender<RecordBatch>>>>,
}

impl LateRecords {
    /// Routes late records to `sender` from now on.
    pub fn subscribe(&self, sender: mpsc::UnboundedSender<RecordBatch>) {
        *self.sender.lock() = Some(sender);
    }

    /// Whether somebody reads late records.
    pub fn wanted(&self) -> bool {
        self.sender.lock().is_some()
    }

    /// Sends the rows of `batch` selected by `late`.
    pub fn send(&self, batch: &RecordBatch, late: &BooleanArray) -> Result<()> {
        let guard = self.sender.lock();
        let Some(sender) = guard.as_ref() else {
            return Ok(());
        };
        let rows = filter_record_batch(batch, late)?;
        // A reader that went away no longer wants them.
        let _ = sender.send(rows);
        Ok(())
    }
}
