//! The exchange split at a network boundary: its input tasks run where the source partitions
//! are read ([`StreamExchangeExec::send_inputs`]), its outputs where the operator above runs
//! ([`StreamExchangeExec::with_remote_input`]), and between them only record batches travel
//! (see [`wire`](super::wire)).
//!
//! Each sending input task routes its batches exactly as in one process and gives its rows
//! the same merge keys, and after each batch it sends every output the same `Passed` or
//! `Progress` items; they go out as wire batches whose `route` column makes the network's
//! hash partitioning deliver each to its output. When an input has sent everything, an
//! `End` item follows on every output. The receiving output splits what arrives by input
//! (the network keeps each input's order to each output, not the order across inputs) and
//! merges the inputs with the same [`OrderedMerge`] as in one process: rows of a replay in
//! replay order, with the watermark one partition reading the whole replay would hold, or
//! by event-time keys. Its decisions depend on keys and input numbers only, so the answer is
//! the one-process answer at the same number of streams, whichever worker runs ahead.
//!
//! Where the outputs do not merge their inputs (an exchange above a window aggregation or a
//! join, whose inputs are that operator's partitions), the input tasks of one process
//! combine their watermarks in shared memory. Across workers each input task keeps its own
//! watermark and sends it, after the rows it covers, to the outputs of its watermark
//! domain; the receiving output combines the watermarks of its domain's inputs (the
//! smallest, an ended input counting as infinite) and passes rows on as they arrive, as a
//! shared channel does in one process.
//!
//! The receiving side buffers what arrives for an input the merge is not yet reading (the
//! network delivers all inputs of an output on one stream): a worker far ahead of another
//! costs memory at the receiver, not a stall. An input that stops without its `End` item —
//! a worker that died — is an error, never a short answer.

use std::ops::Range;
use std::sync::Arc;
use std::time::Instant;

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::common::runtime::SpawnedTask;
use datafusion::common::{DataFusionError, Result, exec_err, internal_err, plan_err};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{ExecutionPlan, ExecutionPlanProperties};
use freshet_partitioner::Router;
use futures::stream::BoxStream;
use futures::{StreamExt, future};
use parking_lot::Mutex;
use tokio::sync::{Notify, mpsc};

use super::input_task::{InputTask, Progress};
use super::ordered_merge::{MergeKeys, OrderedMerge, Routed, RoutedMessage};
use super::wire::{Outgoing, WireItem, decode, encode, wire_schema};
use super::{MERGED_CHANNEL_ITEMS, StreamExchangeExec};
use crate::watermark::{StreamMessage, WatermarkTracker};

/// Where a receiving exchange reads its outputs: `plan`'s partition `p` holds the wire
/// batches of output `first_output + p`.
#[derive(Debug, Clone)]
pub(super) struct RemoteInput {
    pub plan: Arc<dyn ExecutionPlan>,
    pub first_output: usize,
}

impl StreamExchangeExec {
    /// Whether this exchange can be split at a network boundary (see the module
    /// documentation); the error says why not.
    pub fn check_distributable(&self) -> Result<()> {
        // A partial step over windows judges late records at the watermark its consumer
        // holds when it reads the states, which only the inputs of one process can share —
        // unless the consumer merges a replay by position and judges them itself.
        let inputs = self.input.output_partitioning().partition_count();
        if self
            .step
            .as_ref()
            .is_some_and(|step| step.needs_exact_watermark())
            && !self.merges_inputs(inputs)?
        {
            return plan_err!(
                "a two-phase aggregation over windows cannot cross workers unless it reads a \
                 replay of files over TUMBLING or HOPPING windows: its partial steps judge late records \
                 at the watermark of the final step, which workers do not share; set \
                 partitioning_strategy = 'hash'"
            );
        }
        if self.event_time.and_then(|e| e.idle_timeout).is_some() {
            return plan_err!("an exchange with an idle timeout cannot cross workers yet");
        }
        Ok(())
    }

    /// The schema of the wire batches [`Self::send_inputs`] sends.
    pub fn wire_schema(&self) -> SchemaRef {
        wire_schema(&self.schema())
    }

