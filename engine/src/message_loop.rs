//! The driving loop of Freshet's stateful operators: fold an exchange's batches and
//! watermarks into the operator's state, yielding whatever output each produces; at the end
//! of the input the watermark becomes +infinity, which flushes everything. At a checkpoint's
//! barrier the operator's state is written, the barrier recorded as passed, and an empty
//! batch handed out, so that what reads the output learns of it between the rows before
//! and after (see [`crate::checkpoint`]).

use std::sync::Arc;

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::{Result, internal_err};
use datafusion::execution::TaskContext;
use datafusion::physical_plan::ExecutionPlan;
use futures::stream::BoxStream;
use futures::{Stream, StreamExt};

use crate::checkpoint::{Checkpointing, OperatorState, PassedBarriers, pause_point};
use crate::exchange::StreamExchangeExec;
use crate::operator_metrics::StatefulMetrics;
use crate::watermark::StreamMessage;

/// An operator's state, as the loop sees it.
pub(crate) trait MessageHandler: Send + 'static {
    fn on_batch(&mut self, batch: &RecordBatch) -> Result<Option<RecordBatch>>;
    fn on_watermark(&mut self, watermark: i64) -> Result<Option<RecordBatch>>;
    /// Output computed beyond the batch a call returned (a release computed batch by batch);
    /// the loop hands it out before it reads the next message.
    fn queued_output(&mut self) -> Result<Option<RecordBatch>> {
        Ok(None)
    }
    /// The state to checkpoint; `None`: this operator cannot be checkpointed.
    fn snapshot(&mut self) -> Result<Option<OperatorState>> {
        Ok(None)
    }
    /// Takes back the state a checkpoint holds.
    fn restore(&mut self, _state: &OperatorState) -> Result<()> {
        internal_err!("this operator has no checkpointed state to restore")
    }
    /// The counts of records this operator dropped, if it keeps them: the state it leaves
    /// for the checkpoints after its input ended.
    fn dropped_counts(&self) -> Option<&StatefulMetrics> {
        None
    }
}

/// One operator partition's part in the run's checkpoints.
pub(crate) struct OperatorCheckpoint {
    pub checkpointing: Arc<Checkpointing>,
    /// The name of the partition's state file.
    pub name: String,
    pub partition: usize,
    pub passed: Arc<PassedBarriers>,
    /// The operator's output schema, for the empty batch after a barrier.
    pub schema: SchemaRef,
}

impl OperatorCheckpoint {
    /// Partition `partition` of operator `node` in the run's checkpoints, if the run (whose
    /// task context is `context`) has any; `passed` records its barriers, `schema` is its
    /// output's.
    pub fn of(
        context: &TaskContext,
        node: &dyn ExecutionPlan,
        partition: usize,
        passed: &Arc<PassedBarriers>,
        schema: SchemaRef,
    ) -> Result<Option<Self>> {
        let Some(checkpointing) = Checkpointing::of(context) else {
            return Ok(None);
        };
        Ok(Some(Self {
            name: checkpointing.state_name(node, partition)?,
            checkpointing,
            partition,
            passed: Arc::clone(passed),
            schema,
        }))
    }

    /// Restores `handler` from the checkpoint the run resumes, if it holds a state for it.
    pub fn restore<H: MessageHandler>(&self, handler: &mut H) -> Result<()> {
        match self.restored_state()? {
            Some(state) if ended_state(&state) => match handler.dropped_counts() {
                Some(counts) => counts.restore_from(&state),
                None => Ok(()),
            },
            Some(state) => handler.restore(&state),
            None => Ok(()),
        }
    }

    /// Records that the partition's input ended, having dropped `dropped`: every later
    /// checkpoint it did not pass keeps that (see [`Checkpointing::record_ended`]).
    pub fn end(&self, dropped: Option<&StatefulMetrics>) {
        let mut state = OperatorState::default();
        state.put_value(ENDED, 1);
        if let Some(dropped) = dropped {
            dropped.snapshot_into(&mut state);
        }
        self.checkpointing.record_ended(&self.name, state);
    }

    /// The partition's state in the checkpoint the run resumes, if it holds one.
    pub fn restored_state(&self) -> Result<Option<OperatorState>> {
        self.checkpointing.restored_state(&self.name)
    }

    /// Writes `handler`'s state for barrier `epoch` and records the barrier as passed; the
    /// empty batch to hand out.
    fn pass<H: MessageHandler>(&self, handler: &mut H, epoch: u64) -> Result<RecordBatch> {
        let Some(state) = handler.snapshot()? else {
            return internal_err!("a checkpoint barrier reached an operator that has no snapshot");
        };
        self.write(epoch, state)
    }

