//! The exchange of one input partition into one output, run inline: the consumer pulls the
//! input's batches itself, with no input task, channel or wake-up between them.
//!
//! With one input per output there is nothing to route, merge or align: the output is
//! the input's batches in order, each followed by the watermark it moves (computed as the
//! input tasks compute it: the batch's newest event time, or the progress of the operator
//! below, minus the declared delay), and the last watermark when the input ends. An exchange
//! with an input step (two-phase aggregation) or an idle timeout (a timer moves its
//! watermark while the input is silent) keeps its input task.

use std::sync::Arc;
use std::time::Instant;

use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::Result;
use datafusion::execution::SendableRecordBatchStream;
use futures::StreamExt;
use futures::stream::{self, BoxStream};
use parking_lot::Mutex;

use super::checkpoint::OutputCheckpoint;
use crate::checkpoint::BarrierProbe;
use crate::progress::PartitionProgress;
use crate::watermark::{EventTime, StreamMessage, WatermarkTracker};

type Message = Result<StreamMessage>;

/// The watermark of the one input.
struct InlineWatermark {
    tracker: WatermarkTracker,
    /// The last watermark sent.
    sent: i64,
    event_time: Option<EventTime>,
    /// The input partition: where the operator below and a replay record its progress.
    input: usize,
    /// As the input task's: the progress of the operator below, and the constant between it
    /// and the event-time column.
    input_progress: Option<(Arc<PartitionProgress>, i64)>,
    /// An input error ends the output: no watermark follows it.
    failed: bool,
    /// In a checkpointed run: the barriers to pass on, and where the input (a replay's
    /// positions, or a stateful operator) says it has passed one.
    checkpoint: Option<(OutputCheckpoint, BarrierProbe)>,
}

impl InlineWatermark {
    /// The messages of one input item: the batch (unless empty: then it is news only as
    /// progress) and the watermark it moves.
    fn on_batch(&mut self, batch: Result<RecordBatch>) -> Vec<Message> {
        match self.messages_of(batch) {
            Ok(messages) => messages,
            Err(error) => {
                self.failed = true;
                vec![Err(error)]
            }
        }
    }

    fn messages_of(&mut self, batch: Result<RecordBatch>) -> Result<Vec<Message>> {
        let batch = batch?;
        // The operator's progress, where it publishes one; else the batch's newest time.
        let newest = match (&self.input_progress, &self.event_time) {
            (Some((progress, offset)), _) => progress
                .newest(self.input)
                .map(|newest| newest.saturating_add(*offset)),
            (None, Some(event_time)) => event_time.newest_in(&batch)?,
            (None, None) => None,
        };
        let mut messages = Vec::with_capacity(2);
        // A batch the input handed out after passing the barrier (a replay's batch at the
        // barrier's position or beyond) comes after it.
        messages.extend(self.pass_barrier(false)?);
        if batch.num_rows() > 0 {
            messages.push(Ok(StreamMessage::Batch(batch)));
        }
        if let Some(newest) = newest {
            self.tracker.observe(0, newest, Instant::now());
            messages.extend(self.advance());
        }
        Ok(messages)
    }

    /// The pending barrier, if the input has passed it (or `ended`).
    fn pass_barrier(&mut self, ended: bool) -> Result<Option<Message>> {
        let Some((checkpoint, probe)) = &mut self.checkpoint else {
            return Ok(None);
        };
        let Some(barrier) = checkpoint.due_if(|barrier| ended || probe.passed(self.input, barrier))
        else {
            return Ok(None);
        };
        checkpoint.write(barrier.epoch, self.tracker.input(0))?;
        Ok(Some(Ok(StreamMessage::Barrier(barrier.epoch))))
    }

    /// The last watermark, once the input has ended.
    fn on_end(&mut self) -> Vec<Message> {
        if self.failed {
            return Vec::new();
        }
        let mut messages: Vec<Message> = match self.pass_barrier(true) {
            Ok(barrier) => barrier.into_iter().collect(),
            Err(error) => return vec![Err(error)],
        };
        self.tracker.finish(0);
        messages.extend(self.advance());
        messages
    }

    /// The watermark, if it rose since it was last sent.
    fn advance(&mut self) -> Option<Message> {
        let watermark = self.tracker.watermark(Instant::now())?;
        (watermark > self.sent).then(|| {
            self.sent = watermark;
            Ok(StreamMessage::Watermark(watermark))
        })
    }
}

/// The output of an exchange of the one input partition `input` (its stream and number),
/// read inline.
pub(super) fn inline_messages(
    (input, partition): (SendableRecordBatchStream, usize),
    event_time: Option<EventTime>,
    input_progress: Option<(Arc<PartitionProgress>, i64)>,
    checkpoint: Option<(OutputCheckpoint, BarrierProbe)>,
) -> Result<BoxStream<'static, Message>> {
    let delay = event_time.map_or(0, |e| e.delay);
    let mut tracker = WatermarkTracker::new(1, delay);
    let mut sent = i64::MIN;
    if let Some((checkpoint, _)) = &checkpoint
        && let Some(watermark) = checkpoint.restored_watermark()?
    {
        tracker.restore(0, watermark);
        sent = watermark;
    }
    let watermark = Arc::new(Mutex::new(InlineWatermark {
        tracker,
        sent,
        event_time,
        input: partition,
        input_progress,
        failed: false,
        checkpoint,
    }));
    let at_end = Arc::clone(&watermark);
    let batches = input
        .map(move |batch| stream::iter(watermark.lock().on_batch(batch)))
        .flatten();
    // Polled only once the input has ended.
    let end = stream::once(async move { stream::iter(at_end.lock().on_end()) }).flatten();
    Ok(batches.chain(end).boxed())
}