    /// Runs the input tasks of inputs `inputs` and returns, per input, its wire batches
    /// for every output, each output's marked with `routes[output]` (see the module
    /// documentation).
    pub fn send_inputs(
        &self,
        inputs: Range<usize>,
        routes: Arc<[i64]>,
        context: Arc<TaskContext>,
    ) -> Result<Vec<SendableRecordBatchStream>> {
        self.check_distributable()?;
        let total = self.input.output_partitioning().partition_count();
        if inputs.end > total || routes.len() != self.outputs {
            return internal_err!(
                "exchange inputs {inputs:?} of {total}, routes for {} of {} outputs",
                routes.len(),
                self.outputs
            );
        }
        let merged = self.merges_inputs(total)?;
        if let Some(step) = self.step.as_ref().filter(|_| merged) {
            step.check_lateness_deferred()?;
        }
        let positions = merged.then(|| self.input_positions(total)).flatten();
        let input_progress = self
            .input_progress(total)
            .map(|(progress, offset, _)| (progress, offset));
        let delay = self.event_time.map_or(0, |e| e.delay);
        let domains = self.watermark_domains(total);
        let advanced = Arc::new(Notify::new());
        let wire = self.wire_schema();
        inputs
            .map(|input| {
                let (senders, receivers): (Vec<_>, Vec<_>) = (0..self.outputs)
                    .map(|_| mpsc::channel::<RoutedMessage>(MERGED_CHANNEL_ITEMS))
                    .unzip();
                // Merged, the outputs make the watermark from keys and positions; otherwise
                // each input sends its own to its domain's outputs.
                let watermark_senders = match (merged, &positions) {
                    (true, Some(_)) => Vec::new(),
                    (true, None) => senders.clone(),
                    (false, _) => domains
                        .iter()
                        .filter(|domain| domain.inputs.contains(&input))
                        .flat_map(|domain| domain.outputs.iter().map(|&o| senders[o].clone()))
                        .collect(),
                };
                let task = InputTask {
                    input,
                    tracked: 0,
                    plan: Arc::clone(&self.input),
                    context: Arc::clone(&context),
                    router: Router::try_new(&self.strategy, input, total, self.outputs)?,
                    watermark_senders,
                    senders,
                    merge_keys: match (merged, &positions) {
                        (true, Some(positions)) => {
                            Some(MergeKeys::by_position(Arc::clone(positions), input))
                        }
                        (true, None) => Some(MergeKeys::new(self.event_time)),
                        (false, _) => None,
                    },
                    input_progress: input_progress.clone(),
                    watermarks: Arc::new(Mutex::new(Progress {
                        tracker: WatermarkTracker::new(1, delay),
                        sent: i64::MIN,
                        drift_limit: i64::MAX,
                    })),
                    advanced: Arc::clone(&advanced),
                    event_time: self.event_time,
                    aligned: false,
                    step: match &self.step {
                        Some(step) => Some(Arc::clone(step).start(input, &self.metrics)?),
                        None => None,
                    },
                    turns: None,
                    barriers: None,
                    passed: 0,
                };
                let task = SpawnedTask::spawn(task.run());
                Ok(sent_wire_batches(
                    Arc::clone(&wire),
                    input,
                    receivers,
                    Arc::clone(&routes),
                    task,
                ))
            })
            .collect()
    }

    /// This exchange reading its outputs from `plan` (see [`RemoteInput`]) instead of
    /// running its input tasks; its input stays, for what the plan tells about it.
    pub fn with_remote_input(&self, plan: Arc<dyn ExecutionPlan>, first_output: usize) -> Self {
        Self {
            input: Arc::clone(&self.input),
            strategy: self.strategy.clone(),
            outputs: self.outputs,
            event_time: self.event_time,
            reason: self.reason.clone(),
            properties: Arc::clone(&self.properties),
            running: Arc::new(Mutex::new(None)),
            step: self.step.clone(),
            metrics: Default::default(),
            remote: Some(RemoteInput { plan, first_output }),
            inline_outputs: self.inline_outputs,
        }
    }

