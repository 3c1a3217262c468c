//! [`StreamSourceExec`]: the top of every stream's scan.
//!
//! It passes its input's batches through unchanged and is where a plan learns what the
//! stream is: bounded or not (an unbounded source is `Unbounded { requires_infinite_memory:
//! false }`, so DataFusion's sanity checker rejects operators that would wait for the end),
//! its source partitions (declared key partitioning becomes `Partitioning::Hash`, so a keyed
//! operator above it needs no shuffle), its event-time column and watermark delay, and its
//! pacing. With a target rate, each partition releases its batches in slices of about 10 ms
//! worth of records, each when it is due (`records sent / rate per partition` after the
//! partition started). A partition that decodes a file or generates records does so in a
//! task of its own, a couple of batches ahead of the query. Records are counted in
//! the operator's `output_rows` metric, which the progress line reads. A declared key
//! partitioning is checked as the records flow ([`PartitionKeyCheck`]): a key met in two
//! source partitions fails the run. Below an interval join, a source read as fast as it goes
//! hands out each batch only when it is not too far ahead in event time of the join's other
//! sources ([`SourceAlignment`]).

use std::collections::VecDeque;
use std::fmt;
use std::sync::Arc;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use datafusion::arrow::array::AsArray;
use datafusion::arrow::datatypes::Int64Type;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::tree_node::TreeNode;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::{DataFusionError, Result, exec_datafusion_err};
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::datasource::source::DataSourceExec;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_expr::{Partitioning, PhysicalExpr};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::metrics::{BaselineMetrics, ExecutionPlanMetricsSet, MetricsSet};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    ChildrenPropertiesMode, DisplayAs, DisplayFormatType, ExecutionPlan, ExecutionPlanProperties,
    PlanProperties, ReplaceChildrenOptions,
};
use futures::StreamExt;
use futures::stream::BoxStream;
use parking_lot::Mutex;
use tokio::runtime::Handle;
use tokio::sync::{mpsc, watch};

use crate::options::{Pacing, StreamOptions};
use crate::plan_util::{single_child, unless_panicked};

use super::alignment::{AlignedPartition, SourceAlignment};
use super::deal::DealExec;
use super::file_split::{FileSplit, TimeSpan, keep_split};
use super::generator::{generate_in_whole_batches, generates_in_batches, seek_generated};
use super::key_check::PartitionKeyCheck;
use super::replay_units::{read_units, reads_units};
use super::text_errors::TextFiles;
use crate::checkpoint::Checkpointing;
use crate::progress::PartitionProgress;
use crate::watermark::{event_times, newest_time, time_range};
use crate::window::nanoseconds_per_unit;

/// Batches a source partition decodes or generates ahead of the query: enough to keep its
/// reader busy while the query works on the batches before, and to carry the query over the
/// pause at each new row group, whose pages the reader fetches and decompresses at once.
const READ_AHEAD_BATCHES: usize = 8;

/// Whether producing `input`'s batches costs work (decoding files, generating records), as
/// opposed to handing out batches already in memory.
fn reads_or_generates(input: &Arc<dyn ExecutionPlan>) -> bool {
    let mut in_memory = false;
    let _ = input.apply(|node| {
        if node.downcast_ref::<DataSourceExec>().is_some_and(|source| {
            source
                .data_source()
                .downcast_ref::<MemorySourceConfig>()
                .is_some()
        }) {
            in_memory = true;
            return Ok(TreeNodeRecursion::Stop);
        }
        Ok(TreeNodeRecursion::Continue)
    });
    !in_memory
}

/// The stack of a reader thread: decoding is shallow, and DataFusion grows the stack where
/// it recurses (a deep filter turned into a pruning predicate as a file opens).
const READER_STACK_BYTES: usize = 64 << 20;

