//! [`OrderedMerge`]: one exchange output's rows from several inputs in an order fixed by the
//! data alone, so that a replay gives the same changelog on every run and at any number of
//! source partitions.
//!
//! Every row an input sends carries a merge key. Over a replay of files it is the row's
//! position in the replay: its unit's index (or a paced replay's slice number), which no two
//! inputs share, so the merge passes units on in the replay's order. The merge then also makes
//! the watermark: after each input batch, every output gets a `Passed` item with the batch's
//! position and the input's largest event time so far, and the watermark is the largest
//! event time passed so far minus the delay — what one partition reading the whole replay
//! would hold after that batch; watermarks the inputs send are ignored. Over in-memory
//! replays and generators the key is the largest event time its input has sent up to and
//! including that row (a running maximum, so keys never fall within one input), or, without
//! an event time, the input's batch number. After each batch an input also
//! sends every output that got none of its rows a `Progress` key. Watermarks the inputs send
//! travel as items of their own with a key at least `watermark + delay`; a replay's merge
//! ignores them and makes the watermark from the keys it passes on (the largest minus the
//! delay, after each input batch), since which of them arrive, and where, depends on timing. The merge passes on the rows
//! of the input with the smallest head `(key, input)` up to the next input's head, and
//! repeats: a k-way merge of sorted runs. An input with nothing queued counts with its last
//! key (its next ones are no smaller): the merge waits for it only when that could come
//! first. Its decisions depend on keys and input numbers only, never on timing.
//!
//! An input sends a batch's items to all outputs at once (not one after the other): one
//! full channel must not keep another output from learning how far the input has come, or
//! two merges could each wait for an input that is blocked on the other.
//!
//! A time-ordered source comes out in event-time order, ties by source partition, which is
//! stored order when source partitions hold consecutive rows: the same rows in the same
//! order whether the source was read as one partition or four. Rows out of order within the
//! declared delay have a key no larger than their time plus the delay, so each reaches the
//! output ahead of any watermark that passes its time.
//!
//! A silent input would hold the merge as it holds the watermark. With an idle timeout, an
//! input that has sent nothing for that long is left out until it sends again (live streams
//! only; their order across partitions is then arrival order).
//!
//! Rows leave in the batches they came in when a batch is passed on whole (as sorted,
//! non-overlapping partitions do). Otherwise the runs passed on are noted as (batch, first
//! row, length) — no slicing per run — and built into one batch when the session's batch
//! size is reached, before the merge waits for an input, and
//! before a watermark: long runs by concatenating their slices, short ones (partitions that
//! advance together in event time interleave row by row) by one `interleave` over all
//! their rows.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use datafusion::arrow::array::{Array, AsArray};
use datafusion::arrow::compute::{concat_batches, interleave_record_batch};
use datafusion::arrow::datatypes::Int64Type;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::{Result, internal_err};
use futures::StreamExt;
use futures::stream::BoxStream;
use tokio::sync::mpsc;
use tokio::sync::mpsc::error::TryRecvError;

use super::checkpoint::OutputCheckpoint;
use crate::progress::PartitionProgress;
use crate::watermark::{EventTime, StreamMessage, WatermarkTracker, event_times};

/// What an exchange input sends to an output.
pub enum Routed {
    /// Rows, with their merge keys when the output merges its inputs.
    Rows(RecordBatch, Option<RowKeys>),
    /// Nothing for this output up to `key` (merging outputs only).
    Progress(i64),
    /// A watermark, and its merge key.
    Watermark { watermark: i64, key: i64 },
    /// Merging by replay position: the input has sent every row of its batch at position
    /// `key` (to every output), and its event time has reached `newest`.
    Passed { key: i64, newest: Option<i64> },
    /// Rows of input `input`, for an output that does not merge its inputs.
    Piece { batch: RecordBatch, input: usize },
    /// Input `input`, a stateful operator's partition, has handed out everything before
    /// checkpoint barrier `epoch` (see `barrier_alignment`).
    BarrierPassed { input: usize, epoch: u64 },
    /// Input `input` has ended.
    Ended { input: usize },
}

pub type RoutedMessage = Result<Routed>;

