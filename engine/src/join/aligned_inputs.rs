//! [`AlignedInputs`]: a join's two inputs read as one stream, the side behind in event time
//! first, with a checkpoint's barriers aligned.
//!
//! Each input brings batches, watermarks and barriers. The side whose watermark is behind is
//! read first: the side ahead waits in its exchange's channels, so neither side's state grows
//! with the other's lag; a side with nothing ready never holds the other back.
//!
//! A barrier splits each input into the rows before it and after it, and the join's state at
//! the barrier must hold the effect of exactly the rows before it on both sides. So once one
//! side brings barrier `e`, that side is held (its next rows are after the barrier) and only
//! the other side is read, until it brings `e` too or ends; then the barrier goes out once,
//! for the join to write its state (aligned checkpoints, as Flink and Arroyo take them). A
//! side that has ended has passed every barrier. While a side is held its exchange fills and
//! its sources wait; the sources' event-time alignment never stops the other side's sources
//! for long (see `SourceAlignment`), so the other side always reaches the barrier.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use datafusion::common::{JoinSide, Result, internal_err};
use futures::stream::BoxStream;
use futures::{Stream, StreamExt};

use super::interval_stream::Progress;
use crate::watermark::StreamMessage;

/// What the join reads next.
#[derive(Debug)]
pub(super) enum JoinInput {
    /// A batch or a watermark of one side.
    Message(JoinSide, StreamMessage),
    /// One side's input ended: its watermark is +infinity.
    Ended(JoinSide),
    /// Both sides have passed barrier `epoch`.
    Barrier(u64),
}

/// See the module documentation.
pub(super) struct AlignedInputs {
    left: Option<BoxStream<'static, Result<StreamMessage>>>,
    right: Option<BoxStream<'static, Result<StreamMessage>>>,
    progress: Arc<Progress>,
    /// Which side goes first when the watermarks are equal: they take turns.
    turn: bool,
    /// A barrier one side has brought, and that side, held until the other brings it.
    held: Option<(JoinSide, u64)>,
    /// A barrier aligned by the end of the other side, handed out after that end.
    queued: Option<u64>,
}

impl AlignedInputs {
    pub(super) fn new(
        left: BoxStream<'static, Result<StreamMessage>>,
        right: BoxStream<'static, Result<StreamMessage>>,
        progress: Arc<Progress>,
    ) -> Self {
        Self {
            left: Some(left),
            right: Some(right),
            progress,
            turn: false,
            held: None,
            queued: None,
        }
    }

    fn input(&mut self, side: JoinSide) -> &mut Option<BoxStream<'static, Result<StreamMessage>>> {
        match side {
            JoinSide::Left => &mut self.left,
            _ => &mut self.right,
        }
    }

    /// The sides to read, in order.
    fn order(&mut self) -> Vec<JoinSide> {
        if let Some((held, _)) = self.held {
            return vec![other(held)];
        }
        let (left, right) = self.progress.watermarks();
        self.turn = !self.turn;
        let left_first = match left.cmp(&right) {
            std::cmp::Ordering::Less => true,
            std::cmp::Ordering::Greater => false,
            std::cmp::Ordering::Equal => self.turn,
        };
        match left_first {
            true => vec![JoinSide::Left, JoinSide::Right],
            false => vec![JoinSide::Right, JoinSide::Left],
        }
    }

    /// What a barrier `epoch` brought by `side` means: the aligned barrier to hand out, or
    /// nothing yet (the side is now held).
    fn on_barrier(&mut self, side: JoinSide, epoch: u64) -> Result<Option<u64>> {
        match self.held.take() {
            Some((_, held)) if held == epoch => Ok(Some(epoch)),
            Some((_, held)) => {
                internal_err!("a join's inputs brought barriers {held} and {epoch} at once")
            }
            None if self.input(other(side)).is_none() => Ok(Some(epoch)),
            None => {
                self.held = Some((side, epoch));
                Ok(None)
            }
        }
    }
}

fn other(side: JoinSide) -> JoinSide {
    match side {
        JoinSide::Left => JoinSide::Right,
        _ => JoinSide::Left,
    }
}