/// `input` read by a thread of its own, up to [`READ_AHEAD_BATCHES`] ahead of its consumer,
/// so that decoding overlaps with the query's work (order kept: one reader, one FIFO
/// channel). Dropping the stream stops the reader, also while it waits for a batch.
///
/// A thread rather than a runtime task: a consumer task that takes a batch wakes the reader
/// waiting for room, and tokio runs a task woken that way next on the waking worker, where
/// no other worker can take it — reader and query then run in turns on one core (see
/// "Where the time goes on the user's path" in docs/benchmarks.md). A thread of its own
/// rather than one of the runtime's blocking threads: a pool of a few hundred (or fewer, as
/// an application configures it) held by readers would leave none for the reads they wait
/// for.
fn read_ahead(input: SendableRecordBatchStream, reading: Reading) -> SendableRecordBatchStream {
    let schema = input.schema();
    let (sender, receiver) = mpsc::channel(READ_AHEAD_BATCHES);
    let started = Handle::try_current()
        .map_err(|e| exec_datafusion_err!("{}: no runtime to read in: {e}", reading.what))
        .and_then(|runtime| {
            let what = reading.what.clone();
            std::thread::Builder::new()
                .name("freshet-reader".into())
                .stack_size(READER_STACK_BYTES)
                .spawn(move || read_into(runtime, input, reading, sender))
                .map_err(|e| exec_datafusion_err!("{what}: cannot start a reader thread: {e}"))
        });
    if let Err(error) = started {
        return Box::pin(RecordBatchStreamAdapter::new(
            schema,
            futures::stream::once(async move { Err(error) }),
        ));
    }
    let batches = futures::stream::unfold(receiver, |mut receiver| async move {
        receiver.recv().await.map(|item| (item, receiver))
    });
    Box::pin(RecordBatchStreamAdapter::new(schema, batches))
}

/// The reader thread's work: `input`'s batches into `sender` until it ends, fails or nobody
/// reads them. A panic outside the decoder (which [`read_next`] turns into an error) is
/// sent as an error too, so that the query fails rather than ends short.
fn read_into(
    runtime: Handle,
    input: SendableRecordBatchStream,
    reading: Reading,
    sender: mpsc::Sender<Result<RecordBatch>>,
) {
    runtime.block_on(async move {
        let what = reading.what.clone();
        if let Err(error) = unless_panicked(&what, send_batches(input, reading, &sender)).await {
            let _ = sender.send(Err(error)).await;
        }
    });
}

async fn send_batches(
    mut input: SendableRecordBatchStream,
    reading: Reading,
    sender: &mpsc::Sender<Result<RecordBatch>>,
) -> Result<()> {
    loop {
        // A dropped query stops a reader that waits, as for an application's next batch: a
        // thread, unlike a task, is not dropped with the query.
        let next = tokio::select! {
            next = read_next(&mut input, &reading) => next,
            () = sender.closed() => return Ok(()),
        };
        let (item, last) = match next {
            Ok(Some(batch)) => (Ok(batch), false),
            Ok(None) => return Ok(()),
            Err(error) => (Err(error), true),
        };
        if sender.send(item).await.is_err() || last {
            return Ok(());
        }
    }
}

/// `input` read by its consumer, in the consumer's task: where every core already decodes
/// (a source partition per core) for a consumer that does little with the rows, a task of
/// its own would only add a hop per batch.
fn read_here(input: SendableRecordBatchStream, reading: Reading) -> SendableRecordBatchStream {
    let schema = input.schema();
    let batches = futures::stream::unfold(Some((input, reading)), |state| async move {
        let (mut input, reading) = state?;
        match read_next(&mut input, &reading).await {
            Ok(Some(batch)) => Some((Ok(batch), Some((input, reading)))),
            Ok(None) => None,
            Err(error) => Some((Err(error), None)),
        }
    });
    Box::pin(RecordBatchStreamAdapter::new(schema, batches))
}

/// What a source partition reads, for its errors.
#[derive(Clone)]
struct Reading {
    /// "reading stream 'NAME'".
    what: String,
    /// The stream's CSV or JSON-lines files, where a failed read looks for the bad record.
    text_files: Option<Arc<TextFiles>>,
}

/// `input`'s next batch. A reader that fails or panics (the Parquet decoder on a corrupt
/// page) gives an error naming the stream; a text file's, the file and line of the first
/// bad record the query reads (see [`TextFiles`]).
async fn read_next(
    input: &mut SendableRecordBatchStream,
    reading: &Reading,
) -> Result<Option<RecordBatch>> {
    let what = &reading.what;
    let read = async {
        let error = match input.next().await.transpose() {
            Ok(next) => return Ok(next),
            Err(error) => error,
        };
        let located = match &reading.text_files {
            Some(files) => {
                let files = Arc::clone(files);
                tokio::task::spawn_blocking(move || files.locate_error())
                    .await
                    .ok()
                    .flatten()
            }
            None => None,
        };
        let message = located.unwrap_or_else(|| error.to_string());
        Err(DataFusionError::Execution(format!(
            "{what} failed: {message}"
        )))
    };
    unless_panicked(what, read).await
}

