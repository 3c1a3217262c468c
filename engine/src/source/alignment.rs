//! [`SourceAlignment`]: the sources below an interval join kept together in event time.
//!
//! An interval join keeps each side's rows until the other side's watermark passes them, and
//! reads its sides as they come (the side behind first, the other when the side behind has
//! nothing ready). Over replays read as fast as possible, the sides' sources run at their
//! own speeds: a side whose sources run faster grows the join's state by the difference for
//! as long as the replay runs, without bound for an endless one. So the sources below a
//! join's two sides share one alignment:
//!
//! 1. A source joins when its first partition runs. Each of its partitions records the
//!    newest event time it has handed out; the source's frontier is the oldest of those of
//!    its running partitions (an ended partition no longer counts). A source none of whose
//!    partitions has handed out anything yet holds every other source back.
//! 2. Before a partition hands out a batch, it waits while its source's frontier is more
//!    than the source's allowance ahead of another source's frontier. Sources move together
//!    as wholes; how far one source's partitions spread is left to the exchanges that merge
//!    them. The allowance is [`BATCHES_AHEAD`] times the widest batch (in event time) the
//!    source has handed out, so that sources of sparse and dense times both move batches at
//!    a time.
//! 3. A wait lasts at most [`LONGEST_WAIT`]. A source behind that cannot move (its
//!    consumer reads something else first) then only slows the sources ahead, never stops
//!    the query: alignment bounds how fast state grows, it never decides what is read.
//! 4. A partition that ends, or whose stream is dropped, stops holding the others; so does
//!    one silent for its source's `idle_timeout`, as it stops holding back the watermark.
//!
//! Times are compared in nanoseconds, so sources of different time units align.

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio::time::Instant;

/// How many of its widest batches (in event time) a source may run ahead of another's
/// frontier: a few, so that sources taking turns rarely wait (at two batches a
/// self-join's replay ran 5–10% slower), and few, so that the join's state stays a few
/// batches per side.
const BATCHES_AHEAD: i64 = 8;

/// The longest a source partition waits for the others before it hands out its batch.
pub const LONGEST_WAIT: Duration = Duration::from_millis(50);

/// The sources below an interval join; see the module documentation.
#[derive(Debug, Default)]
pub struct SourceAlignment {
    sources: Mutex<Vec<AlignedSource>>,
    advanced: Notify,
}

/// One source's partitions.
#[derive(Debug)]
struct AlignedSource {
    partitions: Vec<PartitionState>,
    /// When each partition last handed out a batch (or joined).
    since: Vec<Instant>,
    /// The source's `idle_timeout`: a partition silent this long holds nobody back.
    idle_timeout: Option<Duration>,
    /// How far ahead of another source's frontier a batch may start, in nanoseconds.
    allowance: i64,
}

/// What a source partition has handed out.
#[derive(Debug, Clone, Copy, PartialEq)]
enum PartitionState {
    /// Nothing yet.
    NotStarted,
    /// Rows up to this time (nanoseconds).
    HandedOut(i64),
    /// Its stream ended or was dropped.
    Ended,
}

/// Where a source stands.
enum Frontier {
    /// No partition handed out anything yet: the source may have rows of any time to come.
    Unknown,
    At(i64),
    /// Every partition ended.
    Ended,
}

impl AlignedSource {
    fn frontier(&self, now: Instant) -> Frontier {
        let mut oldest = None;
        let mut running = false;
        for (state, since) in self.partitions.iter().zip(&self.since) {
            let silent = self
                .idle_timeout
                .is_some_and(|timeout| now.duration_since(*since) >= timeout);
            match state {
                PartitionState::HandedOut(time) if !silent => {
                    oldest = Some(oldest.map_or(*time, |o: i64| o.min(*time)))
                }
                PartitionState::NotStarted if !silent => running = true,
                _ => {}
            }
        }
        match (oldest, running) {
            (Some(time), _) => Frontier::At(time),
            (None, true) => Frontier::Unknown,
            (None, false) => Frontier::Ended,
        }
    }
}

