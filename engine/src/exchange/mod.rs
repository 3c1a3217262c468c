//! [`StreamExchangeExec`]: Freshet's exchange between parallel streams, which carries
//! watermarks through the shuffle.
//!
//! One task per input partition pulls that partition's batches, routes them with a
//! [`Router`] (hash on key columns, sticky, round-robin or fan-in) and sends the pieces into
//! one bounded channel per output partition, so a slow consumer holds the inputs back
//! instead of growing memory. After a batch's pieces are sent, the task records the batch's
//! largest event time in a shared [`WatermarkTracker`]; when the combined watermark (the
//! minimum over running inputs) rises, it sends `Watermark(w)` to every output. Because each
//! input records its progress only after its rows are in the channels, and a channel keeps
//! the order of sends, every row older than `w` is ahead of `Watermark(w)` in every output.
//!
//! Inputs are kept aligned in event time: an input whose own watermark runs more than two
//! batches' worth of event time ahead of the combined watermark waits for the others. Without
//! that, one fast source partition would fill the consumers' state with windows that cannot
//! close until the slowest partition catches up. Only independent source partitions are
//! aligned: the outputs of another exchange share its input tasks, and one waiting for
//! another could hold back the rows the other needs to advance. Outputs that merge their
//! inputs in an order fixed by the data ([`OrderedMerge`]) align them by themselves — a
//! partition ahead waits in its channel until the others catch up — and the inputs do not
//! wait here as well (both waits together could deadlock).
//!
//! Over a replay of files the outputs merge the source partitions by replay position (the
//! unit each batch comes from, see `source::replay_units`) and make the watermark
//! themselves, as one partition reading the whole replay would: the input tasks then send no
//! watermarks and no idle input is left out. Elsewhere they merge by event time.
//!
//! Under sticky routing an output gets the rows of its own inputs only, so the watermark is
//! combined per output, over the inputs that feed it (a watermark domain), and goes to that
//! output alone: streams on different outputs neither wait for each other nor hold each
//! other's windows open.
//!
//! With an [`InputStep`] (the partial step of two-phase aggregation), each input task first
//! runs its batch through the step and routes the step's output instead of the rows. A step
//! whose output depends on the watermark the consumer will hold when it reads it (which rows
//! are late) makes the input tasks take turns (one async lock) for the span from reading the
//! watermark to having sent their output and any new watermark; see [`input_step`]. Over a
//! replay whose inputs it merges by position, a step that can leave lateness to its consumer
//! (a tumbling or hopping window's partial states) runs at no watermark and takes no turns: its outputs
//! are merged in the replay's order like rows, and the consumer judges them.
//!
//! One input partition into one output (a query on one stream), or a sticky exchange of as
//! many inputs as outputs made to read them inline (the side a broadcast join leaves in its
//! streams), needs none of this: unless an input step or an idle timeout needs the task, the
//! consumer of each output reads its one input inline ([`inline`]), with the same batches and
//! watermarks and no task hop between them.
//!
//! DataFusion operators read the exchange with `execute` and see only the batches; Freshet's
//! stateful operators read batches and watermarks with [`StreamExchangeExec::execute_messages`].

use std::fmt;
use std::sync::Arc;

use datafusion::common::runtime::SpawnedTask;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::common::{Result, internal_err};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::{EquivalenceProperties, PhysicalExpr};
use datafusion::physical_plan::execution_plan::EmissionType;
use datafusion::physical_plan::metrics::{ExecutionPlanMetricsSet, MetricsSet};
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    ChildrenPropertiesMode, DisplayAs, DisplayFormatType, ExecutionPlan, ExecutionPlanProperties,
    PlanProperties, ReplaceChildrenOptions,
};
use freshet_partitioner::{Router, RoutingStrategy, WatermarkDomain};
use futures::stream::BoxStream;
use futures::{StreamExt, future};
use parking_lot::Mutex;
use tokio::sync::{Notify, mpsc};

use crate::aggregate::WindowAggregateExec;
use crate::checkpoint::{BarrierProbe, Checkpointing, probe_below};
use crate::filter::StreamFilterExec;
use crate::join::{IntervalJoinExec, LookupJoinExec};
use crate::plan_util::single_child;
use crate::progress::PartitionProgress;
use crate::source::StreamSourceExec;
use crate::watermark::{EventTime, StreamMessage, WatermarkTracker, time_plus_constant};
use checkpoint::OutputCheckpoint;

mod barrier_alignment;
mod checkpoint;
mod inline;
mod input_step;
mod input_task;
mod ordered_merge;
mod remote;
pub mod wire;

use barrier_alignment::BarrierAlignment;
use inline::inline_messages;
pub use input_step::{InputStep, InputStepState, StepOutput};
use input_task::{InputTask, Progress, watch_idle_inputs};
use ordered_merge::{MergeKeys, OrderedMerge, Routed, RoutedMessage};
use remote::RemoteInput;