    /// Writes the partition's `state` for barrier `epoch` and records the barrier as passed;
    /// the empty batch to hand out, so that what reads the output learns of it between the
    /// rows before and after.
    pub fn write(&self, epoch: u64, state: OperatorState) -> Result<RecordBatch> {
        self.checkpointing.write_state(epoch, &self.name, state)?;
        self.passed.record(self.partition, epoch);
        Ok(RecordBatch::new_empty(Arc::clone(&self.schema)))
    }
}

/// Marks the state of an operator partition whose input had ended: it holds only the counts
/// of the records it dropped, as its windows, rows and matches were all handed out.
const ENDED: &str = "input_ended";

/// Whether `state` was left by an operator partition whose input had ended (see
/// [`OperatorCheckpoint::end`]); such a partition reads nothing more on a resumed run.
pub(crate) fn ended_state(state: &OperatorState) -> bool {
    state.value(ENDED).is_ok()
}

/// Where the loop is: reading messages, or handing out what the end of the input left.
enum Drive<H> {
    Reading(BoxStream<'static, Result<StreamMessage>>, H),
    Ended(H),
}

/// The messages of partition `partition` of `input`: an exchange's own (where checkpoint
/// barriers and watermarks travel), or any other plan's batches.
pub(crate) fn input_messages(
    input: &Arc<dyn ExecutionPlan>,
    partition: usize,
    context: Arc<TaskContext>,
) -> Result<BoxStream<'static, Result<StreamMessage>>> {
    Ok(match input.downcast_ref::<StreamExchangeExec>() {
        Some(exchange) => exchange.execute_messages(partition, context)?,
        None => input
            .execute(partition, context)?
            .map(|batch| batch.map(StreamMessage::Batch))
            .boxed(),
    })
}

/// The output stream of `handler` fed by `messages`, taking part in the run's checkpoints if
/// `checkpoint` is given (restored first, snapshot at barriers); it ends after the first
/// error.
pub(crate) fn drive_checkpointed<H: MessageHandler>(
    messages: BoxStream<'static, Result<StreamMessage>>,
    mut handler: H,
    checkpoint: Option<OperatorCheckpoint>,
) -> impl Stream<Item = Result<RecordBatch>> + Send + 'static {
    let restored = match &checkpoint {
        Some(checkpoint) => checkpoint.restore(&mut handler),
        None => Ok(()),
    };
    let messages = match restored {
        Ok(()) => messages,
        Err(error) => futures::stream::once(async move { Err(error) }).boxed(),
    };
    let checkpoint = checkpoint.map(Arc::new);
    let running = Drive::Reading(messages, handler);
    futures::stream::unfold(Some(running), move |state| {
        let checkpoint = checkpoint.clone();
        async move {
            let (mut messages, mut handler) = match state? {
                Drive::Reading(messages, handler) => (messages, handler),
                Drive::Ended(handler) => return hand_out_the_rest(handler, checkpoint).await,
            };
            loop {
                match handler.queued_output() {
                    Ok(Some(batch)) => {
                        return Some((Ok(batch), Some(Drive::Reading(messages, handler))));
                    }
                    Ok(None) => {}
                    Err(error) => return Some((Err(error), None)),
                }
                let output = match messages.next().await {
                    Some(Ok(StreamMessage::Batch(batch))) => handler.on_batch(&batch),
                    Some(Ok(StreamMessage::Watermark(watermark))) => {
                        handler.on_watermark(watermark)
                    }
                    Some(Ok(StreamMessage::Barrier(epoch))) => match &checkpoint {
                        Some(checkpoint) => checkpoint.pass(&mut handler, epoch).map(Some),
                        None => {
                            internal_err!("a checkpoint barrier reached an operator outside it")
                        }
                    },
                    Some(Err(e)) => return Some((Err(e), None)),
                    None => {
                        return match handler.on_watermark(i64::MAX) {
                            Ok(Some(batch)) => Some((Ok(batch), Some(Drive::Ended(handler)))),
                            Ok(None) => hand_out_the_rest(handler, checkpoint).await,
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
        }
    })
}

/// After the end of `handler`'s input: its next queued output, or, once all is handed out,
/// the end, recorded in the run's checkpoints if any.
async fn hand_out_the_rest<H: MessageHandler>(
    mut handler: H,
    checkpoint: Option<Arc<OperatorCheckpoint>>,
) -> Option<(Result<RecordBatch>, Option<Drive<H>>)> {
    match handler.queued_output() {
        Ok(Some(batch)) => Some((Ok(batch), Some(Drive::Ended(handler)))),
        Ok(None) => {
            if let Some(checkpoint) = checkpoint {
                checkpoint.end(handler.dropped_counts());
                pause_point("operator_end").await;
            }
            None
        }
        Err(error) => Some((Err(error), None)),
    }
}
