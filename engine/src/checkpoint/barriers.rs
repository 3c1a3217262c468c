//! [`Barriers`]: where in a replay the next checkpoint's barrier stands, and
//! [`PassedBarriers`]: how far each partition of an operator has carried barriers.
//!
//! A barrier is a replay position `P`: the checkpoint holds the effect of every unit before
//! `P` and of none from `P` on. It is placed one past the largest position any source
//! partition has handed out, under the same lock as the sources' hand-outs, so no reader can
//! have passed `P` when it appears. A reader of source partitions (the exchange's merge, or
//! the sink over a source read as it is) passes the barrier on once every partition it reads
//! is at `P` or beyond (or has ended): partitions read their units in order, so each has then
//! handed out every unit of its own before `P`. One barrier is pending at a time.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use parking_lot::Mutex;

/// A checkpoint's barrier: its epoch and its replay position.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Barrier {
    pub epoch: u64,
    pub position: i64,
}

#[derive(Debug)]
struct Schedule {
    /// The largest replay position handed out by any source partition.
    handed_out: i64,
    pending: Option<Barrier>,
    last_epoch: u64,
}

/// See the module documentation.
#[derive(Debug)]
pub struct Barriers {
    schedule: Mutex<Schedule>,
    /// Whether a barrier is pending: read on every batch, so kept apart from the lock.
    any_pending: AtomicBool,
}

impl Barriers {
    /// A schedule whose first barrier has epoch `last_epoch + 1`, for a replay resumed at
    /// `resumed_at` (0 from the start).
    pub fn new(last_epoch: u64, resumed_at: i64) -> Self {
        Self {
            schedule: Mutex::new(Schedule {
                handed_out: resumed_at - 1,
                pending: None,
                last_epoch,
            }),
            any_pending: AtomicBool::new(false),
        }
    }

    /// Runs `publish` (a source partition recording that it hands out `position`) so that
    /// no barrier is placed at or before it meanwhile.
    pub fn hand_out(&self, position: i64, publish: impl FnOnce()) {
        let mut schedule = self.schedule.lock();
        schedule.handed_out = schedule.handed_out.max(position);
        publish();
    }

    /// Places the next barrier, unless one is pending.
    pub fn place(&self) -> Option<Barrier> {
        let mut schedule = self.schedule.lock();
        if schedule.pending.is_some() {
            return None;
        }
        let barrier = Barrier {
            epoch: schedule.last_epoch + 1,
            position: schedule.handed_out.saturating_add(1),
        };
        schedule.last_epoch = barrier.epoch;
        schedule.pending = Some(barrier);
        self.any_pending.store(true, Ordering::SeqCst);
        Some(barrier)
    }

    /// The pending barrier, if any.
    pub fn pending(&self) -> Option<Barrier> {
        if !self.any_pending.load(Ordering::SeqCst) {
            return None;
        }
        self.schedule.lock().pending
    }

    /// Ends barrier `epoch`: its checkpoint is complete, and the next may be placed.
    pub fn complete(&self, epoch: u64) {
        let mut schedule = self.schedule.lock();
        if schedule.pending.is_some_and(|b| b.epoch == epoch) {
            schedule.pending = None;
            self.any_pending.store(false, Ordering::SeqCst);
        }
    }
}

/// The last epoch each partition of an operator has passed on (0: none).
#[derive(Debug)]
pub struct PassedBarriers(Vec<AtomicU64>);

impl PassedBarriers {
    pub fn new(partitions: usize) -> Self {
        Self((0..partitions).map(|_| AtomicU64::new(0)).collect())
    }

    pub fn record(&self, partition: usize, epoch: u64) {
        if let Some(passed) = self.0.get(partition) {
            passed.fetch_max(epoch, Ordering::SeqCst);
        }
    }

    pub fn passed(&self, partition: usize) -> u64 {
        self.0
            .get(partition)
            .map_or(0, |passed| passed.load(Ordering::SeqCst))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_barrier_stands_past_every_position_handed_out() {
        let barriers = Barriers::new(0, 0);
        barriers.hand_out(4, || {});
        barriers.hand_out(2, || {});
        let barrier = barriers.place().unwrap();
        assert_eq!(
            barrier,
            Barrier {
                epoch: 1,
                position: 5
            }
        );
        assert_eq!(barriers.place(), None, "one barrier at a time");
        barriers.complete(1);
        barriers.hand_out(9, || {});
        assert_eq!(
            barriers.place().unwrap(),
            Barrier {
                epoch: 2,
                position: 10
            }
        );
    }

    #[test]
    fn a_resumed_schedule_continues_the_epochs() {
        let barriers = Barriers::new(7, 12);
        assert_eq!(
            barriers.place().unwrap(),
            Barrier {
                epoch: 8,
                position: 12
            }
        );
    }
}