impl SourceAlignment {
    /// An alignment no source has joined yet.
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Adds a source of `partitions` partitions and the given `idle_timeout`; returns its
    /// index.
    pub fn register(&self, partitions: usize, idle_timeout: Option<Duration>) -> usize {
        let mut sources = self.sources.lock();
        sources.push(AlignedSource {
            partitions: vec![PartitionState::NotStarted; partitions],
            since: vec![Instant::now(); partitions],
            idle_timeout,
            allowance: 0,
        });
        sources.len() - 1
    }

    /// Whether `source`'s frontier is too far ahead of another source's. Sources are compared
    /// as wholes: how far one source's own partitions spread (a file's partitions take turns
    /// by row group) is for the exchanges that merge them, and a partition compared on its
    /// own would wait at every row group.
    fn ahead(&self, source: usize) -> bool {
        let sources = self.sources.lock();
        let now = Instant::now();
        let Some((Frontier::At(own), allowance)) =
            sources.get(source).map(|s| (s.frontier(now), s.allowance))
        else {
            return false;
        };
        sources
            .iter()
            .enumerate()
            .filter(|(index, _)| *index != source)
            .any(|(_, other)| match other.frontier(now) {
                Frontier::Unknown => true,
                Frontier::At(time) => own > time.saturating_add(allowance),
                Frontier::Ended => false,
            })
    }

    /// Waits (at most [`LONGEST_WAIT`]) until `source`, about to hand out a batch spanning
    /// `oldest..=newest`, is no longer too far ahead of the other sources.
    pub async fn wait_for_others(&self, source: usize, oldest: i64, newest: i64) {
        if let Some(aligned) = self.sources.lock().get_mut(source) {
            let span = newest.saturating_sub(oldest).max(1);
            aligned.allowance = aligned.allowance.max(span.saturating_mul(BATCHES_AHEAD));
        }
        let deadline = Instant::now() + LONGEST_WAIT;
        loop {
            let woken = self.advanced.notified();
            if !self.ahead(source) {
                return;
            }
            tokio::select! {
                _ = woken => {}
                _ = tokio::time::sleep_until(deadline) => return,
            }
        }
    }

    /// Partition `partition` of `source` handed out rows up to `newest`.
    pub fn handed_out(&self, source: usize, partition: usize, newest: i64) {
        self.set(source, partition, |state| match state {
            PartitionState::HandedOut(time) => PartitionState::HandedOut(time.max(newest)),
            PartitionState::NotStarted => PartitionState::HandedOut(newest),
            PartitionState::Ended => PartitionState::Ended,
        });
    }

    /// Partition `partition` of `source` ended.
    pub fn ended(&self, source: usize, partition: usize) {
        self.set(source, partition, |_| PartitionState::Ended);
    }

    fn set(
        &self,
        source: usize,
        partition: usize,
        change: impl Fn(PartitionState) -> PartitionState,
    ) {
        {
            let mut sources = self.sources.lock();
            let Some(aligned) = sources.get_mut(source) else {
                return;
            };
            if let (Some(state), Some(since)) = (
                aligned.partitions.get_mut(partition),
                aligned.since.get_mut(partition),
            ) {
                *state = change(*state);
                *since = Instant::now();
            }
        }
        self.advanced.notify_waiters();
    }
}

/// A source partition's part in an alignment: it marks the partition ended when dropped.
#[derive(Debug)]
pub struct AlignedPartition {
    alignment: Arc<SourceAlignment>,
    source: usize,
    partition: usize,
    /// Nanoseconds per unit of the source's event times.
    scale: i64,
}

impl AlignedPartition {
    pub fn new(
        alignment: Arc<SourceAlignment>,
        source: usize,
        partition: usize,
        scale: i64,
    ) -> Self {
        Self {
            alignment,
            source,
            partition,
            scale,
        }
    }