/// Items an input may queue for one merging output. A merge takes one input's rows until
/// another's come first, and a source partition's unit (a row group, up to 16 batches) all
/// comes first: the other inputs keep decoding only while their channels have room.
const MERGED_CHANNEL_ITEMS: usize = 8;

type Message = Result<StreamMessage>;

/// See the module documentation.
#[derive(Debug)]
pub struct StreamExchangeExec {
    input: Arc<dyn ExecutionPlan>,
    strategy: RoutingStrategy,
    outputs: usize,
    event_time: Option<EventTime>,
    /// Why this strategy, for EXPLAIN (e.g. "auto: source partitioned by the keys").
    reason: String,
    properties: Arc<PlanProperties>,
    running: Arc<Mutex<Option<Running>>>,
    /// Work run on each input partition before routing (two-phase aggregation's partial
    /// step).
    step: Option<Arc<dyn InputStep>>,
    metrics: ExecutionPlanMetricsSet,
    /// Where the outputs read what input tasks on other workers sent, if they do.
    remote: Option<RemoteInput>,
    /// Whether each output of a sticky exchange of as many inputs reads its input itself
    /// (see [`Self::reading_inputs_inline`]).
    inline_outputs: bool,
}

fn exchange_properties(
    input: &Arc<dyn ExecutionPlan>,
    strategy: &RoutingStrategy,
    outputs: usize,
    schema: datafusion::arrow::datatypes::SchemaRef,
) -> PlanProperties {
    PlanProperties::new(
        EquivalenceProperties::new(schema),
        strategy.partitioning(outputs),
        EmissionType::Incremental,
        input.boundedness(),
    )
}

/// The channels of one execution, taken one output at a time.
struct Running {
    receivers: Vec<Option<OutputChannels>>,
    tasks: Arc<Vec<SpawnedTask<()>>>,
}

/// What one output reads.
enum OutputChannels {
    /// One channel that every input sends into: rows in arrival order.
    Shared(mpsc::Receiver<RoutedMessage>),
    /// A channel per input, merged in an order fixed by the data ([`OrderedMerge`]).
    Merged(Box<OrderedMerge>),
    /// One shared channel, with checkpoint barriers aligned across the inputs.
    Aligned(Box<BarrierAlignment>),
}

impl fmt::Debug for Running {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Running")
    }
}

impl StreamExchangeExec {
    /// Routes `input` to `outputs` partitions with `strategy`; with `event_time`, computes and
    /// forwards watermarks.
    pub fn try_new(
        input: Arc<dyn ExecutionPlan>,
        strategy: RoutingStrategy,
        outputs: usize,
        event_time: Option<EventTime>,
    ) -> Result<Self> {
        let outputs = strategy.output_count(input.output_partitioning().partition_count(), outputs);
        let properties = exchange_properties(&input, &strategy, outputs, input.schema());
        Ok(Self {
            input,
            strategy,
            outputs,
            event_time,
            reason: String::new(),
            properties: Arc::new(properties),
            running: Arc::new(Mutex::new(None)),
            step: None,
            metrics: ExecutionPlanMetricsSet::new(),
            remote: None,
            inline_outputs: false,
        })
    }

    /// A sticky exchange of as many inputs as outputs whose outputs each read their input
    /// themselves ([`inline`]), with no input task between: its input partition `p` then
    /// runs where output `p` is read, so across workers the exchange stays inside a worker
    /// (the side a broadcast join leaves in its streams). Other sticky exchanges keep their
    /// input tasks, which overlap an operator below with the one above.
    pub fn reading_inputs_inline(mut self) -> Self {
        self.inline_outputs = true;
        self
    }

    /// Runs `step` on each input partition and routes its output (whose schema the exchange
    /// then has) instead of the rows; the strategy's keys refer to the step's output.
    pub fn with_input_step(mut self, step: Arc<dyn InputStep>) -> Self {
        let properties =
            exchange_properties(&self.input, &self.strategy, self.outputs, step.schema());
        self.properties = Arc::new(properties);
        self.step = Some(step);
        self
    }

    /// The step run on each input partition, if any.
    pub fn input_step(&self) -> Option<&Arc<dyn InputStep>> {
        self.step.as_ref()
    }

    /// Whether the step leaves lateness to the consumer (see [`input_step`]): its late
    /// records are then never seen whole, so they cannot go to a late-record output.
    pub fn defers_lateness(&self) -> Result<bool> {
        Ok(self.step.is_some()
            && self.merges_inputs(self.input.output_partitioning().partition_count())?)
    }

