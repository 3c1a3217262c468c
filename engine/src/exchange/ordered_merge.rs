//! [`OrderedMerge`]: one exchange output's rows from several inputs in an order fixed by the
//! data alone, so that a replay gives the same changelog on every run and at any number of
//! source partitions.
//!
//! Every row an input sends carries a merge key: the largest event time its input has sent
//! up to and including that row (a running maximum, so keys never fall within one input),
//! or, without an event time, the input's batch number. After each batch an input also
//! sends every output that got none of its rows a `Progress` key, and watermarks travel as
//! items of their own with a key at least `watermark + delay`. The merge passes on the rows
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
//! non-overlapping partitions do); runs cut from batches are collected as slices and
//! concatenated when one of them ends its batch, when the session's batch size is reached,
//! before the merge waits for an input, and before a watermark.

use std::collections::VecDeque;
use std::time::Duration;

use datafusion::arrow::array::{Array, AsArray};
use datafusion::arrow::compute::concat_batches;
use datafusion::arrow::datatypes::Int64Type;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::Result;
use futures::StreamExt;
use futures::stream::BoxStream;
use tokio::sync::mpsc;
use tokio::sync::mpsc::error::TryRecvError;

use crate::watermark::{EventTime, StreamMessage, event_times};

/// What an exchange input sends to an output.
pub enum Routed {
    /// Rows, with their merge keys when the output merges its inputs.
    Rows(RecordBatch, Option<Vec<i64>>),
    /// Nothing for this output up to `key` (merging outputs only).
    Progress(i64),
    /// A watermark, and its merge key.
    Watermark { watermark: i64, key: i64 },
}

pub type RoutedMessage = Result<Routed>;

/// The merge keys an input gives its rows (see the module documentation).
#[derive(Debug)]
pub struct MergeKeys {
    event_time: Option<EventTime>,
    /// The largest event time sent so far, or the batches sent so far.
    progress: i64,
}

impl MergeKeys {
    pub fn new(event_time: Option<EventTime>) -> Self {
        Self {
            event_time,
            progress: if event_time.is_some() { i64::MIN } else { 0 },
        }
    }

    /// The keys of `piece`, part of the batch about to be sent.
    pub fn of(&self, piece: &RecordBatch) -> Result<Vec<i64>> {
        let Some(event_time) = self.event_time else {
            return Ok(vec![self.progress; piece.num_rows()]);
        };
        let times = event_times(piece.column(event_time.column))?;
        let times = times.as_primitive::<Int64Type>();
        let mut running = self.progress;
        Ok((0..times.len())
            .map(|row| {
                if times.is_valid(row) {
                    running = running.max(times.value(row));
                }
                running
            })
            .collect())
    }

    /// Records a sent batch whose largest event time is `newest`.
    pub fn sent(&mut self, newest: Option<i64>) {
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
        keys: Vec<i64>,
        /// Keys below the input's previous key count as that key.
        floor: i64,
        offset: usize,
    },
    Progress(i64),
    Watermark {
        watermark: i64,
        key: i64,
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
            } => keys[*offset].max(*floor),
            Self::Progress(key) | Self::Watermark { key, .. } => *key,
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
                let keys = keys.unwrap_or_else(|| vec![floor; batch.num_rows()]);
                self.last_key = floor.max(keys[keys.len() - 1]);
                Queued::Rows {
                    batch,
                    keys,
                    floor,
                    offset: 0,
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
    /// Rows passed on but not yet sent, as slices of the inputs' batches.
    pending: Vec<RecordBatch>,
    pending_rows: usize,
    ready: VecDeque<Result<StreamMessage>>,
    sent_watermark: i64,
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
            pending: Vec::new(),
            pending_rows: 0,
            ready: VecDeque::new(),
            sent_watermark: i64::MIN,
            done: false,
        }
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
                self.pending.clear();
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
                self.done = true;
                return Ok(());
            }
            // Every running input is idle: wait for whichever sends first.
            if self.flush()? {
                return Ok(());
            }
            return self.wait_for_any().await;
        };
        let (mut smallest, mut second) = (first, None);
        for head in heads {
            if head < smallest {
                second = Some(smallest);
                smallest = head;
            } else if second.is_none_or(|second| head < second) {
                second = Some(head);
            }
        }
        if let Some(floor) = floor {
            if floor < smallest {
                if self.flush()? {
                    return Ok(());
                }
                return self.wait_for(floor.1).await;
            }
            second = Some(second.map_or(floor, |second| second.min(floor)));
        }
        self.take_from(smallest.1, second)
    }

    /// Passes on the head of input `index` up to the next input's head `limit`.
    fn take_from(&mut self, index: usize, limit: Option<(i64, usize)>) -> Result<()> {
        let input = &mut self.inputs[index];
        let Some(head) = input.queue.front_mut() else {
            return Ok(());
        };
        match head {
            Queued::Progress(_) => {
                input.queue.pop_front();
            }
            Queued::Watermark { watermark, .. } => {
                let watermark = *watermark;
                input.queue.pop_front();
                if watermark > self.sent_watermark {
                    self.sent_watermark = watermark;
                    self.flush()?;
                    self.ready
                        .push_back(Ok(StreamMessage::Watermark(watermark)));
                }
            }
            Queued::Rows {
                batch,
                keys,
                floor,
                offset,
            } => {
                let start = *offset;
                let end = match limit {
                    None => keys.len(),
                    Some(limit) => {
                        start
                            + keys[start..].partition_point(|&key| (key.max(*floor), index) < limit)
                    }
                };
                let rows = if start == 0 && end == keys.len() {
                    batch.clone()
                } else {
                    batch.slice(start, end - start)
                };
                *offset = end;
                let piece_ends = end == keys.len();
                if piece_ends {
                    input.queue.pop_front();
                }
                self.pending_rows += rows.num_rows();
                self.pending.push(rows);
                if piece_ends || self.pending_rows >= self.batch_rows {
                    self.flush()?;
                }
            }
        }
        Ok(())
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

    /// Sends the rows passed on so far as one batch; whether there were any.
    fn flush(&mut self) -> Result<bool> {
        let batch = match self.pending.as_slice() {
            [] => return Ok(false),
            [batch] => batch.clone(),
            [first, ..] => concat_batches(&first.schema(), &self.pending)?,
        };
        self.pending.clear();
        self.pending_rows = 0;
        self.ready.push_back(Ok(StreamMessage::Batch(batch)));
        Ok(true)
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
        Routed::Rows(batch, Some(values.to_vec()))
    }

    /// Merges what each input sends (then closes) into the values and watermarks seen.
    async fn merge(inputs: Vec<Vec<Routed>>, idle_timeout: Option<Duration>) -> Vec<String> {
        let mut receivers = Vec::new();
        for items in inputs {
            let (sender, receiver) = mpsc::channel(items.len().max(1));
            for item in items {
                sender.send(Ok(item)).await.unwrap();
            }
            receivers.push(receiver);
        }
        let messages: Vec<_> = OrderedMerge::new(receivers, idle_timeout, 1024)
            .into_stream()
            .collect()
            .await;
        let mut seen = Vec::new();
        for message in messages {
            match message.unwrap() {
                StreamMessage::Batch(batch) => {
                    let values = batch.column(0).as_primitive::<Int64Type>();
                    seen.extend(values.values().iter().map(i64::to_string));
                }
                StreamMessage::Watermark(w) => seen.push(format!("w{w}")),
            }
        }
        seen
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