    /// Waits until a batch of event times `oldest..=newest` (in the source's unit) may be
    /// handed out, and records it as handed out.
    pub async fn hand_out(&self, oldest: i64, newest: i64) {
        let (oldest, newest) = (
            oldest.saturating_mul(self.scale),
            newest.saturating_mul(self.scale),
        );
        self.alignment
            .wait_for_others(self.source, oldest, newest)
            .await;
        self.alignment
            .handed_out(self.source, self.partition, newest);
    }
}

impl Drop for AlignedPartition {
    fn drop(&mut self) {
        self.alignment.ended(self.source, self.partition);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_source_ahead_waits_until_the_other_catches_up() {
        let alignment = SourceAlignment::new();
        let fast = AlignedPartition::new(Arc::clone(&alignment), alignment.register(1, None), 0, 1);
        let slow = AlignedPartition::new(Arc::clone(&alignment), alignment.register(1, None), 0, 1);
        slow.hand_out(0, 10).await;
        fast.hand_out(0, 10).await;
        fast.hand_out(95, 105).await;
        // Allowance: eight times the widest batch (10) = 80. At 105 the fast source is ahead
        // of 10 + 80.
        let waiting = tokio::spawn(async move {
            fast.hand_out(110, 120).await;
            tokio::time::Instant::now()
        });
        tokio::task::yield_now().await;
        let start = tokio::time::Instant::now();
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert!(!waiting.is_finished(), "the source ahead went on");
        slow.hand_out(11, 30).await;
        let released = waiting.await.unwrap();
        assert_eq!(released - start, Duration::from_millis(10));
    }

    #[tokio::test(start_paused = true)]
    async fn a_wait_is_bounded_and_an_ended_source_holds_nothing() {
        let alignment = SourceAlignment::new();
        let fast = AlignedPartition::new(Arc::clone(&alignment), alignment.register(1, None), 0, 1);
        let stuck =
            AlignedPartition::new(Arc::clone(&alignment), alignment.register(1, None), 0, 1);
        stuck.hand_out(0, 1).await;
        fast.hand_out(1_000, 1_001).await;
        let start = tokio::time::Instant::now();
        fast.hand_out(1_002, 1_003).await;
        assert_eq!(start.elapsed(), LONGEST_WAIT);
        drop(stuck);
        let start = tokio::time::Instant::now();
        fast.hand_out(5_000, 5_001).await;
        assert_eq!(start.elapsed(), Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn a_source_silent_for_its_idle_timeout_holds_nobody_back() {
        let alignment = SourceAlignment::new();
        let fast = AlignedPartition::new(Arc::clone(&alignment), alignment.register(1, None), 0, 1);
        let idle_source = alignment.register(1, Some(Duration::from_secs(1)));
        let silent = AlignedPartition::new(Arc::clone(&alignment), idle_source, 0, 1);
        silent.hand_out(0, 1).await;
        fast.hand_out(1_000, 1_001).await;
        let start = tokio::time::Instant::now();
        fast.hand_out(1_002, 1_003).await;
        assert_eq!(
            start.elapsed(),
            LONGEST_WAIT,
            "the silent source held it back at first"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
        let start = tokio::time::Instant::now();
        fast.hand_out(2_000, 2_001).await;
        assert_eq!(start.elapsed(), Duration::ZERO);
    }

    /// A file's partitions take turns by row group, so one runs a row group ahead of the
    /// other: sources are compared by their frontiers, and that spread makes nobody wait.
    #[tokio::test(start_paused = true)]
    async fn partitions_of_one_source_may_spread_without_waiting() {
        let alignment = SourceAlignment::new();
        let file = alignment.register(2, None);
        let first = AlignedPartition::new(Arc::clone(&alignment), file, 0, 1);
        let second = AlignedPartition::new(Arc::clone(&alignment), file, 1, 1);
        let other =
            AlignedPartition::new(Arc::clone(&alignment), alignment.register(1, None), 0, 1);
        other.hand_out(0, 10).await;
        first.hand_out(0, 10).await;
        second.hand_out(1_000, 1_010).await;
        let start = tokio::time::Instant::now();
        second.hand_out(1_011, 1_020).await;
        assert_eq!(start.elapsed(), Duration::ZERO);
    }
}