    /// `plan` as the exchange it must be: the input of `reader`, a stateful operator that
    /// reads batches and watermarks with [`Self::execute_messages`].
    pub fn from_plan(plan: Arc<dyn ExecutionPlan>, reader: &str) -> Result<Arc<Self>> {
        let name = plan.name().to_string();
        let plan: Arc<dyn std::any::Any + Send + Sync> = plan;
        match plan.downcast::<Self>() {
            Ok(exchange) => Ok(exchange),
            Err(_) => internal_err!("{reader} reads a StreamExchangeExec, got {name}"),
        }
    }

    /// Records why the strategy was chosen, for EXPLAIN.
    pub fn with_reason(mut self, reason: impl Into<String>) -> Self {
        self.reason = reason.into();
        self
    }

    pub fn input(&self) -> &Arc<dyn ExecutionPlan> {
        &self.input
    }

    pub fn strategy(&self) -> &RoutingStrategy {
        &self.strategy
    }

    pub fn event_time(&self) -> Option<EventTime> {
        self.event_time
    }

    /// Output `partition` as batches and watermarks.
    pub fn execute_messages(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<BoxStream<'static, Message>> {
        if let Some(remote) = &self.remote {
            return self.receive(remote, partition, context);
        }
        if self.runs_inline() {
            let inputs = self.input.output_partitioning().partition_count();
            let probe = match self.input_positions(inputs) {
                Some(positions) => Some(BarrierProbe::Source(positions)),
                None => self.operator_probe(),
            };
            let checkpoint = match probe {
                Some(probe) => {
                    OutputCheckpoint::of(Checkpointing::of(&context).as_ref(), self, partition)?
                        .map(|checkpoint| (checkpoint, probe))
                }
                None => None,
            };
            // Marked read before the input runs.
            let input_progress = self
                .input_progress(inputs)
                .map(|(progress, offset, _)| (progress, offset));
            let input = self.input.execute(partition, context)?;
            return inline_messages(
                (input, partition),
                self.event_time,
                input_progress,
                checkpoint,
            );
        }
        let mut running = self.running.lock();
        if running.is_none() {
            *running = Some(self.start(context)?);
        }
        let Some(state) = running.as_mut() else {
            return internal_err!("exchange state missing");
        };
        let Some(channels) = state.receivers.get_mut(partition).and_then(Option::take) else {
            return internal_err!("exchange output {partition} executed twice or out of range");
        };
        let tasks = Arc::clone(&state.tasks);
        if state.receivers.iter().all(Option::is_none) {
            // Every output is taken: a later execution starts afresh.
            *running = None;
        }
        let messages = match channels {
            OutputChannels::Shared(receiver) => futures::stream::unfold(receiver, |mut r| async {
                let item = r.recv().await?;
                Some((item, r))
            })
            .filter_map(|item| {
                future::ready(match item {
                    Ok(Routed::Rows(batch, _) | Routed::Piece { batch, .. }) => {
                        Some(Ok(StreamMessage::Batch(batch)))
                    }
                    Ok(Routed::Watermark { watermark, .. }) => {
                        Some(Ok(StreamMessage::Watermark(watermark)))
                    }
                    Ok(
                        Routed::Progress(_)
                        | Routed::Passed { .. }
                        | Routed::BarrierPassed { .. }
                        | Routed::Ended { .. },
                    ) => None,
                    Err(error) => Some(Err(error)),
                })
            })
            .boxed(),
            OutputChannels::Merged(merge) => merge.into_stream(),
            OutputChannels::Aligned(alignment) => alignment.into_stream(),
        };
        // The stream holds the input tasks: they stop when every output is dropped.
        Ok(messages
            .map(move |message| {
                let _ = &tasks;
                message
            })
            .boxed())
    }

    /// Whether this exchange can carry checkpoint barriers: its outputs read a replay of
    /// files in replay order, inline or merged by position, or a stateful operator that
    /// takes part in checkpoints (see [`barrier_alignment`]).
    pub fn carries_barriers(&self) -> Result<bool> {
        if self.step.is_some() {
            return Ok(false);
        }
        let inputs = self.input.output_partitioning().partition_count();
        if self.input_positions(inputs).is_none() {
            return Ok(self.operator_probe().is_some());
        }
        Ok(self.runs_inline() || self.merges_inputs(inputs)?)
    }

    /// Where the stateful operator this exchange reads (through filters and projections)
    /// records the barriers its partitions passed, if it reads one.
    fn operator_probe(&self) -> Option<BarrierProbe> {
        match probe_below(&self.input) {
            Ok(probe @ BarrierProbe::Operator(_)) => Some(probe),
            _ => None,
        }
    }

