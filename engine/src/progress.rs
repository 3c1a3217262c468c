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
//!
//! Progress that nobody reads need not be computed: a source finds its partitions' newest
//! event times with a pass over every batch's time column, which is most of what a
//! projection of a stream costs. The exchange marks the progress it will read
//! ([`PartitionProgress::mark_read`]) before it pulls the operator's first batch, and a source
//! records only progress that is read.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};

/// See the module documentation.
#[derive(Debug)]
pub struct PartitionProgress {
    newest: Vec<AtomicI64>,
    read: AtomicBool,
}

impl PartitionProgress {
    pub fn new(partitions: usize) -> Self {
        Self {
            newest: (0..partitions).map(|_| AtomicI64::new(i64::MIN)).collect(),
            read: AtomicBool::new(false),
        }
    }

    /// Records that `partition` has got to event time `newest`.
    pub fn record(&self, partition: usize, newest: i64) {
        if let Some(progress) = self.newest.get(partition) {
            progress.fetch_max(newest, Ordering::Relaxed);
        }
    }

    /// How far `partition` has got, if it recorded anything.
    pub fn newest(&self, partition: usize) -> Option<i64> {
        let newest = self.newest.get(partition)?.load(Ordering::Relaxed);
        (newest != i64::MIN).then_some(newest)
    }

    pub fn partitions(&self) -> usize {
        self.newest.len()
    }

    /// A consumer will read this progress: marked before it pulls the operator's first batch.
    pub fn mark_read(&self) {
        self.read.store(true, Ordering::Relaxed);
    }

    /// Whether a consumer reads this progress (an operator for which recording it costs a
    /// pass over its rows records it only then).
    pub fn is_read(&self) -> bool {
        self.read.load(Ordering::Relaxed)
    }
}