    /// Output `partition` of a receiving exchange, as batches and watermarks.
    pub(super) fn receive(
        &self,
        remote: &RemoteInput,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<BoxStream<'static, Result<StreamMessage>>> {
        self.check_distributable()?;
        let Some(local) = partition.checked_sub(remote.first_output) else {
            return internal_err!("exchange output {partition} is not read on this worker");
        };
        let inputs = self.input.output_partitioning().partition_count();
        let batch_rows = context.session_config().batch_size();
        let wire = remote.plan.execute(local, context)?;
        if !self.merges_inputs(inputs)? {
            let domain = self
                .watermark_domains(inputs)
                .into_iter()
                .find(|domain| domain.outputs.contains(&partition))
                .map(|domain| domain.inputs)
                .unwrap_or_default();
            return Ok(arrival_order(wire, self.schema(), inputs, domain));
        }
        let (senders, receivers): (Vec<_>, Vec<_>) = (0..inputs)
            .map(|_| mpsc::channel::<RoutedMessage>(MERGED_CHANNEL_ITEMS))
            .unzip();
        let (queues, queued): (Vec<_>, Vec<_>) =
            (0..inputs).map(|_| mpsc::unbounded_channel()).unzip();
        let mut tasks: Vec<SpawnedTask<()>> = senders
            .into_iter()
            .zip(queued)
            .map(|(sender, mut queued)| {
                SpawnedTask::spawn(async move {
                    while let Some(item) = queued.recv().await {
                        if sender.send(item).await.is_err() {
                            return;
                        }
                    }
                })
            })
            .collect();
        tasks.push(SpawnedTask::spawn(split_by_input(
            wire,
            self.schema(),
            queues,
        )));
        let delay = self.event_time.map_or(0, |e| e.delay);
        // As in one process (where an idle timeout, refused here, would also count).
        let merge = OrderedMerge::new(receivers, None, batch_rows);
        let merge = match self.input_positions(inputs) {
            Some(_) => merge.by_position(delay),
            None if self.event_time.is_some() => merge.by_event_time(delay),
            None => merge,
        };
        Ok(merge
            .into_stream()
            .map(move |message| {
                let _ = &tasks;
                message
            })
            .boxed())
    }
}

/// `receiver`'s items as wire items: rows followed by their `Passed` item, when it is
/// already there, folded into one (see [`Outgoing::fold`]).
fn wire_items(
    receiver: mpsc::Receiver<RoutedMessage>,
) -> impl futures::Stream<Item = Result<Outgoing>> + Send + 'static {
    futures::stream::unfold((receiver, None), |(mut receiver, next)| async move {
        let item = match next {
            Some(item) => item,
            None => receiver.recv().await?,
        };
        let rows = match item {
            Ok(rows @ Routed::Rows(..)) => rows,
            other => {
                let item = other.map(|item| WireItem::Routed(item).into());
                return Some((item, (receiver, None)));
            }
        };
        let (item, next) = match receiver.try_recv() {
            Ok(Ok(passed)) if Outgoing::folds(&rows, &passed) => {
                match Outgoing::fold(rows, passed) {
                    Ok(folded) => (folded, None),
                    Err(error) => return Some((Err(error), (receiver, None))),
                }
            }
            Ok(next) => (WireItem::Routed(rows).into(), Some(next)),
            Err(_) => (WireItem::Routed(rows).into(), None),
        };
        Some((Ok(item), (receiver, next)))
    })
    .boxed()
}

/// The wire batches of one input: its items for every output as they come, then `End` on
/// every output once the input task has ended without an error.
fn sent_wire_batches(
    wire: SchemaRef,
    input: usize,
    receivers: Vec<mpsc::Receiver<RoutedMessage>>,
    routes: Arc<[i64]>,
    task: SpawnedTask<()>,
) -> SendableRecordBatchStream {
    let outputs = futures::stream::select_all(
        receivers
            .into_iter()
            .enumerate()
            .map(|(output, receiver)| wire_items(receiver).map(move |item| (output, item))),
    );
    let failed = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let items = {
        let (wire, routes, failed) = (Arc::clone(&wire), Arc::clone(&routes), Arc::clone(&failed));
        outputs.map(move |(output, item)| match item {
            Ok(item) => encode(&wire, routes[output], input, item),
            Err(error) => {
                failed.store(true, std::sync::atomic::Ordering::Relaxed);
                Err(error)
            }
        })
    };
    let ends = {
        let wire = Arc::clone(&wire);
        futures::stream::once(future::ready(())).flat_map(move |()| {
            let ends: Vec<Result<_>> = match failed.load(std::sync::atomic::Ordering::Relaxed) {
                true => Vec::new(),
                false => routes
                    .iter()
                    .map(|route| encode(&wire, *route, input, WireItem::End))
                    .collect(),
            };
            futures::stream::iter(ends)
        })
    };
    let batches = items.chain(ends).map(move |batch| {
        let _ = &task;
        batch
    });
    Box::pin(RecordBatchStreamAdapter::new(wire, batches))
}

