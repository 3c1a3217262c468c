//! [`PartitionProgress`]: how far in event time each partition of an operator has got,
//! published beside its batches and read by the exchange above it.
//!
//! The exchange computes watermarks from the rows it receives, and those rows may say too
//! little. A filter between a source and the exchange may pass none of a partition's rows,
//! which would hold every window open; so the source records the largest event time each
//! partition has handed out, before any filter. A window aggregation emits rows only when
//! windows close, yet the watermark it holds proves that no window starting before a point
//! can still come; so it records, per output partition, the smallest window start it may
//! still emit (and passes on an empty batch when only that moved). The exchange, woken by the
//! (possibly empty) batch, reads the progress: the watermark moves with the operator below,
//! whatever rows reach it. The exchange pulls the operator's stream itself, so the progress
//! it reads after a batch is exactly the operator's when it handed that batch out.

use std::sync::atomic::{AtomicI64, Ordering};

/// See the module documentation.
#[derive(Debug)]
pub struct PartitionProgress(Vec<AtomicI64>);

impl PartitionProgress {
    pub fn new(partitions: usize) -> Self {
        Self((0..partitions).map(|_| AtomicI64::new(i64::MIN)).collect())
    }

    /// Records that `partition` has got to event time `newest`.
    pub fn record(&self, partition: usize, newest: i64) {
        if let Some(progress) = self.0.get(partition) {
            progress.fetch_max(newest, Ordering::Relaxed);
        }
    }

    /// How far `partition` has got, if it recorded anything.
    pub fn newest(&self, partition: usize) -> Option<i64> {
        let newest = self.0.get(partition)?.load(Ordering::Relaxed);
        (newest != i64::MIN).then_some(newest)
    }

    pub fn partitions(&self) -> usize {
        self.0.len()
    }
}