/// `batches` of a source partition, each handed out when its alignment lets it (see
/// [`SourceAlignment`]); the partition counts as ended once the batches end or the stream
/// is dropped.
fn aligned(
    batches: BoxStream<'static, Result<RecordBatch>>,
    partition: AlignedPartition,
    column: usize,
) -> BoxStream<'static, Result<RecordBatch>> {
    futures::stream::unfold(Some((batches, partition)), move |state| async move {
        let (mut batches, partition) = state?;
        let batch = batches.next().await?;
        if let Ok(batch) = &batch {
            let times = event_times(batch.column(column));
            if let Some((oldest, newest)) = times
                .ok()
                .and_then(|times| time_range(times.as_primitive::<Int64Type>()))
            {
                partition.hand_out(oldest, newest).await;
            }
        }
        Some((batch, Some((batches, partition))))
    })
    .boxed()
}

/// The source operator of a stream; see the module documentation.
#[derive(Debug)]
pub struct StreamSourceExec {
    input: Arc<dyn ExecutionPlan>,
    table: String,
    options: StreamOptions,
    bounded: bool,
    properties: Arc<PlanProperties>,
    metrics: ExecutionPlanMetricsSet,
    /// The check of a declared key partitioning, when something may rely on it.
    key_check: Option<Arc<PartitionKeyCheck>>,
    /// Each partition's largest event time handed out, and the event-time column.
    progress: Option<(Arc<PartitionProgress>, usize)>,
    /// A replay of files read unit by unit: each partition's position in the replay (see
    /// [`replay_units`](super::replay_units)), as of the last batch handed out.
    positions: Option<Arc<PartitionProgress>>,
    /// A generator replayed as fast as it goes, and in-memory batches dealt to the partitions
    /// in turn, have positions too (block or batch numbers), taken only by a checkpointed
    /// run ([`Self::take_checkpoint_positions`]): merged by them, their records apply in
    /// that order, which the plans of other runs do not assume.
    generated_positions: OnceLock<Arc<PartitionProgress>>,
    /// Whether the input is in-memory batches dealt to the partitions in turn (batch `k` to
    /// partition `k mod n`).
    dealt_batches: bool,
    /// Set to stop: every partition then ends as if its data had ended.
    stop: Arc<watch::Sender<bool>>,
    /// The same files split over more source partitions (one per core), for a query that
    /// reads them with a step per source partition.
    wider_split: Option<Arc<FileSplit>>,
    /// A replay of files: its records and the event times they span, if the files'
    /// statistics tell.
    time_span: Option<TimeSpan>,
    /// Whether each partition decodes or generates in its consumer's task rather than in a
    /// task of its own (see [`Self::read_where_consumed`]).
    read_here: AtomicBool,
    /// The alignment this source shares with the other sources below an interval join (see
    /// [`SourceAlignment`]).
    alignment: OnceLock<Arc<SourceAlignment>>,
    /// The source's index in its alignment, once a partition runs.
    aligned_as: Arc<OnceLock<usize>>,
}

