//! The driving loop of Freshet's stateful operators: fold an exchange's batches and
//! watermarks into the operator's state, yielding whatever output each produces; at the end
//! of the input the watermark becomes +infinity, which flushes everything.

use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::Result;
use futures::stream::BoxStream;
use futures::{Stream, StreamExt};

use crate::watermark::StreamMessage;

/// An operator's state, as the loop sees it.
pub(crate) trait MessageHandler: Send + 'static {
    fn on_batch(&mut self, batch: &RecordBatch) -> Result<Option<RecordBatch>>;
    fn on_watermark(&mut self, watermark: i64) -> Result<Option<RecordBatch>>;
    /// Output computed beyond the batch a call returned (a release computed batch by batch);
    /// the loop hands it out before it reads the next message.
    fn queued_output(&mut self) -> Option<RecordBatch> {
        None
    }
}

/// Where the loop is: reading messages, or handing out what the end of the input left.
enum Drive<H> {
    Reading(BoxStream<'static, Result<StreamMessage>>, H),
    Ended(H),
}

/// The output stream of `handler` fed by `messages`; it ends after the first error.
pub(crate) fn drive<H: MessageHandler>(
    messages: BoxStream<'static, Result<StreamMessage>>,
    handler: H,
) -> impl Stream<Item = Result<RecordBatch>> + Send + 'static {
    let running = Drive::Reading(messages, handler);
    futures::stream::unfold(Some(running), |state| async move {
        let (mut messages, mut handler) = match state? {
            Drive::Reading(messages, handler) => (messages, handler),
            Drive::Ended(mut handler) => {
                let batch = handler.queued_output()?;
                return Some((Ok(batch), Some(Drive::Ended(handler))));
            }
        };
        loop {
            if let Some(batch) = handler.queued_output() {
                return Some((Ok(batch), Some(Drive::Reading(messages, handler))));
            }
            let output = match messages.next().await {
                Some(Ok(StreamMessage::Batch(batch))) => handler.on_batch(&batch),
                Some(Ok(StreamMessage::Watermark(watermark))) => handler.on_watermark(watermark),
                Some(Err(e)) => return Some((Err(e), None)),
                None => {
                    return match handler.on_watermark(i64::MAX) {
                        Ok(Some(batch)) => Some((Ok(batch), Some(Drive::Ended(handler)))),
                        Ok(None) => None,
                        Err(e) => Some((Err(e), None)),
                    };
                }
            };
            match output {
                Ok(Some(batch)) => {
                    return Some((Ok(batch), Some(Drive::Reading(messages, handler))));
                }
                Ok(None) => continue,
                Err(e) => return Some((Err(e), None)),
            }
        }
    })
}