    /// Whether the consumer of each output reads its one input itself ([`inline`]): one
    /// input into one output, or a sticky exchange into as many outputs made to (see
    /// [`Self::reading_inputs_inline`]); with no input step and no idle timeout.
    pub fn runs_inline(&self) -> bool {
        let inputs = self.input.output_partitioning().partition_count();
        let one_input_each = (self.outputs == 1 && inputs == 1)
            || (self.inline_outputs
                && matches!(self.strategy, RoutingStrategy::Sticky)
                && inputs == self.outputs);
        one_input_each
            && self.step.is_none()
            && self.event_time.is_none_or(|e| e.idle_timeout.is_none())
    }

    /// Whether each output merges its inputs in an order fixed by the data (see
    /// [`OrderedMerge`]): where rows of one key come from several inputs and the consumer
    /// applies them in order. Sticky routing keeps a key in one input; round-robin feeds
    /// stateless operators only; a step's outputs are combined whatever their order, except
    /// those of a replay whose consumer judges lateness itself (see [`input_step`]); an endless
    /// stream without event time or replay positions has no key that a silent input could
    /// not hold; and inputs
    /// fed by another exchange share its input tasks, so that waiting for one of them could
    /// hold back the rows it waits for (the same reason they are not aligned). One input with
    /// replay positions is merged too: the merge is where checkpoint barriers are passed on.
    fn merges_inputs(&self, inputs: usize) -> Result<bool> {
        let positions = self.input_positions(inputs).is_some();
        Ok((inputs > 1 || positions)
            && self
                .step
                .as_ref()
                .is_none_or(|step| positions && step.lateness_deferrable())
            && self.strategy.interleaves_keys()
            && (self.event_time.is_some()
                || !self.input.boundedness().is_unbounded()
                || self.input_positions(inputs).is_some())
            && self.reads_source_partitions()?)
    }

    /// The progress of the operator right below, through filters, projections and lookups
    /// only (which hold no rows back), when the exchange computes watermarks: a source's when the
    /// event-time column is the source's, a window aggregation's when it is the window
    /// start, or a join's when it is an event time of the join's output, with the constant a projection added to it (`window_end` is the start plus the
    /// size). Its partitions are the exchange's inputs.
    /// Also names the operator.
    fn input_progress(&self, inputs: usize) -> Option<(Arc<PartitionProgress>, i64, &str)> {
        let mut column = self.event_time?.column;
        let mut offset = 0i64;
        let mut node = &self.input;
        loop {
            if let Some(source) = node.downcast_ref::<StreamSourceExec>() {
                let (progress, time_column) = source.progress()?;
                let read = time_column == column && progress.partitions() == inputs;
                if read {
                    progress.mark_read();
                }
                return read.then(|| (Arc::clone(progress), offset, node.name()));
            }
            if let Some(aggregate) = node.downcast_ref::<WindowAggregateExec>() {
                let (progress, start_column) = aggregate.progress()?;
                return (start_column == column && progress.partitions() == inputs)
                    .then(|| (Arc::clone(progress), offset, node.name()));
            }
            if let Some(join) = node.downcast_ref::<IntervalJoinExec>() {
                let (progress, _) = join.progress().find(|(_, time)| *time == column)?;
                return (progress.partitions() == inputs)
                    .then(|| (Arc::clone(progress), offset, node.name()));
            }
            node = if let Some(filter) = node.downcast_ref::<StreamFilterExec>() {
                if let Some(projection) = filter.projection() {
                    column = *projection.get(column)?;
                }
                filter.input()
            } else if let Some(lookup) = node.downcast_ref::<LookupJoinExec>() {
                column = lookup.stream_column(column)?;
                lookup.stream()
            } else if let Some(projection) = node.downcast_ref::<ProjectionExec>() {
                let (below, added) = time_plus_constant(
                    &projection.expr().get(column)?.expr,
                    &projection.input().schema(),
                )?;
                column = below;
                offset = offset.checked_add(added)?;
                projection.input()
            } else {
                return None;
            };
        }
    }

    /// The replay positions of the source right below, through filters, projections and
    /// lookups (which pass on one batch per batch), when it is a replay of files read unit
    /// by unit and its partitions are the exchange's inputs (see `replay_units`).
    fn input_positions(&self, inputs: usize) -> Option<Arc<PartitionProgress>> {
        let mut node = &self.input;
        loop {
            if let Some(source) = node.downcast_ref::<StreamSourceExec>() {
                let positions = source.positions()?;
                return (positions.partitions() == inputs).then(|| Arc::clone(positions));
            }
            node = if let Some(filter) = node.downcast_ref::<StreamFilterExec>() {
                filter.input()
            } else if let Some(lookup) = node.downcast_ref::<LookupJoinExec>() {
                lookup.stream()
            } else if let Some(projection) = node.downcast_ref::<ProjectionExec>() {
                projection.input()
            } else {
                return None;
            };
        }
    }

    /// Whether the inputs are independent source partitions, with no exchange below.
    fn reads_source_partitions(&self) -> Result<bool> {
        Ok(!self
            .input
            .exists(|node| Ok(node.downcast_ref::<StreamExchangeExec>().is_some()))?)
    }