impl StreamSourceExec {
    /// Wraps `input`, the reader of stream `table`.
    pub fn try_new(
        input: Arc<dyn ExecutionPlan>,
        table: &str,
        options: &StreamOptions,
        bounded: bool,
    ) -> Result<Self> {
        let properties = Arc::new(Self::compute_properties(&input, options, bounded)?);
        let key_check = match properties.output_partitioning() {
            Partitioning::Hash(_, partitions) if *partitions > 1 => {
                PartitionKeyCheck::try_new(table, &input.schema(), &options.partitioned_by)
            }
            _ => None,
        };
        let progress = options
            .event_time
            .as_ref()
            .and_then(|column| input.schema().index_of(column).ok())
            .map(|column| {
                let partitions = properties.output_partitioning().partition_count();
                (Arc::new(PartitionProgress::new(partitions)), column)
            });
        // A replay of files read as fast as it goes, or paced by one partition, is read unit
        // by unit; a paced one read by several partitions is dealt by `DealExec`, which
        // numbers its slices. (Paced partitions split by declared keys are each paced on
        // their own: merged by unit, they would hold each other back.)
        let dealt = input.downcast_ref::<DealExec>().is_some();
        let one_partition = properties.output_partitioning().partition_count() == 1;
        let unit_by_unit = (matches!(options.pacing, Pacing::AsFastAsPossible) || one_partition)
            && reads_units(&input);
        let positions = (dealt || unit_by_unit).then(|| {
            let partitions = properties.output_partitioning().partition_count();
            Arc::new(PartitionProgress::new(partitions))
        });
        Ok(Self {
            input,
            table: table.to_string(),
            options: options.clone(),
            bounded,
            properties,
            metrics: ExecutionPlanMetricsSet::new(),
            key_check,
            progress,
            positions,
            generated_positions: OnceLock::new(),
            dealt_batches: false,
            stop: Arc::new(watch::Sender::new(false)),
            wider_split: None,
            time_span: None,
            read_here: AtomicBool::new(false),
            alignment: OnceLock::new(),
            aligned_as: Arc::default(),
        })
    }

    /// This source, able to read its files over `split`'s more source partitions.
    /// Marks the input as in-memory batches dealt to the partitions in turn.
    pub fn with_dealt_batches(mut self, dealt: bool) -> Self {
        self.dealt_batches = dealt;
        self
    }

    pub fn with_wider_split(mut self, split: Option<FileSplit>) -> Self {
        self.wider_split = split.map(Arc::new);
        self
    }

    /// Records that the replay holds `span`'s records over its event times.
    pub fn with_time_span(mut self, span: Option<TimeSpan>) -> Self {
        self.time_span = span;
        self
    }

    /// The replay's records and the event times they span, if known (Parquet statistics).
    pub fn time_span(&self) -> Option<TimeSpan> {
        self.time_span
    }

    /// This source reading its files over one source partition per core, if it was given
    /// such a split: a query whose first step runs per source partition (a plain GROUP
    /// BY's partial step) then decodes on every core even at one stream. A replay is
    /// otherwise read by as many source partitions as the query has streams.
    pub fn widened(&self) -> Result<Option<Arc<Self>>> {
        let Some(split) = &self.wider_split else {
            return Ok(None);
        };
        let input = split.apply(&self.input)?;
        Self::try_new(input, &self.table, &self.options, self.bounded)
            .map(|s| Some(Arc::new(s.with_time_span(self.time_span))))
    }

    fn compute_properties(
        input: &Arc<dyn ExecutionPlan>,
        options: &StreamOptions,
        bounded: bool,
    ) -> Result<PlanProperties> {
        let schema = input.schema();
        let partitions = input.output_partitioning().partition_count();
        // Declared key partitioning holds only while every key column is projected.
        let keys: Option<Vec<Arc<dyn PhysicalExpr>>> = (!options.partitioned_by.is_empty())
            .then(|| {
                options
                    .partitioned_by
                    .iter()
                    .map(|name| {
                        Column::new_with_schema(name, &schema)
                            .ok()
                            .map(|c| Arc::new(c) as Arc<dyn PhysicalExpr>)
                    })
                    .collect()
            })
            .flatten();
        let partitioning = match keys {
            Some(keys) => Partitioning::Hash(keys, partitions),
            None => Partitioning::UnknownPartitioning(partitions),
        };
        let boundedness = if bounded {
            Boundedness::Bounded
        } else {
            Boundedness::Unbounded {
                requires_infinite_memory: false,
            }
        };
        Ok(PlanProperties::new(
            input.equivalence_properties().clone(),
            partitioning,
            EmissionType::Incremental,
            boundedness,
        ))
    }

    /// The stream's name.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// The stream's registration options.
    pub fn options(&self) -> &StreamOptions {
        &self.options
    }

    /// The largest event time each partition has handed out, and the event-time column's
    /// index, when that column is read.
    pub fn progress(&self) -> Option<(&Arc<PartitionProgress>, usize)> {
        self.progress
            .as_ref()
            .map(|(progress, column)| (progress, *column))
    }

    /// Each partition's position in a replay of files, as of the last batch handed out (see
    /// [`replay_units`](super::replay_units)), when the replay is read unit by unit.
    pub fn positions(&self) -> Option<&Arc<PartitionProgress>> {
        self.positions.as_ref().or(self.generated_positions.get())
    }

