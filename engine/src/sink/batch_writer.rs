//! [`BatchWriter`]: what every sink implements.

use std::path::PathBuf;

use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::{DataFusionError, Result};

/// Takes a result's batches one at a time.
pub trait BatchWriter: Send {
    /// Writes one batch.
    fn write(&mut self, batch: &RecordBatch) -> Result<()>;
    /// Flushes and closes the output.
    fn finish(self: Box<Self>) -> Result<()>;
}

/// A file sink's writer whose errors name the file (a full disk says where).
pub struct NamedFileWriter {
    pub inner: Box<dyn BatchWriter>,
    pub path: PathBuf,
}

impl NamedFileWriter {
    fn named(&self, error: DataFusionError) -> DataFusionError {
        DataFusionError::Execution(format!("writing {} failed: {error}", self.path.display()))
    }
}

impl BatchWriter for NamedFileWriter {
    fn write(&mut self, batch: &RecordBatch) -> Result<()> {
        self.inner.write(batch).map_err(|error| self.named(error))
    }

    fn finish(self: Box<Self>) -> Result<()> {
        let NamedFileWriter { inner, path } = *self;
        inner.finish().map_err(|error| {
            DataFusionError::Execution(format!("writing {} failed: {error}", path.display()))
        })
    }
}