    /// The groups of inputs whose watermark is combined, and the outputs they feed: the
    /// strategy's, except that a step's outputs are judged at one watermark for all.
    fn watermark_domains(&self, inputs: usize) -> Vec<WatermarkDomain> {
        if self.step.is_some() {
            return vec![WatermarkDomain::all(inputs, self.outputs)];
        }
        self.strategy.watermark_domains(inputs, self.outputs)
    }

    fn start(&self, context: Arc<TaskContext>) -> Result<Running> {
        let inputs = self.input.output_partitioning().partition_count();
        let merged = self.merges_inputs(inputs)?;
        // A replay of files merges by replay position, which fixes the order to the file's.
        let positions = merged.then(|| self.input_positions(inputs)).flatten();
        // In a checkpointed run over a stateful operator, where its partitions record the
        // barriers they passed: the outputs align them (see [`barrier_alignment`]).
        let barriers = match (Checkpointing::of(&context), self.operator_probe()) {
            (Some(checkpointing), Some(probe)) if !merged && self.step.is_none() => {
                Some((probe, checkpointing))
            }
            _ => None,
        };
        // `senders[input][output]`; shared channels are one per output, cloned per input.
        let mut senders: Vec<Vec<mpsc::Sender<RoutedMessage>>> = Vec::with_capacity(inputs);
        let receivers: Vec<OutputChannels> = if merged {
            let mut receivers: Vec<Vec<_>> = (0..self.outputs).map(|_| Vec::new()).collect();
            for _ in 0..inputs {
                let (input_senders, input_receivers): (Vec<_>, Vec<_>) = (0..self.outputs)
                    .map(|_| mpsc::channel(MERGED_CHANNEL_ITEMS))
                    .unzip();
                senders.push(input_senders);
                for (output, receiver) in input_receivers.into_iter().enumerate() {
                    receivers[output].push(receiver);
                }
            }
            let idle_timeout = self.event_time.and_then(|e| e.idle_timeout);
            let batch_rows = context.session_config().batch_size();
            let delay = self.event_time.map_or(0, |e| e.delay);
            let checkpointing = Checkpointing::of(&context);
            receivers
                .into_iter()
                .enumerate()
                .map(|(output, r)| {
                    // A replay read as fast as it goes has no idle partition: one that is
                    // slow to decode is waited for, to keep the replay's order.
                    Ok(OutputChannels::Merged(Box::new(match positions {
                        Some(_) => OrderedMerge::new(r, None, batch_rows)
                            .by_position(delay)
                            .with_checkpoint(OutputCheckpoint::of(
                                checkpointing.as_ref(),
                                self,
                                output,
                            )?)?,
                        // Without idle inputs (whose watermark is a matter of time), the merge
                        // makes the watermark from the event-time keys it passes on.
                        None if self.event_time.is_some() && idle_timeout.is_none() => {
                            OrderedMerge::new(r, None, batch_rows).by_event_time(delay)
                        }
                        None => OrderedMerge::new(r, idle_timeout, batch_rows),
                    })))
                })
                .collect::<Result<_>>()?
        } else {
            let (shared, receivers): (Vec<_>, Vec<_>) = (0..self.outputs)
                .map(|_| mpsc::channel(2 * inputs.max(1)))
                .unzip();
            senders.resize(inputs, shared);
            receivers
                .into_iter()
                .enumerate()
                .map(|(output, receiver)| {
                    Ok(match &barriers {
                        Some((_, checkpointing)) => {
                            OutputChannels::Aligned(Box::new(BarrierAlignment::new(
                                receiver,
                                inputs,
                                OutputCheckpoint::of(Some(checkpointing), self, output)?,
                            )))
                        }
                        None => OutputChannels::Shared(receiver),
                    })
                })
                .collect::<Result<_>>()?
        };
        let delay = self.event_time.map_or(0, |e| e.delay);
        // Turns give a step the exact watermark its consumer will read its output at; merged
        // by replay position, the consumer judges lateness itself.
        if let Some(step) = self.step.as_ref().filter(|_| merged) {
            step.check_lateness_deferred()?;
        }
        let turns = self
            .step
            .as_ref()
            .filter(|step| step.needs_exact_watermark() && !merged)
            .map(|_| Arc::new(tokio::sync::Mutex::new(())));
        // Inputs fed by another exchange share its input tasks: one that waited for another
        // could hold back the very rows the other waits for. Only independent source
        // partitions are aligned.
        let aligned = self.reads_source_partitions()?;
        let input_progress = self
            .input_progress(inputs)
            .map(|(progress, offset, _)| (progress, offset));
        let mut tasks = Vec::with_capacity(inputs);
        for domain in self.watermark_domains(inputs) {
            let watermarks = Arc::new(Mutex::new(Progress {
                tracker: WatermarkTracker::new(domain.inputs.len(), delay)
                    .with_idle_timeout(self.event_time.and_then(|e| e.idle_timeout)),
                sent: i64::MIN,
                // A merged output aligns its inputs itself: a partition ahead waits in its
                // channel until the others catch up. Waiting here as well could deadlock.
                drift_limit: if aligned && !merged { 0 } else { i64::MAX },
            }));
            let advanced = Arc::new(Notify::new());
            // Each input's senders to the domain's outputs.
            let domain_senders = |input: usize| -> Vec<mpsc::Sender<RoutedMessage>> {
                domain
                    .outputs
                    .iter()
                    .map(|&o| senders[input][o].clone())
                    .collect()
            };
            for (tracked, &input) in domain.inputs.iter().enumerate() {
                let router = Router::try_new(&self.strategy, input, inputs, self.outputs)?;
                let step = match &self.step {
                    Some(step) => Some(Arc::clone(step).start(input, &self.metrics)?),
                    None => None,
                };
                let task = InputTask {
                    input,
                    tracked,
                    plan: Arc::clone(&self.input),
                    context: Arc::clone(&context),
                    router,
                    senders: senders[input].clone(),
                    // Merged by replay position, the outputs make the watermark themselves.
                    watermark_senders: match positions {
                        Some(_) => Vec::new(),
                        None => domain_senders(input),
                    },
                    merge_keys: match (&positions, merged) {
                        (Some(positions), _) => {
                            Some(MergeKeys::by_position(Arc::clone(positions), input))
                        }
                        (None, true) => Some(MergeKeys::new(self.event_time)),
                        (None, false) => None,
                    },
                    input_progress: input_progress.clone(),
                    watermarks: Arc::clone(&watermarks),
                    advanced: Arc::clone(&advanced),
                    event_time: self.event_time,
                    aligned: aligned && !merged,
                    step,
                    turns: turns.clone(),
                    barriers: barriers.clone(),
                    passed: 0,
                };
                tasks.push(SpawnedTask::spawn(task.run()));
            }
            let idle_timeout = self.event_time.and_then(|e| e.idle_timeout);
            if let Some(timeout) = idle_timeout.filter(|_| positions.is_none()) {
                // Merged outputs read every input's channel, shared ones the one channel.
                let watched: Vec<_> = if merged {
                    domain
                        .inputs
                        .iter()
                        .flat_map(|&i| domain_senders(i))
                        .collect()
                } else {
                    domain
                        .inputs
                        .first()
                        .map(|&i| domain_senders(i))
                        .unwrap_or_default()
                };
                tasks.push(SpawnedTask::spawn(watch_idle_inputs(
                    timeout,
                    delay,
                    watched.iter().map(mpsc::Sender::downgrade).collect(),
                    Arc::clone(&watermarks),
                    Arc::clone(&advanced),
                    turns.clone(),
                )));
            }
        }
        Ok(Running {
            receivers: receivers.into_iter().map(Some).collect(),
            tasks: Arc::new(tasks),
        })
    }
}