    /// Numbers a generator's batches by their blocks in the stream, and dealt in-memory
    /// batches by their place in the replay, for a checkpointed run: the source then has
    /// replay positions (see [`Self::positions`]), which its barriers cut and a resumed run
    /// seeks. Nothing for other sources.
    pub fn take_checkpoint_positions(&self) {
        if self.positions.is_some() {
            return;
        }
        // A paced generator deals whole batches in a checkpointed run.
        if matches!(self.options.pacing, Pacing::RecordsPerSecond(_)) {
            generate_in_whole_batches(&self.input);
        }
        if self.dealt_batches || generates_in_batches(&self.input) {
            let partitions = self.properties.output_partitioning().partition_count();
            let _ = self
                .generated_positions
                .set(Arc::new(PartitionProgress::new(partitions)));
        }
    }

    /// Ends every partition of the stream after the batch it is handing out, as if the data
    /// had ended: the operators above flush what they hold (windows close at the end of
    /// input) and the query ends cleanly.
    pub fn stop(&self) {
        self.stop.send_replace(true);
    }

    /// This source checking its declared key partitioning with `check` instead of a check of
    /// its own: the check a sticky join of two streams shares (see [`PartitionKeyCheck`]).
    /// A source of one partition needs no check and is returned as it is.
    pub fn with_key_check(&self, check: Arc<PartitionKeyCheck>) -> Result<Arc<Self>> {
        let mut source = Self::try_new(
            Arc::clone(&self.input),
            &self.table,
            &self.options,
            self.bounded,
        )?;
        if source.key_check.is_some() {
            source.key_check = Some(check);
        }
        Ok(Arc::new(source))
    }

    /// Has each partition decode its files or generate its records in the task that consumes
    /// it, not in a task of its own a few batches ahead: for a planner that finds every core
    /// decoding already and a consumer that does little per row (a filter, a partial
    /// aggregation step), where the extra task would only add a hop per batch.
    pub fn read_where_consumed(&self) {
        self.read_here.store(true, Ordering::Relaxed);
    }

    /// Has this source hand out each batch only when it is not too far ahead in event time
    /// of the other sources of `alignment` (see [`SourceAlignment`]); a source that is
    /// paced (held to the clock already), has no event time or is already aligned is left
    /// as it is.
    pub fn align_with(&self, alignment: &Arc<SourceAlignment>) {
        let paced = matches!(self.options.pacing, Pacing::RecordsPerSecond(_));
        if paced || self.progress.is_none() || self.alignment.get().is_some() {
            return;
        }
        let _ = self.alignment.set(Arc::clone(alignment));
    }

    /// Records handed out so far, over all partitions.
    pub fn records_read(&self) -> usize {
        self.metrics.clone_inner().output_rows().unwrap_or(0)
    }
}

impl DisplayAs for StreamSourceExec {
    fn fmt_as(&self, _format: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "StreamSourceExec: stream={}, {}, source_partitions={}",
            self.table,
            if self.bounded { "bounded" } else { "unbounded" },
            self.properties.output_partitioning().partition_count(),
        )?;
        if let Some(column) = &self.options.event_time {
            write!(
                f,
                ", event_time={column}, watermark=max({column}) - {}",
                format_duration(self.options.out_of_orderness)
            )?;
        }
        if !self.options.partitioned_by.is_empty() {
            write!(
                f,
                ", partitioned_by=[{}]",
                self.options.partitioned_by.join(", ")
            )?;
        }
        if let Pacing::RecordsPerSecond(rate) = self.options.pacing {
            write!(f, ", rate={rate} records/s")?;
        }
        if self.read_here.load(Ordering::Relaxed) && reads_or_generates(&self.input) {
            write!(f, ", read where consumed")?;
        }
        if self.alignment.get().is_some() {
            write!(f, ", aligned with the join's other sources")?;
        }
        Ok(())
    }
}

fn format_duration(duration: Duration) -> String {
    let millis = duration.as_millis();
    if millis.is_multiple_of(1000) {
        format!("{}s", millis / 1000)
    } else {
        format!("{millis}ms")
    }
}

