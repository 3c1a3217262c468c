//! [`BarrierAlignment`]: an exchange output over a stateful operator's partitions, passing a
//! checkpoint's barrier on once every partition has passed it.
//!
//! The operator below writes its state at a barrier and records it as passed before it hands
//! out anything after it; each input task, before routing a batch, asks the operator whether
//! it has passed the pending barrier and if so sends `BarrierPassed` to every output first.
//! The output's one channel holds every input's pieces in arrival order, each tagged with its
//! input. Once the first input has passed barrier `e`, that input's later pieces — and every
//! watermark, which may already count them — are held here, while the other inputs' pieces
//! go on. When every input has passed `e` (or ended), the output checkpoints its watermark,
//! hands out `Barrier(e)`, then what it held, in order.
//!
//! Inputs are not stopped at the barrier, only their rows held: an input task waiting for
//! the others would stop reading its operator partition, which would stop reading the
//! exchange below it, whose input tasks feed the other partitions too — the others could then
//! never reach the barrier. What is held is what one partition runs ahead of the slowest
//! during one alignment.

use std::collections::VecDeque;

use datafusion::common::Result;
use tokio::sync::mpsc;

use super::Message;
use super::checkpoint::OutputCheckpoint;
use super::ordered_merge::{Routed, RoutedMessage};
use crate::watermark::StreamMessage;

/// See the module documentation.
pub(super) struct BarrierAlignment {
    receiver: mpsc::Receiver<RoutedMessage>,
    /// Where the output's watermark is checkpointed (none in tests).
    checkpoint: Option<OutputCheckpoint>,
    /// Per input: the last barrier passed, and whether it ended.
    passed: Vec<u64>,
    ended: Vec<bool>,
    /// The barrier some input has passed and others not yet.
    aligning: Option<u64>,
    held: VecDeque<Message>,
    ready: VecDeque<Message>,
    /// The last watermark handed out.
    watermark: Option<i64>,
}

impl BarrierAlignment {
    pub fn new(
        receiver: mpsc::Receiver<RoutedMessage>,
        inputs: usize,
        checkpoint: Option<OutputCheckpoint>,
    ) -> Self {
        Self {
            receiver,
            checkpoint,
            passed: vec![0; inputs],
            ended: vec![false; inputs],
            aligning: None,
            held: VecDeque::new(),
            ready: VecDeque::new(),
            watermark: None,
        }
    }

    /// The output's messages.
    pub fn into_stream(self) -> futures::stream::BoxStream<'static, Message> {
        use futures::StreamExt;
        futures::stream::unfold(self, |mut output| async move {
            loop {
                if let Some(message) = output.ready.pop_front() {
                    return Some((message, output));
                }
                let item = output.receiver.recv().await;
                let closed = item.is_none();
                if let Some(item) = item {
                    output.take(item);
                } else {
                    // Every input has ended: nothing is left to wait for.
                    output.ended.fill(true);
                }
                if let Err(error) = output.complete_alignment() {
                    output.ready.push_back(Err(error));
                }
                if closed && output.ready.is_empty() {
                    return None;
                }
            }
        })
        .boxed()
    }

    fn take(&mut self, item: RoutedMessage) {
        let holding = |passed: &[u64], input: usize, aligning: Option<u64>| {
            aligning.is_some_and(|epoch| passed.get(input).is_some_and(|p| *p >= epoch))
        };
        match item {
            Ok(Routed::Piece { batch, input }) => {
                let message = Ok(StreamMessage::Batch(batch));
                match holding(&self.passed, input, self.aligning) {
                    true => self.held.push_back(message),
                    false => self.ready.push_back(message),
                }
            }
            Ok(Routed::Rows(batch, _)) => self.ready.push_back(Ok(StreamMessage::Batch(batch))),
            Ok(Routed::Watermark { watermark, .. }) => {
                let message = Ok(StreamMessage::Watermark(watermark));
                match self.aligning {
                    Some(_) => self.held.push_back(message),
                    None => {
                        self.watermark = Some(watermark);
                        self.ready.push_back(message);
                    }
                }
            }
            Ok(Routed::BarrierPassed { input, epoch }) => {
                if let Some(passed) = self.passed.get_mut(input) {
                    *passed = (*passed).max(epoch);
                }
                self.aligning.get_or_insert(epoch);
            }
            Ok(Routed::Ended { input }) => {
                if let Some(ended) = self.ended.get_mut(input) {
                    *ended = true;
                }
            }
            Ok(Routed::Progress(_) | Routed::Passed { .. }) => {}
            Err(error) => self.ready.push_back(Err(error)),
        }
    }

    /// Once every input has passed the barrier being aligned: the watermark checkpointed,
    /// the barrier and then the held messages handed out.
    fn complete_alignment(&mut self) -> Result<()> {
        let Some(epoch) = self.aligning else {
            return Ok(());
        };
        let aligned = (0..self.passed.len()).all(|i| self.ended[i] || self.passed[i] >= epoch);
        if !aligned {
            return Ok(());
        }
        self.aligning = None;
        if let Some(checkpoint) = &self.checkpoint {
            checkpoint.write(epoch, self.watermark)?;
        }
        self.ready.push_back(Ok(StreamMessage::Barrier(epoch)));
        for message in self.held.drain(..) {
            if let Ok(StreamMessage::Watermark(watermark)) = &message {
                self.watermark = Some(*watermark);
            }
            self.ready.push_back(message);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::arrow::array::Int64Array;
    use datafusion::arrow::record_batch::RecordBatch;
    use futures::StreamExt;

    use super::*;

    fn piece(value: i64, input: usize) -> RoutedMessage {
        let column = Arc::new(Int64Array::from(vec![value]));
        let batch = RecordBatch::try_from_iter([("v", column as _)]).unwrap();
        Ok(Routed::Piece { batch, input })
    }

    fn text(message: &Message) -> String {
        match message.as_ref().unwrap() {
            StreamMessage::Batch(batch) => {
                let values = batch
                    .column(0)
                    .as_any()
                    .downcast_ref::<Int64Array>()
                    .unwrap();
                format!("{}", values.value(0))
            }
            StreamMessage::Watermark(w) => format!("W{w}"),
            StreamMessage::Barrier(e) => format!("B{e}"),
        }
    }

    #[tokio::test]
    async fn an_inputs_rows_after_the_barrier_wait_until_every_input_has_passed_it() {
        let (sender, receiver) = mpsc::channel(32);
        for item in [
            piece(1, 0),
            Ok(Routed::BarrierPassed { input: 0, epoch: 1 }),
            piece(2, 0),
            Ok(Routed::Watermark {
                watermark: 5,
                key: 0,
            }),
            piece(10, 1),
            piece(11, 1),
            Ok(Routed::BarrierPassed { input: 1, epoch: 1 }),
            piece(12, 1),
            Ok(Routed::Ended { input: 0 }),
            Ok(Routed::Ended { input: 1 }),
        ] {
            sender.send(item).await.unwrap();
        }
        drop(sender);
        let output = BarrierAlignment::new(receiver, 2, None);
        let read: Vec<String> = output.into_stream().map(|m| text(&m)).collect().await;
        assert_eq!(read, ["1", "10", "11", "B1", "2", "W5", "12"]);
    }
}