impl DisplayAs for StreamExchangeExec {
    fn fmt_as(&self, _format: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "StreamExchangeExec: strategy={}, partitions={}->{}",
            self.strategy,
            self.input.output_partitioning().partition_count(),
            self.outputs
        )?;
        if !self.reason.is_empty() {
            write!(f, " ({})", self.reason)?;
        }
        if let Some(step) = &self.step {
            write!(f, ", ")?;
            step.fmt_as(f)?;
        }
        if let Some(event_time) = &self.event_time {
            let inputs = self.input.output_partitioning().partition_count();
            match self.input_progress(inputs) {
                // An operator's own progress: the smallest time it may still emit.
                Some((_, offset, operator)) if operator != "StreamSourceExec" => write!(
                    f,
                    ", watermark=progress of {operator} (column {}{}) - {}",
                    event_time.column,
                    match offset {
                        0 => String::new(),
                        offset => format!(" {offset:+}"),
                    },
                    event_time.delay
                )?,
                _ if event_time.delay == i64::MAX => write!(
                    f,
                    ", watermark=the end of the input (column {} is in no bounded disorder)",
                    event_time.column
                )?,
                _ => write!(
                    f,
                    ", watermark=max(column {}) - {}",
                    event_time.column, event_time.delay
                )?,
            }
            if let Some(timeout) = event_time.idle_timeout {
                write!(f, ", idle_timeout={timeout:?}")?;
            }
        }
        Ok(())
    }
}

impl ExecutionPlan for StreamExchangeExec {
    fn name(&self) -> &str {
        "StreamExchangeExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    fn benefits_from_input_partitioning(&self) -> Vec<bool> {
        vec![false]
    }

    fn maintains_input_order(&self) -> Vec<bool> {
        vec![false]
    }