impl ExecutionPlan for StreamSourceExec {
    fn name(&self) -> &str {
        "StreamSourceExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    /// The source passes its batches on in order, but says it does not: DataFusion would
    /// otherwise push a sort below it, into the reader (a scan that reorders row groups by
    /// statistics), where a streaming operator that replaces the sort cannot undo it.
    fn maintains_input_order(&self) -> Vec<bool> {
        vec![false]
    }

    fn benefits_from_input_partitioning(&self) -> Vec<bool> {
        vec![false]
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn replace_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
        _options: ReplaceChildrenOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let mut child = single_child("StreamSourceExec", children)?;
        let partitions =
            |plan: &Arc<dyn ExecutionPlan>| plan.output_partitioning().partition_count();
        // The stream's source partitions are fixed when it is scanned. DataFusion's
        // `repartition_file_scans` re-splits a scan below any node (an in-memory source by
        // batch sizes, files by byte ranges), which would break each partition's event-time
        // order and make its watermark run ahead: the split stays as it was.
        if partitions(&child) != partitions(&self.input) {
            child = Arc::clone(&self.input);
        } else {
            child = keep_split(child, &self.input)?;
        }
        let mut source = Self::try_new(child, &self.table, &self.options, self.bounded)?;
        source.wider_split = self.wider_split.clone();
        source.time_span = self.time_span;
        source.read_here = AtomicBool::new(self.read_here.load(Ordering::Relaxed));
        source.alignment = self.alignment.clone();
        source.aligned_as = Arc::clone(&self.aligned_as);
        // A check shared with a joined stream stays shared.
        if let (Some(_), Some(shared)) = (&source.key_check, &self.key_check) {
            source.key_check = Some(Arc::clone(shared));
        }
        Ok(Arc::new(source))
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
        let schema = self.schema();
        let context = with_batch_rows_for_width(context, schema.fields().len());
        // Read unit by unit, the positions of the batches queue here in order until each
        // batch is handed out (the read ahead and the checks between keep the order).
        let positions = self
            .positions()
            .map(|positions| (Arc::clone(positions), Arc::new(Mutex::new(VecDeque::new()))));
        // A checkpointed run resumes at its checkpoint's barrier, and no barrier may be
        // placed at or before a position while it is being handed out.
        // A lookup's table is read whole, and its positions are not the replay's.
        let checkpointing = Checkpointing::of(&context).filter(|c| !c.reads_whole(self));
        let input = match &positions {
            Some((_, queued)) => {
                let queued = Arc::clone(queued);
                let resumed_at = checkpointing.as_ref().map_or(0, |c| c.resumed_at());
                let generated = self
                    .generated_positions
                    .get()
                    .and_then(|_| seek_generated(&self.input, partition, resumed_at));
                let partitions = self.properties.output_partitioning().partition_count() as i64;
                let positioned = match (self.input.downcast_ref::<DealExec>(), generated) {
                    (Some(deal), _) => deal.execute_positioned(partition, context, resumed_at)?,
                    (None, Some(mut positions)) => self
                        .input
                        .execute(partition, context)?
                        .map(move |batch| Ok((batch?, positions.next_position())))
                        .boxed(),
                    // Batch `k` of the replay is batch `k / n` of partition `k mod n`.
                    (None, None) if self.dealt_batches => self
                        .input
                        .execute(partition, context)?
                        .enumerate()
                        .map(move |(index, batch)| {
                            Ok((batch?, index as i64 * partitions + partition as i64))
                        })
                        .filter(move |item| {
                            let before =
                                matches!(item, Ok((_, position)) if *position < resumed_at);
                            futures::future::ready(!before)
                        })
                        .boxed(),
                    (None, None) => read_units(&self.input, partition, context, resumed_at)?,
                };
                let batches = positioned.map(move |item| {
                    let (batch, position) = item?;
                    queued.lock().push_back(position);
                    Ok(batch)
                });
                Box::pin(RecordBatchStreamAdapter::new(self.input.schema(), batches))
            }
            None => self.input.execute(partition, context)?,
        };
        let reading = || Reading {
            what: format!("reading stream '{}'", self.table),
            text_files: TextFiles::of_plan(&self.input),
        };
        let input = match (
            reads_or_generates(&self.input),
            self.read_here.load(Ordering::Relaxed),
        ) {
            (true, false) => read_ahead(input, reading()),
            (true, true) => read_here(input, reading()),
            (false, _) => input,
        };
        let metrics = BaselineMetrics::new(&self.metrics, partition);
        let mut keys = match &self.key_check {
            Some(check) => Some(check.partition(partition)?),
            None => None,
        };
        let counted = input.map(move |batch| {
            let batch = batch?;
            if let Some(keys) = &mut keys {
                keys.check(&batch)?;
            }
            Ok(batch)
        });
        let progress = self.progress.clone();
        // The positions of the batches not handed out yet, for the pacing's slices.
        let queued_positions = positions.as_ref().map(|(_, queued)| Arc::clone(queued));
        // Records count as read, and move the source's progress, when they are handed out.
        let record_progress = move |batch: Result<RecordBatch>| {
            if let Ok(batch) = &batch {
                metrics.record_output(batch.num_rows());
                if let Some((positions, queued)) = &positions
                    && let Some(position) = queued.lock().pop_front()
                {
                    match &checkpointing {
                        Some(checkpointing) => checkpointing
                            .barriers()
                            .hand_out(position, || positions.record(partition, position)),
                        None => positions.record(partition, position),
                    }
                }
            }
            if let (Ok(batch), Some((progress, column))) = (&batch, &progress)
                && progress.is_read()
                && let Some(newest) =
                    newest_time(event_times(batch.column(*column))?.as_primitive::<Int64Type>())
            {
                progress.record(partition, newest);
            }
            batch
        };
        let mut stop = self.stop.subscribe();
        let stopped = async move {
            // A dropped plan stops nothing: the streams run on.
            if stop.wait_for(|stopped| *stopped).await.is_err() {
                futures::future::pending::<()>().await;
            }
        };
        let Pacing::RecordsPerSecond(rate) = self.options.pacing else {
            let aligned = match (self.alignment.get(), &self.progress) {
                (Some(alignment), Some((_, column))) => {
                    // A source joins its alignment when it first runs: one planned but
                    // never run (replaced by a wider split) holds nobody back.
                    let partitions = self.properties.output_partitioning().partition_count();
                    let source = *self
                        .aligned_as
                        .get_or_init(|| alignment.register(partitions, self.options.idle_timeout));
                    let scale = nanoseconds_per_unit(schema.field(*column).data_type())?;
                    let part =
                        AlignedPartition::new(Arc::clone(alignment), source, partition, scale);
                    aligned(counted.boxed(), part, *column)
                }
                _ => counted.boxed(),
            };
            let handed_out = aligned.map(record_progress).take_until(stopped);
            return Ok(Box::pin(RecordBatchStreamAdapter::new(schema, handed_out)));
        };
        let rate_per_partition =
            rate / self.properties.output_partitioning().partition_count() as f64;
        // Batches are released in slices of about 10 ms worth of records, so that a slow rate
        // gives a steady flow of rows, not a whole batch and then a long pause. A dealt
        // replay's slices are 10 ms of the whole stream already, cut as one partition
        // reading the replay cuts them, and stay whole: numbered, they keep the replay's order.
        let slice_rate = match self.input.downcast_ref::<DealExec>() {
            Some(_) => rate,
            None => rate_per_partition,
        };
        let slice_rows = ((slice_rate / 100.0).ceil() as usize).max(1);
        let sliced = counted.flat_map(move |batch| {
            let slices: Vec<Result<RecordBatch>> = match batch {
                Ok(batch) if batch.num_rows() > slice_rows => (0..batch.num_rows())
                    .step_by(slice_rows)
                    .map(|start| Ok(batch.slice(start, slice_rows.min(batch.num_rows() - start))))
                    .collect(),
                other => vec![other],
            };
            // Each slice is handed out with its batch's position: the batch's is first in
            // the queue (every slice of the batches before it has been handed out), and the
            // partition passes a barrier only with a slice of a later position.
            if let Some(queued) = &queued_positions
                && slices.len() > 1
            {
                let mut queued = queued.lock();
                if let Some(&position) = queued.front() {
                    for _ in 1..slices.len() {
                        queued.push_front(position);
                    }
                }
            }
            futures::stream::iter(slices)
        });
        let mut started = None;
        let mut sent = 0u64;
        let paced = sliced.then(move |batch| {
            let start = *started.get_or_insert_with(tokio::time::Instant::now);
            let due = start + Duration::from_secs_f64(sent as f64 / rate_per_partition);
            if let Ok(batch) = &batch {
                sent += batch.num_rows() as u64;
            }
            async move {
                tokio::time::sleep_until(due).await;
                batch
            }
        });
        let handed_out = paced.map(record_progress).take_until(stopped);
        Ok(Box::pin(RecordBatchStreamAdapter::new(schema, handed_out)))
    }

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }
}

