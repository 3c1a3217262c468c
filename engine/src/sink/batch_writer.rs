//! [`BatchWriter`]: what every sink implements.

use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::Result;

/// Takes a result's batches one at a time.
pub trait BatchWriter: Send {
    /// Writes one batch.
    fn write(&mut self, batch: &RecordBatch) -> Result<()>;
    /// Flushes and closes the output.
    fn finish(self: Box<Self>) -> Result<()>;
}
