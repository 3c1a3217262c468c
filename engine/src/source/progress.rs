//! [`SourceProgress`]: the largest event time each source partition has handed out, read by
//! the exchange above it.
//!
//! The exchange computes watermarks from the rows it receives, and a filter between the
//! source and the exchange may pass none of them: a source partition whose rows all fail the
//! filter would hold every window open. The source records its progress before any filter,
//! and the exchange, woken by the (possibly empty) filtered batch, reads it: the watermark
//! moves with the source, whatever the filter keeps.

use std::sync::atomic::{AtomicI64, Ordering};

/// See the module documentation.
#[derive(Debug)]
pub struct SourceProgress(Vec<AtomicI64>);

impl SourceProgress {
    pub fn new(partitions: usize) -> Self {
        Self((0..partitions).map(|_| AtomicI64::new(i64::MIN)).collect())
    }

    /// Records that `partition` handed out a record of event time `newest`.
    pub fn record(&self, partition: usize, newest: i64) {
        if let Some(progress) = self.0.get(partition) {
            progress.fetch_max(newest, Ordering::Relaxed);
        }
    }

    /// The largest event time `partition` has handed out, if any.
    pub fn newest(&self, partition: usize) -> Option<i64> {
        let newest = self.0.get(partition)?.load(Ordering::Relaxed);
        (newest != i64::MIN).then_some(newest)
    }

    pub fn partitions(&self) -> usize {
        self.0.len()
    }
}