/// Splits the wire batches of one output into one queue per input; an input whose items
/// stop before its `End` gets an error.
async fn split_by_input(
    mut wire: SendableRecordBatchStream,
    data: SchemaRef,
    queues: Vec<mpsc::UnboundedSender<RoutedMessage>>,
) {
    let mut queues: Vec<Option<_>> = queues.into_iter().map(Some).collect();
    let fail_all = |queues: &mut Vec<Option<mpsc::UnboundedSender<RoutedMessage>>>,
                    error: DataFusionError| {
        let error = Arc::new(error);
        for queue in queues.iter_mut().filter_map(Option::take) {
            let _ = queue.send(Err(DataFusionError::Shared(Arc::clone(&error))));
        }
    };
    while let Some(batch) = wire.next().await {
        let items = match batch.and_then(|batch| decode(&batch, &data)) {
            Ok(items) => items,
            Err(error) => return fail_all(&mut queues, error),
        };
        for (input, item) in items {
            let Some(queue) = queues.get_mut(input) else {
                return fail_all(
                    &mut queues,
                    DataFusionError::Internal(format!("a wire item of unknown input {input}")),
                );
            };
            match item {
                WireItem::End => *queue = None,
                WireItem::Routed(item) => {
                    if let Some(queue) = queue {
                        let _ = queue.send(Ok(item));
                    }
                }
            }
        }
    }
    let unfinished: Vec<usize> = (0..queues.len())
        .filter(|input| queues[*input].is_some())
        .collect();
    if !unfinished.is_empty() {
        let error: Result<()> = exec_err!(
            "the network stream of an exchange output ended before exchange inputs \
             {unfinished:?} had sent everything (a worker stopped?)"
        );
        if let Err(error) = error {
            fail_all(&mut queues, error);
        }
    }
}

/// What one output of an exchange that does not merge its inputs reads: rows as they
/// arrive, and the watermark of `domain` (the inputs that feed it) whenever it rises.
fn arrival_order(
    wire: SendableRecordBatchStream,
    data: SchemaRef,
    inputs: usize,
    domain: Vec<usize>,
) -> BoxStream<'static, Result<StreamMessage>> {
    let state = ArrivalOrder {
        tracker: WatermarkTracker::new(domain.len(), 0),
        domain,
        ended: vec![false; inputs],
        sent: i64::MIN,
    };
    futures::stream::unfold(Some((wire, state)), move |running| {
        let data = Arc::clone(&data);
        async move {
            let (mut wire, mut state) = running?;
            let messages = match wire.next().await {
                Some(batch) => batch
                    .and_then(|batch| decode(&batch, &data))
                    .and_then(|items| state.messages(items)),
                None => return state.check_ended().err().map(|e| (vec![Err(e)], None)),
            };
            Some(match messages {
                Ok(messages) => (messages.into_iter().map(Ok).collect(), Some((wire, state))),
                Err(error) => (vec![Err(error)], None),
            })
        }
    })
    .flat_map(futures::stream::iter)
    .boxed()
}

/// The watermark of one output in [`arrival_order`].
struct ArrivalOrder {
    tracker: WatermarkTracker,
    /// The inputs whose watermarks the output combines, by their place in the tracker.
    domain: Vec<usize>,
    ended: Vec<bool>,
    sent: i64,
}