/// The merge keys of a piece's rows: one per row, or one for all of them (a replay
/// position, or the batch number without event time), which needs no vector per piece.
#[derive(Debug, Clone, PartialEq)]
pub enum RowKeys {
    PerRow(Vec<i64>),
    All(i64),
}

impl RowKeys {
    pub(super) fn at(&self, row: usize) -> i64 {
        match self {
            Self::PerRow(keys) => keys[row],
            Self::All(key) => *key,
        }
    }
}

/// The merge keys an input gives its rows (see the module documentation).
#[derive(Debug)]
pub struct MergeKeys {
    event_time: Option<EventTime>,
    /// The source's replay positions and the input's partition, when merging by them.
    positions: Option<(Arc<PartitionProgress>, usize)>,
    /// The largest event time sent so far, the batches sent so far, or the position of the
    /// last batch sent.
    progress: i64,
}

impl MergeKeys {
    pub fn new(event_time: Option<EventTime>) -> Self {
        Self {
            event_time,
            positions: None,
            progress: if event_time.is_some() { i64::MIN } else { 0 },
        }
    }

    /// Keys that are the replay positions of the batches of source partition `input`.
    pub fn by_position(positions: Arc<PartitionProgress>, input: usize) -> Self {
        Self {
            event_time: None,
            positions: Some((positions, input)),
            progress: i64::MIN,
        }
    }

    /// Whether the keys are replay positions: the merge then makes the watermarks.
    pub fn is_by_position(&self) -> bool {
        self.positions.is_some()
    }

    /// The position of the batch the input last took from its source.
    fn position(&self) -> i64 {
        self.positions
            .as_ref()
            .and_then(|(positions, input)| positions.newest(*input))
            .unwrap_or(self.progress)
    }

    /// The keys of `piece`, part of the batch about to be sent.
    pub fn of(&self, piece: &RecordBatch) -> Result<RowKeys> {
        if self.positions.is_some() {
            return Ok(RowKeys::All(self.position()));
        }
        let Some(event_time) = self.event_time else {
            return Ok(RowKeys::All(self.progress));
        };
        let times = event_times(piece.column(event_time.column))?;
        let times = times.as_primitive::<Int64Type>();
        let mut running = self.progress;
        Ok(RowKeys::PerRow(
            (0..times.len())
                .map(|row| {
                    if times.is_valid(row) {
                        running = running.max(times.value(row));
                    }
                    running
                })
                .collect(),
        ))
    }

    /// Records a sent batch whose largest event time is `newest`.
    pub fn sent(&mut self, newest: Option<i64>) {
        if self.positions.is_some() {
            self.progress = self.position();
            return;
        }
        match self.event_time {
            Some(_) => self.progress = self.progress.max(newest.unwrap_or(i64::MIN)),
            None => self.progress += 1,
        }
    }

    /// The key of a progress item after the batches sent so far.
    pub fn progress(&self) -> i64 {
        self.progress
    }

    /// The key of `watermark`: after every row whose time it passes.
    pub fn of_watermark(&self, watermark: i64) -> i64 {
        let delay = self.event_time.map_or(0, |e| e.delay);
        watermark.saturating_add(delay).max(self.progress)
    }
}

enum Queued {
    Rows {
        batch: RecordBatch,
        keys: RowKeys,
        /// Keys below the input's previous key count as that key.
        floor: i64,
        offset: usize,
        /// The batch's place among the pending output's sources, and that output's number.
        pending: Option<(u64, usize)>,
    },
    Progress(i64),
    Watermark {
        watermark: i64,
        key: i64,
    },
    Passed {
        key: i64,
        newest: Option<i64>,
    },
}