    fn apply_expressions(
        &self,
        f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        if let RoutingStrategy::Hash(keys) = &self.strategy {
            for key in keys {
                if f(key)? == TreeNodeRecursion::Stop {
                    return Ok(TreeNodeRecursion::Stop);
                }
            }
        }
        Ok(TreeNodeRecursion::Continue)
    }

    fn replace_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
        _options: ReplaceChildrenOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let child = single_child("StreamExchangeExec", children)?;
        let mut exchange =
            Self::try_new(child, self.strategy.clone(), self.outputs, self.event_time)?
                .with_reason(self.reason.clone());
        exchange.inline_outputs = self.inline_outputs;
        if let Some(step) = &self.step {
            exchange = exchange.with_input_step(Arc::clone(step));
        }
        Ok(Arc::new(exchange))
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        self.replace_children(
            children,
            ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute),
        )
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let batches = self
            .execute_messages(partition, context)?
            .filter_map(|message| {
                future::ready(match message {
                    Ok(StreamMessage::Batch(batch)) => Some(Ok(batch)),
                    Ok(StreamMessage::Watermark(_) | StreamMessage::Barrier(_)) => None,
                    Err(e) => Some(Err(e)),
                })
            });
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            self.schema(),
            batches,
        )))
    }

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use datafusion::arrow::array::TimestampMillisecondArray;
    use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
    use datafusion::arrow::record_batch::RecordBatch;
    use datafusion::execution::SendableRecordBatchStream;
    use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
    use datafusion::physical_plan::streaming::{PartitionStream, StreamingTableExec};
    use datafusion::prelude::SessionContext;

    use super::*;

    /// Partition 0 sends one batch of times 1 000..=1 009 and then stays open; partition 1
    /// never sends anything.
    #[derive(Debug)]
    struct OpenPartition {
        schema: SchemaRef,
        sends: bool,
    }

    impl PartitionStream for OpenPartition {
        fn schema(&self) -> &SchemaRef {
            &self.schema
        }

        fn execute(&self, _context: Arc<TaskContext>) -> SendableRecordBatchStream {
            let batches = if self.sends {
                let times = TimestampMillisecondArray::from_iter_values(1_000..1_010);
                vec![Ok(RecordBatch::try_new(
                    Arc::clone(&self.schema),
                    vec![Arc::new(times)],
                )
                .unwrap())]
            } else {
                vec![]
            };
            let stream = futures::stream::iter(batches).chain(futures::stream::pending());
            Box::pin(RecordBatchStreamAdapter::new(
                Arc::clone(&self.schema),
                stream,
            ))
        }
    }

    /// The first watermark the exchange sends to output 0 within `wait`, over one partition
    /// that sent records and one that stays silent.
    async fn first_watermark(
        strategy: RoutingStrategy,
        idle_timeout: Option<Duration>,
        wait: Duration,
    ) -> Option<i64> {
        let schema = Arc::new(Schema::new(vec![Field::new(
            "ts",
            DataType::Timestamp(TimeUnit::Millisecond, None),
            false,
        )]));
        let partitions: Vec<Arc<dyn PartitionStream>> = [true, false]
            .into_iter()
            .map(|sends| {
                Arc::new(OpenPartition {
                    schema: Arc::clone(&schema),
                    sends,
                }) as Arc<dyn PartitionStream>
            })
            .collect();
        let source = StreamingTableExec::try_new(schema, partitions, None, [], true, None).unwrap();
        let event_time = EventTime {
            column: 0,
            delay: 5,
            idle_timeout,
        };
        let exchange =
            StreamExchangeExec::try_new(Arc::new(source), strategy, 2, Some(event_time)).unwrap();
        let mut messages = exchange
            .execute_messages(0, SessionContext::new().task_ctx())
            .unwrap();
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            match tokio::time::timeout_at(deadline, messages.next()).await {
                Ok(Some(Ok(StreamMessage::Watermark(watermark)))) => return Some(watermark),
                Ok(Some(Ok(StreamMessage::Batch(_) | StreamMessage::Barrier(_)))) => continue,
                Ok(Some(Err(e))) => panic!("{e}"),
                Ok(None) | Err(_) => return None,
            }
        }
    }

    #[tokio::test]
    async fn a_silent_partition_holds_the_watermark_without_an_idle_timeout() {
        assert_eq!(
            first_watermark(RoutingStrategy::FanIn, None, Duration::from_millis(300)).await,
            None
        );
    }

    #[tokio::test]
    async fn under_sticky_routing_a_silent_partition_holds_only_its_own_output() {
        // Output 0 gets partition 0's rows alone: partition 1 cannot hold its watermark.
        assert_eq!(
            first_watermark(RoutingStrategy::Sticky, None, Duration::from_secs(10)).await,
            Some(1_004)
        );
    }

    #[tokio::test]
    async fn an_idle_timeout_leaves_a_silent_partition_out() {
        assert_eq!(
            first_watermark(
                RoutingStrategy::FanIn,
                Some(Duration::from_millis(50)),
                Duration::from_secs(10)
            )
            .await,
            Some(1_004),
            "max event time 1 009 minus the 5 ms delay, once partition 1 is idle"
        );
    }

    /// A memory source of one column of millisecond times `ts`: `partitions` of batches of
    /// times.
    fn timed_source(partitions: &[Vec<Vec<i64>>]) -> Arc<dyn ExecutionPlan> {
        let schema = Arc::new(Schema::new(vec![Field::new(
            "ts",
            DataType::Timestamp(TimeUnit::Millisecond, None),
            false,
        )]));
        let partitions: Vec<Vec<RecordBatch>> = partitions
            .iter()
            .map(|batches| {
                batches
                    .iter()
                    .map(|times| {
                        let times =
                            TimestampMillisecondArray::from_iter_values(times.iter().copied());
                        RecordBatch::try_new(Arc::clone(&schema), vec![Arc::new(times)]).unwrap()
                    })
                    .collect()
            })
            .collect();
        datafusion::datasource::memory::MemorySourceConfig::try_new_exec(&partitions, schema, None)
            .unwrap()
    }

    /// `message` as text: its kind and rows or time.
    fn as_text(message: Message) -> String {
        match message.unwrap() {
            StreamMessage::Batch(batch) => format!("rows {}", batch.num_rows()),
            StreamMessage::Watermark(watermark) => format!("watermark {watermark}"),
            StreamMessage::Barrier(epoch) => format!("barrier {epoch}"),
        }
    }

    /// The messages of a 1→1 exchange over `batches` of times, with the given idle timeout
    /// (which keeps the input task), as text.
    async fn one_to_one(batches: &[Vec<i64>], idle_timeout: Option<Duration>) -> Vec<String> {
        let source = timed_source(&[batches.to_vec()]);
        let event_time = EventTime {
            column: 0,
            delay: 5,
            idle_timeout,
        };
        let exchange =
            StreamExchangeExec::try_new(source, RoutingStrategy::FanIn, 1, Some(event_time))
                .unwrap();
        assert_eq!(exchange.runs_inline(), idle_timeout.is_none());
        exchange
            .execute_messages(0, SessionContext::new().task_ctx())
            .unwrap()
            .map(as_text)
            .collect()
            .await
    }

    #[tokio::test]
    async fn one_input_into_one_output_inline_sends_what_its_input_task_sends() {
        let batches = [vec![1_000, 1_009], vec![], vec![1_005], vec![1_020, 1_012]];
        let inline = one_to_one(&batches, None).await;
        assert_eq!(
            inline,
            [
                "rows 2",
                "watermark 1004",
                "rows 1",
                "rows 2",
                "watermark 1015",
                "watermark 9223372036854775807",
            ]
        );
        let tasked = one_to_one(&batches, Some(Duration::from_secs(3600))).await;
        assert_eq!(inline, tasked);
    }

    /// The messages of each output of a sticky exchange of the partitions `partitions` of
    /// times into as many outputs, read inline or through input tasks, as text.
    async fn sticky_outputs(partitions: &[Vec<Vec<i64>>], inline: bool) -> Vec<Vec<String>> {
        let event_time = EventTime {
            column: 0,
            delay: 5,
            idle_timeout: None,
        };
        let source = timed_source(partitions);
        let outputs = partitions.len();
        let exchange =
            StreamExchangeExec::try_new(source, RoutingStrategy::Sticky, outputs, Some(event_time))
                .unwrap();
        let exchange = match inline {
            true => exchange.reading_inputs_inline(),
            false => exchange,
        };
        assert_eq!(exchange.runs_inline(), inline);
        let context = SessionContext::new().task_ctx();
        // Every output read at once, as the operators above read them.
        let outputs = (0..outputs).map(|output| {
            exchange
                .execute_messages(output, Arc::clone(&context))
                .unwrap()
                .map(as_text)
                .collect::<Vec<String>>()
        });
        future::join_all(outputs).await
    }

    #[tokio::test]
    async fn a_sticky_exchange_read_inline_gives_each_output_its_own_input() {
        let partitions = [
            vec![vec![1_000, 1_009], vec![1_005]],
            vec![vec![2_000], vec![], vec![2_030, 2_010]],
        ];
        let inline = sticky_outputs(&partitions, true).await;
        assert_eq!(
            inline[1],
            [
                "rows 1",
                "watermark 1995",
                "rows 2",
                "watermark 2025",
                "watermark 9223372036854775807",
            ]
        );
        assert_eq!(inline, sticky_outputs(&partitions, false).await);
    }
}