impl Stream for AlignedInputs {
    type Item = Result<JoinInput>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        'read: loop {
            if let Some(epoch) = this.queued.take() {
                return Poll::Ready(Some(Ok(JoinInput::Barrier(epoch))));
            }
            if this.left.is_none() && this.right.is_none() {
                return Poll::Ready(None);
            }
            for side in this.order() {
                let Some(input) = this.input(side).as_mut() else {
                    continue;
                };
                let message = match input.poll_next_unpin(cx) {
                    Poll::Pending => continue,
                    Poll::Ready(message) => message,
                };
                return Poll::Ready(Some(match message {
                    None => {
                        *this.input(side) = None;
                        // The ended side has passed every barrier: a held one is aligned.
                        this.queued = this.held.take().map(|(_, epoch)| epoch);
                        Ok(JoinInput::Ended(side))
                    }
                    Some(Ok(StreamMessage::Barrier(epoch))) => match this.on_barrier(side, epoch) {
                        Ok(Some(epoch)) => Ok(JoinInput::Barrier(epoch)),
                        Ok(None) => continue 'read,
                        Err(e) => Err(e),
                    },
                    Some(Ok(message)) => Ok(JoinInput::Message(side, message)),
                    Some(Err(e)) => Err(e),
                }));
            }
            return Poll::Pending;
        }
    }
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::array::Int64Array;
    use datafusion::arrow::record_batch::RecordBatch;

    use super::*;

    fn batch(value: i64) -> StreamMessage {
        let column = Arc::new(Int64Array::from(vec![value]));
        StreamMessage::Batch(RecordBatch::try_from_iter([("v", column as _)]).unwrap())
    }

    fn value(message: &StreamMessage) -> i64 {
        match message {
            StreamMessage::Batch(batch) => batch
                .column(0)
                .as_any()
                .downcast_ref::<Int64Array>()
                .unwrap()
                .value(0),
            other => panic!("not a batch: {other:?}"),
        }
    }

    fn input(messages: Vec<StreamMessage>) -> BoxStream<'static, Result<StreamMessage>> {
        futures::stream::iter(messages.into_iter().map(Ok)).boxed()
    }

    /// What the join reads, as text: `L1` a left batch of 1, `B2` barrier 2, `R.` right's end.
    async fn read(left: Vec<StreamMessage>, right: Vec<StreamMessage>) -> Vec<String> {
        let inputs = AlignedInputs::new(input(left), input(right), Arc::default());
        inputs
            .map(|input| match input.unwrap() {
                JoinInput::Message(side, message) => format!("{side:?}{}", value(&message)),
                JoinInput::Ended(side) => format!("{side:?}."),
                JoinInput::Barrier(epoch) => format!("B{epoch}"),
            })
            .collect()
            .await
    }

    #[tokio::test]
    async fn a_side_that_brings_a_barrier_waits_until_the_other_brings_it() {
        let read = read(
            vec![batch(1), StreamMessage::Barrier(1), batch(2), batch(3)],
            vec![
                batch(10),
                batch(11),
                batch(12),
                StreamMessage::Barrier(1),
                batch(13),
            ],
        )
        .await;
        let barrier = read.iter().position(|r| r == "B1").unwrap();
        let before: Vec<&String> = read[..barrier].iter().collect();
        let after: Vec<&String> = read[barrier + 1..].iter().collect();
        for row in ["left1", "right10", "right11", "right12"] {
            assert!(
                before.iter().any(|r| r.eq_ignore_ascii_case(row)),
                "{read:?}"
            );
        }
        for row in ["left2", "left3", "right13"] {
            assert!(
                after.iter().any(|r| r.eq_ignore_ascii_case(row)),
                "{read:?}"
            );
        }
        assert_eq!(read.iter().filter(|r| r.starts_with('B')).count(), 1);
    }

    #[tokio::test]
    async fn the_end_of_the_other_side_aligns_a_held_barrier() {
        let held = read(
            vec![StreamMessage::Barrier(3), batch(1)],
            vec![batch(10), batch(11)],
        )
        .await;
        assert_eq!(
            held,
            ["Right10", "Right11", "Right.", "B3", "Left1", "Left."]
        );
        // A barrier brought after the other side ended goes out at once.
        let after_end = read(vec![], vec![StreamMessage::Barrier(4), batch(2)]).await;
        assert_eq!(after_end, ["Left.", "B4", "Right2", "Right."]);
    }
}