impl Queued {
    fn head_key(&self) -> i64 {
        match self {
            Self::Rows {
                keys,
                floor,
                offset,
                ..
            } => keys.at(*offset).max(*floor),
            Self::Progress(key) | Self::Watermark { key, .. } | Self::Passed { key, .. } => *key,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum InputState {
    Open,
    /// Silent past the idle timeout: not waited for until it sends again.
    Idle,
    Finished,
}

struct MergeInput {
    receiver: mpsc::Receiver<RoutedMessage>,
    queue: VecDeque<Queued>,
    state: InputState,
    /// The largest key queued so far.
    last_key: i64,
}

impl MergeInput {
    /// Queues `item`, keeping the input's keys from falling.
    fn push(&mut self, item: Routed) {
        let floor = self.last_key;
        let queued = match item {
            Routed::Rows(batch, keys) => {
                if batch.num_rows() == 0 {
                    return;
                }
                let keys = keys.unwrap_or(RowKeys::All(floor));
                self.last_key = floor.max(keys.at(batch.num_rows() - 1));
                Queued::Rows {
                    batch,
                    keys,
                    floor,
                    offset: 0,
                    pending: None,
                }
            }
            Routed::Progress(key) => {
                self.last_key = floor.max(key);
                Queued::Progress(self.last_key)
            }
            Routed::Watermark { watermark, key } => {
                self.last_key = floor.max(key);
                Queued::Watermark {
                    watermark,
                    key: self.last_key,
                }
            }
            Routed::Passed { key, newest } => {
                self.last_key = floor.max(key);
                Queued::Passed {
                    key: self.last_key,
                    newest,
                }
            }
            // Sent to outputs that do not merge.
            Routed::Piece { .. } | Routed::BarrierPassed { .. } | Routed::Ended { .. } => {
                return;
            }
        };
        self.queue.push_back(queued);
        self.state = InputState::Open;
    }

    /// Takes what the input has sent without waiting; an error is returned.
    fn poll_ready(&mut self) -> Result<()> {
        while self.state != InputState::Finished {
            match self.receiver.try_recv() {
                Ok(item) => self.push(item?),
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => self.state = InputState::Finished,
            }
        }
        Ok(())
    }

    fn waits_for_input(&self) -> bool {
        self.queue.is_empty() && self.state == InputState::Open
    }
}

/// See the module documentation.
pub struct OrderedMerge {
    inputs: Vec<MergeInput>,
    idle_timeout: Option<Duration>,
    batch_rows: usize,
    /// Rows passed on but not yet sent.
    pending: PendingOutput,
    ready: VecDeque<Result<StreamMessage>>,
    sent_watermark: i64,
    /// Merging by replay position: the watermark of the rows passed on, computed as one
    /// partition reading the whole replay would (see the module documentation). Merging a
    /// replay by event time: the watermark of the keys passed on.
    replay_watermark: Option<WatermarkTracker>,
    /// Whether the replay watermark follows the keys passed on (a merge by event time)
    /// rather than the inputs' `Passed` items (a merge by position).
    watermark_from_keys: bool,
    /// Merging by replay position in a checkpointed run: the barriers to pass on.
    checkpoint: Option<OutputCheckpoint>,
    done: bool,
}

impl OrderedMerge {
    pub fn new(
        receivers: Vec<mpsc::Receiver<RoutedMessage>>,
        idle_timeout: Option<Duration>,
        batch_rows: usize,
    ) -> Self {
        Self {
            inputs: receivers
                .into_iter()
                .map(|receiver| MergeInput {
                    receiver,
                    queue: VecDeque::new(),
                    state: InputState::Open,
                    last_key: i64::MIN,
                })
                .collect(),
            idle_timeout,
            batch_rows: batch_rows.max(1),
            pending: PendingOutput::default(),
            ready: VecDeque::new(),
            sent_watermark: i64::MIN,
            replay_watermark: None,
            watermark_from_keys: false,
            checkpoint: None,
            done: false,
        }
    }

    /// A merge by replay position that passes on the run's checkpoint barriers, resumed at
    /// the watermark its checkpoint holds.
    pub fn with_checkpoint(mut self, checkpoint: Option<OutputCheckpoint>) -> Result<Self> {
        if let Some(checkpoint) = &checkpoint
            && let Some(watermark) = checkpoint.restored_watermark()?
            && let Some(tracker) = &mut self.replay_watermark
        {
            tracker.restore(0, watermark);
            self.sent_watermark = watermark;
        }
        self.checkpoint = checkpoint;
        Ok(self)
    }

    /// Passes on the pending barrier once every running input is at its position or
    /// beyond: every row before it has then been passed on, and none after it.
    fn pass_barrier(&mut self) -> Result<bool> {
        let Some(checkpoint) = &mut self.checkpoint else {
            return Ok(false);
        };
        let low = self
            .inputs
            .iter()
            .filter(|input| input.state != InputState::Finished || !input.queue.is_empty())
            .map(|input| input.queue.front().map_or(input.last_key, Queued::head_key))
            .min()
            .unwrap_or(i64::MAX);
        let Some(barrier) = checkpoint.due(low) else {
            return Ok(false);
        };
        let watermark = self.replay_watermark.as_ref().and_then(|t| t.input(0));
        checkpoint.write(barrier.epoch, watermark)?;
        self.flush()?;
        self.ready
            .push_back(Ok(StreamMessage::Barrier(barrier.epoch)));
        Ok(true)
    }

    /// A merge by replay position, which makes the watermark itself from the inputs'
    /// `Passed` items with the declared `delay`, ignoring any watermark the inputs send.
    pub fn by_position(mut self, delay: i64) -> Self {
        self.replay_watermark = Some(WatermarkTracker::new(1, delay));
        self
    }

    /// A merge of a replay by event-time keys that makes the watermark itself, ignoring
    /// the inputs' watermarks: each input sends its watermark when it computes it, so which
    /// watermarks arrive, and where among the rows, depends on timing, and with them which
    /// records are late. Here, once an input's batch has been passed on whole (or its
    /// progress key, for a batch with no rows here), the watermark is the largest key passed
    /// so far minus `delay`. Keys pass in order and every input's next key is at least the
    /// one passed, so this is never above the inputs' combined watermark, and it depends on
    /// the data alone.
    pub fn by_event_time(mut self, delay: i64) -> Self {
        self.replay_watermark = Some(WatermarkTracker::new(1, delay));
        self.watermark_from_keys = true;
        self
    }

    /// Merging by event time: the watermark after key `key` was passed on.
    fn pass_key(&mut self, key: i64) -> Result<()> {
        if !self.watermark_from_keys {
            return Ok(());
        }
        if let Some(tracker) = &mut self.replay_watermark {
            tracker.observe(0, key, Instant::now());
        }
        self.pass_watermark()
    }

    pub fn into_stream(self) -> BoxStream<'static, Result<StreamMessage>> {
        futures::stream::unfold(self, |mut merge| async move {
            let message = merge.next_message().await?;
            Some((message, merge))
        })
        .boxed()
    }

    async fn next_message(&mut self) -> Option<Result<StreamMessage>> {
        loop {
            if let Some(message) = self.ready.pop_front() {
                return Some(message);
            }
            if self.done {
                return None;
            }
            if let Err(error) = self.step().await {
                self.done = true;
                self.pending = PendingOutput::default();
                return Some(Err(error));
            }
        }
    }

    /// Makes progress: takes in what the inputs have sent, waits for one when the merge
    /// cannot decide without it, or passes on the rows of the input with the smallest head.
    async fn step(&mut self) -> Result<()> {
        for input in &mut self.inputs {
            if input.queue.is_empty() {
                input.poll_ready()?;
            }
        }
        if self.pass_barrier()? {
            return Ok(());
        }
        // A running input with nothing queued will send keys no smaller than its last one:
        // the rows of others below that can go on without it. Waiting for it instead could
        // deadlock: it may itself be paused until the others' rows move on (event-time
        // alignment).
        let floor = self
            .inputs
            .iter()
            .enumerate()
            .filter(|(_, input)| input.waits_for_input())
            .map(|(index, input)| (input.last_key, index))
            .min();
        let mut heads = self
            .inputs
            .iter()
            .enumerate()
            .filter_map(|(index, input)| Some((input.queue.front()?.head_key(), index)));
        let Some(first) = heads.next() else {
            if let Some((_, waited)) = floor {
                if self.flush()? {
                    return Ok(());
                }
                return self.wait_for(waited).await;
            }
            if self.inputs.iter().all(|i| i.state == InputState::Finished) {
                self.flush()?;
                if let Some(tracker) = &mut self.replay_watermark {
                    tracker.finish(0);
                    self.pass_watermark()?;
                }
                self.done = true;
                return Ok(());
            }
            // Every running input is idle: wait for whichever sends first.
            if self.flush()? {
                return Ok(());
            }
            return self.wait_for_any().await;
        };
        let smallest = heads.fold(first, std::cmp::min);
        if let Some(floor) = floor
            && floor < smallest
        {
            if self.flush()? {
                return Ok(());
            }
            return self.wait_for(floor.1).await;
        }
        let head_is_rows = matches!(
            self.inputs[smallest.1].queue.front(),
            Some(Queued::Rows { .. })
        );
        if !head_is_rows {
            return self.take_from(smallest.1);
        }
        // Rows go on up to the smallest head that is not a row, or an input waited for.
        let bound = self
            .inputs
            .iter()
            .enumerate()
            .filter_map(|(index, input)| match input.queue.front() {
                Some(Queued::Rows { .. }) => None,
                Some(item) => Some((item.head_key(), index)),
                None => input.waits_for_input().then_some((input.last_key, index)),
            })
            .min();
        self.merge_rows(bound)
    }

    /// Passes on the head item of input `index`, a progress or watermark item.
    fn take_from(&mut self, index: usize) -> Result<()> {
        let input = &mut self.inputs[index];
        match input.queue.pop_front() {
            Some(Queued::Passed { newest, .. }) => {
                // Each source batch's rows leave as a batch of their own, as one partition
                // reading the replay hands them out: what an operator emits can depend on
                // how its input is cut into batches.
                self.flush()?;
                if let (Some(tracker), Some(newest)) = (&mut self.replay_watermark, newest) {
                    tracker.observe(0, newest, Instant::now());
                    self.pass_watermark()?;
                }
            }
            Some(Queued::Watermark { .. }) if self.replay_watermark.is_some() => {}
            Some(Queued::Watermark { watermark, .. }) if watermark > self.sent_watermark => {
                self.sent_watermark = watermark;
                self.flush()?;
                self.ready
                    .push_back(Ok(StreamMessage::Watermark(watermark)));
            }
            Some(Queued::Rows { .. }) => {
                return internal_err!("ordered merge: rows taken as a progress item");
            }
            Some(Queued::Progress(key)) => self.pass_key(key)?,
            Some(Queued::Watermark { .. }) | None => {}
        }
        Ok(())
    }

    /// The merge's inner loop: passes on runs of rows while the smallest head is a queued
    /// row, without looking at the channels. `bound` is the smallest head that is not a
    /// queued row (an input waited for, a progress or watermark item); rows from there on
    /// wait for the next step, as does everything once a batch ends (its input may have
    /// sent more). Pending rows leave once there are a batch's worth, or before the merge
    /// waits.
    fn merge_rows(&mut self, bound: Option<(i64, usize)>) -> Result<()> {
        loop {
            let mut smallest: Option<(i64, usize)> = None;
            let mut second = bound;
            for (index, input) in self.inputs.iter().enumerate() {
                let Some(Queued::Rows {
                    keys,
                    floor,
                    offset,
                    ..
                }) = input.queue.front()
                else {
                    continue;
                };
                let head = (keys.at(*offset).max(*floor), index);
                match smallest {
                    Some(first) if head > first => {
                        if second.is_none_or(|second| head < second) {
                            second = Some(head);
                        }
                    }
                    Some(first) => {
                        second = Some(second.map_or(first, |second| second.min(first)));
                        smallest = Some(head);
                    }
                    None => smallest = Some(head),
                }
            }
            let Some((_, index)) = smallest.filter(|head| bound.is_none_or(|b| *head < b)) else {
                return Ok(());
            };
            let input = &mut self.inputs[index];
            let Some(Queued::Rows {
                batch,
                keys,
                floor,
                offset,
                pending,
            }) = input.queue.front_mut()
            else {
                return internal_err!("ordered merge: the smallest head is not a row");
            };
            let start = *offset;
            let rows = batch.num_rows();
            let last_key = keys.at(rows - 1).max(*floor);
            let end = run_end(keys, rows, *floor, index, start, second);
            let source = self.pending.source(batch, pending);
            self.pending.push(source, start, end - start);
            *offset = end;
            let batch_ended = end == rows;
            if batch_ended {
                input.queue.pop_front();
            }
            if self.pending.rows >= self.batch_rows || self.pending.is_whole_batch() {
                self.flush()?;
            }
            if batch_ended {
                return self.pass_key(last_key);
            }
        }
    }

    /// Waits for input `index` to send something; with an idle timeout, at most that long.
    async fn wait_for(&mut self, index: usize) -> Result<()> {
        let input = &mut self.inputs[index];
        let received = match self.idle_timeout {
            None => input.receiver.recv().await,
            Some(timeout) => match tokio::time::timeout(timeout, input.receiver.recv()).await {
                Ok(received) => received,
                Err(_) => {
                    input.state = InputState::Idle;
                    return Ok(());
                }
            },
        };
        match received {
            Some(item) => input.push(item?),
            None => input.state = InputState::Finished,
        }
        Ok(())
    }

    async fn wait_for_any(&mut self) -> Result<()> {
        let waits = self
            .inputs
            .iter_mut()
            .enumerate()
            .filter(|(_, input)| input.state == InputState::Idle)
            .map(|(index, input)| Box::pin(async move { (index, input.receiver.recv().await) }));
        let ((index, received), _, _) = futures::future::select_all(waits).await;
        let input = &mut self.inputs[index];
        match received {
            Some(item) => input.push(item?),
            None => input.state = InputState::Finished,
        }
        Ok(())
    }

    /// Passes on the replay watermark, if it rose.
    fn pass_watermark(&mut self) -> Result<()> {
        let watermark = self
            .replay_watermark
            .as_ref()
            .and_then(|tracker| tracker.watermark(Instant::now()));
        if let Some(watermark) = watermark.filter(|w| *w > self.sent_watermark) {
            self.sent_watermark = watermark;
            self.flush()?;
            self.ready
                .push_back(Ok(StreamMessage::Watermark(watermark)));
        }
        Ok(())
    }

    /// Sends the rows passed on so far as one batch; whether there were any.
    fn flush(&mut self) -> Result<bool> {
        match self.pending.build()? {
            Some(batch) => {
                self.ready.push_back(Ok(StreamMessage::Batch(batch)));
                Ok(true)
            }
            None => Ok(false),
        }
    }
}

/// The end of the run of input `index`'s rows from `start` (the smallest head) that come
/// before `limit`, the next head; runs are often a row or two long, so the first rows are
/// looked at one by one before a binary search.
fn run_end(
    keys: &RowKeys,
    rows: usize,
    floor: i64,
    index: usize,
    start: usize,
    limit: Option<(i64, usize)>,
) -> usize {
    let Some(limit) = limit else {
        return rows;
    };
    let before = |key: i64| (key.max(floor), index) < limit;
    let keys = match keys {
        RowKeys::PerRow(keys) => keys,
        // The run starts at the smallest head: with one key for all rows, it is all of them.
        RowKeys::All(_) => return rows,
    };
    let scanned = (start + 8).min(keys.len());
    match (start + 1..scanned).find(|&row| !before(keys[row])) {
        Some(end) => end,
        None => scanned + keys[scanned..].partition_point(|&key| before(key)),
    }
}

/// Runs at least this long on average are concatenated as slices, shorter ones interleaved.
const SLICED_RUN_ROWS: usize = 32;

/// The runs of rows passed on since the last batch left, in output order.
#[derive(Default)]
struct PendingOutput {
    /// The batches the runs are cut from.
    sources: Vec<RecordBatch>,
    /// `(source, first row, rows)`.
    runs: Vec<(usize, usize, usize)>,
    rows: usize,
    /// Counts the batches built, so that a queued batch knows whether its place among
    /// `sources` is still valid.
    output: u64,
}

impl PendingOutput {
    /// `batch`'s index among the sources, added if it is not there yet; `place` remembers it.
    fn source(&mut self, batch: &RecordBatch, place: &mut Option<(u64, usize)>) -> usize {
        match *place {
            Some((output, index)) if output == self.output => index,
            _ => {
                let index = self.sources.len();
                self.sources.push(batch.clone());
                *place = Some((self.output, index));
                index
            }
        }
    }

    fn push(&mut self, source: usize, start: usize, rows: usize) {
        self.rows += rows;
        match self.runs.last_mut() {
            Some((last, first, length)) if *last == source && *first + *length == start => {
                *length += rows;
            }
            _ => self.runs.push((source, start, rows)),
        }
    }

    /// Whether the pending rows are one whole batch, which can leave as it came.
    fn is_whole_batch(&self) -> bool {
        matches!(self.runs.as_slice(), &[(source, 0, rows)] if rows == self.sources[source].num_rows())
    }

    /// The pending rows as one batch, if there are any; afterwards none are pending.
    fn build(&mut self) -> Result<Option<RecordBatch>> {
        let batch = match self.runs.as_slice() {
            [] => return Ok(None),
            &[(source, start, rows)] => {
                let batch = &self.sources[source];
                if start == 0 && rows == batch.num_rows() {
                    batch.clone()
                } else {
                    batch.slice(start, rows)
                }
            }
            runs if self.rows / runs.len() >= SLICED_RUN_ROWS => {
                let slices: Vec<RecordBatch> = runs
                    .iter()
                    .map(|&(source, start, rows)| self.sources[source].slice(start, rows))
                    .collect();
                concat_batches(&self.sources[0].schema(), &slices)?
            }
            runs => {
                let indices: Vec<(usize, usize)> = runs
                    .iter()
                    .flat_map(|&(source, start, rows)| {
                        (start..start + rows).map(move |r| (source, r))
                    })
                    .collect();
                let sources: Vec<&RecordBatch> = self.sources.iter().collect();
                interleave_record_batch(&sources, &indices)?
            }
        };
        self.sources.clear();
        self.runs.clear();
        self.rows = 0;
        self.output += 1;
        Ok(Some(batch))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::arrow::array::Int64Array;
    use datafusion::arrow::datatypes::{DataType, Field, Schema};

    use super::*;

    fn rows(values: &[i64]) -> Routed {
        let schema = Arc::new(Schema::new(vec![Field::new("t", DataType::Int64, false)]));
        let column = Arc::new(Int64Array::from(values.to_vec()));
        let batch = RecordBatch::try_new(schema, vec![column]).unwrap();
        Routed::Rows(batch, Some(RowKeys::PerRow(values.to_vec())))
    }

    /// Merges what each input sends (then closes) into the values and watermarks seen.
    async fn merge(inputs: Vec<Vec<Routed>>, idle_timeout: Option<Duration>) -> Vec<String> {
        merge_batches(inputs, idle_timeout, 1024)
            .await
            .into_iter()
            .flatten()
            .collect()
    }

    /// Like [`merge`], one list per batch or watermark that left.
    async fn merge_batches(
        inputs: Vec<Vec<Routed>>,
        idle_timeout: Option<Duration>,
        batch_rows: usize,
    ) -> Vec<Vec<String>> {
        let receivers = channels_holding(inputs).await;
        seen(OrderedMerge::new(receivers, idle_timeout, batch_rows)).await
    }

    /// A closed channel per input, holding what the input sends.
    async fn channels_holding(inputs: Vec<Vec<Routed>>) -> Vec<mpsc::Receiver<RoutedMessage>> {
        let mut receivers = Vec::new();
        for items in inputs {
            let (sender, receiver) = mpsc::channel(items.len().max(1));
            for item in items {
                sender.send(Ok(item)).await.unwrap();
            }
            receivers.push(receiver);
        }
        receivers
    }

    /// What leaves `merge`: one list per batch or watermark.
    async fn seen(merge: OrderedMerge) -> Vec<Vec<String>> {
        let messages: Vec<_> = merge.into_stream().collect().await;
        let mut seen = Vec::new();
        for message in messages {
            match message.unwrap() {
                StreamMessage::Batch(batch) => {
                    let values = batch.column(0).as_primitive::<Int64Type>();
                    seen.push(values.values().iter().map(i64::to_string).collect());
                }
                StreamMessage::Watermark(w) => seen.push(vec![format!("w{w}")]),
                StreamMessage::Barrier(e) => seen.push(vec![format!("b{e}")]),
            }
        }
        seen
    }

    fn strings(values: impl IntoIterator<Item = i64>) -> Vec<String> {
        values.into_iter().map(|v| v.to_string()).collect()
    }

    /// Merged by event time, the watermark follows the keys passed on, wherever the inputs'
    /// own watermarks (sent when each input computes one) fall: whether input 1's watermark
    /// arrives or not, the same rows leave before the same watermarks.
    #[tokio::test]
    async fn a_merge_by_event_time_makes_the_same_watermarks_whatever_the_inputs_send() {
        let arrangements = [
            vec![
                vec![rows(&[1, 5]), Routed::Progress(6), rows(&[7, 12])],
                vec![rows(&[2, 9])],
            ],
            vec![
                vec![rows(&[1, 5]), Routed::Progress(6), rows(&[7, 12])],
                vec![
                    rows(&[2, 9]),
                    Routed::Watermark {
                        watermark: 3,
                        key: 9,
                    },
                ],
            ],
        ];
        let mut outputs = Vec::new();
        for inputs in arrangements {
            let receivers = channels_holding(inputs).await;
            outputs.push(seen(OrderedMerge::new(receivers, None, 1024).by_event_time(2)).await);
        }
        let w = |w: i64| vec![format!("w{w}")];
        let expected = vec![
            strings([1, 2, 5]),
            w(3),
            w(4),
            strings([7, 9]),
            w(7),
            strings([12]),
            w(10),
            w(i64::MAX),
        ];
        assert_eq!(outputs[0], expected);
        assert_eq!(outputs[1], expected);
    }

    #[tokio::test]
    async fn interleaved_rows_leave_in_batches_of_the_session_size() {
        let odd: Vec<i64> = (1..40).step_by(2).collect();
        let even: Vec<i64> = (2..41).step_by(2).collect();
        let seen = merge_batches(
            vec![
                vec![rows(&odd[..7]), rows(&odd[7..])],
                vec![rows(&even[..12]), rows(&even[12..])],
            ],
            None,
            16,
        )
        .await;
        let sizes: Vec<usize> = seen.iter().map(Vec::len).collect();
        assert_eq!(sizes, [16, 16, 8]);
        assert_eq!(seen.concat(), strings(1..=40));
    }

    #[tokio::test]
    async fn long_runs_and_whole_batches_keep_their_order() {
        let seen = merge_batches(
            vec![
                vec![rows(&[1, 2, 3, 4]), rows(&[20, 21, 22, 23, 24, 25, 26])],
                vec![rows(&[10, 11, 12, 13, 14, 15, 16, 30, 31])],
            ],
            None,
            1024,
        )
        .await;
        assert_eq!(seen[0], strings(1..=4), "a whole batch leaves as it came");
        let rest = strings((10..=16).chain(20..=26).chain(30..=31));
        assert_eq!(seen[1..].concat(), rest);
    }

    #[tokio::test]
    async fn rows_leave_in_key_order_ties_by_input() {
        let seen = merge(
            vec![
                vec![rows(&[1, 3, 5]), rows(&[7, 7])],
                vec![rows(&[2, 3, 4]), Routed::Progress(7), rows(&[8])],
            ],
            None,
        )
        .await;
        assert_eq!(seen, ["1", "2", "3", "3", "4", "5", "7", "7", "8"]);
    }

    #[tokio::test]
    async fn a_watermark_follows_the_rows_it_passes_on_every_input() {
        let seen = merge(
            vec![
                vec![
                    rows(&[10, 11]),
                    Routed::Watermark {
                        watermark: 9,
                        key: 11,
                    },
                ],
                vec![rows(&[8, 9, 12])],
            ],
            None,
        )
        .await;
        assert_eq!(seen, ["8", "9", "10", "11", "w9", "12"]);
    }

    #[tokio::test]
    async fn without_an_idle_timeout_a_silent_input_holds_the_merge() {
        let (_silent, receiver) = mpsc::channel::<RoutedMessage>(1);
        let (sender, other) = mpsc::channel(1);
        sender.send(Ok(rows(&[1]))).await.unwrap();
        let mut merge = OrderedMerge::new(vec![receiver, other], None, 1024).into_stream();
        let next = tokio::time::timeout(Duration::from_millis(200), merge.next()).await;
        assert!(next.is_err(), "nothing may leave while an input is silent");
    }

    #[tokio::test]
    async fn an_idle_timeout_leaves_a_silent_input_out() {
        let (_silent, receiver) = mpsc::channel::<RoutedMessage>(1);
        let (sender, other) = mpsc::channel(1);
        sender.send(Ok(rows(&[1]))).await.unwrap();
        let mut merge =
            OrderedMerge::new(vec![receiver, other], Some(Duration::from_millis(20)), 1024)
                .into_stream();
        let next = tokio::time::timeout(Duration::from_secs(10), merge.next()).await;
        assert!(matches!(next, Ok(Some(Ok(StreamMessage::Batch(_))))));
    }
}