impl ArrivalOrder {
    fn messages(&mut self, items: Vec<(usize, WireItem)>) -> Result<Vec<StreamMessage>> {
        let mut messages = Vec::new();
        for (input, item) in items {
            let Some(ended) = self.ended.get_mut(input) else {
                return internal_err!("a wire item of unknown input {input}");
            };
            let tracked = self.domain.iter().position(|&i| i == input);
            match item {
                WireItem::Routed(Routed::Rows(batch, _)) => {
                    messages.push(StreamMessage::Batch(batch));
                    continue;
                }
                WireItem::Routed(Routed::Watermark { watermark, .. }) => {
                    if let Some(tracked) = tracked {
                        self.tracker.observe(tracked, watermark, Instant::now());
                    }
                }
                WireItem::End => {
                    *ended = true;
                    if let Some(tracked) = tracked {
                        self.tracker.finish(tracked);
                    }
                }
                WireItem::Routed(_) => {
                    return internal_err!("a merge item reached an exchange that does not merge");
                }
            }
            if let Some(watermark) = self.tracker.watermark(Instant::now())
                && watermark > self.sent
                && watermark < i64::MAX
            {
                self.sent = watermark;
                messages.push(StreamMessage::Watermark(watermark));
            }
        }
        Ok(messages)
    }

    fn check_ended(&self) -> Result<()> {
        let unfinished: Vec<usize> = (0..self.ended.len()).filter(|&i| !self.ended[i]).collect();
        match unfinished.is_empty() {
            true => Ok(()),
            false => exec_err!(
                "the network stream of an exchange output ended before exchange inputs \
                 {unfinished:?} had sent everything (a worker stopped?)"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{Int64Array, RecordBatch};
    use datafusion::arrow::datatypes::{DataType, Field, Schema};

    fn data() -> SchemaRef {
        Arc::new(Schema::new(vec![Field::new("t", DataType::Int64, false)]))
    }

    fn wire_stream(items: Vec<(usize, WireItem)>) -> SendableRecordBatchStream {
        let wire = wire_schema(&data());
        let batches: Vec<Result<RecordBatch>> = items
            .into_iter()
            .map(|(input, item)| encode(&wire, 0, input, item))
            .collect();
        Box::pin(RecordBatchStreamAdapter::new(
            wire,
            futures::stream::iter(batches),
        ))
    }

    fn rows(times: &[i64]) -> WireItem {
        let batch =
            RecordBatch::try_new(data(), vec![Arc::new(Int64Array::from(times.to_vec()))]).unwrap();
        WireItem::Routed(Routed::Piece { batch, input: 0 })
    }

    fn watermark(watermark: i64) -> WireItem {
        WireItem::Routed(Routed::Watermark { watermark, key: 0 })
    }

    async fn described(stream: BoxStream<'static, Result<StreamMessage>>) -> Vec<String> {
        stream
            .map(|message| match message {
                Ok(StreamMessage::Batch(batch)) => format!("{} rows", batch.num_rows()),
                Ok(StreamMessage::Watermark(w)) => format!("watermark {w}"),
                Ok(StreamMessage::Barrier(_)) => "barrier".to_string(),
                Err(error) => format!("error: {error}"),
            })
            .collect()
            .await
    }

    /// An output that does not merge its inputs holds the smallest watermark of its domain's
    /// inputs, an ended input counting as infinite; an input outside the domain moves nothing.
    #[tokio::test]
    async fn the_receiving_watermark_is_the_smallest_of_the_domain() {
        let items = vec![
            (0, rows(&[90, 100])),
            (0, watermark(100)),
            (1, rows(&[40])),
            (1, watermark(50)),
            (2, watermark(10)),
            (1, watermark(120)),
            (1, WireItem::End),
            (2, WireItem::End),
            (0, watermark(130)),
            (0, WireItem::End),
        ];
        let messages = described(arrival_order(wire_stream(items), data(), 3, vec![0, 1])).await;
        assert_eq!(
            messages,
            [
                "2 rows",
                "1 rows",
                "watermark 50",
                "watermark 100",
                "watermark 130"
            ]
        );
    }

    /// An input whose items stop before its end (a worker died) fails the output.
    #[tokio::test]
    async fn an_input_without_its_end_fails_the_output() {
        let items = vec![(0, rows(&[1])), (0, WireItem::End), (1, rows(&[2]))];
        let messages = described(arrival_order(wire_stream(items), data(), 2, vec![0, 1])).await;
        assert_eq!(messages.len(), 3, "{messages:?}");
        assert!(
            messages[2].contains("before exchange inputs [1] had sent everything"),
            "{messages:?}"
        );
    }
}