/// Values one decoded batch may hold: a file's decoder allocates its columns for the batch
/// size, so a wide file (thousands of columns) reads fewer rows at a time.
const VALUES_PER_BATCH: usize = 1 << 20;

/// `context` with its batch size capped at [`VALUES_PER_BATCH`] over `columns` (at least 64
/// rows); as it is for the usual widths.
fn with_batch_rows_for_width(context: Arc<TaskContext>, columns: usize) -> Arc<TaskContext> {
    let batch_size = context.session_config().batch_size();
    let fits = (VALUES_PER_BATCH / columns.max(1)).max(64);
    if batch_size <= fits {
        return context;
    }
    let config = context.session_config().clone().with_batch_size(fits);
    Arc::new(TaskContext::new(
        context.task_id(),
        context.session_id(),
        config,
        context.scalar_functions().clone(),
        context.higher_order_functions().clone(),
        context.aggregate_functions().clone(),
        context.window_functions().clone(),
        context.runtime_env(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::Int64Array;
    use datafusion::arrow::datatypes::{DataType, Field, Schema};

    #[test]
    fn a_wide_file_is_decoded_fewer_rows_at_a_time() {
        let context = datafusion::prelude::SessionContext::new().task_ctx();
        let batch = |columns| {
            with_batch_rows_for_width(Arc::clone(&context), columns)
                .session_config()
                .batch_size()
        };
        assert_eq!(
            batch(10),
            8192,
            "the usual widths keep the session's batch size"
        );
        assert_eq!(batch(2_000), VALUES_PER_BATCH / 2_000);
        assert_eq!(batch(1_000_000), 64);
    }

    #[tokio::test]
    async fn a_source_records_its_progress_only_once_a_consumer_reads_it() {
        let schema = Arc::new(Schema::new(vec![Field::new("ts", DataType::Int64, false)]));
        let batch = RecordBatch::try_new(
            Arc::clone(&schema),
            vec![Arc::new(Int64Array::from(vec![5, 40, 7]))],
        )
        .unwrap();
        let options = StreamOptions {
            event_time: Some("ts".into()),
            ..StreamOptions::default()
        };
        let context = datafusion::prelude::SessionContext::new().task_ctx();
        for read in [false, true] {
            let input =
                MemorySourceConfig::try_new_exec(&[vec![batch.clone()]], Arc::clone(&schema), None)
                    .unwrap();
            let source = StreamSourceExec::try_new(input, "t", &options, true).unwrap();
            let (progress, column) = source.progress().unwrap();
            assert_eq!(column, 0);
            if read {
                progress.mark_read();
            }
            let rows: usize = source
                .execute(0, Arc::clone(&context))
                .unwrap()
                .map(|batch| batch.unwrap().num_rows())
                .collect::<Vec<_>>()
                .await
                .into_iter()
                .sum();
            assert_eq!(rows, 3);
            let expected = read.then_some(40);
            assert_eq!(progress.newest(0), expected, "read by a consumer: {read}");
        }
    }

    #[tokio::test]
    async fn a_reader_that_panics_ends_the_stream_with_an_error_naming_it() {
        let schema = Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, false)]));
        let batch = RecordBatch::try_new(
            Arc::clone(&schema),
            vec![Arc::new(Int64Array::from(vec![1, 2, 3]))],
        )
        .unwrap();
        let batches = futures::stream::iter(0..3).map(move |i| {
            if i == 1 {
                panic!("corrupt page");
            }
            Ok(batch.clone())
        });
        let input = Box::pin(RecordBatchStreamAdapter::new(schema, batches));
        let items: Vec<Result<RecordBatch>> = read_ahead(
            input,
            Reading {
                what: "reading stream 't'".into(),
                text_files: None,
            },
        )
        .collect()
        .await;
        assert_eq!(items.len(), 2, "the batch before the panic, then the error");
        assert!(items[0].is_ok());
        let error = items[1].as_ref().unwrap_err().to_string();
        assert!(
            error.contains("reading stream 't' failed: corrupt page"),
            "{error}"
        );
    }
}
